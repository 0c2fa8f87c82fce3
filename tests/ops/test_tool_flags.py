"""``kubectl hami``'s overrides of the server's settings are the server's own declarations.

Covers: for every setting the tools can override, each value in a table of good and bad ones is accepted by
``kubectl hami explain`` exactly when ``hami-web serve`` accepts it, and refused in the server's words (the
``--default-cores 150`` the tools used to accept while the server refused it); the help text is the server's.
"""

from __future__ import annotations

import pytest

from hami_web.cli import build_parser
from hami_web.settings import SettingsError, build_settings, option_help

VALUES = {
    "--default-cores": ["0", "30", "100", "150", "-1", "x", "2.5"],
    "--default-mem": ["0", "2000", "-5", "lots"],
    "--node-scheduler-policy": ["binpack", "spread", "binpak", ""],
    "--gpu-scheduler-policy": ["spread", "binpack,numa", "mutex", "binpak", "binpack,foo"],
    "--scheduler-name": ["hami-scheduler", "other"],
    "--node-label-selector": ["gpu=on", ""],
    "--enable-iluvatar": ["true", "false", "maybe"],
    "--enable-ascend": ["true", "false", "maybe"],
}
CASES = [(flag, value) for flag, values in VALUES.items() for value in values]


def _server_refusal(flag: str, value: str) -> str:
    try:
        build_settings(build_parser().parse_args(["serve", flag, value]), {})
    except SettingsError as error:
        return str(error)
    return ""


def _tool_refusal(flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> str:
    try:
        build_parser().parse_args(["explain", "default/pod", f"{flag}={value}"])
    except SystemExit:
        return capsys.readouterr().err.strip().splitlines()[-1]
    return ""


@pytest.mark.parametrize(("flag", "value"), CASES, ids=[f"{flag}={value}" for flag, value in CASES])
def test_the_tools_refuse_exactly_what_the_server_refuses(flag: str, value: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    server, tool = _server_refusal(flag, value), _tool_refusal(flag, value, capsys)
    assert bool(server) == bool(tool), f"server: {server!r}; kubectl hami: {tool!r}"
    if server:
        # The same words: the server says "invalid value for <flag>: <why>", the tool "argument <flag>: <why>".
        assert server.split(": ", 1)[1] in tool


def test_the_tools_show_the_servers_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["explain", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert " ".join(option_help("--default-cores").split()) in shown
