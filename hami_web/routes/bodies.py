"""Reading a request's JSON body, so every route says the same thing about the same bad body.

A body nested deeper than the JSON parser's recursion limit raises `RecursionError`, which is not a
`ValueError`; left alone it reaches the generic handler as ``internal error: RecursionError``. Here it
becomes a plain "nested too deeply". A body over the size limit is not handled here: werkzeug raises
`RequestEntityTooLarge` while reading it, and each route answers that in its own wire format.
"""

from __future__ import annotations

import json
from typing import Any

from flask import request


class BodyError(ValueError):
    """The body cannot be read as JSON; the message says why, for the client."""


def read_json_body() -> Any:
    """The request body decoded as JSON (any JSON value; callers check its shape).

    Raises `BodyError` for a body that is not JSON or is nested too deeply.
    """
    raw = request.get_data(cache=False)
    try:
        return json.loads(raw)
    except RecursionError:
        raise BodyError("the body is nested too deeply to be read as JSON") from None
    except ValueError as error:  # JSONDecodeError, and bytes that are not UTF-8/16/32
        raise BodyError(f"the body is not JSON: {error}") from None
