"""Settings, CLI and the app factory: the parts every other module stands on.

Covers: every flag of docs/configuration.md#configuration in ``SPEC_FLAGS`` is offered by ``hami-web serve``; ``HAMI_…``
variables apply when no flag is given and flags beat them; bad values fail with a `SettingsError` naming the flag, and
``main`` exits 2 with the flag on stderr; Go-style durations; ``/healthz``, ``/readyz`` without a cache, JSON 404, and
an oversized body (413 JSON from the webhook, 200 with ``Error`` from the extender as kube-scheduler requires); ``python
-m hami_web --help``.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from flask.testing import FlaskClient

from hami_web.cli import build_parser, main
from hami_web.server.app import create_app
from hami_web.settings import Settings, SettingsError, build_settings, parse_duration_seconds

SPEC_FLAGS = ("--scheduler-name", "--node-scheduler-policy", "--gpu-scheduler-policy", "--default-mem",
              "--default-cores", "--default-gpu", "--node-label-selector", "--node-lock-timeout",
              "--overwrite-env", "--resource-name", "--resource-mem", "--resource-mem-percentage",
              "--resource-cores", "--resource-priority", "--cert-file", "--key-file", "--bind",
              "--refresh-interval", "--privileged-policy", "--kubeconfig")


def settings_from(argv: list[str], environ: dict[str, str] | None = None) -> Settings:
    arguments = build_parser().parse_args(["serve", *argv])
    return build_settings(arguments, environ or {})


def test_every_spec_flag_is_in_serve_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["serve", "--help"])
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    missing = [flag for flag in SPEC_FLAGS if flag not in help_text]
    assert missing == []


def test_environment_applies_when_no_flag_is_given() -> None:
    settings = settings_from([], {"HAMI_GPU_SCHEDULER_POLICY": "binpack"})
    assert settings.gpu_scheduler_policy == "binpack"


def test_flag_beats_environment() -> None:
    settings = settings_from(["--gpu-scheduler-policy", "topology-aware"], {"HAMI_GPU_SCHEDULER_POLICY": "binpack"})
    assert settings.gpu_scheduler_policy == "topology-aware"


def test_defaults_without_flags_or_environment() -> None:
    settings = settings_from([])
    assert (settings.node_scheduler_policy, settings.gpu_scheduler_policy) == ("binpack", "spread")
    assert (settings.watch.refresh_interval_seconds, settings.binding.node_lock_timeout_seconds) == (15.0, 300.0)


@pytest.mark.parametrize(("value", "seconds"), [(None, 0.0), ("off", 0.0), ("0", 0.0), ("30m", 1800.0)])
def test_the_relist_interval_is_off_by_default_or_a_duration(value: str | None, seconds: float) -> None:
    settings = settings_from([] if value is None else ["--relist-interval", value])
    assert settings.watch.relist_interval_seconds == seconds


@pytest.mark.parametrize(("flag", "value"), [
    ("--default-cores", "101"),
    ("--node-scheduler-policy", "foo"),
    ("--refresh-interval", "0"),
    ("--bind", "nope"),
    ("--node-lock-timeout", "5x"),
    ("--relist-interval", "soon"),
])
def test_bad_values_name_the_flag(flag: str, value: str) -> None:
    with pytest.raises(SettingsError, match=flag):
        settings_from([flag, value])


def test_bad_environment_value_names_flag_and_variable() -> None:
    with pytest.raises(SettingsError, match=r"--default-cores.*HAMI_DEFAULT_CORES"):
        settings_from([], {"HAMI_DEFAULT_CORES": "abc"})


def test_main_exits_2_with_the_flag_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--default-cores", "abc"])
    assert exit_info.value.code == 2
    assert "--default-cores" in capsys.readouterr().err


@pytest.mark.parametrize(("text", "seconds"), [
    ("15", 15.0), ("15s", 15.0), ("5m", 300.0), ("1h30m", 5400.0), ("500ms", 0.5),
])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration_seconds(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5x", "m5", "1h30"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration_seconds(text)


def test_healthz_is_200(client: FlaskClient) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200


def test_readyz_is_503_without_a_cache(client: FlaskClient) -> None:
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.is_json


def test_unknown_path_is_a_json_404(client: FlaskClient) -> None:
    response = client.get("/no/such/route")
    assert response.status_code == 404
    assert response.is_json and response.get_json()["error"] == "Not Found"


OVERSIZED_BODY = b"{" + b" " * (4 * 1024 * 1024 + 1) + b"}"


def test_webhook_body_over_4_mib_is_a_json_413(client: FlaskClient) -> None:
    response = client.post("/webhook", data=OVERSIZED_BODY, content_type="application/json")
    assert response.status_code == 413
    assert response.is_json


class _NeverCalledExtender:
    def filter(self, body: object) -> dict:
        raise AssertionError("an oversized body must not reach the extender")

    bind = filter


@pytest.mark.parametrize("path", ["/filter", "/bind"])
def test_extender_body_over_4_mib_is_a_json_error(settings: Settings, path: str) -> None:
    # kube-scheduler wants HTTP 200 with a non-empty Error from an extender, even for 413.
    client = create_app(settings, extender=_NeverCalledExtender()).test_client()
    response = client.post(path, data=OVERSIZED_BODY, content_type="application/json")
    assert response.status_code == 200 and response.is_json
    assert response.get_json()["Error"]


def test_python_dash_m_help_runs() -> None:
    completed = subprocess.run([sys.executable, "-m", "hami_web", "--help"], capture_output=True, text=True,
                               timeout=60, check=False)
    assert completed.returncode == 0, completed.stderr
    assert "serve" in completed.stdout
