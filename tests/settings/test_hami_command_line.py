"""HAMi v2.10's scheduler command line, read by the ``scheduler`` command (README.md#switching-from-hami).

Covers, table-driven over every flag ``cmd/scheduler/main.go`` ``init()`` and ``config.GlobalFlagSet`` define (the
families' ``ParseConfig``, ``--debug``, ``--device-config-file``, klog's ``InitFlags``): a good value is accepted and,
where we have the setting, sets it through the setting's own declaration; a value HAMi's pflag type refuses (bool,
int, float32, duration, StringToString, klog's severity, vmodule and trace location) is one line naming flag and
value, exit 2; pflag's spellings (``--f=v``, ``--f v``, bare ``--bool``, ``-v=4``, ``-v4``, ``-v 4``); an unknown flag
or a stray argument exits 2 naming it; a flag without a feature here is one warning line; ``--debug`` and ``-v``
choose the log level and never fail; the chart's three rendered command lines (``../shared/fixtures/
hami-chart-v2.10.0``) build settings (one listener, TLS or not, leader election, legacy metrics, ascend and
iluvatar, the node selector); the chart's environment (``HAMI_NODELOCK_EXPIRE``, ``NODE_SELECTOR_*``,
``POD_NAMESPACE``); ``scheduler version`` and ``--help``. The same settings under ``hami-web serve``:
``test_hami_flags.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from hami_web.cli import scheduler_main
from hami_web.settings import Settings, SettingsError, build_settings_from_flags
from hami_web.settings.hamicommand import (
    HAMI_FLAGS,
    LOG,
    NO_EFFECT,
    OURS,
    HamiFlagError,
    go_duration_seconds,
    parse_hami_command_line,
)

FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "hami-chart-v2.10.0"
CHART_FILES = ("default.yaml", "all-options.yaml", "no-webhook.yaml")

# Every flag HAMi v2.10's scheduler defines (read off cmd/scheduler/main.go and pkg/scheduler/config, pkg/device/*
# ParseConfig, klog v2 InitFlags), with a good and a bad value as HAMi's pflag types judge them.
GOOD_AND_BAD: dict[str, tuple[str, str | None]] = {
    "http_bind": ("0.0.0.0:443", None), "cert_file": ("/tls/tls.crt", None), "key_file": ("/tls/tls.key", None),
    "scheduler-name": ("hami-scheduler", None), "node-scheduler-policy": ("spread", None),
    "gpu-scheduler-policy": ("binpack", None), "metrics-bind-address": (":9395", None),
    "node-label-selector": ("gpu=on,zone=a", "gpu"), "kube-qps": ("20.5", "fast"), "kube-burst": ("40", "4.5"),
    "kube-timeout": ("30", "30s"), "profiling": ("true", "yes"), "node-lock-timeout": ("10m", "10"),
    "node-lock-retry-timeout": ("20s", "20"), "force-overwrite-default-scheduler": ("false", "no"),
    "leader-elect": ("true", "on"), "leader-elect-resource-name": ("hami-scheduler", None),
    "leader-elect-resource-namespace": ("kube-system", None), "legacy-metrics": ("true", "2"),
    "enable-ascend": ("true", "enabled"), "cambricon-mlu-name": ("cambricon.com/mlu", None),
    "cambricon-mlu-memory": ("cambricon.com/mlu.smlu.vmemory", None),
    "cambricon-mlu-cores": ("cambricon.com/mlu.smlu.vcore", None), "dcu-name": ("hygon.com/dcunum", None),
    "dcu-memory": ("hygon.com/dcumem", None), "dcu-cores": ("hygon.com/dcucores", None),
    "enable-iluvatar": ("true", "y"), "mthreads-name": ("mthreads.com/vgpu", None),
    "mthreads-memory": ("mthreads.com/sgpu-memory", None), "mthreads-cores": ("mthreads.com/sgpu-core", None),
    "enflame-gcu-resource-name": ("enflame.com/gcu", None),
    "enflame-drs-gcu-resource-name": ("enflame.com/drs-gcu", None),
    "enflame-gcu-memory-resource-name": ("enflame.com/gcu-memory", None),
    "enflame-gcu-core-resource-name": ("enflame.com/gcu-core", None),
    "enflame-vgcu-resource-name": ("enflame.com/drs-gcu", None),
    "enflame-vgcu-legacy-resource-name": ("enflame.com/vgcu", None),
    "enflame-vgcu-percentage-resource-name": ("enflame.com/vgcu-percentage", None),
    "metax-name": ("metax-tech.com/gpu", None), "metax-vcount": ("metax-tech.com/sgpu", None),
    "metax-vcore": ("metax-tech.com/vcore", None), "metax-vmemory": ("metax-tech.com/vmemory", None),
    "sgpu-topology-aware": ("true", "sure"), "kunlun-name": ("kunlunxin.com/xpu", None),
    "kunlun-vcount": ("kunlunxin.com/vxpu", None), "kunlun-vmemory": ("kunlunxin.com/vxpu-memory", None),
    "debug": ("true", "verbose"), "device-config-file": ("", None),
    "add_dir_header": ("true", "x"), "alsologtostderr": ("true", "x"), "log_backtrace_at": ("main.go:10", "main"),
    "log_dir": ("/var/log", None), "log_file": ("/var/log/hami.log", None), "log_file_max_size": ("1800", "-1"),
    "logtostderr": ("false", "x"), "one_output": ("true", "x"), "skip_headers": ("true", "x"),
    "skip_log_headers": ("true", "x"), "stderrthreshold": ("ERROR", "LOUD"), "v": ("4", "four"),
    "vmodule": ("scheduler=5,webhook*=3", "scheduler"),
}


def test_the_table_names_every_flag_hami_defines() -> None:
    assert set(GOOD_AND_BAD) == {flag.name for flag in HAMI_FLAGS}


def _settings_of(argv: list[str], environ: dict[str, str] | None = None) -> tuple[Settings, list[str], str]:
    line = parse_hami_command_line(argv, environ or {})
    settings = build_settings_from_flags(line.settings, {})
    return settings, line.warnings, settings.serving.log_level


@pytest.mark.parametrize("flag", HAMI_FLAGS, ids=lambda flag: flag.name)
def test_a_good_value_of_every_flag_is_taken(flag: Any) -> None:
    good, _ = GOOD_AND_BAD[flag.name]
    argv = [f"--{flag.name}={good}"]
    if flag.name == "leader-elect":
        argv += ["--leader-elect-resource-name=hami-scheduler", "--leader-elect-resource-namespace=kube-system"]
    if flag.name == "key_file":
        argv.append("--cert_file=/tls/tls.crt")
    if flag.name == "cert_file":
        argv.append("--key_file=/tls/tls.key")
    _, warnings, _ = _settings_of(argv)
    if flag.does == NO_EFFECT:
        (warning,) = warnings
        assert warning == f"--{flag.name}={good} has no effect: {flag.detail}"
    else:
        assert warnings == []
    if flag.does == OURS:
        assert parse_hami_command_line(argv, {}).settings[flag.detail] is not None


@pytest.mark.parametrize("name", [name for name, (_, bad) in GOOD_AND_BAD.items() if bad is not None])
def test_a_bad_value_is_one_line_naming_flag_and_value(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    bad = GOOD_AND_BAD[name][1]
    assert scheduler_main([f"--{name}={bad}"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert error.startswith(f"scheduler: error: invalid argument '{bad}' for --{name}: ")


@pytest.mark.parametrize(("argv", "message"), [
    pytest.param(["--node-scheduler-policy=fastest"], "invalid value for --node-scheduler-policy: must be one of "
                 "binpack, spread, got 'fastest'", id="our-parser-refuses"),
    pytest.param(["--gpu-scheduler-policy=best"], "invalid value for --gpu-scheduler-policy", id="gpu-policy"),
    pytest.param(["--http_bind=0.0.0.0"], "invalid value for --http-bind: '0.0.0.0' is not HOST:PORT", id="bind"),
    pytest.param(["--metrics-bind-address=:99999"], "invalid value for --metrics-bind-address: ':99999'",
                 id="metrics-port"),
    pytest.param(["--cert_file=/tls/tls.crt"], "give both or neither", id="cert-without-key"),
    pytest.param(["--leader-elect"], "invalid value for --leader-elect: needs --leader-elect-resource-name",
                 id="lease-unnamed"),
    pytest.param(["--bogus=1"], "unknown flag: --bogus=1", id="unknown-flag"),
    pytest.param(["--bind=0.0.0.0:8443"], "unknown flag: --bind=0.0.0.0:8443", id="ours-is-not-hamis"),
    pytest.param(["-debug"], "unknown shorthand flag: 'd' in -debug", id="go-single-dash"),
    pytest.param(["--scheduler-name"], "flag needs an argument: --scheduler-name", id="missing-value"),
    pytest.param(["--debug", "false"], "unknown command 'false' for \"scheduler\"", id="bool-takes-no-next"),
    pytest.param(["start"], "unknown command 'start' for \"scheduler\"", id="stray-argument"),
])
def test_a_refused_command_line_exits_2_with_one_line(argv: list[str], message: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert scheduler_main(argv) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and message in error


@pytest.mark.parametrize(("argv", "level"), [
    ([], "INFO"), (["--debug"], "DEBUG"), (["--debug=false"], "INFO"), (["-v=4"], "DEBUG"), (["-v4"], "DEBUG"),
    (["-v", "5"], "DEBUG"), (["--v=3"], "INFO"), (["--v", "0"], "INFO"), (["-v=2", "--debug"], "DEBUG"),
])
def test_debug_and_verbosity_choose_the_log_level(argv: list[str], level: str) -> None:
    settings, warnings, _ = _settings_of(argv)
    assert (settings.serving.log_level, warnings) == (level, [])


@pytest.mark.parametrize(("argv", "level"), [([], "WARNING"), (["--debug"], "DEBUG"), (["-v=2"], "INFO")])
def test_without_debug_or_v_our_log_level_variable_decides(argv: list[str], level: str) -> None:
    line = parse_hami_command_line(argv, {})
    assert build_settings_from_flags(line.settings, {"HAMI_LOG_LEVEL": "WARNING"}).serving.log_level == level


@pytest.mark.parametrize(("argv", "field", "value"), [
    (["--http_bind=0.0.0.0:443"], "serving.http_bind", "0.0.0.0:443"),
    (["--http_bind", "0.0.0.0:80"], "serving.plain_http", True),
    (["--http_bind=0.0.0.0:443", "--cert_file=/c", "--key_file=/k"], "serving.plain_http", False),
    (["--force-overwrite-default-scheduler=false"], "force_overwrite_default_scheduler", False),
    (["--force-overwrite-default-scheduler"], "admission.force_overwrite_default_scheduler", True),
    (["--legacy-metrics"], "serving.legacy_metrics", True),
    (["--node-label-selector", "gpu=on,zone=a"], "watch.node_label_selector", "gpu=on,zone=a"),
    (["--node-lock-timeout=1h30m"], "binding.node_lock_timeout_seconds", 5400.0),
    (["--node-lock-retry-timeout=0"], "binding.node_lock_retry_timeout_seconds", 0.0),
    (["--node-lock-retry-timeout=28s"], "binding.node_lock_retry_timeout_seconds", 27.0),  # HAMi's default, capped
    (["--kube-timeout=0"], "api.kube_timeout_seconds", 10.0),  # HAMi's 0: the client's default
    (["--kube-timeout=30"], "api.kube_timeout_seconds", 30.0),
    (["--kube-burst=0x10"], "api.kube_burst", 16),
    (["--enable-ascend=t"], "enabled_families", frozenset({"ascend"})),
    (["--enable-iluvatar=F"], "enabled_families", frozenset()),
])
def test_hamis_flags_set_our_settings(argv: list[str], field: str, value: object) -> None:
    found: object = _settings_of(argv)[0]
    for name in field.split("."):
        found = getattr(found, name)
    assert found == value


def test_a_retry_timeout_above_our_limit_says_it_is_capped() -> None:
    (warning,) = _settings_of(["--node-lock-retry-timeout=28s"])[1]
    assert warning.startswith("--node-lock-retry-timeout=28s is taken as 27s")


@pytest.mark.parametrize(("text", "seconds"), [("0", 0.0), ("28s", 28.0), ("1h30m", 5400.0), ("1.5m", 90.0),
                                               ("500ms", 0.5), ("-2s", -2.0)])
def test_go_durations(text: str, seconds: float) -> None:
    assert go_duration_seconds(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["10", "", "s", "1d", "1h 2m"])
def test_go_refuses_what_is_not_a_duration(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        go_duration_seconds(text)


@pytest.mark.parametrize(("environ", "timeout", "warning"), [
    ({"HAMI_NODELOCK_EXPIRE": "10m"}, 600.0, ""),
    ({"HAMI_NODELOCK_EXPIRE": "ten"}, 300.0, "HAMI_NODELOCK_EXPIRE=ten is ignored (not a duration"),
    ({"NODE_SELECTOR_USAGE": "gpu"}, 300.0, "NODE_SELECTOR_USAGE=gpu has no effect: HAMi v2.10 reads no "
                                            "NODE_SELECTOR_* variable either"),
])
def test_the_charts_environment(environ: dict[str, str], timeout: float, warning: str) -> None:
    settings, warnings, _ = _settings_of([], environ)
    assert settings.binding.node_lock_timeout_seconds == timeout
    assert [line for line in warnings if warning and line.startswith(warning)] == ([warnings[0]] if warning else [])
    assert len(warnings) == (1 if warning else 0)


def test_an_explicit_lock_timeout_wins_over_the_environment() -> None:
    settings, _, _ = _settings_of(["--node-lock-timeout=2m"], {"HAMI_NODELOCK_EXPIRE": "10m"})
    assert settings.binding.node_lock_timeout_seconds == 120.0


def test_the_settings_are_published_in_the_pods_namespace() -> None:
    assert _settings_of([], {"POD_NAMESPACE": "kube-system"})[0].settings_configmap == "kube-system/hami-web-settings"


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert scheduler_main(["version"]) == 0
    assert "HAMi v2.10 scheduler command line" in capsys.readouterr().out
    assert scheduler_main(["--help"]) == 0
    text = capsys.readouterr().out
    assert all(f"--{flag.name} " in text or flag.name == "v" for flag in HAMI_FLAGS)


def test_the_flags_kinds_are_what_the_table_says() -> None:
    assert {flag.does for flag in HAMI_FLAGS} == {OURS, LOG, NO_EFFECT}
    assert [flag.name for flag in HAMI_FLAGS if flag.does == LOG] == ["debug", "v"]


def _chart_command(filename: str) -> tuple[list[str], dict[str, str]]:
    for document in yaml.safe_load_all((FIXTURES / filename).read_text()):
        if document and document["kind"] == "Deployment":
            (container,) = [container for container in document["spec"]["template"]["spec"]["containers"]
                            if container["command"][0] == "scheduler"]
            # The fieldRef values as kubelet fills them for the chart's namespace and a pod of the Deployment.
            from_field = {"metadata.namespace": "kube-system", "metadata.name": "hami-scheduler-5d9c7b-x2x7q"}
            environ = {item["name"]: item.get("value") or from_field[item["valueFrom"]["fieldRef"]["fieldPath"]]
                       for item in container["env"]}
            return container["command"][1:], environ
    raise LookupError(filename)


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="the rendered chart is not on this machine")
@pytest.mark.parametrize("filename", CHART_FILES)
def test_the_charts_command_lines_build_settings(filename: str, tmp_path: Path) -> None:
    """Each rendered Deployment's exact command and environment, only the device config's path remapped."""
    argv, environ = _chart_command(filename)
    config = tmp_path / "device-config.yaml"
    for document in yaml.safe_load_all((FIXTURES / filename).read_text()):
        if document and document["metadata"]["name"] == "hami-scheduler-device":
            config.write_text(document["data"]["device-config.yaml"])
    argv = [item.replace("/device-config.yaml", str(config)) for item in argv]
    line = parse_hami_command_line(argv, environ)
    settings = build_settings_from_flags(line.settings, {})
    serving = settings.serving
    assert (serving.http_bind, serving.plain_http, serving.log_level) == (
        ("0.0.0.0:80", True, "DEBUG") if filename == "no-webhook.yaml" else ("0.0.0.0:443", False, "DEBUG"))
    assert (settings.leader.leader_elect, settings.leader.leader_elect_resource_name,
            settings.leader.leader_elect_resource_namespace) == (True, "hami-scheduler", "kube-system")
    assert settings.settings_configmap == "kube-system/hami-web-settings"
    all_options = filename == "all-options.yaml"
    assert (settings.force_overwrite_default_scheduler, serving.legacy_metrics, settings.enabled_families,
            settings.watch.node_label_selector) == (
        (False, True, frozenset({"ascend", "iluvatar"}), "gpu=on") if all_options else (True, False, frozenset(), ""))
    assert settings.binding.node_lock_timeout_seconds == (600.0 if all_options else 300.0)
    assert line.warnings == (["NODE_SELECTOR_USAGE=gpu has no effect: HAMi v2.10 reads no NODE_SELECTOR_* variable "
                              "either; to restrict the nodes, use --node-label-selector (the chart's "
                              "scheduler.nodeLabelSelector)"] if all_options else [])


def test_a_hami_flag_error_is_a_value_error() -> None:
    with pytest.raises(HamiFlagError):
        parse_hami_command_line(["--kube-burst=many"], {})
    with pytest.raises(SettingsError):
        build_settings_from_flags({"--scheduler-name": ""}, {})
