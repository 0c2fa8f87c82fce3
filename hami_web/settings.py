"""Service configuration: one frozen object built once from flags and ``HAMI_…`` environment variables.

Every knob of README.md#configuration lives here so that the rest of the code receives its configuration explicitly
(no module-level globals) and a bad value fails at start-up with a message naming the flag, instead of
surfacing later as a confusing scheduling decision.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from hami_web.core.families import (
    DeviceCatalog,
    DeviceConfig,
    DeviceConfigError,
    ResourceNames,
    build_catalog,
    parse_device_config,
)
from hami_web.core.families.config import config_document
from hami_web.core.families.nvidia import nvidia_family
from hami_web.core.options import parse_gpu_policy
from hami_web.core.policy import AdmissionPolicy, SchedulingPolicy
from hami_web.core.requests import RequestDefaults

__all__ = ["ResourceNames", "Settings", "SettingsError", "build_settings"]

NODE_POLICIES = ("binpack", "spread")
# Where the server publishes its scheduling settings for the operator tools (NAMESPACE/NAME).
DEFAULT_SETTINGS_CONFIGMAP = "hami-system/hami-web-settings"
PRIVILEGED_POLICIES = ("deny", "skip")
LOG_FORMATS = ("text", "json")
# The longest deadline of one /filter or /bind (see `_bind_deadline`).
MAX_BIND_DEADLINE_SECONDS = 27.0
ENV_PREFIX = "HAMI_"


class SettingsError(ValueError):
    """A configuration value is invalid; the message names the flag."""


@dataclass(frozen=True, slots=True)
class Settings:
    """Validated configuration of one hami-web process."""

    scheduler_name: str = "hami-scheduler"
    node_scheduler_policy: str = "binpack"
    gpu_scheduler_policy: str = "spread"
    default_mem_mib: int = 0
    default_cores: int = 0
    default_gpu: int = 1
    node_label_selector: str = ""
    node_lock_timeout_seconds: float = 300.0
    overwrite_env: bool = False
    resources: ResourceNames = field(default_factory=ResourceNames)
    cert_file: str = ""
    key_file: str = ""
    bind: str = "0.0.0.0:8443"
    extender_bind: str = "127.0.0.1:8444"
    metrics_bind_address: str = ":9395"
    ui_bind: str = "127.0.0.1:9396"
    ui_expose: bool = False
    refresh_interval_seconds: float = 15.0
    relist_interval_seconds: float = 0.0
    watch_silence_bound_seconds: float = 90.0
    privileged_policy: str = "deny"
    kubeconfig: str = ""
    insecure_http: bool = False
    threads: int = 8
    log_level: str = "INFO"
    # HAMi v2.10's names and meanings (see README, Compatibility with HAMi v2.10).
    node_lock_retry_timeout_seconds: float = 25.0
    kube_qps: float = 0.0
    kube_burst: int = 0
    kube_timeout_seconds: float = 10.0
    log_format: str = "text"
    extender_deadline_seconds: float = 15.0
    busy_nodes_last: bool = True
    settings_configmap: str = DEFAULT_SETTINGS_CONFIGMAP
    device_config_file: str = ""
    enable_iluvatar: bool = False
    device_config: DeviceConfig = field(default_factory=DeviceConfig)
    # The enabled device families, built from the fields above (README.md#device-families): what every part of the
    # server reads.
    devices: DeviceCatalog = field(init=False, compare=False, repr=False)
    # The scheduling policy the filter and the tools decide with, and the admission webhook's, built from the fields
    # above: each part of the server gets the one it uses.
    policy: SchedulingPolicy = field(init=False, compare=False, repr=False)
    admission: AdmissionPolicy = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        nvidia = nvidia_family(resources=self.resources, default_memory_mib=self.default_mem_mib,
                               default_cores=self.default_cores, default_count=self.default_gpu,
                               overwrite_env=self.overwrite_env,
                               memory_factor=self.device_config.nvidia.memory_factor or 1)
        try:
            catalog = build_catalog(nvidia=nvidia, config=self.device_config, enable_iluvatar=self.enable_iluvatar)
        except DeviceConfigError as error:
            raise SettingsError(f"invalid device configuration: {error}") from None
        object.__setattr__(self, "devices", catalog)
        object.__setattr__(self, "policy", SchedulingPolicy(
            node_policy=self.node_scheduler_policy, gpu_policy=self.gpu_scheduler_policy,
            defaults=RequestDefaults.of(catalog), scheduler_name=self.scheduler_name))
        object.__setattr__(self, "admission", AdmissionPolicy(
            scheduler_name=self.scheduler_name, privileged_policy=self.privileged_policy, devices=catalog))

    @property
    def bind_host_port(self) -> tuple[str, int]:
        """``--bind`` split into host and port (validated at construction)."""
        return split_host_port(self.bind)

    @property
    def extender_host_port(self) -> tuple[str, int]:
        """``--extender-bind`` split into host and port."""
        return split_host_port(self.extender_bind)

    @property
    def metrics_host_port(self) -> tuple[str, int]:
        """``--metrics-bind-address`` split into host and port (``:9395`` means every interface)."""
        return split_host_port(self.metrics_bind_address)

    @property
    def ui_host_port(self) -> tuple[str, int] | None:
        """``--ui-bind`` split into host and port; None when the dashboard is off."""
        return split_host_port(self.ui_bind) if self.ui_bind else None


def split_host_port(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT``, or ``:PORT`` for every interface) as ``(host, port)``."""
    host, _, port = address.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an IP address or ``localhost``) only listens on this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_DURATION_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration_seconds(text: str) -> float:
    """Parse ``15``, ``15s``, ``5m``, ``1h30m`` or ``500ms`` (Go-style, as HAMi's flags) into seconds."""
    value = text.strip()
    if not value:
        raise ValueError("empty duration")
    try:
        return float(value)
    except ValueError:
        pass
    position, total = 0, 0.0
    for match in _DURATION_PART.finditer(value):
        if match.start() != position:
            break
        total += float(match.group(1)) * _DURATION_UNIT_SECONDS[match.group(2)]
        position = match.end()
    if position != len(value):
        raise ValueError(f"{text!r} is not a duration (examples: 30, 30s, 5m, 1h)")
    return total


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"{text!r} is not a boolean (true/false)")


def _non_negative_int(text: str) -> int:
    value = int(text.strip())
    if value < 0:
        raise ValueError("must not be negative")
    return value


def _positive_int(text: str) -> int:
    value = int(text.strip())
    if value < 1:
        raise ValueError("must be at least 1")
    return value


def _non_negative_duration(text: str) -> float:
    seconds = parse_duration_seconds(text)
    if seconds < 0:
        raise ValueError("must not be negative")
    return seconds


def _non_negative_float(text: str) -> float:
    value = float(text.strip())
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{text!r} must be a number >= 0")
    return value


def _bind_deadline(*, allow_zero: bool) -> Callable[[str], float]:
    # kube-scheduler abandons a /filter or /bind after its extender httpTimeout (30s as deployed); the deadline
    # plus the cleanup after a failed bind (at most 3s) must end before it, or the answer arrives too late.
    def parse(text: str) -> float:
        seconds = _non_negative_duration(text) if allow_zero else _positive_duration(text)
        if seconds > MAX_BIND_DEADLINE_SECONDS:
            raise ValueError(f"must be at most {MAX_BIND_DEADLINE_SECONDS:g}s, so that with the cleanup after a "
                             "failed bind the answer comes inside kube-scheduler's 30s httpTimeout")
        return seconds

    return parse


def _positive_duration(text: str) -> float:
    seconds = parse_duration_seconds(text)
    if seconds <= 0:
        raise ValueError("must be greater than zero")
    return seconds


def _duration_or_off(text: str) -> float:
    if text.strip().lower() in ("off", "0", "false", "none"):
        return 0.0
    return _positive_duration(text)


def _choice(options: Sequence[str]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip()
        if value not in options:
            raise ValueError(f"{text!r} is not one of {', '.join(options)}")
        return value

    return parse


def _configmap_or_off(text: str) -> str:
    text = text.strip()
    if text.lower() in ("off", ""):
        return ""
    namespace, slash, name = text.partition("/")
    if not slash or not namespace or not name or "/" in name:
        raise ValueError(f"{text!r} is not NAMESPACE/NAME or off")
    return text


def _gpu_policy(text: str) -> str:
    # The same parser as the pod annotation, so a chain such as binpack,numa is a valid default too.
    return parse_gpu_policy(text, source="policy")


def _cores(text: str) -> int:
    value = _non_negative_int(text)
    if value > 100:
        raise ValueError("must be between 0 and 100")
    return value


def _bind_address(text: str) -> str:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r} is not HOST:PORT")
    return f"{host}:{port}"


def _optional_bind_address(text: str) -> str:
    return "" if text.strip().lower() in ("", "off") else _bind_address(text)


def _resource_name(text: str) -> str:
    value = text.strip()
    if not re.fullmatch(r"[A-Za-z0-9.\-]+/[A-Za-z0-9.\-_]+", value):
        raise ValueError(f"{text!r} is not an extended resource name like nvidia.com/gpu")
    return value


def _text(text: str) -> str:
    return text.strip()


@dataclass(frozen=True, slots=True)
class _Option:
    flag: str
    target: str
    parse: Callable[[str], Any]
    help: str
    is_switch: bool = False


_OPTIONS: tuple[_Option, ...] = (
    _Option("--scheduler-name", "scheduler_name", _text, "scheduler name set on GPU pods (hami-scheduler)"),
    _Option("--node-scheduler-policy", "node_scheduler_policy", _choice(NODE_POLICIES),
            "default node policy: binpack or spread (binpack)"),
    _Option("--gpu-scheduler-policy", "gpu_scheduler_policy", _gpu_policy,
            "default GPU policy: binpack, spread, topology-aware, mutex, numa, or a chain such as binpack,numa "
            "(spread)"),
    _Option("--default-mem", "default_mem_mib", _non_negative_int,
            "MiB booked when a container asks for neither gpumem nor gpumem-percentage; 0 = whole card (0)"),
    _Option("--default-cores", "default_cores", _cores, "percent of a GPU booked when gpucores is absent (0)"),
    _Option("--default-gpu", "default_gpu", _positive_int,
            "GPU count added when a container asks for gpumem/gpucores without a count (1)"),
    _Option("--node-label-selector", "node_label_selector", _text,
            "only nodes matching this label selector are GPU candidates (all nodes)"),
    _Option("--node-lock-timeout", "node_lock_timeout_seconds", _positive_duration,
            "age after which a node lock is stale, e.g. 5m (5m)"),
    _Option("--overwrite-env", "overwrite_env", _parse_bool,
            "give containers without a GPU NVIDIA_VISIBLE_DEVICES=none", is_switch=True),
    _Option("--resource-name", "resources.count", _resource_name, "GPU count resource (nvidia.com/gpu)"),
    _Option("--resource-mem", "resources.memory", _resource_name, "GPU memory resource, MiB (nvidia.com/gpumem)"),
    _Option("--resource-mem-percentage", "resources.memory_percentage", _resource_name,
            "GPU memory percentage resource (nvidia.com/gpumem-percentage)"),
    _Option("--resource-cores", "resources.cores", _resource_name, "GPU cores resource (nvidia.com/gpucores)"),
    _Option("--resource-priority", "resources.priority", _resource_name,
            "task priority resource (nvidia.com/priority)"),
    _Option("--cert-file", "cert_file", _text, "TLS certificate (PEM), re-read when it changes"),
    _Option("--key-file", "key_file", _text, "TLS private key (PEM)"),
    _Option("--bind", "bind", _bind_address,
            "TLS listener for /webhook, /healthz, /readyz: the Service's port, HOST:PORT (0.0.0.0:8443)"),
    _Option("--extender-bind", "extender_bind", _bind_address,
            "TLS listener for /filter, /bind (+ /healthz, /readyz): kube-scheduler in the same pod; keep it on "
            "loopback (127.0.0.1:8444)"),
    _Option("--metrics-bind-address", "metrics_bind_address", _bind_address,
            "plain-HTTP listener for /metrics, HOST:PORT or :PORT (:9395)"),
    _Option("--ui-bind", "ui_bind", _optional_bind_address,
            "listener of the read-only dashboard /ui/, HOST:PORT or off; plain HTTP on loopback, reach it with "
            "kubectl port-forward (127.0.0.1:9396)"),
    _Option("--ui-expose", "ui_expose", _parse_bool,
            "allow --ui-bind on a non-loopback address: then every request needs a Kubernetes bearer token "
            "allowed to list pods and nodes (TokenReview + SubjectAccessReview), and TLS unless "
            "--insecure-http", is_switch=True),
    _Option("--refresh-interval", "refresh_interval_seconds", _positive_duration,
            "period of the cache's resync from local state: handshakes, device plugins gone (15s)"),
    _Option("--relist-interval", "relist_interval_seconds", _duration_or_off,
            "full list of nodes and pods this often besides the watches, e.g. 30m, or off (off)"),
    _Option("--watch-silence-bound", "watch_silence_bound_seconds", _positive_duration,
            "a watch that delivers nothing (no event, no bookmark; kube-apiserver sends a bookmark about every "
            "minute) for this long is re-opened, and /readyz fails meanwhile (90s)"),
    _Option("--privileged-policy", "privileged_policy", _choice(PRIVILEGED_POLICIES),
            "deny GPU pods with privileged containers, or skip them as HAMi v2.4 did (deny)"),
    _Option("--kubeconfig", "kubeconfig", _text,
            "kubeconfig path (default: $KUBECONFIG, else in-cluster config, else ~/.kube/config)"),
    _Option("--insecure-http", "insecure_http", _parse_bool,
            "serve plain HTTP instead of TLS (local use only)", is_switch=True),
    _Option("--threads", "threads", _positive_int,
            "threads that run the app, per listener (binds waiting on the API never hold the threads of /webhook or "
            "/metrics); connections are read by the event loop (8)"),
    _Option("--log-level", "log_level", _choice(("DEBUG", "INFO", "WARNING", "ERROR")), "log level (INFO)"),
    _Option("--node-lock-retry-timeout", "node_lock_retry_timeout_seconds", _bind_deadline(allow_zero=True),
            "how long the bind of a PodGroup member that finds its node locked may take, the wait for the lock "
            "and the bind's API calls together, e.g. 25s; 0 = fail at once; at most 27s (25s)"),
    _Option("--kube-qps", "kube_qps", _non_negative_float,
            "requests per second to kube-apiserver, sustained; 0 = no client-side limit (0)"),
    _Option("--kube-burst", "kube_burst", _non_negative_int,
            "requests to kube-apiserver allowed at once above --kube-qps (0 = the QPS rounded up)"),
    _Option("--kube-timeout", "kube_timeout_seconds", _positive_duration,
            "timeout of one request to kube-apiserver, e.g. 10 or 10s (10s)"),
    _Option("--log-format", "log_format", _choice(LOG_FORMATS), "text, or json for one JSON object per line (text)"),
    _Option("--extender-deadline", "extender_deadline_seconds", _bind_deadline(allow_zero=False),
            "time one /filter or /bind may spend on API calls; reading back an unanswered write or cleaning up "
            "a failed bind gets a third more, at most 3s; at most 27s (15s)"),
    _Option("--busy-nodes-last", "busy_nodes_last", _parse_bool,
            "a filter tries nodes whose HAMi node lock a live bind holds, or that have a placement not yet bound, "
            "after the free ones (never excluding them); false = strict HAMi node order (true)", is_switch=True),
    _Option("--device-config-file", "device_config_file", _text,
            "HAMi's device config (device-config.yaml of the hami-scheduler-device ConfigMap): resource names and "
            "settings of the nvidia, hygon and iluvatars sections; flags given explicitly win over it"),
    _Option("--enable-iluvatar", "enable_iluvatar", _parse_bool,
            "schedule Iluvatar GPUs (the chips of the device config's iluvatars list) (false)", is_switch=True),
    _Option("--settings-configmap", "settings_configmap", _configmap_or_off,
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
                   "--resource-mem-percentage", "--resource-cores", "--resource-priority", "--enable-iluvatar")

# The data key under which the device config the server read is published (HAMi's YAML, only what was set).
PUBLISHED_DEVICE_CONFIG = "device-config.yaml"

# HAMi scheduler flags an operator may carry over, for features hami-web does not have: refused with a reason,
# so a copied command line fails loudly instead of with argparse's bare "unrecognized arguments".
UNSUPPORTED_HAMI_FLAGS: dict[str, str] = {
    "--http_bind": "use --bind (TLS) instead",
    "--cert_file": "use --cert-file instead",
    "--key_file": "use --key-file instead",
    "--profiling": "hami-web has no pprof endpoint",
    "--profiling-bind-address": "hami-web has no pprof endpoint",
    "--force-overwrite-default-scheduler": "hami-web always replaces default-scheduler on GPU pods",
    "--device-plugin-namespace": "hami-web has no /refit endpoint",
    "--device-plugin-service-account": "hami-web has no /refit endpoint",
    "--leader-elect": "kube-scheduler in the same pod does the leader election",
    "--leader-elect-resource-name": "kube-scheduler in the same pod does the leader election",
    "--leader-elect-resource-namespace": "kube-scheduler in the same pod does the leader election",
    "--legacy-metrics": "only HAMi's current metric names are served",
    "--debug": "use --log-level DEBUG",
    "--v": "use --log-level (klog verbosity has no equivalent)",
    "--vmodule": "use --log-level (klog verbosity has no equivalent)",
    "--logtostderr": "hami-web always logs to stderr",
    "--alsologtostderr": "hami-web always logs to stderr",
    "--log_dir": "hami-web always logs to stderr",
    "--log_file": "hami-web always logs to stderr",
}


def _env_name(flag: str) -> str:
    return ENV_PREFIX + flag.lstrip("-").upper().replace("-", "_")


class _UnsupportedHamiFlag(argparse.Action):
    """Fails parsing with the reason hami-web does not take this HAMi flag."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        reason = UNSUPPORTED_HAMI_FLAGS.get(option_string or "", "")
        parser.error(f"{option_string} is a HAMi scheduler flag that hami-web does not support: {reason}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register every settings flag on ``parser`` (values stay strings; `build_settings` validates)."""
    for flag in UNSUPPORTED_HAMI_FLAGS:
        parser.add_argument(flag, nargs="?", action=_UnsupportedHamiFlag, help=argparse.SUPPRESS)
    group = parser.add_argument_group("settings (each also read from HAMI_<FLAG> in the environment)")
    for option in _OPTIONS:
        dest = option.target.replace(".", "__")
        if option.is_switch:
            group.add_argument(option.flag, dest=dest, nargs="?", const="true", default=None,
                               metavar="BOOL", help=f"{option.help} [{_env_name(option.flag)}]")
        else:
            group.add_argument(option.flag, dest=dest, default=None, metavar="VALUE",
                               help=f"{option.help} [{_env_name(option.flag)}]")


def build_settings(namespace: argparse.Namespace | None = None,
                   environ: Mapping[str, str] | None = None) -> Settings:
    """Build `Settings` from parsed flags, falling back to ``HAMI_…`` variables, then defaults.

    Raises `SettingsError` naming the flag when a value does not parse or is out of range.
    """
    env = os.environ if environ is None else environ
    top: dict[str, Any] = {}
    resources: dict[str, Any] = {}
    for option in _OPTIONS:
        raw = getattr(namespace, option.target.replace(".", "__"), None) if namespace else None
        source = option.flag
        if raw is None:
            raw = env.get(_env_name(option.flag))
            source = f"{option.flag} (from {_env_name(option.flag)})"
        if raw is None:
            continue
        try:
            value = option.parse(raw)
        except ValueError as error:
            raise SettingsError(f"invalid value for {source}: {error}") from None
        if option.target.startswith("resources."):
            resources[option.target.split(".", 1)[1]] = value
        else:
            top[option.target] = value
    if top.get("device_config_file"):
        config = read_device_config(top["device_config_file"])
        top["device_config"] = config
        _fill_from_device_config(config, top, resources)
    settings = Settings(resources=ResourceNames(**resources), **top)
    _check_consistency(settings)
    return settings


def read_device_config(path: str) -> DeviceConfig:
    """Load HAMi's ``device-config.yaml``; `SettingsError` names the file and the key that is wrong."""
    where = f"invalid value for --device-config-file: {path}"
    try:
        with open(path, encoding="utf-8") as stream:
            document = yaml.safe_load(stream)
    except OSError as error:
        raise SettingsError(f"{where}: cannot read it: {error.strerror or error}") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        position = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise SettingsError(f"{where}: not valid YAML{position}: {problem}") from None
    try:
        return parse_device_config(document)
    except DeviceConfigError as error:
        raise SettingsError(f"{where}: {error}") from None


def _fill_from_device_config(config: DeviceConfig, top: dict[str, Any], resources: dict[str, Any]) -> None:
    """Precedence (README.md#configuration, ``--device-config-file``): an explicit flag, else the file, else the chart
    default (the field's default)."""
    nvidia = config.nvidia
    for key, value in (("count", nvidia.count), ("memory", nvidia.memory),
                       ("memory_percentage", nvidia.memory_percentage), ("cores", nvidia.cores),
                       ("priority", nvidia.priority)):
        if value is not None:
            resources.setdefault(key, value)
    defaults: tuple[tuple[str, int | bool | None], ...] = (
        ("default_mem_mib", nvidia.default_memory_mib), ("default_cores", nvidia.default_cores),
        ("default_gpu", nvidia.default_count), ("overwrite_env", nvidia.overwrite_env))
    for key, setting in defaults:
        if setting is not None:
            top.setdefault(key, setting)


def _check_consistency(settings: Settings) -> None:
    names = (*settings.resources.managed(), settings.resources.priority)
    if len(set(names)) != len(names):
        raise SettingsError("invalid value for --resource-*: the resource names must all differ")
    if bool(settings.cert_file) != bool(settings.key_file):
        raise SettingsError("invalid value for --cert-file/--key-file: give both or neither")
    ports = [address[1] for address in (settings.bind_host_port, settings.extender_host_port,
                                        settings.metrics_host_port, settings.ui_host_port) if address]
    if len(set(ports)) != len(ports):
        raise SettingsError("invalid value for --bind/--extender-bind/--metrics-bind-address/--ui-bind: each "
                            f"listener needs its own port (got {', '.join(map(str, ports))})")
    if settings.ui_host_port and not settings.ui_expose and not is_loopback(settings.ui_host_port[0]):
        raise SettingsError(f"invalid value for --ui-bind: {settings.ui_bind} is not a loopback address; the "
                            "dashboard shows pod and node names, so exposing it needs --ui-expose (which then "
                            "requires a Kubernetes bearer token on every request)")
    if not settings.scheduler_name:
        raise SettingsError("invalid value for --scheduler-name: must not be empty")



def published_settings(settings: Settings) -> dict[str, str]:
    """The `PUBLISHED_FLAGS` of ``settings`` as a ConfigMap's data: flag name without ``--`` → value text; and,
    when a device config was given, what the server read of it under `PUBLISHED_DEVICE_CONFIG` (the tools cannot
    read the server's file, and the families' names and units come from it)."""
    data = {}
    for option in _OPTIONS:
        if option.flag in PUBLISHED_FLAGS:
            holder: Any = settings.resources if option.target.startswith("resources.") else settings
            data[option.flag.removeprefix("--")] = str(getattr(holder, option.target.rsplit(".", 1)[-1]))
    document = config_document(settings.device_config)
    if document:
        data[PUBLISHED_DEVICE_CONFIG] = yaml.safe_dump(document, sort_keys=True)
    return data


def settings_from_published(data: Mapping[str, str], *, where: str) -> Settings:
    """`Settings` from a published ConfigMap's data, each value checked by its flag's own parser.

    Keys that are not published flags are ignored (a newer server may publish more); a bad value is a
    `SettingsError` naming ``where`` and the key.
    """
    environ = {_env_name(f"--{key}"): str(value) for key, value in data.items() if f"--{key}" in PUBLISHED_FLAGS}
    try:
        settings = build_settings(None, environ=environ)
        text = data.get(PUBLISHED_DEVICE_CONFIG)
        if text:
            config = parse_device_config(yaml.safe_load(str(text)))
            settings = dataclasses.replace(settings, device_config=config)
    except SettingsError as error:
        raise SettingsError(f"{where}: {error}") from None
    except (yaml.YAMLError, DeviceConfigError) as error:
        raise SettingsError(f"{where}: {PUBLISHED_DEVICE_CONFIG}: {error}") from None
    return settings
