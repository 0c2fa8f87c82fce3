"""The registry: every family hami-web knows, one line each (hami_web.core.families.spec says how to add one).

Order does not matter (the catalog sorts families by common word); a family whose spec has a ``flag`` is built only
when that flag enables it, every other one always (as HAMi v2.10 registers its vendors unconditionally).
"""

from __future__ import annotations

from typing import Any

from hami_web.core.families import (
    amd,
    ascend,
    biren,
    cambricon,
    enflame,
    enflame_drs,
    hygon,
    iluvatar,
    kunlunxin,
    metax,
    metax_sgpu,
    mthreads,
    neuron,
    nvidia,
    vastai,
)
from hami_web.core.families.spec import FamilySpec

REGISTRY: tuple[FamilySpec[Any], ...] = (
    nvidia.SPEC,
    hygon.SPEC,
    cambricon.SPEC,
    iluvatar.SPEC,
    ascend.SPEC,
    biren.SPEC,
    enflame.SPEC,
    enflame_drs.SPEC,
    metax.SPEC,
    metax_sgpu.SPEC,
    mthreads.SPEC,
    vastai.SPEC,
    kunlunxin.SPEC,
    amd.SPEC,
    neuron.SPEC,
)
