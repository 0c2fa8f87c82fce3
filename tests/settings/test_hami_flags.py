"""HAMi v2.10's scheduler flags and the API request budget (docs/compatibility.md#compatibility-with-hami-v210).

Covers: ``--node-lock-retry-timeout``, ``--kube-qps``, ``--kube-burst``, ``--kube-timeout``, ``--log-format`` and a
chain for ``--gpu-scheduler-policy`` parse with HAMi's meaning and defaults, bad values name the flag;
``--node-lock-retry-timeout`` and ``--extender-deadline`` are refused above 27 s (the answer must reach
kube-scheduler inside its 30 s httpTimeout); HAMi flags we do not support stop ``hami-web serve`` with a message
saying so and why; the token bucket behind ``--kube-qps``/``--kube-burst`` (burst free, then one request per 1/qps
seconds, refilled over time; a wait longer than allowed is refused and spends nothing) and the client calling it
before each request against the in-process API server, under a deadline with the time left, so a budget wait
past the deadline means the request is not sent. (JSON log lines: ``test_logs.py``.)
"""

from __future__ import annotations

import pytest

from hami_web.cli import build_parser, main
from hami_web.kube import Kube, KubeError, deadline, join_pages
from hami_web.localcluster import LocalCluster
from hami_web.settings import UNSUPPORTED_HAMI_FLAGS, Settings, SettingsError, build_settings
from hami_web.state.budget import RequestBudget


def _settings(*argv: str) -> Settings:
    return build_settings(build_parser().parse_args(["serve", *argv]), {})


def test_hami_flag_defaults() -> None:
    settings = _settings()
    assert (settings.binding.node_lock_retry_timeout_seconds, settings.api.kube_qps, settings.api.kube_burst,
            settings.api.kube_timeout_seconds, settings.serving.log_format) == (25.0, 0.0, 0, 10.0, "text")
    assert settings.binding.extender_deadline_seconds == 15.0


@pytest.mark.parametrize(("argv", "field", "value"), [
    pytest.param(["--node-lock-retry-timeout", "10s"], "binding.node_lock_retry_timeout_seconds", 10.0,
                 id="retry-duration"),
    pytest.param(["--node-lock-retry-timeout", "0"], "binding.node_lock_retry_timeout_seconds", 0.0, id="retry-off"),
    pytest.param(["--node-lock-retry-timeout", "27s"], "binding.node_lock_retry_timeout_seconds", 27.0,
                 id="retry-longest"),
    pytest.param(["--extender-deadline", "27"], "binding.extender_deadline_seconds", 27.0, id="deadline-longest"),
    pytest.param(["--kube-qps", "20.5"], "api.kube_qps", 20.5, id="qps"),
    pytest.param(["--kube-burst", "40"], "api.kube_burst", 40, id="burst"),
    pytest.param(["--kube-timeout", "30"], "api.kube_timeout_seconds", 30.0, id="timeout-seconds-as-hami"),
    pytest.param(["--kube-timeout", "1m"], "api.kube_timeout_seconds", 60.0, id="timeout-duration"),
    pytest.param(["--log-format", "json"], "serving.log_format", "json", id="json-logs"),
    pytest.param(["--http_bind=0.0.0.0:443"], "serving.http_bind", "0.0.0.0:443", id="hamis-http-bind-spelling"),
    pytest.param(["--http-bind", "0.0.0.0:443"], "serving.plain_http", True, id="http-bind-without-certificate"),
    pytest.param(["--cert_file=/c", "--key_file=/k"], "serving.key_file", "/k", id="hamis-cert-spelling"),
    pytest.param(["--force-overwrite-default-scheduler=false"], "admission.force_overwrite_default_scheduler", False,
                 id="force-overwrite"),
    pytest.param(["--leader-elect", "--leader-elect-resource-name=l", "--leader-elect-resource-namespace=n"],
                 "leader.leader_elect_resource_namespace", "n", id="leader-elect"),
    pytest.param(["--legacy-metrics"], "serving.legacy_metrics", True, id="legacy-metrics"),
    pytest.param(["--gpu-scheduler-policy", "mutex, binpack ,numa"], "gpu_scheduler_policy", "mutex,binpack,numa",
                 id="policy-chain-default"),
])
def test_hami_flags_parse(argv: list[str], field: str, value: object) -> None:
    found: object = _settings(*argv)
    for name in field.split("."):  # a field of a group: "binding.extender_deadline_seconds"
        found = getattr(found, name)
    assert found == value


@pytest.mark.parametrize(("argv", "message"), [
    pytest.param(["--node-lock-retry-timeout=-1s"], "invalid value for --node-lock-retry-timeout: "
                 "'-1s' is not a duration (examples: 30, 30s, 5m, 1h)", id="negative-retry"),
    pytest.param(["--node-lock-retry-timeout", "28s"], "invalid value for --node-lock-retry-timeout: must be at "
                 "most 27s, so that with the cleanup after a failed bind the answer comes inside kube-scheduler's "
                 "30s httpTimeout", id="retry-longer-than-any-bind"),
    pytest.param(["--extender-deadline", "30s"], "invalid value for --extender-deadline: must be at most 27s, so "
                 "that with the cleanup after a failed bind the answer comes inside kube-scheduler's 30s "
                 "httpTimeout", id="deadline-longer-than-httpTimeout"),
    pytest.param(["--extender-deadline", "0"], "invalid value for --extender-deadline: must be greater than zero",
                 id="zero-deadline"),
    pytest.param(["--kube-qps", "-5"], "invalid value for --kube-qps: '-5' must be a number >= 0", id="negative-qps"),
    pytest.param(["--kube-qps", "nan"], "invalid value for --kube-qps: 'nan' must be a number >= 0", id="nan-qps"),
    pytest.param(["--kube-burst", "x"], "invalid value for --kube-burst: invalid literal for int() with base 10: 'x'",
                 id="burst-not-int"),
    pytest.param(["--kube-timeout", "0"], "invalid value for --kube-timeout: must be greater than zero",
                 id="zero-timeout"),
    pytest.param(["--log-format", "xml"], "invalid value for --log-format: must be one of text, json, got 'xml'",
                 id="log-format"),
    pytest.param(["--gpu-scheduler-policy", "binpack,best"], 'invalid value for --gpu-scheduler-policy: unknown '
                 'policy key "best" in "binpack,best" (expected a comma-separated list of binpack, spread, numa, '
                 'mutex, topology-aware)', id="policy-chain-bad-key"),
])
def test_bad_hami_flag_values_name_the_flag(argv: list[str], message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        _settings(*argv)
    assert str(caught.value) == message


@pytest.mark.parametrize("flag", sorted(UNSUPPORTED_HAMI_FLAGS))
def test_unsupported_hami_flags_fail_saying_so(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", flag, "x"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    reason = UNSUPPORTED_HAMI_FLAGS[flag]
    assert f"{flag} is a HAMi scheduler flag that hami-web serve does not support: {reason}" in error


# -- --kube-qps / --kube-burst -----------------------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))


def test_budget_lets_the_burst_through_then_spaces_requests_by_one_over_qps() -> None:
    clock = _Clock()
    budget = RequestBudget(qps=2.0, burst=3, monotonic=clock, sleep=clock.sleep)

    waits = [budget.take() for _ in range(5)]

    assert waits == [0.0, 0.0, 0.0, 0.5, 1.0]
    assert clock.slept == [0.5, 1.0]


def test_budget_refills_over_time_up_to_the_burst() -> None:
    clock = _Clock()
    budget = RequestBudget(qps=10.0, burst=2, monotonic=clock, sleep=clock.sleep)
    budget.take()
    budget.take()
    clock.now += 60  # a long quiet spell refills only up to the burst
    assert [budget.take() for _ in range(3)] == [0.0, 0.0, pytest.approx(0.1)]


def test_budget_burst_defaults_to_the_qps_rounded_up() -> None:
    clock = _Clock()
    budget = RequestBudget(qps=1.5, monotonic=clock, sleep=clock.sleep)
    assert [budget.take() for _ in range(3)] == [0.0, 0.0, pytest.approx(2 / 3)]


def test_budget_refuses_a_wait_longer_than_allowed_and_spends_nothing() -> None:
    clock = _Clock()
    budget = RequestBudget(qps=2.0, burst=1, monotonic=clock, sleep=clock.sleep)
    assert budget.take(max_wait_seconds=0.0) == 0.0  # the burst: no wait needed

    assert budget.take(max_wait_seconds=0.4) is None  # the next slot is 0.5 s away
    assert budget.take(max_wait_seconds=0.5) == 0.5  # the refusal did not push it back
    assert clock.slept == [0.5]


def test_client_spends_the_budget_before_every_request() -> None:
    calls: list[float | None] = []

    def throttle(max_wait_seconds: float | None) -> float:
        calls.append(max_wait_seconds)
        return 0.0

    with LocalCluster() as cluster:
        kube = Kube.for_url(cluster.url, timeout_seconds=5.0, throttle=throttle)
        join_pages(kube.list_nodes())
        with deadline(60.0):
            join_pages(kube.list_pods())
        kube.close()
    assert calls[0] is None  # no deadline: the budget may make the call wait as long as it needs
    assert calls[1] is not None and 0 < calls[1] <= 60.0  # under a deadline: at most the time left


def test_under_a_deadline_a_budget_wait_past_it_is_not_sent() -> None:
    with LocalCluster() as cluster:
        kube = Kube.for_url(cluster.url, throttle=RequestBudget(qps=0.01, burst=1).take)
        join_pages(kube.list_nodes())  # spends the burst; the next slot is 100 s away
        with deadline(5.0), pytest.raises(KubeError) as refused:
            kube.get_node("node1")
        kube.close()
    assert str(refused.value) == ("get node node1: not sent, the request budget (--kube-qps) has no slot before "
                                  "the request's deadline")
    assert refused.value.outcome_unknown is False
