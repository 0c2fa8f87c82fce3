"""The dashboard exposed beyond loopback (``--ui-expose``): a bearer token checked as kube-rbac-proxy does.

Covers: the listener layout and flags (loopback by default, a non-loopback ``--ui-bind`` refused without
``--ui-expose``, ``--ui-bind off``); with ``--ui-expose``, no token → 401 with a Bearer challenge, an unknown
token → 401, a ServiceAccount token without RBAC → 403 naming what is missing, a token whose ServiceAccount
may list pods and nodes → the page; answers are remembered for a bounded time (one TokenReview for a page and
its assets), so removing the ClusterRoleBinding takes access away once that time has passed; a failed check
is not remembered (TokenReview and SubjectAccessReview against the in-process API server's stored RBAC
objects).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator

import kubernetes.client
import pytest
from flask.testing import FlaskClient

from hami_web.dashboard.auth import ANSWER_SECONDS, AnswerCache
from hami_web.kube import Kube
from hami_web.localcluster import LocalCluster
from hami_web.server.listeners import plan_listeners
from hami_web.server.runtime import build_runtime
from hami_web.services import EXTENSION_KEY
from hami_web.settings import Settings, SettingsError, build_settings

VIEWER_TOKEN = "viewer-token-1234"
NOBODY_TOKEN = "nobody-token-5678"


def _token_secret(account: str, token: str) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
            "metadata": {"name": f"{account}-token", "namespace": "monitoring",
                         "annotations": {"kubernetes.io/service-account.name": account}},
            "data": {"token": base64.b64encode(token.encode()).decode()}}


RBAC = [
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "gpu-viewer"},
     "rules": [{"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["get", "list", "watch"]}]},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "gpu-viewer"},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gpu-viewer"},
     "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": "monitoring"}]},
]


@pytest.fixture
def apiserver() -> Iterator[LocalCluster]:
    with LocalCluster(bookmark_interval_seconds=0.1) as cluster:
        cluster.load([_token_secret("viewer", VIEWER_TOKEN), _token_secret("nobody", NOBODY_TOKEN), *RBAC])
        yield cluster


@pytest.fixture
def clock() -> list[float]:
    """The time the token answers are remembered against (tests move it by hand)."""
    return [1000.0]


@pytest.fixture
def answers(clock: list[float]) -> AnswerCache:
    return AnswerCache(seconds=ANSWER_SECONDS, clock=lambda: clock[0])


@pytest.fixture
def exposed(apiserver: LocalCluster, answers: AnswerCache) -> Iterator[FlaskClient]:
    settings = Settings.of(ui_bind="0.0.0.0:9396", ui_expose=True, refresh_interval_seconds=300.0)
    runtime = build_runtime(settings, kube=Kube.for_url(apiserver.url))
    runtime.app.extensions[EXTENSION_KEY].dashboard.answers = answers
    runtime.start()
    try:
        yield runtime.app.test_client()
    finally:
        runtime.stop()


def test_the_dashboard_listens_on_loopback_in_plain_http_by_default() -> None:
    serving = build_settings(None, environ={}).serving
    ui = [listener for listener in plan_listeners(serving) if listener.audience == "ui"]
    assert [(listener.address, listener.tls) for listener in ui] == [("127.0.0.1:9396", False)]


@pytest.mark.parametrize("address", ["0.0.0.0:9396", ":9396", "10.0.0.5:9396", "[::]:9396"])
def test_a_non_loopback_dashboard_needs_ui_expose(address: str) -> None:
    with pytest.raises(SettingsError, match=r"--ui-bind.*--ui-expose"):
        build_settings(None, environ={"HAMI_UI_BIND": address})
    exposed = build_settings(None, environ={"HAMI_UI_BIND": address, "HAMI_UI_EXPOSE": "true"})
    assert [listener.tls for listener in plan_listeners(exposed.serving) if listener.audience == "ui"] == [True]


def test_ui_bind_off_serves_no_dashboard() -> None:
    settings = build_settings(None, environ={"HAMI_UI_BIND": "off"})
    assert "ui" not in {listener.audience for listener in plan_listeners(settings.serving)}
    assert build_runtime(settings, kube=Kube.for_url("http://127.0.0.1:9")).app.test_client().get(
        "/ui/").status_code == 404


def test_the_dashboard_port_must_differ_from_the_others() -> None:
    with pytest.raises(SettingsError, match="--ui-bind"):
        build_settings(None, environ={"HAMI_UI_BIND": "127.0.0.1:8444"})


def test_without_a_token_the_exposed_dashboard_answers_401_with_a_bearer_challenge(exposed: FlaskClient) -> None:
    response = exposed.get("/ui/api/overview")
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert "bearer token" in response.get_json()["message"]


def test_an_unknown_token_is_401(exposed: FlaskClient) -> None:
    response = exposed.get("/ui/", headers={"Authorization": "Bearer not-a-token"})
    assert response.status_code == 401 and "not valid" in response.get_json()["message"]


def test_a_token_without_rbac_is_403_naming_what_is_missing(exposed: FlaskClient) -> None:
    response = exposed.get("/ui/", headers={"Authorization": f"Bearer {NOBODY_TOKEN}"})
    assert response.status_code == 403
    assert response.get_json()["message"] == \
        "user 'system:serviceaccount:monitoring:nobody' may not list pods cluster-wide"


def test_a_token_allowed_to_list_pods_and_nodes_sees_the_pages(exposed: FlaskClient) -> None:
    for path in ("/ui/", "/ui/api/overview", "/ui/pending", "/ui/static/dashboard.css"):
        assert exposed.get(path, headers={"Authorization": f"Bearer {VIEWER_TOKEN}"}).status_code == 200


def test_a_page_and_its_assets_cost_one_token_check(exposed: FlaskClient, answers: AnswerCache) -> None:
    headers = {"Authorization": f"Bearer {VIEWER_TOKEN}"}
    for path in ("/ui/", "/ui/static/dashboard.css", "/ui/static/dashboard.js", "/ui/api/overview"):
        assert exposed.get(path, headers=headers).status_code == 200
    refused = {"Authorization": f"Bearer {NOBODY_TOKEN}"}
    assert [exposed.get("/ui/", headers=refused).status_code for _ in range(3)] == [403, 403, 403]
    assert answers.api_checks == 2  # one per token


def test_removing_the_binding_takes_access_away_once_the_answer_expires(
        exposed: FlaskClient, apiserver: LocalCluster, answers: AnswerCache, clock: list[float]) -> None:
    headers = {"Authorization": f"Bearer {VIEWER_TOKEN}"}
    assert exposed.get("/ui/api/overview", headers=headers).status_code == 200
    _rbac_api(apiserver).delete_cluster_role_binding("gpu-viewer")  # as an admin would, with kubectl
    clock[0] += ANSWER_SECONDS - 1
    assert exposed.get("/ui/api/overview", headers=headers).status_code == 200  # still the remembered answer
    clock[0] += 1
    assert exposed.get("/ui/api/overview", headers=headers).status_code == 403


def test_a_failed_check_is_not_remembered(apiserver: LocalCluster) -> None:
    cache = AnswerCache(clock=lambda: 0.0)
    unreachable, reachable = Kube.for_url("http://127.0.0.1:9"), Kube.for_url(apiserver.url)
    try:
        failed = cache.check(unreachable, VIEWER_TOKEN)
        assert failed is not None and failed.message.startswith("cannot check the token (TokenReview)")
        assert cache.check(reachable, VIEWER_TOKEN) is None  # asked again: the failure was not remembered
        assert cache.check(unreachable, VIEWER_TOKEN) is None  # now remembered: the API is not asked
    finally:
        unreachable.close()
        reachable.close()
    assert cache.api_checks == 2


def test_the_answer_cache_stays_bounded(apiserver: LocalCluster) -> None:
    cache = AnswerCache(capacity=8, clock=lambda: 0.0)
    kube = Kube.for_url(apiserver.url)
    try:
        refusals = [cache.check(kube, f"unknown-token-{number}") for number in range(20)]
    finally:
        kube.close()
    assert {refusal.status for refusal in refusals if refusal} == {401}
    assert cache.remembered <= 8


def _rbac_api(apiserver: LocalCluster) -> kubernetes.client.RbacAuthorizationV1Api:
    configuration = kubernetes.client.Configuration()
    configuration.host = apiserver.url
    return kubernetes.client.RbacAuthorizationV1Api(kubernetes.client.ApiClient(configuration))
