"""PATCH bodies applied the way kube-apiserver applies them, chosen by ``Content-Type``.

Merge patch is RFC 7386 (``null`` deletes, objects merge, lists replace). Strategic merge patch is served
with merge semantics plus removal of ``$``-directives: the types here are patched on maps (metadata,
annotations, labels, status), where both agree. JSON patch (RFC 6902) uses `jsonpatch`. A body that does
not parse is a 400; a JSON patch that cannot be applied (missing path, failed ``test``) is the 422 the real
server answers; server-side apply is not served (415), as a server without apply would answer.
"""

from __future__ import annotations

import json
from typing import Any

import jsonpatch

from hami_web.localcluster.errors import ApiError, bad_request

JsonObject = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
SUPPORTED = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH)

# Same cap as the real server: a JSON patch with more operations is refused.
MAX_JSON_PATCH_OPERATIONS = 10_000


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 merge of ``patch`` into ``target``; returns a new value and leaves both inputs untouched."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _strip_directives(patch: Any) -> Any:
    if isinstance(patch, dict):
        return {key: _strip_directives(value) for key, value in patch.items() if not key.startswith("$")}
    return patch


def media_type(content_type: str | None) -> str:
    """``Content-Type`` without parameters, lower case."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def apply_patch(current: JsonObject, content_type: str | None, body: bytes) -> JsonObject:
    """The object ``current`` becomes under the patch ``body``; raises `ApiError` (400/415/422)."""
    kind = media_type(content_type)
    if kind not in SUPPORTED:
        raise ApiError(415, "the body of the request was in an unknown format - accepted media types "
                            f"include: {', '.join(SUPPORTED)}")
    try:
        document = json.loads(body or b"null")
    except ValueError as error:
        raise bad_request(f"error decoding patch: {error}") from None
    if kind == JSON_PATCH:
        return _apply_json_patch(current, document)
    if not isinstance(document, dict):
        raise bad_request("invalid JSON Patch" if kind == MERGE_PATCH else
                          "error decoding patch: a strategic merge patch must be a JSON object")
    if kind == STRATEGIC_MERGE_PATCH:
        document = _strip_directives(document)
    merged: JsonObject = merge_patch(current, document)
    return merged


def _apply_json_patch(current: JsonObject, document: Any) -> JsonObject:
    if not isinstance(document, list) or not all(isinstance(op, dict) for op in document):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    if len(document) > MAX_JSON_PATCH_OPERATIONS:
        raise ApiError(413, f"The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, "
                            f"got {len(document)}")
    try:
        patched = jsonpatch.JsonPatch(document).apply(current, in_place=False)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, KeyError, TypeError,
            ValueError) as error:
        raise ApiError(422, f"the server rejected our request due to an error in our request: {error}") from None
    if not isinstance(patched, dict):
        raise ApiError(422, "the server rejected our request due to an error in our request: "
                            "the patch replaced the whole object with a non-object")
    return patched
