"""Shared fixtures: an in-process Kubernetes API server, the adapter pointed at it, the app and its client."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flask import Flask
from flask.testing import FlaskClient

from hami_web.kube import Kube
from hami_web.localcluster import LocalCluster
from hami_web.server.app import create_app
from hami_web.settings import Settings


@pytest.fixture
def apiserver() -> Iterator[LocalCluster]:
    """A fresh, empty API server on a free 127.0.0.1 port (cheap: one thread, in memory)."""
    with LocalCluster() as cluster:
        yield cluster


@pytest.fixture
def kube(apiserver: LocalCluster) -> Iterator[Kube]:
    """The adapter (official client) talking HTTP to `apiserver`."""
    client = Kube.for_url(apiserver.url)
    yield client
    client.close()


@pytest.fixture
def settings() -> Settings:
    """Default settings (tests override with `dataclasses.replace`)."""
    return Settings()


@pytest.fixture
def app(settings: Settings) -> Flask:
    """An app with no cluster behind it (webhook and health routes)."""
    return create_app(settings)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    """Flask test client for `app`."""
    return app.test_client()
