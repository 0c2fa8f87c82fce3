"""NVIDIA GPUs (README.md#device-families): HAMi's first family and the one with every selection and rewrite.

The resource names, defaults and overwriteEnv come from the flags and the ``nvidia`` section of HAMi's device
config; everything else is fixed by HAMi's NVIDIA device plugin, which reads what we write.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hami_web.core import names
from hami_web.core.families.family import AdmissionRules, Family, ResourceNames
from hami_web.core.mig import encode_reservations

CW = names.VENDOR
KIND = "nvidia"
DEFAULT_RESOURCES = ResourceNames()


def mig_reservations(grants: Sequence[Sequence[Any]]) -> dict[str, str]:
    """``hami.io/vgpu-mig-allocations`` for the MIG instances among the grants, none when there are none
    (README.md#dynamic-mig)."""
    text = encode_reservations(grants)
    return {names.POD_MIG_RESERVATIONS: text} if text else {}


def nvidia_family(*, resources: ResourceNames = DEFAULT_RESOURCES, memory_factor: int = 1,
                  default_memory_mib: int = 0, default_cores: int = 0, default_count: int = 1,
                  overwrite_env: bool = False) -> Family:
    """The NVIDIA family with the given names and defaults (HAMi's chart values when left out)."""
    return Family(
        cw=CW, kind=KIND, label="NVIDIA GPU", resources=resources,
        register_key=names.NODE_REGISTER,
        handshake_key=names.NODE_HANDSHAKE,
        to_allocate_key=names.POD_DEVICES_TO_ALLOCATE,
        allocated_key=names.POD_DEVICES_ALLOCATED,
        memory_factor=memory_factor,
        default_memory_mib=default_memory_mib,
        default_cores=default_cores,
        use_type_key=names.POD_USE_GPU_TYPE,
        nouse_type_key=names.POD_NOUSE_GPU_TYPE,
        use_uuid_key=names.POD_USE_GPU_UUID,
        nouse_uuid_key=names.POD_NOUSE_GPU_UUID,
        numa_bind_key=names.POD_NUMA_BIND,
        mode_key="nvidia.com/vgpu-mode",
        reservations_key=names.POD_MIG_RESERVATIONS,
        booking_extras=mig_reservations,
        cordon=True,
        topology=True,
        admission=AdmissionRules(count_in_requests=True, default_count=default_count, whole_card_cores=True,
                                 priority_env="CUDA_TASK_PRIORITY", visible_devices_env="NVIDIA_VISIBLE_DEVICES",
                                 overwrite_env=overwrite_env),
    )
