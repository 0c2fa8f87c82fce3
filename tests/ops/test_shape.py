"""The tools' pod shape, declared once (`hami_web.ops.shape`): capacity's flags and the what-if form read it alike.

Covers: every row of the table gives a flag and a form key; the same text is accepted as the same shape, or refused
with the same words, by ``kubectl hami capacity``'s flags and by the dashboard's what-if form (the name differing:
``--gpucores`` or ``cores``): out of bounds (cores 150, 129 devices, 101 %), not a number, an unknown policy, a bad
toleration, two memory asks at once; an empty form field is not given; the form's number inputs carry the table's
bounds.
"""

from __future__ import annotations

import argparse

import pytest

from hami_web.ops.capacity import PodShape, ShapeError
from hami_web.ops.shape import SHAPE_FIELDS, add_shape_flags, form_bounds, shape_from_flags, shape_from_form


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_shape_flags(parser)
    return parser


def _by_flags(pairs: list[tuple[str, str]]) -> PodShape:
    argv: list[str] = []
    for field, text in pairs:
        row = next(row for row in SHAPE_FIELDS if row.field == field)
        argv += [row.flag] if row.switch else [row.flag, text]
    return shape_from_flags(_parser().parse_args(argv))


def _by_form(pairs: list[tuple[str, str]]) -> PodShape | None:
    form: dict[str, str] = {"gpus": "1"}
    for field, text in pairs:
        row = next(row for row in SHAPE_FIELDS if row.field == field)
        form[row.form_key] = f"{form[row.form_key]},{text}" if row.repeated and row.form_key in form else text
    return shape_from_form(form)


ACCEPTED = [
    pytest.param([], PodShape(), id="defaults"),
    pytest.param([("gpus", "128"), ("cores", "100")], PodShape(gpus=128, cores=100), id="bounds-included"),
    pytest.param([("memory_mib", "4000"), ("gpu_type", "A40"), ("node_policy", "spread")],
                 PodShape(memory_mib=4000, gpu_type="A40", node_policy="spread"), id="memory-type-policy"),
    pytest.param([("memory_percent", "50"), ("gpu_policy", "binpack,numa"), ("numa_bind", "true")],
                 PodShape(memory_percent=50, gpu_policy="binpack,numa", numa_bind=True), id="percent-chain-numa"),
    pytest.param([("tolerations", "nvidia.com/gpu:NoSchedule"), ("tolerations", "*"),
                  ("node_selector", "pool=a100"), ("cpu", "500m"), ("memory", "16Gi"), ("family", "DCU")],
                 PodShape(tolerations=("nvidia.com/gpu:NoSchedule", "*"), node_selector=("pool=a100",), cpu="500m",
                          memory="16Gi", family="DCU"), id="lists-and-requests"),
    pytest.param([("mig_profile", "2g.10gb")], PodShape(mig_profile="2g.10gb"), id="mig"),
]


@pytest.mark.parametrize(("given", "shape"), ACCEPTED)
def test_flags_and_form_read_the_same_shape(given: list[tuple[str, str]], shape: PodShape) -> None:
    assert _by_flags(given) == shape
    assert _by_form(given) == shape


REFUSED = [
    pytest.param([("cores", "150")], "must be between 0 and 100, got 150", id="cores-over-100"),
    pytest.param([("gpus", "129")], "must be between 1 and 128, got 129", id="too-many-devices"),
    pytest.param([("gpus", "0")], "must be between 1 and 128, got 0", id="no-device"),
    pytest.param([("memory_percent", "101")], "must be between 0 and 100, got 101", id="percent-over-100"),
    pytest.param([("memory_mib", "lots")], "must be a whole number, got 'lots'", id="not-a-number"),
    pytest.param([("memory_mib", "-5")], "must be between 0 and", id="negative"),
    pytest.param([("node_policy", "binpak")], "must be one of binpack, spread, got 'binpak'", id="node-policy"),
    pytest.param([("gpu_policy", "binpak")], 'unknown GPU policy "binpak"', id="gpu-policy"),
    pytest.param([("tolerations", "gpu:Sometimes")], "effect must be one of", id="toleration-effect"),
    pytest.param([("node_selector", "pool")], "is not KEY=VALUE", id="selector"),
]


def _name(field: str, flag: bool) -> str:
    row = next(row for row in SHAPE_FIELDS if row.field == field)
    return row.flag if flag else row.form_key


@pytest.mark.parametrize(("given", "message"), REFUSED)
def test_flags_and_form_refuse_the_same_text_in_the_same_words(given: list[tuple[str, str]], message: str) -> None:
    field = given[0][0]
    with pytest.raises(ShapeError) as by_flags:
        _by_flags(given)
    with pytest.raises(ShapeError) as by_form:
        _by_form(given)
    assert str(by_flags.value).startswith(f"{_name(field, True)}: ") and message in str(by_flags.value)
    assert str(by_form.value) == str(by_flags.value).replace(_name(field, True), _name(field, False), 1)


def test_one_memory_ask_at_a_time() -> None:
    both = [("memory_mib", "100"), ("memory_percent", "50")]
    with pytest.raises(ShapeError, match="give one of --gpumem, --gpumem-percentage, --mig-profile"):
        _by_flags(both)
    with pytest.raises(ShapeError, match="give one of memory_mib, memory_percent, mig_profile"):
        _by_form(both)


def test_an_empty_form_field_is_not_given_and_no_gpus_is_no_form() -> None:
    assert shape_from_form({"gpus": "2", "cores": " ", "node_policy": "", "tolerations": " , "}) == PodShape(gpus=2)
    assert shape_from_form({"cores": "20"}) is None


def test_every_row_has_its_own_flag_and_form_key_and_a_field_of_the_shape() -> None:
    fields = {field.name for field in PodShape.__dataclass_fields__.values()}
    assert len({row.flag for row in SHAPE_FIELDS}) == len({row.form_key for row in SHAPE_FIELDS}) == len(SHAPE_FIELDS)
    assert {row.field for row in SHAPE_FIELDS} <= fields
    assert fields - {row.field for row in SHAPE_FIELDS} == {"namespace"}  # capacity's -n, the dashboard's none


def test_the_forms_bounds_are_the_tables() -> None:
    assert form_bounds() == {"gpus": {"min": 1, "max": 128}, "memory_mib": {"min": 0, "max": (1 << 31) - 1},
                             "memory_percent": {"min": 0, "max": 100}, "cores": {"min": 0, "max": 100}}
