"""Listeners by audience: the flags that place them and the routes each serves (in-process).

Covers: the safe defaults (webhook on every interface, extender on loopback, metrics plain HTTP on :9395);
the ``HAMI_…`` twins of the new flags; two listeners on one port refused naming the flags; a bad address
naming its flag; TLS on the webhook and extender listeners only (none under ``--insecure-http``); the app
answering a plain JSON 404 for a route asked for on a listener that does not serve it — before any
blueprint's handler (the extender's would turn it into a 200) — and every route when no listener is marked
(an in-process test client). Over real sockets: ``tests/server/test_front.py``.
"""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from hami_web.server.listeners import LISTENER_ENVIRON_KEY, ROUTES_BY_AUDIENCE, plan_listeners
from hami_web.server.worker import ThreadLanes
from hami_web.settings import Settings, SettingsError, build_settings

ALL_ROUTES = [("POST", "/webhook"), ("POST", "/filter"), ("POST", "/bind"), ("GET", "/healthz"),
              ("GET", "/readyz"), ("GET", "/metrics")]


def test_defaults_are_the_safe_layout() -> None:
    settings = build_settings(None, environ={})
    assert [(listener.audience, listener.address, listener.tls) for listener in plan_listeners(settings.serving)] == [
        ("webhook", "0.0.0.0:8443", True), ("extender", "127.0.0.1:8444", True), ("metrics", "0.0.0.0:9395", False),
        ("ui", "127.0.0.1:9396", False)]


def test_the_listener_flags_have_environment_twins() -> None:
    settings = build_settings(None, environ={"HAMI_EXTENDER_BIND": "127.0.0.1:9000",
                                             "HAMI_METRICS_BIND_ADDRESS": "127.0.0.1:9001"})
    assert (settings.serving.extender_host_port, settings.serving.metrics_host_port) == (("127.0.0.1", 9000),
                                                                                         ("127.0.0.1", 9001))


def test_two_listeners_on_one_port_are_refused() -> None:
    with pytest.raises(SettingsError, match="--bind/--extender-bind/--http-bind/--metrics-bind-address"):
        build_settings(None, environ={"HAMI_EXTENDER_BIND": "127.0.0.1:8443"})


@pytest.mark.parametrize("variable", ["HAMI_EXTENDER_BIND", "HAMI_METRICS_BIND_ADDRESS"])
def test_a_bad_listener_address_names_its_flag(variable: str) -> None:
    flag = "--" + variable.removeprefix("HAMI_").lower().replace("_", "-")
    with pytest.raises(SettingsError, match=flag):
        build_settings(None, environ={variable: "no-port"})


def test_insecure_http_makes_every_listener_plain() -> None:
    settings = Settings.of(insecure_http=True)
    assert [listener.tls for listener in plan_listeners(settings.serving)] == [False, False, False, False]


@pytest.mark.parametrize("audience", sorted(ROUTES_BY_AUDIENCE))
@pytest.mark.parametrize(("method", "path"), ALL_ROUTES)
def test_a_route_on_the_wrong_listener_is_a_plain_404(client: FlaskClient, audience: str, method: str,
                                                      path: str) -> None:
    response = client.open(path, method=method, data=b"{}", environ_base={LISTENER_ENVIRON_KEY: audience})
    if path in ROUTES_BY_AUDIENCE[audience]:
        assert response.status_code != 404 or path == "/metrics"  # no metrics collaborator in this app
    else:
        assert response.status_code == 404
        assert response.get_json() == {"error": "Not Found", "message": "no such route on this listener"}


@pytest.mark.parametrize(("method", "path"), [route for route in ALL_ROUTES if route[1] != "/metrics"])
def test_an_unmarked_request_reaches_every_route(client: FlaskClient, method: str, path: str) -> None:
    assert client.open(path, method=method, data=b"{}").status_code != 404


# -- HAMi's one listener (--http_bind) -------------------------------------------------------------------------


@pytest.mark.parametrize(("overrides", "tls"), [({"cert_file": "/tls/tls.crt", "key_file": "/tls/tls.key"}, True),
                                                ({}, False)], ids=["tls", "plain-as-hamis-chart-without-webhook"])
def test_http_bind_is_one_listener_for_the_webhook_and_the_extender(overrides: dict[str, str], tls: bool) -> None:
    """HAMi v2.10 cmd/scheduler/main.go start(): one router on --http_bind, TLS only with both files."""
    settings = Settings.of(http_bind="0.0.0.0:443", **overrides)
    assert [(listener.audience, listener.address, listener.tls) for listener in plan_listeners(settings.serving)] == [
        ("shared", "0.0.0.0:443", tls), ("metrics", "0.0.0.0:9395", False), ("ui", "127.0.0.1:9396", False)]
    assert ROUTES_BY_AUDIENCE["shared"] == {"/webhook", "/filter", "/bind", "/preempt", "/healthz", "/readyz"}


@pytest.mark.parametrize("path", ["/filter", "/bind", "/preempt"])
@pytest.mark.parametrize("peer", ["10.1.2.3", "192.168.0.7", "::ffff:10.0.0.1", "fd00::5"])
def test_the_shared_listener_refuses_booking_routes_to_other_peers(client: FlaskClient, path: str, peer: str) -> None:
    response = client.post(path, data=b"{}", environ_base={LISTENER_ENVIRON_KEY: "shared", "REMOTE_ADDR": peer})
    assert response.status_code == 403
    assert response.get_json() == {"error": "Forbidden", "message": (
        f"{path} is answered only to loopback peers on this listener (kube-scheduler in the same pod); "
        f"refused for {peer}")}


@pytest.mark.parametrize(("path", "peer"), [("/filter", "127.0.0.1"), ("/bind", "::1"),
                                            ("/filter", "::ffff:127.0.0.1"), ("/webhook", "10.1.2.3")])
def test_the_shared_listener_answers_loopback_and_the_webhook_to_anyone(client: FlaskClient, path: str,
                                                                         peer: str) -> None:
    response = client.post(path, data=b"{}", environ_base={LISTENER_ENVIRON_KEY: "shared", "REMOTE_ADDR": peer})
    assert response.status_code not in (403, 404)


def test_the_shared_listener_runs_the_webhook_on_its_own_threads() -> None:
    """A burst of slow binds must not hold the threads of the webhook, as with separate listeners."""
    (shared, *_) = plan_listeners(Settings.of(http_bind="0.0.0.0:443").serving)
    lanes = ThreadLanes(2)
    try:
        assert lanes.for_path(shared, "/filter") is lanes.for_path(shared, "/bind")
        assert lanes.for_path(shared, "/webhook") is not lanes.for_path(shared, "/bind")
    finally:
        lanes.shutdown()


@pytest.mark.parametrize("serving", [{"http_bind": "0.0.0.0:443"}, {}], ids=["HAMi's one listener", "three"])
def test_binds_waiting_in_line_have_threads_of_their_own_on_the_extenders_listener(serving: dict[str, str]) -> None:
    """Binpack's in-process line (``--binpack-lock-queue``): waiting binds never take the threads /filter runs on, and
    the webhook's and metrics' pools stay as ``--threads`` says."""
    listeners = plan_listeners(Settings.of(**serving).serving)
    lanes = ThreadLanes(2, waiting_threads=5)
    try:
        for listener in listeners:
            for path in ("/filter", "/webhook", "/metrics"):
                pool = lanes.for_path(listener, path)
                serves_binds = lanes.for_path(listener, "/bind") is pool and listener.audience in ("extender", "shared")
                assert pool._max_workers == (7 if serves_binds else 2), (listener.flag, path)
    finally:
        lanes.shutdown()


def test_the_shared_listener_needs_its_own_port() -> None:
    with pytest.raises(SettingsError, match="each listener needs its own port"):
        build_settings(None, environ={"HAMI_HTTP_BIND": "0.0.0.0:9395"})
