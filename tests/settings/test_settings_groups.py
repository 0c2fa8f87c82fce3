"""Settings grouped by concern: each flag's value lands in its group, and the flat names still build them.

Covers: every flag of the option table sets the field its row names (top level or a group's), so the groups and
the table cannot drift; `Settings.of`/`with_values` route a flat name to its group and refuse one no group has; the
policies built from the settings (the scheduling policy the filter gets, the admission policy the webhook gets)
carry the flags' values.
"""

from __future__ import annotations

import pytest

from hami_web.cli import build_parser
from hami_web.settings import ApiSettings, BindSettings, ServingSettings, Settings, WatchSettings, build_settings


def _settings(*argv: str) -> Settings:
    return build_settings(build_parser().parse_args(["serve", *argv]), {})


@pytest.mark.parametrize(("argv", "group", "expected"), [
    pytest.param(["--threads", "3", "--log-level", "DEBUG"], "serving",
                 ServingSettings(threads=3, log_level="DEBUG"), id="serving"),
    pytest.param(["--relist-interval", "30m", "--node-label-selector", "gpu=on"], "watch",
                 WatchSettings(relist_interval_seconds=1800.0, node_label_selector="gpu=on"), id="watch"),
    pytest.param(["--extender-deadline", "20s", "--node-lock-timeout", "1m"], "binding",
                 BindSettings(extender_deadline_seconds=20.0, node_lock_timeout_seconds=60.0), id="binding"),
    pytest.param(["--kube-qps", "5", "--kubeconfig", "/k"], "api", ApiSettings(kube_qps=5.0, kubeconfig="/k"),
                 id="api"),
])
def test_each_flag_lands_in_its_group(argv: list[str], group: str, expected: object) -> None:
    assert getattr(_settings(*argv), group) == expected


def test_flat_names_build_the_groups() -> None:
    settings = Settings.of(threads=4, kube_burst=9, node_scheduler_policy="spread", refresh_interval_seconds=2.0)
    assert (settings.serving.threads, settings.api.kube_burst, settings.watch.refresh_interval_seconds) == (4, 9, 2.0)
    assert settings.node_scheduler_policy == "spread"
    changed = settings.with_values(threads=6)
    assert (changed.serving.threads, changed.api.kube_burst, changed.node_scheduler_policy) == (6, 9, "spread")
    assert settings.serving.threads == 4  # frozen: a copy, not a change


@pytest.mark.parametrize("name", ["thread", "serving", "devices", "policy"])
def test_a_name_no_group_has_is_refused(name: str) -> None:
    with pytest.raises(TypeError, match=name):
        Settings.of(**{name: 1})


def test_the_policies_carry_the_flags() -> None:
    settings = _settings("--node-scheduler-policy", "spread", "--gpu-scheduler-policy", "binpack,numa",
                         "--scheduler-name", "gpu-sched", "--privileged-policy", "skip", "--default-cores", "30")
    policy, admission = settings.policy, settings.admission
    assert (policy.node_policy, policy.gpu_policy, policy.scheduler_name) == ("spread", "binpack,numa", "gpu-sched")
    assert policy.defaults.default_cores == 30 and policy.catalog is settings.devices
    assert (admission.scheduler_name, admission.privileged_policy) == ("gpu-sched", "skip")
    assert admission.devices is settings.devices
