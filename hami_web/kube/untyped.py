"""The few calls into the ``kubernetes`` client that it ships without annotations, each declared once with the
types hami-web relies on, so the rest of the package is checked strictly (``mypy --strict``) without ignores.

Each is a narrow `cast` of one client function to the signature we call it with; a client upgrade that changes
one shows up here, in one place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import kubernetes.client
import kubernetes.config


def close_api_client(api_client: kubernetes.client.ApiClient) -> None:
    """Release the client's connection pool (``ApiClient.close``)."""
    cast(Callable[[], None], api_client.close)()


def drain_response(response: Any) -> None:
    """Read the rest of a raw (``_preload_content=False``) response, so its connection goes back to the pool."""
    cast(Callable[[], bytes], response.read)()


def load_kube_config(*, config_file: str, context: str, client_configuration: kubernetes.client.Configuration,
                     persist_config: bool) -> None:
    """``kubernetes.config.load_kube_config`` into ``client_configuration``."""
    cast(Callable[..., None], kubernetes.config.load_kube_config)(
        config_file=config_file, context=context, client_configuration=client_configuration,
        persist_config=persist_config)


def load_incluster_config(*, client_configuration: kubernetes.client.Configuration) -> None:
    """``kubernetes.config.load_incluster_config`` into ``client_configuration``."""
    cast(Callable[..., None], kubernetes.config.load_incluster_config)(client_configuration=client_configuration)
