"""The image runs HAMi's pod spec (README.md#switching-from-hami), checked statically (no Docker engine here).

Covers: every command the Dockerfile runs or rewrites (the entry point ``hami-web``, HAMi's ``scheduler`` that the
chart's Deployment starts) is a console script of the package, so it is on the image's PATH after ``pip install``;
the command the three rendered HAMi charts start is that script; the file capability for port 443 is set on the
interpreter copy that only ``scheduler``'s shebang names, never on the interpreter ``hami-web`` runs with; the image
stays non-root.
"""

from __future__ import annotations

import configparser
import re
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = (REPO_ROOT / "Dockerfile").read_text()
FIXTURES = REPO_ROOT.parent / "shared" / "fixtures" / "hami-chart-v2.10.0"


def _console_scripts() -> dict[str, str]:
    config = configparser.ConfigParser()
    config.read(REPO_ROOT / "setup.cfg")
    lines = config["options.entry_points"]["console_scripts"].strip().splitlines()
    return dict(tuple(part.strip() for part in line.split("=", 1)) for line in lines)  # type: ignore[misc]


def test_the_entry_point_and_hamis_command_are_console_scripts() -> None:
    scripts = _console_scripts()
    (entrypoint,) = re.findall(r'^ENTRYPOINT \["([^"]+)"\]', DOCKERFILE, re.MULTILINE)
    assert entrypoint in scripts
    assert scripts["scheduler"] == "hami_web.cli:scheduler_main"
    for name in re.findall(r"/usr/local/bin/([A-Za-z0-9_.-]+)", DOCKERFILE):
        assert name in scripts or name.startswith("python3"), name


def test_only_the_scheduler_interpreter_gets_the_capability() -> None:
    (target,) = re.findall(r"setcap cap_net_bind_service=\+ep (\S+)", DOCKERFILE)
    (shebang,) = re.findall(r"1s\|\^#!\.\*\|#!(\S+)\|' /usr/local/bin/scheduler", DOCKERFILE)
    assert target == shebang == "/usr/local/bin/python3.11-scheduler"
    assert f"cp /usr/local/bin/python3.11 {target}" in DOCKERFILE
    assert re.search(r"^USER 10001:10001$", DOCKERFILE, re.MULTILINE)
    # The capability is added after the packages are installed, in the final stage (xattrs stay in that layer).
    final_stage = DOCKERFILE.split("FROM python:3.11-slim\n", 1)[1]
    assert final_stage.index("pip install") < final_stage.index("setcap") < final_stage.index("USER 10001")


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="the rendered chart is not on this machine")
@pytest.mark.parametrize("filename", ["default.yaml", "all-options.yaml", "no-webhook.yaml"])
def test_hamis_chart_starts_a_command_the_image_has(filename: str) -> None:
    for document in yaml.safe_load_all((FIXTURES / filename).read_text()):
        if document and document["kind"] == "Deployment":
            commands = [container["command"][0] for container in document["spec"]["template"]["spec"]["containers"]
                        if "kube-scheduler" not in container["image"]]
            assert commands == ["scheduler"]
            assert "securityContext" not in document["spec"]["template"]["spec"]
            assert _console_scripts()[commands[0]]
