"""Label and field selectors, parsed once per request into predicates over wire objects.

The grammar is the subset kube-apiserver accepts for these types: label requirements ``a=b``, ``a==b``,
``a!=b``, ``a``, ``!a``, ``a in (x,y)``, ``a notin (x)`` joined by commas (AND); field requirements
``path=value``, ``path==value``, ``path!=value`` over the fields a type declares. A selector that does not
parse is a 400, as it is from the real server, so typos in our code fail in tests instead of matching all.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from hami_web.localcluster.errors import bad_request

JsonObject = dict[str, Any]
Predicate = Callable[[JsonObject], bool]

_KEY = r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_VALUE = r"(?:[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET_REQUIREMENT = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s*\(([^()]*)\)\s*$")
_EQUALITY_REQUIREMENT = re.compile(rf"^\s*({_KEY})\s*(==|=|!=)\s*({_VALUE})\s*$")
_EXISTS_REQUIREMENT = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")
_VALUE_ONLY = re.compile(rf"^{_VALUE}$")


def _split_requirements(text: str) -> list[str]:
    """Split on commas that are not inside ``( )``."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def _label_requirement(text: str) -> Callable[[Mapping[str, str]], bool]:
    if match := _SET_REQUIREMENT.match(text):
        key, operator = match.group(1), match.group(3)
        values = {value.strip() for value in match.group(4).split(",")}
        if not all(_VALUE_ONLY.match(value) for value in values):
            raise bad_request(f"unable to parse requirement: invalid value in {text.strip()!r}")
        if operator == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if match := _EQUALITY_REQUIREMENT.match(text):
        key, operator, value = match.group(1), match.group(3), match.group(4)
        if operator == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if match := _EXISTS_REQUIREMENT.match(text):
        negated, key = match.group(1) == "!", match.group(2)
        if negated:
            return lambda labels: key not in labels
        return lambda labels: key in labels
    raise bad_request(f"unable to parse requirement: {text.strip()!r} is not a valid label selector requirement")


def parse_label_selector(text: str | None) -> Predicate:
    """A predicate over objects' ``metadata.labels``; empty or absent selects everything."""
    if not text or not text.strip():
        return lambda obj: True
    requirements = [_label_requirement(part) for part in _split_requirements(text)]

    def matches(obj: JsonObject) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(requirement(labels) for requirement in requirements)

    return matches


def field_value(obj: JsonObject, path: str) -> str:
    """The string form of a dotted field as field selectors compare it (absent is ``""``)."""
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if path == "source" and isinstance(value, dict):
        value = value.get("component")
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_field_selector(text: str | None, supported: tuple[str, ...]) -> Predicate:
    """A predicate over the fields in ``supported``; an unknown field or bad syntax is a 400."""
    if not text or not text.strip():
        return lambda obj: True
    requirements: list[tuple[str, bool, str]] = []
    for part in text.split(","):
        match = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|=|!=)(.*)$", part)
        if not match:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        path, operator, value = match.group(1), match.group(2), match.group(3).strip()
        if path not in supported:
            raise bad_request(f'field label not supported: {path}')
        requirements.append((path, operator == "!=", value))

    def matches(obj: JsonObject) -> bool:
        return all((field_value(obj, path) != value) if negated else (field_value(obj, path) == value)
                   for path, negated, value in requirements)

    return matches
