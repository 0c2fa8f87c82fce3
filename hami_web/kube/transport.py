"""Sending one API request: the request budget, the per-request timeout, the shared deadline, reading the answer.

`Kube` builds requests (which path, which query, which body); this module carries them. Answers are read raw
and decoded to plain JSON dicts (the wire form): deserialising thousands of nodes and pods into the client's
models on every refresh would cost more than the scheduling itself, and our code reads annotations, not typed
fields. Every failure leaves here as a `KubeError`.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from types import TracebackType
from typing import Any, Self

import kubernetes.client
from kubernetes.client.exceptions import ApiException
from urllib3.connectionpool import ConnectionPool
from urllib3.exceptions import ReadTimeoutError
from urllib3.response import BaseHTTPResponse
from urllib3.util.retry import Retry

from hami_web.kube.deadlines import count_call, current_deadline
from hami_web.kube.errors import KubeError, error_from, is_transport_error
from hami_web.kube.untyped import close_api_client, drain_response

JsonObject = dict[str, Any]

# Seconds: a request to the API server that takes longer than this is a failure, not a hang.
REQUEST_TIMEOUT_SECONDS = 10.0
# Seconds a page of a list may take when no deadline is shorter: kube-apiserver's own ``--request-timeout`` (one
# minute by default), past which it answers 504 itself. A client that gave up sooner and asked again would make a busy
# API server read the same page twice.
LIST_PAGE_TIMEOUT_SECONDS = 60.0
# Threads that carry API calls made under a deadline (see `deadline`); more calls than this wait their turn.
DEADLINE_CALL_THREADS = 16
# Bytes read from a response at a time, so a response dripped slowly is cut at the deadline.
READ_CHUNK_BYTES = 64 * 1024

# Called before each request with the most it may wait (seconds, or None); answers None when it cannot wait.
Throttle = Callable[[float | None], float | None]


class LateAnswersNotResent(Retry):
    """urllib3's retries (a refused connection, a pooled connection the server had closed), except for a request whose
    answer is late: the server may still be working on it, and urllib3's default would send it three more times,
    doubling and tripling the work of a busy API server (a list page, a watch waiting for its first bytes)."""

    def increment(self, method: str | None = None, url: str | None = None, response: BaseHTTPResponse | None = None,
                  error: Exception | None = None, _pool: ConnectionPool | None = None,
                  _stacktrace: TracebackType | None = None) -> Self:
        if isinstance(error, ReadTimeoutError):
            raise error  # as the one request's failure (`errors.timed_out_reading` knows it)
        return super().increment(method, url, response, error, _pool, _stacktrace)


class _DeadlineExceeded(Exception):
    """The body of a response was still arriving at the request's deadline."""


class Transport:
    """Carries requests over one `ApiClient` (auth, TLS, connection pool) and turns the answers into dicts."""

    def __init__(self, api_client: kubernetes.client.ApiClient, *, timeout_seconds: float,
                 throttle: Throttle | None) -> None:
        self.api_client = api_client
        self.timeout_seconds = timeout_seconds
        self._throttle = throttle
        self._call_threads: ThreadPoolExecutor | None = None
        self._call_threads_lock = threading.Lock()

    def close(self) -> None:
        """Release the connection pool and the helper threads of calls under a deadline."""
        if self._call_threads is not None:
            self._call_threads.shutdown(wait=False, cancel_futures=True)
        close_api_client(self.api_client)

    def get(self, what: str, path: str, query: list[tuple[str, str]], *,
            timeout_seconds: float | None = None) -> JsonObject:
        """GET ``path`` with ``query``, without the generated API classes (importing CoreV1Api costs about 0.6 s
        of CPU, more than a whole `inspect` of a small cluster); ``timeout_seconds`` instead of ``--kube-timeout``
        when no deadline is set."""
        if timeout_seconds is None:
            return self.call(what, self._get_raw, path, query)
        return self.call(what, self._get_raw, path, query, _request_timeout=timeout_seconds)

    def send(self, what: str, method: str, path: str, body: JsonObject | list[JsonObject], *,
             content_type: str = "application/json", read_answer: bool = True) -> JsonObject:
        """``method`` (POST, PATCH, PUT) ``body`` to ``path`` through the client's request layer, as `get` does.

        The generated API methods validate every argument with pydantic and serialise through per-method helpers
        before the same request layer: a third of the CPU of a write on a burst's hot paths (the lock, the Binding,
        two Events per pod). ``read_answer`` False drains the answer without decoding it (an Event, a Binding's
        Status: nobody reads them) and answers ``{}``.
        """
        return self.call(what, self._send_raw, method, path, body, content_type, _read_answer=read_answer)

    def call(self, what: str, method: Any, *args: Any, **kwargs: Any) -> JsonObject:
        """Call ``method`` (a generated API method, or `_get_raw`) and decode its answer; ``what`` names the call
        in errors."""
        end = current_deadline()
        if end is None:
            self.spend_budget(what, None)
            count_call()
            kwargs.setdefault("_request_timeout", self.timeout_seconds)
            return self._request(what, method, args, kwargs, end=None)
        # A wait for the request budget counts against the deadline: it happens here, in the caller's thread,
        # and is refused up front when it would end after the deadline.
        self.spend_budget(what, end - time.monotonic())
        left = end - time.monotonic()
        if left <= 0:
            raise KubeError(f"{what}: not sent, the request's deadline has passed")
        # The helper's own read timeout runs a little past the deadline: the caller stops waiting first, and
        # the helper thread still ends soon after.
        kwargs["_request_timeout"] = min(self.timeout_seconds, left + 1.0)
        count_call()
        responses: list[Any] = []
        future = self._helpers().submit(self._request, what, method, args, kwargs, end=end, responses=responses)
        try:
            return future.result(timeout=left)
        except FutureTimeout:
            if future.cancel():  # never started: nothing was sent
                raise KubeError(f"{what}: not sent within the request's deadline (API calls are queued)") from None
            for response in list(responses):  # a body still dripping in: cut it so the helper thread is freed
                with contextlib.suppress(Exception):
                    response.shutdown()
            raise KubeError(f"{what}: no answer within the request's deadline of {left:.1f}s",
                            outcome_unknown=True) from None

    def spend_budget(self, what: str, max_wait_seconds: float | None) -> None:
        """Wait for the request budget (``--kube-qps``); `KubeError` when no slot comes within ``max_wait_seconds``."""
        if self._throttle is None:
            return
        if max_wait_seconds is not None and max_wait_seconds <= 0:
            raise KubeError(f"{what}: not sent, the request's deadline has passed")
        if self._throttle(max_wait_seconds) is None:
            raise KubeError(f"{what}: not sent, the request budget (--kube-qps) has no slot before the request's "
                            f"deadline")

    def _helpers(self) -> ThreadPoolExecutor:
        with self._call_threads_lock:
            if self._call_threads is None:
                self._call_threads = ThreadPoolExecutor(DEADLINE_CALL_THREADS, thread_name_prefix="kube-call")
            return self._call_threads

    def _request(self, what: str, method: Any, args: tuple[Any, ...], kwargs: dict[str, Any], *,
                 end: float | None, responses: list[Any] | None = None) -> JsonObject:
        decode = kwargs.pop("_read_answer", True)
        try:
            response = method(*args, _preload_content=False, **kwargs)
            if responses is not None:
                responses.append(response)
            return _read(response, end, decode=decode)
        except _DeadlineExceeded:
            raise KubeError(f"{what}: the answer was still arriving at the request's deadline",
                            outcome_unknown=True) from None
        except ApiException as error:
            raise error_from(error, what) from error
        except Exception as error:  # urllib3 raises its own hierarchy for connection problems
            if is_transport_error(error):
                raise error_from(error, what) from error
            raise

    def open_stream(self, path: str, query: list[tuple[str, str]], *, connect_seconds: float,
                    read_seconds: float) -> Any:
        """GET ``path`` and return the urllib3 response unread, once its headers have come (a watch stream); a
        non-2xx answer raises `ApiException`. Each socket read waits at most ``read_seconds``."""
        return self._get_raw(path, query, _request_timeout=(connect_seconds, read_seconds))

    def _get_raw(self, path: str, query: list[tuple[str, str]], *, _preload_content: bool = False,
                 _request_timeout: float | tuple[float, float] = REQUEST_TIMEOUT_SECONDS) -> Any:
        """GET through the client's request layer (auth, TLS, pool) without the generated API classes."""
        return self._raw("GET", path, query, None, {}, _request_timeout)

    def _send_raw(self, method: str, path: str, body: JsonObject | list[JsonObject], content_type: str, *,
                  _preload_content: bool = False,
                  _request_timeout: float | tuple[float, float] = REQUEST_TIMEOUT_SECONDS) -> Any:
        return self._raw(method, path, [], body, {"Content-Type": content_type}, _request_timeout)

    def _raw(self, method: str, path: str, query: list[tuple[str, str]], body: Any, headers: dict[str, str],
             request_timeout: float | tuple[float, float]) -> Any:
        """One request through the client's request layer; the urllib3 response, unread.

        A non-2xx answer raises `ApiException`, as the generated methods do with ``_preload_content=False``.
        """
        request = self.api_client.param_serialize(method=method, resource_path=path, query_params=query,
                                                  header_params={"Accept": "application/json", **headers},
                                                  body=body, auth_settings=["BearerToken"])
        response = self.api_client.call_api(*request, _request_timeout=request_timeout)
        if not 200 <= response.status <= 299:
            drain_response(response)
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response.response


def _read(response: Any, end: float | None, *, decode: bool = True) -> JsonObject:
    try:
        if end is None:
            data = response.data
        else:
            chunks = []
            while chunk := response.read1(READ_CHUNK_BYTES):  # whatever has arrived, not a full chunk
                chunks.append(chunk)
                if time.monotonic() > end:
                    raise _DeadlineExceeded
            data = b"".join(chunks)
        if not decode:
            return {}
        return json.loads(data or b"{}")  # type: ignore[no-any-return]
    finally:
        response.release_conn()
