"""Request bodies every route reads the same way (in-process, through the app of a running `Runtime`).

Covers: a JSON body nested 100,000 deep gets a plain "nested too deeply" on ``/filter``, ``/bind`` and
``/webhook`` (never ``internal error: RecursionError``); a body that is not JSON says so on each route.
"""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from hami_web.server.runtime import Runtime

NESTED_100K = b"[" * 100_000 + b"]" * 100_000
OBJECT_NESTED_100K = b'{"a":' * 100_000 + b"1" + b"}" * 100_000


@pytest.fixture
def client(runtime: Runtime) -> FlaskClient:
    """A client of the full app: webhook and extender routes."""
    return runtime.app.test_client()


def _message(client: FlaskClient, route: str, body: bytes) -> str:
    response = client.post(route, data=body, content_type="application/json")
    answer = response.get_json()
    if route == "/webhook":
        assert response.status_code == 400
        return answer["message"]
    assert response.status_code == 200
    return answer["Error"]


@pytest.mark.parametrize("body", [NESTED_100K, OBJECT_NESTED_100K], ids=["arrays", "objects"])
@pytest.mark.parametrize("route", ["/filter", "/bind", "/webhook"])
def test_a_body_nested_too_deeply_is_refused_plainly_on_every_route(client: FlaskClient, route: str,
                                                                    body: bytes) -> None:
    message = _message(client, route, body)
    assert "nested too deeply" in message
    assert "RecursionError" not in message and "internal error" not in message


@pytest.mark.parametrize("route", ["/filter", "/bind", "/webhook"])
def test_a_body_that_is_not_json_says_so_on_every_route(client: FlaskClient, route: str) -> None:
    assert "not JSON" in _message(client, route, b"{nope")
