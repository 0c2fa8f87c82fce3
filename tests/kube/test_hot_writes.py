"""The requests a burst makes per pod, sent through the client's request layer instead of its generated API classes
(`Transport.send`, `Transport.get`), are the very requests the generated classes sent: same method, path, query,
content type, accept header, token and JSON body, and the same errors. And the loaders' token refresh hook runs at
most once a second (`throttle_token_refresh`) yet still renews an expired token.

A recording HTTP server stands in for the API server, so each request is compared byte for byte as the official
client sends it; the errors are checked against the in-process API server.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami_web.kube import ConflictError, Kube, NotFoundError
from hami_web.kube.config import throttle_token_refresh
from hami_web.localcluster import LocalCluster

Recorded = tuple[str, str, str, str, str, Any]


class _Recorder(BaseHTTPRequestHandler):
    """Answers every request 201 with a small object and records what it was sent."""

    protocol_version = "HTTP/1.1"
    seen: list[Recorded]

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        self.seen.append((self.command, self.path, self.headers.get("Content-Type") or "",
                          self.headers.get("Accept") or "", self.headers.get("Authorization") or "", body))
        answer = b'{"kind": "Node", "metadata": {"name": "n1", "resourceVersion": "7"}}'
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    do_GET = do_POST = do_PATCH = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def recorder(tmp_path: Path) -> Iterator[tuple[Kube, list[Recorded]]]:
    """A Kube loaded from a kubeconfig with a token (the loader's refresh hook installed), talking to the recorder."""
    seen: list[Recorded] = []
    handler = type("Handler", (_Recorder,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    config = tmp_path / "config"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}],
        "users": [{"name": "u", "user": {"token": "sekret"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    kube = Kube.from_kubeconfig(str(config))
    yield kube, seen
    kube.close()
    server.shutdown()
    server.server_close()


BINDING: Any = {"apiVersion": "v1", "kind": "Binding",
           "metadata": {"name": "p 1", "namespace": "team-a", "uid": "u1", "resourceVersion": "41",
                        "annotations": {"hami.io/vgpu-node": "n1"}},
           "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}}
EVENT: Any = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "p.1", "namespace": "team-a"}, "reason": "R",
         "involvedObject": {"kind": "Pod", "name": "p", "namespace": "team-a"}, "count": 1}
PATCH = {"metadata": {"resourceVersion": "3", "annotations": {"hami.io/mutex.lock": "x", "drop": None}}}

# (what, the call through Kube, the same request through the generated API class)
CASES: list[tuple[str, Callable[[Kube], object], Callable[[Kube], object]]] = [
    ("get node", lambda k: k.get_node("n/1"), lambda k: k._core.read_node("n/1", _preload_content=False)),
    ("patch node", lambda k: k.patch_node("n1", PATCH),
     lambda k: k._core.patch_node("n1", PATCH, _content_type="application/merge-patch+json", _preload_content=False)),
    ("get pod", lambda k: k.get_pod("team-a", "p1"),
     lambda k: k._core.read_namespaced_pod("p1", "team-a", _preload_content=False)),
    ("patch pod", lambda k: k.patch_pod("team-a", "p1", PATCH),
     lambda k: k._core.patch_namespaced_pod("p1", "team-a", PATCH, _content_type="application/merge-patch+json",
                                            _preload_content=False)),
    ("patch pod status", lambda k: k.patch_pod_status("team-a", "p1", PATCH),
     lambda k: k._core.patch_namespaced_pod_status("p1", "team-a", PATCH,
                                                   _content_type="application/merge-patch+json",
                                                   _preload_content=False)),
    ("bind pod", lambda k: k.bind_pod("team-a", "p 1", "n1", uid="u1", resource_version="41",
                                      annotations={"hami.io/vgpu-node": "n1"}),
     lambda k: k._core.create_namespaced_pod_binding("p 1", "team-a", BINDING, _preload_content=False)),
    ("create event", lambda k: k.create_event(EVENT),
     lambda k: k._core.create_namespaced_event("team-a", EVENT, _preload_content=False)),
    ("patch event", lambda k: k.patch_event("team-a", "p.1", {"count": 2}),
     lambda k: k._core.patch_namespaced_event("p.1", "team-a", {"count": 2},
                                              _content_type="application/merge-patch+json", _preload_content=False)),
]


@pytest.mark.parametrize(("what", "ours", "generated"), CASES, ids=[case[0] for case in CASES])
def test_the_request_on_the_wire_is_the_generated_classes_one(
        recorder: tuple[Kube, list[Recorded]], what: str, ours: Callable[[Kube], object],
        generated: Callable[[Kube], object]) -> None:
    kube, seen = recorder
    ours(kube)
    generated(kube)
    assert len(seen) == 2, what
    (method, path, content_type, *rest), generated_request = seen
    if method == "POST" and not generated_request[2]:
        # The generated create methods of a subresource (a Binding) name no content type; the body is JSON.
        assert content_type == "application/json"
        content_type = ""
    assert (method, path, content_type, *rest) == generated_request, what
    assert rest[1] == "Bearer sekret"


def test_reads_and_patches_answer_the_decoded_object(recorder: tuple[Kube, list[Recorded]]) -> None:
    """The answers of events and Bindings are drained undecoded (nobody reads them)."""
    kube, seen = recorder
    kube.create_event(EVENT)
    kube.bind_pod("team-a", "p1", "n1")
    assert kube.patch_node("n1", PATCH)["metadata"]["resourceVersion"] == "7"
    assert kube.get_pod("team-a", "p1")["metadata"]["name"] == "n1"
    assert [request[0] for request in seen] == ["POST", "POST", "PATCH", "GET"]


def test_errors_are_the_same_kube_errors(apiserver: LocalCluster, kube: Kube) -> None:
    """A missing object is `NotFoundError`, a stale precondition `ConflictError`, as through the generated classes."""
    with pytest.raises(NotFoundError, match="patch node nowhere"):
        kube.patch_node("nowhere", {"metadata": {"annotations": {"a": "b"}}})
    with pytest.raises(NotFoundError, match="get pod team-a/none"):
        kube.get_pod("team-a", "none")
    apiserver.load([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}])
    written = kube.patch_node("n1", {"metadata": {"annotations": {"a": "b"}}})
    assert written["metadata"]["annotations"] == {"a": "b"}
    with pytest.raises(ConflictError):
        kube.patch_node("n1", {"metadata": {"resourceVersion": "1", "annotations": {"a": "c"}}})
    assert kube.get_node("n1")["metadata"]["annotations"] == {"a": "b"}


class _Configuration:
    """What the loaders' hook touches of a configuration: the hook itself and the token."""

    def __init__(self) -> None:
        self.refresh_api_key_hook: Any = None
        self.token = "old"


class _LoaderHook:
    """Behaves as the official loaders' ``_refresh_api_key`` (kube_config.py ``KubeConfigLoader._set_config``,
    incluster_config.py ``InClusterConfigLoader._set_config``): renews the token when it has expired, then installs
    a fresh hook of its own on the configuration."""

    def __init__(self, expired: Callable[[], bool], runs: list[str]) -> None:
        self._expired = expired
        self._runs = runs

    def __call__(self, configuration: _Configuration) -> None:
        self._runs.append("run")
        if self._expired():
            configuration.token = "new"
        configuration.refresh_api_key_hook = _LoaderHook(self._expired, self._runs)


# (times the client asks for the token, seconds apart; hook runs expected)
THROTTLE_CASES = [
    ([0.0], 1),
    ([0.0, 0.1, 0.2, 0.9], 1),
    ([0.0, 1.0], 2),
    ([0.0, 0.5, 1.2, 1.3, 2.5], 3),
]


@pytest.mark.parametrize(("times", "runs_expected"), THROTTLE_CASES)
def test_the_refresh_hook_runs_at_most_once_a_second(times: list[float], runs_expected: int) -> None:
    now = [0.0]
    runs: list[str] = []
    configuration = _Configuration()
    configuration.refresh_api_key_hook = _LoaderHook(lambda: False, runs)
    throttle_token_refresh(configuration, clock=lambda: now[0])  # type: ignore[arg-type]
    wrapper = configuration.refresh_api_key_hook
    for at in times:
        now[0] = at
        configuration.refresh_api_key_hook(configuration)
        assert configuration.refresh_api_key_hook is wrapper  # the loader's new hook is wrapped, not installed bare
    assert len(runs) == runs_expected


def test_an_expired_token_is_still_renewed() -> None:
    now = [0.0]
    expired = [False]
    configuration = _Configuration()
    configuration.refresh_api_key_hook = _LoaderHook(lambda: expired[0], [])
    throttle_token_refresh(configuration, clock=lambda: now[0])  # type: ignore[arg-type]
    configuration.refresh_api_key_hook(configuration)
    expired[0] = True
    now[0] = 0.5
    configuration.refresh_api_key_hook(configuration)
    assert configuration.token == "old"  # within the second: not looked at yet
    now[0] = 1.5
    configuration.refresh_api_key_hook(configuration)
    assert configuration.token == "new"


def test_a_configuration_without_a_hook_is_left_alone(apiserver: LocalCluster) -> None:
    kube = Kube.for_url(apiserver.url)
    try:
        assert kube._api_client.configuration.refresh_api_key_hook is None
    finally:
        kube.close()
