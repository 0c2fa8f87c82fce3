"""The pod shape the tools ask about, declared once: ``kubectl hami capacity``'s flags and the dashboard's what-if form.

Each row of `SHAPE_FIELDS` is one part of a `PodShape`: the field it sets, its flag, its form key, its parser with
its bounds and its help. `add_shape_flags` makes the flags from it, `shape_from_flags` and `shape_from_form` read a
shape with it, so the command and the form accept and refuse the same values in the same words (before, the
command clamped ``--gpucores 150`` in silence and took ``--gpus 100`` while the form refused both). Each parser
raises `ValueError` saying what is wrong; the reader names the flag or the form key.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hami_web.core.limits import MAX_GPUS_PER_CONTAINER, MAX_QUANTITY, MAX_TASK_CORES
from hami_web.core.options import NODE_POLICIES, OptionsError, parse_gpu_policy
from hami_web.ops.capacity import PodShape, ShapeError, parse_label, parse_toleration
from hami_web.settings.values import Whole, choice, parse_bool, whole

# Which memory a pod asks for: at most one of these, the others left at their defaults.
MEMORY = "memory"


@dataclass(frozen=True, slots=True)
class ShapeField:
    """One part of the shape: `PodShape`'s ``field``, capacity's ``flag``, the what-if form's ``form_key``.

    ``parse`` turns one text into the value (`ValueError`: what is wrong); ``repeated`` fields are lists (the
    flag repeats, the form separates entries by commas); a ``switch`` is a flag without a value and a checkbox;
    of the fields of one ``exclusive`` group at most one may be given.
    """

    field: str
    flag: str
    form_key: str
    parse: Callable[[str], Any]
    help: str
    metavar: str = ""
    repeated: bool = False
    switch: bool = False
    exclusive: str = ""


def _text(text: str) -> str:
    return text.strip()


def _gpu_policy(text: str) -> str:
    """What the server's ``--gpu-scheduler-policy`` accepts: a policy or a chain such as ``binpack,numa``; empty is
    the server's."""
    if not text.strip():
        return ""
    try:
        return parse_gpu_policy(text.strip(), source="GPU policy")
    except OptionsError as error:
        raise ValueError(str(error)) from None


def _toleration(text: str) -> str:
    try:
        parse_toleration(text.strip())
    except ShapeError as error:
        raise ValueError(str(error)) from None
    return text.strip()


def _label(text: str) -> str:
    try:
        parse_label(text.strip())
    except ShapeError as error:
        raise ValueError(str(error)) from None
    return text.strip()


SHAPE_FIELDS: tuple[ShapeField, ...] = (
    ShapeField("family", "--family", "family", _text, metavar="CW",
               help="the device family the pod asks for, by its common word (default NVIDIA; DCU, the Iluvatar "
                    "chips with --enable-iluvatar, the Ascend chips with --enable-ascend): the flags below are its "
                    "resources"),
    ShapeField("gpus", "--gpus", "gpus", whole(1, MAX_GPUS_PER_CONTAINER), metavar="N",
               help=f"devices per pod (1-{MAX_GPUS_PER_CONTAINER}, default 1)"),
    ShapeField("memory_mib", "--gpumem", "memory_mib", whole(0, MAX_QUANTITY), metavar="MIB", exclusive=MEMORY,
               help="memory per device: the family's memory resource (MiB times its memory factor)"),
    ShapeField("memory_percent", "--gpumem-percentage", "memory_percent", whole(0, 100), metavar="P",
               exclusive=MEMORY, help="memory per device in %% (0-100)"),
    ShapeField("mig_profile", "--mig-profile", "mig_profile", _text, metavar="NAME", exclusive=MEMORY,
               help="a dynamic MIG instance of this profile per device, e.g. 2g.10gb: its memory, on MIG GPUs "
                    "(nvidia.com/vgpu-mode: mig)"),
    ShapeField("cores", "--gpucores", "cores", whole(0, MAX_TASK_CORES), metavar="C",
               help=f"cores per device in %% (0-{MAX_TASK_CORES})"),
    ShapeField("gpu_type", "--type", "type", _text, metavar="T",
               help="device types allowed (the family's use-type annotation, nvidia.com/use-gputype)"),
    ShapeField("numa_bind", "--numa-bind", "numa_bind", parse_bool, switch=True,
               help="all devices of the pod on one NUMA node"),
    ShapeField("node_policy", "--node-policy", "node_policy", choice(NODE_POLICIES), metavar="POLICY",
               help=f"the pod's hami.io/node-scheduler-policy: {' or '.join(NODE_POLICIES)} (default: the "
                    "server's)"),
    ShapeField("gpu_policy", "--gpu-policy", "gpu_policy", _gpu_policy, metavar="POLICY",
               help="the pod's hami.io/gpu-scheduler-policy (default: the server's)"),
    ShapeField("tolerations", "--toleration", "tolerations", _toleration, metavar="KEY[=VALUE][:EFFECT]",
               repeated=True,
               help="a toleration of the pod (repeatable; * tolerates every taint); without one, tainted nodes are "
                    "left out as kube-scheduler leaves them out"),
    ShapeField("node_selector", "--node-selector", "node_selector", _label, metavar="KEY=VALUE", repeated=True,
               help="the pod's spec.nodeSelector (repeatable)"),
    ShapeField("cpu", "--cpu", "cpu", _text, metavar="QUANTITY", help="the pod's cpu request, e.g. 4 or 500m"),
    ShapeField("memory", "--memory", "memory", _text, metavar="QUANTITY",
               help="the pod's memory request, e.g. 16Gi"),
)

_BY_FIELD = {row.field: row for row in SHAPE_FIELDS}


def _dest(row: ShapeField) -> str:
    return f"shape_{row.field}"


def add_shape_flags(parser: argparse.ArgumentParser) -> None:
    """Capacity's shape flags, one per row; values stay text until `shape_from_flags` reads them."""
    for row in SHAPE_FIELDS:
        if row.switch:
            parser.add_argument(row.flag, dest=_dest(row), action="store_const", const="true", default=None,
                                help=row.help)
        else:
            parser.add_argument(row.flag, dest=_dest(row), action="append" if row.repeated else "store",
                                default=None, metavar=row.metavar, help=row.help)


def _read(given: Callable[[ShapeField], list[str] | None], name: Callable[[ShapeField], str]) -> PodShape:
    """The shape from each row's texts (None: not given, the field's default); `ShapeError` names the part."""
    values: dict[str, Any] = {}
    for row in SHAPE_FIELDS:
        texts = given(row)
        if texts is None:
            continue
        try:
            parsed = [row.parse(text) for text in texts]
        except ValueError as error:
            raise ShapeError(f"{name(row)}: {error}") from None
        values[row.field] = tuple(parsed) if row.repeated else parsed[-1]
    defaults = {item.name: item.default for item in dataclasses.fields(PodShape)}
    for group in {row.exclusive for row in SHAPE_FIELDS if row.exclusive}:
        members = [row for row in SHAPE_FIELDS if row.exclusive == group]
        if sum(values.get(row.field, defaults[row.field]) != defaults[row.field] for row in members) > 1:
            raise ShapeError(f"give one of {', '.join(name(row) for row in members)}")
    return PodShape(**values)


def shape_from_flags(arguments: argparse.Namespace) -> PodShape:
    """The shape capacity's flags (`add_shape_flags`) give; `ShapeError` names the flag."""
    def given(row: ShapeField) -> list[str] | None:
        value = getattr(arguments, _dest(row))
        return None if value is None else value if isinstance(value, list) else [value]

    return _read(given, lambda row: row.flag)


def shape_from_form(form: Mapping[str, str]) -> PodShape | None:
    """The shape of the what-if form, or None when it was not submitted (no ``gpus``); `ShapeError` names the key.
    An empty field is not given; a repeated field's entries are separated by commas."""
    def given(row: ShapeField) -> list[str] | None:
        text = str(form.get(row.form_key, "") or "").strip()
        if not text:
            return None
        return [part for part in (part.strip() for part in text.split(",")) if part] if row.repeated else [text]

    if given(_BY_FIELD["gpus"]) is None:
        return None
    return _read(given, lambda row: row.form_key)


def form_bounds() -> dict[str, dict[str, int]]:
    """The bounds of the form's number inputs by form key (``{"gpus": {"min": 1, "max": 128}}``): the table's, so
    the page's inputs say what the parser takes."""
    return {row.form_key: {"min": row.parse.low, "max": row.parse.high}
            for row in SHAPE_FIELDS if isinstance(row.parse, Whole)}
