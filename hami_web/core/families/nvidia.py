"""NVIDIA GPUs (docs/device-families.md#device-families): HAMi's first family and the one with every selection and
rewrite.

The resource names, defaults and overwriteEnv come from the flags and the ``nvidia`` section of HAMi's device
config; everything else is fixed by HAMi's NVIDIA device plugin, which reads what we write. Its GPUs in ``mig`` mode
are carved per grant by the family's partitioning, dynamic MIG (`hami_web.core.migpartitioning.MIG`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hami_web.core import names
from hami_web.core.families import config
from hami_web.core.families.family import AdmissionRules, Family, ResourceNames
from hami_web.core.families.spec import FamilySpec
from hami_web.core.mig import encode_reservations
from hami_web.core.migpartitioning import MIG

CW = names.VENDOR
KIND = "nvidia"
DEFAULT_RESOURCES = ResourceNames()
# ``nvidia.gpuCorePolicy`` (HAMi v2.10 ``GPUCoreUtilizationPolicy``): HAMi-core's values ("default" writes nothing).
CORE_POLICY_ENV = "GPU_CORE_UTILIZATION_POLICY"
CORE_POLICIES = ("default", "force", "disable")


def mig_reservations(grants: Sequence[Sequence[Any]]) -> dict[str, str]:
    """``hami.io/vgpu-mig-allocations`` for the MIG instances among the grants, none when there are none
    (docs/mig.md#dynamic-mig)."""
    text = encode_reservations(grants)
    return {MIG.reservations_key: text} if text else {}


def nvidia_family(*, resources: ResourceNames = DEFAULT_RESOURCES, memory_factor: int = 1,
                  default_memory_mib: int = 0, default_cores: int = 0, default_count: int = 1,
                  overwrite_env: bool = False, runtime_class_name: str = "", core_policy: str = "") -> Family:
    """The NVIDIA family with the given names and defaults (HAMi's chart values when left out).

    ``runtime_class_name`` and ``core_policy`` are the device config's ``nvidia.runtimeClassName`` and
    ``nvidia.gpuCorePolicy``, applied as HAMi v2.10's ``MutateAdmission`` does: the runtime class on a GPU pod naming
    none, the policy as ``GPU_CORE_UTILIZATION_POLICY`` in every container unless it is "" or ``default``. A policy
    HAMi-core does not know is written all the same (HAMi does) and each pod is told so in a warning.
    """
    core_env = ((CORE_POLICY_ENV, core_policy),) if core_policy and core_policy != "default" else ()
    notice = "" if not core_env or core_policy in CORE_POLICIES else (
        f"nvidia.gpuCorePolicy {core_policy!r} of the device config is none of {', '.join(CORE_POLICIES)}: "
        f"{CORE_POLICY_ENV}={core_policy} is set as HAMi v2.10 sets it, and HAMi-core runs with its default policy")
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
        partitioning=MIG,
        booking_extras=mig_reservations,
        cordon=True,
        topology=True,
        admission=AdmissionRules(count_in_requests=True, default_count=default_count, whole_card_cores=True,
                                 priority_env="CUDA_TASK_PRIORITY", visible_devices_env="NVIDIA_VISIBLE_DEVICES",
                                 overwrite_env=overwrite_env, runtime_class_name=runtime_class_name,
                                 every_container_env=core_env, notice=notice),
    )


@dataclass(frozen=True, slots=True)
class NvidiaConfig:
    """The ``nvidia`` section: each field None when the file leaves it out (the flags and the chart fill the rest)."""

    count: str | None = None
    memory: str | None = None
    memory_percentage: str | None = None
    cores: str | None = None
    priority: str | None = None
    overwrite_env: bool | None = None
    default_memory_mib: int | None = None
    default_cores: int | None = None
    default_count: int | None = None
    memory_factor: int | None = None
    runtime_class_name: str | None = None
    gpu_core_policy: str | None = None


def read_nvidia(value: object, where: str) -> NvidiaConfig:
    """The ``nvidia`` section as HAMi's ``NvidiaConfig`` reads it."""
    section = config.section_map(value, where)
    return NvidiaConfig(
        count=config.resource(section, "resourceCountName", where),
        memory=config.resource(section, "resourceMemoryName", where),
        memory_percentage=config.resource(section, "resourceMemoryPercentageName", where),
        cores=config.resource(section, "resourceCoreName", where),
        priority=config.resource(section, "resourcePriorityName", where),
        overwrite_env=config.boolean(section, "overwriteEnv", where),
        default_memory_mib=config.integer(section, "defaultMemory", where, minimum=0, maximum=1 << 19),
        default_cores=config.integer(section, "defaultCores", where, minimum=0, maximum=100),
        default_count=config.integer(section, "defaultGPUNum", where, minimum=1, maximum=128),
        memory_factor=config.memory_factor(section, where),
        runtime_class_name=config.string(section, "runtimeClassName", where),
        gpu_core_policy=config.string(section, "gpuCorePolicy", where),
    )


def publish_nvidia(nvidia: NvidiaConfig) -> object | None:
    """The section back, only what was set."""
    return config.names_document((
        ("resourceCountName", nvidia.count), ("resourceMemoryName", nvidia.memory),
        ("resourceMemoryPercentageName", nvidia.memory_percentage), ("resourceCoreName", nvidia.cores),
        ("resourcePriorityName", nvidia.priority), ("overwriteEnv", nvidia.overwrite_env),
        ("defaultMemory", nvidia.default_memory_mib), ("defaultCores", nvidia.default_cores),
        ("defaultGPUNum", nvidia.default_count), ("memoryFactor", nvidia.memory_factor),
        ("runtimeClassName", nvidia.runtime_class_name), ("gpuCorePolicy", nvidia.gpu_core_policy)))


def build_nvidia(nvidia: NvidiaConfig) -> tuple[Family, ...]:
    """The NVIDIA family as the file alone configures it (the server merges its flags first and passes the result to
    `hami_web.core.families.build_catalog` as an override)."""
    return (nvidia_family(
        resources=ResourceNames(count=nvidia.count or DEFAULT_RESOURCES.count,
                                memory=nvidia.memory or DEFAULT_RESOURCES.memory,
                                memory_percentage=nvidia.memory_percentage or DEFAULT_RESOURCES.memory_percentage,
                                cores=nvidia.cores or DEFAULT_RESOURCES.cores,
                                priority=nvidia.priority or DEFAULT_RESOURCES.priority),
        memory_factor=nvidia.memory_factor or 1, default_memory_mib=nvidia.default_memory_mib or 0,
        default_cores=nvidia.default_cores or 0, default_count=nvidia.default_count or 1,
        overwrite_env=bool(nvidia.overwrite_env), runtime_class_name=nvidia.runtime_class_name or "",
        core_policy=nvidia.gpu_core_policy or ""),)


SPEC = FamilySpec(name=KIND, label="NVIDIA GPU", section="nvidia", default=NvidiaConfig(), read=read_nvidia,
                  publish=publish_nvidia, build=build_nvidia)
