"""Wire names shared with HAMi: annotation keys, label keys and filter reason names.

They are HAMi's exact strings, because HAMi's device plugin on each node reads what we write and writes
what we read.
"""

from __future__ import annotations

# NVIDIA's node annotations written by HAMi's device plugin (and the handshake we answer). The other families'
# keys live in their records (`core.families`); these are the NVIDIA family's.
NODE_REGISTER = "hami.io/node-nvidia-register"
NODE_PAIR_SCORES = "hami.io/node-nvidia-score"
NODE_DEVICE_CORDON = "hami.io/device-cordon"
NODE_HANDSHAKE = "hami.io/node-handshake"
NODE_LOCK = "hami.io/mutex.lock"

# Pod annotations the extender writes and the device plugin reads.
POD_ASSIGNED_NODE = "hami.io/vgpu-node"
POD_ASSIGNED_TIME = "hami.io/vgpu-time"
POD_DEVICES_TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
POD_DEVICES_ALLOCATED = "hami.io/vgpu-devices-allocated"
POD_BIND_PHASE = "hami.io/bind-phase"
POD_BIND_TIME = "hami.io/bind-time"
# The MIG instances (profile and placement) a booking picked on dynamic MIG GPUs (docs/mig.md#dynamic-mig).
POD_MIG_RESERVATIONS = "hami.io/vgpu-mig-allocations"

# Pod annotations a user sets to steer placement.
POD_NODE_POLICY = "hami.io/node-scheduler-policy"
POD_GPU_POLICY = "hami.io/gpu-scheduler-policy"
POD_SCORING_WEIGHTS = "hami.io/device-scoring-weights"
POD_NUMA_BIND = "nvidia.com/numa-bind"
POD_USE_GPU_TYPE = "nvidia.com/use-gputype"
POD_NOUSE_GPU_TYPE = "nvidia.com/nouse-gputype"
POD_USE_GPU_UUID = "nvidia.com/use-gpuuuid"
POD_NOUSE_GPU_UUID = "nvidia.com/nouse-gpuuuid"

# Label of a Coscheduling PodGroup member: such pods wait for a held node lock instead of failing at once.
LABEL_POD_GROUP = "scheduling.x-k8s.io/pod-group"

VENDOR = "NVIDIA"

# Why a GPU (or a node) could not take a container: HAMi's reason names.
CARD_TYPE_MISMATCH = "CardTypeMismatch"
CARD_UUID_MISMATCH = "CardUuidMismatch"
CARD_NOT_HEALTH = "CardNotHealth"
CARD_CORDONED = "CardCordoned"
NUMA_NOT_FIT = "NumaNotFit"
CARD_TIME_SLICING_EXHAUSTED = "CardTimeSlicingExhausted"
EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT = "ExclusiveDeviceAllocateConflict"
CARD_INSUFFICIENT_MEMORY = "CardInsufficientMemory"
CARD_INSUFFICIENT_CORE = "CardInsufficientCore"
CARD_COMPUTE_UNITS_EXHAUSTED = "CardComputeUnitsExhausted"
NODE_INSUFFICIENT_DEVICE = "NodeInsufficientDevice"
ALLOCATED_CARDS_INSUFFICIENT_REQUEST = "AllocatedCardsInsufficientRequest"
# A dynamic MIG GPU (``migProfiles``) with no profile big enough that has a free placement (HAMi's reason), and a
# pre-2.10 geometry MIG GPU, which is never allocated (docs/mig.md#dynamic-mig).
CARD_MIG_TOPOLOGY_INFEASIBLE = "CardMigTopologyInfeasible"
# The device would take the pod's namespace past a ResourceQuota limit on device memory or cores.
RESOURCE_QUOTA_NOT_FIT = "ResourceQuotaNotFit"
CARD_MIG_LEGACY_GEOMETRY = "CardMigLegacyGeometry"
# A later container of a pod whose family keeps a pod on one card (Metax GPU, Mthreads: HAMi's ``customFilterRule``)
# offered another card than the pod's earlier containers hold.
CARD_NOT_FOUND_CUSTOM_FILTER_RULE = "CardNotFoundCustomFilterRule"
# The pod asks for a soft split (Ascend hami-core) the node does not allow.
MODE_NOT_FIT = "ModeNotFit"
# A device shared in fixed slices (Kunlunxin vXPU) already holds slices of another size than the ask (HAMi counts it
# under NumaNotFit).
CARD_SLICE_SIZE_MISMATCH = "CardSliceSizeMismatch"
