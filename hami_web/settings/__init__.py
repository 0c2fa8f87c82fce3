"""Service configuration: one frozen object built once from flags and ``HAMI_…`` environment variables.

Every knob of docs/configuration.md#configuration is declared once, as a row of the option table (`_OPTIONS`: flag, the
field it sets, its parser from `values`, its help) and the field it names, so that the rest of the code receives its
configuration explicitly (no module-level globals) and a bad value fails at start-up with a message naming the flag,
instead of surfacing later as a confusing scheduling decision. The fields are grouped by concern (`groups`: serving,
watch, binding, api; the scheduling and device settings at the top build the `SchedulingPolicy`, `AdmissionPolicy`
and device catalog), and each part of the process is handed the group or policy it uses. ``kubectl hami`` parses its
overrides of these settings with the same rows (`argument_type`, `option_help`).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from hami_web.core.families import (
    DeviceCatalog,
    DeviceConfig,
    DeviceConfigError,
    ResourceNames,
    build_catalog,
    config_document,
    gated_specs,
    parse_device_config,
)
from hami_web.core.families import nvidia as nvidia_spec
from hami_web.core.families.nvidia import nvidia_family
from hami_web.core.options import NODE_POLICIES
from hami_web.core.policy import AdmissionPolicy, SchedulingPolicy
from hami_web.core.requests import RequestDefaults
from hami_web.settings.deviceconfig import SettingsError, fill_from_device_config, read_device_config
from hami_web.settings.groups import ApiSettings, BindSettings, LeaderSettings, ServingSettings, WatchSettings
from hami_web.settings.hamiflags import UNSUPPORTED_HAMI_FLAGS, UnsupportedHamiFlag
from hami_web.settings.values import (
    bind_address,
    bind_deadline,
    choice,
    configmap_or_off,
    cores,
    duration_or_off,
    gpu_policy,
    is_loopback,
    non_negative_float,
    non_negative_int,
    optional_bind_address,
    parse_bool,
    parse_duration_seconds,
    plain_text,
    positive_duration,
    positive_int,
    resource_name,
    split_host_port,
)

__all__ = [
    "UNSUPPORTED_HAMI_FLAGS",
    "ApiSettings",
    "BindSettings",
    "LeaderSettings",
    "ResourceNames",
    "ServingSettings",
    "Settings",
    "SettingsError",
    "WatchSettings",
    "build_settings",
    "build_settings_from_flags",
    "parse_duration_seconds",
    "settings_from_texts",
    "split_host_port",
]

# Where the server publishes its scheduling settings for the operator tools (NAMESPACE/NAME).
DEFAULT_SETTINGS_CONFIGMAP = "hami-system/hami-web-settings"
PRIVILEGED_POLICIES = ("deny", "skip")
PREEMPTION_MODES = ("on", "off")
LOG_FORMATS = ("text", "json")
ENV_PREFIX = "HAMI_"
_ENABLE = "enable"  # the option-table group of the families' switches


@dataclass(frozen=True, slots=True)
class Settings:
    """Validated configuration of one hami-web process: the scheduling and device settings, and a group per concern.

    `Settings.of` builds one from fields named flat (``Settings.of(threads=4)``), as tests and tools do.
    """

    # Scheduling: which pods are ours, the default policies, privileged containers, busy nodes.
    scheduler_name: str = "hami-scheduler"
    node_scheduler_policy: str = "binpack"
    gpu_scheduler_policy: str = "spread"
    privileged_policy: str = "deny"
    busy_nodes_last: bool = True
    # HAMi's --force-overwrite-default-scheduler: false leaves pods that name default-scheduler alone.
    force_overwrite_default_scheduler: bool = True
    preemption: str = "on"  # device-aware preemption (docs/preemption.md)
    # Devices: the request defaults and the families (docs/device-families.md#device-families).
    default_mem_mib: int = 0
    default_cores: int = 0
    default_gpu: int = 1
    overwrite_env: bool = False
    resources: ResourceNames = field(default_factory=ResourceNames)
    device_config_file: str = ""
    # The gated families enabled (by spec name: ``--enable-iluvatar`` adds "iluvatar"); the others are always on.
    enabled_families: frozenset[str] = frozenset()
    device_config: DeviceConfig = field(default_factory=DeviceConfig)
    settings_configmap: str = DEFAULT_SETTINGS_CONFIGMAP
    serving: ServingSettings = field(default_factory=ServingSettings)
    watch: WatchSettings = field(default_factory=WatchSettings)
    binding: BindSettings = field(default_factory=BindSettings)
    api: ApiSettings = field(default_factory=ApiSettings)
    leader: LeaderSettings = field(default_factory=LeaderSettings)
    # Built from the fields above: the enabled device families (what every part of the server reads), the scheduling
    # policy the filter and the tools decide with, and the admission webhook's: each part gets the one it uses.
    devices: DeviceCatalog = field(init=False, compare=False, repr=False)
    policy: SchedulingPolicy = field(init=False, compare=False, repr=False)
    admission: AdmissionPolicy = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        nvidia_config = self.device_config.get(nvidia_spec.SPEC)
        nvidia = nvidia_family(resources=self.resources, default_memory_mib=self.default_mem_mib,
                               default_cores=self.default_cores, default_count=self.default_gpu,
                               overwrite_env=self.overwrite_env,
                               memory_factor=nvidia_config.memory_factor or 1,
                               runtime_class_name=nvidia_config.runtime_class_name or "",
                               core_policy=nvidia_config.gpu_core_policy or "")
        try:
            catalog = build_catalog(nvidia=nvidia, config=self.device_config, enable=self.enabled_families)
        except DeviceConfigError as error:
            raise SettingsError(f"invalid device configuration: {error}") from None
        object.__setattr__(self, "devices", catalog)
        object.__setattr__(self, "policy", SchedulingPolicy(
            node_policy=self.node_scheduler_policy, gpu_policy=self.gpu_scheduler_policy,
            defaults=RequestDefaults.of(catalog), scheduler_name=self.scheduler_name))
        object.__setattr__(self, "admission", AdmissionPolicy(
            scheduler_name=self.scheduler_name, privileged_policy=self.privileged_policy, devices=catalog,
            force_overwrite_default_scheduler=self.force_overwrite_default_scheduler))

    @classmethod
    def of(cls, **values: Any) -> Settings:
        """`Settings` with ``values`` named flat (a group's field by its own name: ``threads``, ``kube_qps``)."""
        return cls().with_values(**values)

    def with_values(self, **values: Any) -> Settings:
        """A copy with ``values`` named flat replaced (`Settings.of`); `TypeError` naming a field no group has."""
        top: dict[str, Any] = {}
        groups: dict[str, dict[str, Any]] = {}
        enabled = set(self.enabled_families)
        for name, value in values.items():
            if name in _ENABLE_FIELDS:
                (enabled.add if value else enabled.discard)(_ENABLE_FIELDS[name])
                top["enabled_families"] = frozenset(enabled)
            elif name in _TOP_FIELDS:
                top[name] = value
            elif name in _GROUP_OF_FIELD:
                groups.setdefault(_GROUP_OF_FIELD[name], {})[name] = value
            else:
                raise TypeError(f"Settings has no field {name!r}")
        for group, changes in groups.items():
            top[group] = dataclasses.replace(getattr(self, group), **changes)
        return dataclasses.replace(self, **top)


_GROUPS = {"serving": ServingSettings, "watch": WatchSettings, "binding": BindSettings, "api": ApiSettings,
           "leader": LeaderSettings}
_TOP_FIELDS = frozenset(field.name for field in dataclasses.fields(Settings)
                        if field.init and field.name not in _GROUPS)
# ``Settings.of(enable_iluvatar=True)``: a gated family's switch named flat, as its flag reads.
_ENABLE_FIELDS = {f"enable_{spec.name}": spec.name for spec in gated_specs()}
_GROUP_OF_FIELD = {field.name: group for group, kind in _GROUPS.items() for field in dataclasses.fields(kind)}


@dataclass(frozen=True, slots=True)
class _Option:
    flag: str
    target: str
    parse: Callable[[str], Any]
    help: str
    is_switch: bool = False
    aliases: tuple[str, ...] = ()  # HAMi's spelling of the same flag (--cert_file)


_OPTIONS: tuple[_Option, ...] = (
    _Option("--scheduler-name", "scheduler_name", plain_text, "scheduler name set on GPU pods (hami-scheduler)"),
    _Option("--node-scheduler-policy", "node_scheduler_policy", choice(NODE_POLICIES),
            "default node policy: binpack or spread (binpack)"),
    _Option("--gpu-scheduler-policy", "gpu_scheduler_policy", gpu_policy,
            "default GPU policy: binpack, spread, topology-aware, mutex, numa, or a chain such as binpack,numa "
            "(spread)"),
    _Option("--default-mem", "default_mem_mib", non_negative_int,
            "MiB booked when a container asks for neither gpumem nor gpumem-percentage; 0 = whole card (0)"),
    _Option("--default-cores", "default_cores", cores, "percent of a GPU booked when gpucores is absent (0)"),
    _Option("--default-gpu", "default_gpu", positive_int,
            "GPU count added when a container asks for gpumem/gpucores without a count (1)"),
    _Option("--node-label-selector", "watch.node_label_selector", plain_text,
            "only nodes matching this label selector are GPU candidates (all nodes)"),
    _Option("--node-lock-timeout", "binding.node_lock_timeout_seconds", positive_duration,
            "age after which a node lock is stale, e.g. 5m (5m)"),
    _Option("--overwrite-env", "overwrite_env", parse_bool,
            "give containers without a GPU NVIDIA_VISIBLE_DEVICES=none", is_switch=True),
    _Option("--resource-name", "resources.count", resource_name, "GPU count resource (nvidia.com/gpu)"),
    _Option("--resource-mem", "resources.memory", resource_name, "GPU memory resource, MiB (nvidia.com/gpumem)"),
    _Option("--resource-mem-percentage", "resources.memory_percentage", resource_name,
            "GPU memory percentage resource (nvidia.com/gpumem-percentage)"),
    _Option("--resource-cores", "resources.cores", resource_name, "GPU cores resource (nvidia.com/gpucores)"),
    _Option("--resource-priority", "resources.priority", resource_name,
            "task priority resource (nvidia.com/priority)"),
    _Option("--cert-file", "serving.cert_file", plain_text, "TLS certificate (PEM), re-read when it changes",
            aliases=("--cert_file",)),
    _Option("--key-file", "serving.key_file", plain_text, "TLS private key (PEM)", aliases=("--key_file",)),
    _Option("--http-bind", "serving.http_bind", optional_bind_address,
            "HAMi's one listener for /webhook, /filter, /bind, /healthz, /readyz instead of --bind and "
            "--extender-bind: TLS with --cert-file/--key-file, plain HTTP without; /filter and /bind answer only "
            "loopback peers there (off)", aliases=("--http_bind",)),
    _Option("--force-overwrite-default-scheduler", "force_overwrite_default_scheduler", parse_bool,
            "route device pods that name default-scheduler to --scheduler-name; false leaves them alone, as HAMi "
            "(true)", is_switch=True),
    _Option("--leader-elect", "leader.leader_elect", parse_bool,
            "follow kube-scheduler's Lease: only the replica whose kube-scheduler leads books devices and is "
            "labelled hami.io/scheduler-role=leader (false)", is_switch=True),
    _Option("--leader-elect-resource-name", "leader.leader_elect_resource_name", plain_text,
            "the Lease kube-scheduler elects its leader on (its leaderElection.resourceName)"),
    _Option("--leader-elect-resource-namespace", "leader.leader_elect_resource_namespace", plain_text,
            "the namespace of that Lease (its leaderElection.resourceNamespace)"),
    _Option("--legacy-metrics", "serving.legacy_metrics", parse_bool,
            "also serve HAMi's legacy metric names (GPUDeviceMemoryLimit, vGPUMemoryAllocated, ...) (false)",
            is_switch=True),
    _Option("--bind", "serving.bind", bind_address,
            "TLS listener for /webhook, /healthz, /readyz: the Service's port, HOST:PORT (0.0.0.0:8443)"),
    _Option("--extender-bind", "serving.extender_bind", bind_address,
            "TLS listener for /filter, /bind (+ /healthz, /readyz): kube-scheduler in the same pod; keep it on "
            "loopback (127.0.0.1:8444)"),
    _Option("--metrics-bind-address", "serving.metrics_bind_address", bind_address,
            "plain-HTTP listener for /metrics, HOST:PORT or :PORT (:9395)"),
    _Option("--ui-bind", "serving.ui_bind", optional_bind_address,
            "listener of the read-only dashboard /ui/, HOST:PORT or off; plain HTTP on loopback, reach it with "
            "kubectl port-forward (127.0.0.1:9396)"),
    _Option("--ui-expose", "serving.ui_expose", parse_bool,
            "allow --ui-bind on a non-loopback address: then every request needs a Kubernetes bearer token "
            "allowed to list pods and nodes (TokenReview + SubjectAccessReview), and TLS unless "
            "--insecure-http", is_switch=True),
    _Option("--refresh-interval", "watch.refresh_interval_seconds", positive_duration,
            "period of the cache's resync from local state: handshakes, device plugins gone (15s)"),
    _Option("--relist-interval", "watch.relist_interval_seconds", duration_or_off,
            "full list of nodes and pods this often besides the watches, e.g. 30m, or off (off)"),
    _Option("--watch-silence-bound", "watch.watch_silence_bound_seconds", positive_duration,
            "a watch that delivers nothing (no event, no bookmark; kube-apiserver sends a bookmark about every "
            "minute) for this long is re-opened, and /readyz fails meanwhile (90s)"),
    _Option("--privileged-policy", "privileged_policy", choice(PRIVILEGED_POLICIES),
            "deny GPU pods with privileged containers, or skip them as HAMi v2.4 did (deny)"),
    _Option("--kubeconfig", "api.kubeconfig", plain_text,
            "kubeconfig path (default: $KUBECONFIG, else in-cluster config, else ~/.kube/config)"),
    _Option("--insecure-http", "serving.insecure_http", parse_bool,
            "serve plain HTTP instead of TLS (local use only)", is_switch=True),
    _Option("--threads", "serving.threads", positive_int,
            "threads that run the app, per listener (binds waiting on the API never hold the threads of /webhook or "
            "/metrics); connections are read by the event loop (8)"),
    _Option("--log-level", "serving.log_level", choice(("DEBUG", "INFO", "WARNING", "ERROR")), "log level (INFO)"),
    _Option("--node-lock-retry-timeout", "binding.node_lock_retry_timeout_seconds", bind_deadline(allow_zero=True),
            "how long the bind of a PodGroup member that finds its node locked may take, the wait for the lock "
            "and the bind's API calls together, e.g. 25s; 0 = fail at once; at most 27s (25s)"),
    _Option("--binpack-lock-queue", "binding.binpack_lock_queue_seconds", bind_deadline(allow_zero=True),
            "under binpack, a node whose HAMi lock is held still takes pods (up to --binpack-lock-queue-depth binds "
            "under way), whose binds wait in line in the process for the lock, at most this long, e.g. 10s; packs "
            "bursts tighter at some pace (docs/performance.md); 0 = off (HAMi's way): a locked node is tried last, a "
            "bind that finds it locked is refused (10s)"),
    _Option("--binpack-lock-queue-depth", "binding.binpack_lock_queue_depth", positive_int,
            "with --binpack-lock-queue, how many binds may be under way on one node at most, the lock's holder "
            "included; fewer when the locks are held so long that they would not all get it within the wait (7)"),
    _Option("--kube-qps", "api.kube_qps", non_negative_float,
            "requests per second to kube-apiserver, sustained; 0 = no client-side limit (0)"),
    _Option("--kube-burst", "api.kube_burst", non_negative_int,
            "requests to kube-apiserver allowed at once above --kube-qps (0 = the QPS rounded up)"),
    _Option("--kube-timeout", "api.kube_timeout_seconds", positive_duration,
            "timeout of one request to kube-apiserver, e.g. 10 or 10s (10s)"),
    _Option("--log-format", "serving.log_format", choice(LOG_FORMATS),
            "text, or json for one JSON object per line (text)"),
    _Option("--extender-deadline", "binding.extender_deadline_seconds", bind_deadline(allow_zero=False),
            "time one /filter or /bind may spend on API calls; reading back an unanswered write or cleaning up "
            "a failed bind gets a third more, at most 3s; at most 27s (15s)"),
    _Option("--busy-nodes-last", "busy_nodes_last", parse_bool,
            "a filter tries nodes whose HAMi node lock a live bind holds, or that have a placement not yet bound, "
            "after the free ones (never excluding them); false = strict HAMi node order (true)", is_switch=True),
    _Option("--preemption", "preemption", choice(PREEMPTION_MODES),
            "device-aware preemption: a pod no node takes deletes device-holding pods of lower priority, as "
            "kube-scheduler's preemption does for CPU and memory; turned off at start-up when the server may not "
            "delete pods or patch pods/status (on)"),
    _Option("--device-config-file", "device_config_file", plain_text,
            "HAMi's device config (device-config.yaml of the hami-scheduler-device ConfigMap): resource names and "
            "settings of each registered family's section (nvidia, hygon, cambricon, iluvatars, vnpus, …); flags "
            "given explicitly win over "
            "it"),
    # One switch per family HAMi gates (the registry's specs with a flag): the target "enable.<name>".
    *(_Option(spec.flag, f"{_ENABLE}.{spec.name}", parse_bool, spec.flag_help, is_switch=True)
      for spec in gated_specs()),
    _Option("--settings-configmap", "settings_configmap", configmap_or_off,
            "ConfigMap NAMESPACE/NAME where the scheduling settings are published at start-up for kubectl hami, "
            f"or off ({DEFAULT_SETTINGS_CONFIGMAP})"),
)

_OPTION_BY_FLAG = {option.flag: option for option in _OPTIONS}


def argument_type(flag: str) -> Callable[[str], Any]:
    """The server's own parser of ``flag``, for another command line that overrides it (``kubectl hami``): one
    declaration, so a value the server refuses is refused there too, in the same words."""
    option = _OPTION_BY_FLAG[flag]

    def parse(text: str) -> Any:
        try:
            return option.parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    parse.__name__ = flag.removeprefix("--")  # argparse's "invalid <name> value: …"
    return parse


def option_help(flag: str) -> str:
    """The server's help text of ``flag``."""
    return _OPTION_BY_FLAG[flag].help


# The settings that change a scheduling decision or what the webhook routes: published at start-up so the
# operator tools decide as this server does without being told its flags.
PUBLISHED_FLAGS = ("--scheduler-name", "--node-scheduler-policy", "--gpu-scheduler-policy", "--default-mem",
                   "--default-cores", "--default-gpu", "--node-label-selector", "--resource-name", "--resource-mem",
                   "--resource-mem-percentage", "--resource-cores", "--resource-priority", "--preemption",
                   *(spec.flag for spec in gated_specs()))

# The data key under which the device config the server read is published (HAMi's YAML, only what was set).
PUBLISHED_DEVICE_CONFIG = "device-config.yaml"


def _env_name(flag: str) -> str:
    return ENV_PREFIX + flag.lstrip("-").upper().replace("-", "_")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register every settings flag on ``parser`` (values stay strings; `build_settings` validates)."""
    for flag in UNSUPPORTED_HAMI_FLAGS:
        parser.add_argument(flag, nargs="?", action=UnsupportedHamiFlag, help=argparse.SUPPRESS)
    group = parser.add_argument_group("settings (each also read from HAMI_<FLAG> in the environment)")
    for option in _OPTIONS:
        dest = option.target.replace(".", "__")
        if option.is_switch:
            group.add_argument(option.flag, *option.aliases, dest=dest, nargs="?", const="true", default=None,
                               metavar="BOOL", help=f"{option.help} [{_env_name(option.flag)}]")
        else:
            group.add_argument(option.flag, *option.aliases, dest=dest, default=None, metavar="VALUE",
                               help=f"{option.help} [{_env_name(option.flag)}]")


def _given(namespace: argparse.Namespace | None, environ: Mapping[str, str] | None) -> dict[str, tuple[str, str]]:
    """Each setting's text and where it came from, by flag: the parsed flags, else the ``HAMI_…`` variables."""
    env = os.environ if environ is None else environ
    given: dict[str, tuple[str, str]] = {}
    for option in _OPTIONS:
        raw = getattr(namespace, option.target.replace(".", "__"), None) if namespace else None
        if raw is not None:
            given[option.flag] = (raw, option.flag)
        elif (raw := env.get(_env_name(option.flag))) is not None:
            given[option.flag] = (raw, f"{option.flag} (from {_env_name(option.flag)})")
    return given


def settings_from_texts(given: Mapping[str, tuple[str, str]]) -> Settings:
    """The one builder of `Settings`: for each flag given, its text and where it came from (named in errors).

    The command line and the environment (`build_settings`) and the ConfigMap the server publishes
    (`settings_from_published`) all come here, so each value is checked by its flag's own parser whatever its
    source. Raises `SettingsError` naming the source when a value does not parse or is out of range.
    """
    top: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}  # a group's (or the resource names') fields by the group's name
    for option in _OPTIONS:
        if option.flag not in given:
            continue
        raw, source = given[option.flag]
        try:
            value = option.parse(raw)
        except ValueError as error:
            raise SettingsError(f"invalid value for {source}: {error}") from None
        group, dot, name = option.target.rpartition(".")
        if dot:
            nested.setdefault(group, {})[name] = value
        else:
            top[name] = value
    resources = nested.pop("resources", {})
    switches = nested.pop(_ENABLE, {})
    if switches:
        top["enabled_families"] = frozenset(name for name, on in switches.items() if on)
    if top.get("device_config_file"):
        config = read_device_config(top["device_config_file"])
        top["device_config"] = config
        fill_from_device_config(config, top, resources)
    groups = {group: _GROUPS[group](**values) for group, values in nested.items()}
    settings = Settings(resources=ResourceNames(**resources), **groups, **top)
    _check_consistency(settings)
    return settings


def build_settings(namespace: argparse.Namespace | None = None,
                   environ: Mapping[str, str] | None = None) -> Settings:
    """Build `Settings` from parsed flags, falling back to ``HAMI_…`` variables, then defaults (`settings_from_texts`).

    Raises `SettingsError` naming the flag when a value does not parse or is out of range.
    """
    return settings_from_texts(_given(namespace, environ))


def build_settings_from_flags(values: Mapping[str, str], environ: Mapping[str, str] | None = None) -> Settings:
    """`Settings` from flags given as ``{"--flag": "text"}`` (HAMi's command line, `hamicommand`) over the ``HAMI_…``
    variables (`settings_from_texts`): each value is checked by its flag's own parser, as under ``hami-web serve``."""
    given = _given(None, environ)
    given.update({flag: (text, flag) for flag, text in values.items()})
    return settings_from_texts(given)


def _check_consistency(settings: Settings) -> None:
    names = (*settings.resources.managed(), settings.resources.priority)
    if len(set(names)) != len(names):
        raise SettingsError("invalid value for --resource-*: the resource names must all differ")
    serving = settings.serving
    if bool(serving.cert_file) != bool(serving.key_file):
        raise SettingsError("invalid value for --cert-file/--key-file: give both or neither")
    served = ((serving.http_host_port,) if serving.http_bind else (serving.bind_host_port, serving.extender_host_port))
    ports = [address[1] for address in (*served, serving.metrics_host_port, serving.ui_host_port) if address]
    if len(set(ports)) != len(ports):
        raise SettingsError("invalid value for --bind/--extender-bind/--http-bind/--metrics-bind-address/--ui-bind: "
                            f"each listener needs its own port (got {', '.join(map(str, ports))})")
    if serving.ui_host_port and not serving.ui_expose and not is_loopback(serving.ui_host_port[0]):
        raise SettingsError(f"invalid value for --ui-bind: {serving.ui_bind} is not a loopback address; the "
                            "dashboard shows pod and node names, so exposing it needs --ui-expose (which then "
                            "requires a Kubernetes bearer token on every request)")
    if not settings.scheduler_name:
        raise SettingsError("invalid value for --scheduler-name: must not be empty")
    leader = settings.leader
    if leader.leader_elect and not (leader.leader_elect_resource_name and leader.leader_elect_resource_namespace):
        raise SettingsError("invalid value for --leader-elect: needs --leader-elect-resource-name and "
                            "--leader-elect-resource-namespace (the Lease of kube-scheduler's leaderElection)")


def published_settings(settings: Settings) -> dict[str, str]:
    """The `PUBLISHED_FLAGS` of ``settings`` as a ConfigMap's data: flag name without ``--`` → value text; and,
    when a device config was given, what the server read of it under `PUBLISHED_DEVICE_CONFIG` (the tools cannot
    read the server's file, and the families' names and units come from it)."""
    data = {}
    for option in _OPTIONS:
        if option.flag in PUBLISHED_FLAGS:
            group, _, family = option.target.partition(".")
            value: Any = family in settings.enabled_families if group == _ENABLE else settings
            for name in option.target.split(".") if group != _ENABLE else ():
                value = getattr(value, name)
            data[option.flag.removeprefix("--")] = str(value)
    document = config_document(settings.device_config)
    if document:
        data[PUBLISHED_DEVICE_CONFIG] = yaml.safe_dump(document, sort_keys=True)
    return data


def settings_from_published(data: Mapping[str, str], *, where: str) -> Settings:
    """`Settings` from a published ConfigMap's data, through `settings_from_texts` like the flags and the environment.

    Keys that are not published flags are ignored (a newer server may publish more); a bad value is a
    `SettingsError` naming ``where`` and the key.
    """
    given = {f"--{key}": (str(value), f"--{key}") for key, value in data.items() if f"--{key}" in PUBLISHED_FLAGS}
    try:
        settings = settings_from_texts(given)
        text = data.get(PUBLISHED_DEVICE_CONFIG)
        if text:
            config = parse_device_config(yaml.safe_load(str(text)))
            settings = dataclasses.replace(settings, device_config=config)
    except SettingsError as error:
        raise SettingsError(f"{where}: {error}") from None
    except (yaml.YAMLError, DeviceConfigError) as error:
        raise SettingsError(f"{where}: {PUBLISHED_DEVICE_CONFIG}: {error}") from None
    return settings
