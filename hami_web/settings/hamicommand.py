"""HAMi v2.10's scheduler command line (``scheduler --http_bind=0.0.0.0:443 … --debug -v=4``), read as HAMi reads it.

Why: every HAMi cluster runs HAMi's Helm chart, whose Deployment starts ``scheduler`` with HAMi's flags; to switch
an operator changes only the image (README.md#switching-from-hami). So the ``scheduler`` command takes every flag
``cmd/scheduler/main.go`` and ``pkg/scheduler/config.GlobalFlagSet`` define (klog's included), spelled and typed as
pflag parses them (``--flag=value``, ``--flag value``, a bare ``--bool``, ``-v=4``). A flag with a setting of ours
sets it through that setting's one declaration (`settings._OPTIONS`, so its value is checked by the same parser as
under ``hami-web serve``); ``--debug`` and klog's ``-v`` choose the log level; a flag for something hami-web does not
have is accepted with one warning line saying it has no effect and why. A flag HAMi does not define, or a value
HAMi's own parser would refuse, is a `HamiFlagError` naming flag and value (exit 2).

The environment the chart sets: ``HAMI_NODELOCK_EXPIRE`` (the node lock's expiry, unless ``--node-lock-timeout``
is given), ``NODE_SELECTOR_*`` (read by no code of HAMi v2.10: a warning says so), ``POD_NAME`` and
``POD_NAMESPACE`` (read by the leader labelling, `state.leadership`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from hami_web.settings.values import MAX_BIND_DEADLINE_SECONDS

# Which setting the flag sets, or why it has none.
OURS, LOG, NO_EFFECT = "ours", "log", "no-effect"
# klog verbosity from which HAMi's debug lines show (V(4) is "debug" in Kubernetes' logging conventions).
DEBUG_VERBOSITY = 4
NODE_SELECTOR_PREFIX = "NODE_SELECTOR_"
NODE_LOCK_EXPIRE_ENV = "HAMI_NODELOCK_EXPIRE"
SETTINGS_CONFIGMAP_NAME = "hami-web-settings"


class HamiFlagError(ValueError):
    """A HAMi command line that HAMi's scheduler would refuse too; the message names the flag and the value."""


_GO_BOOLS = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
             "0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False}
_GO_DURATION = re.compile(r"[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:ns|us|µs|μs|ms|s|m|h))+")
_GO_DURATION_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_SEVERITIES = ("INFO", "WARNING", "ERROR", "FATAL")


def go_bool(text: str) -> bool:
    """strconv.ParseBool, as pflag's bool flags."""
    if text not in _GO_BOOLS:
        raise ValueError("not a boolean (true, false, 1, 0, t, f)")
    return _GO_BOOLS[text]


def go_duration_seconds(text: str) -> float:
    """time.ParseDuration in seconds: ``28s``, ``5m``, ``1h30m``, ``0``; a bare number other than 0 is refused."""
    if text in ("0", "+0", "-0"):
        return 0.0
    if not _GO_DURATION.fullmatch(text):
        raise ValueError("not a duration (examples: 30s, 5m, 1h30m)")
    total = sum(float(number) * _UNIT_SECONDS[unit] for number, unit in _GO_DURATION_PART.findall(text))
    return -total if text.startswith("-") else total


def go_int(text: str) -> int:
    """strconv.ParseInt(text, 0, 64): decimal, or 0x/0o/0b prefixed."""
    try:
        return int(text, 0)
    except ValueError:
        raise ValueError("not an integer") from None


def go_uint(text: str) -> int:
    value = go_int(text)
    if value < 0:
        raise ValueError("not an unsigned integer")
    return value


def go_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError("not a number") from None
    if math.isnan(value):
        raise ValueError("not a number")
    return value


def go_string_map(text: str) -> dict[str, str]:
    """pflag's StringToString: ``key=value`` pairs separated by commas."""
    pairs: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",") if text):
        key, equals, value = item.partition("=")
        if not equals:
            raise ValueError(f"{item} must be formatted as key=value")
        pairs[key] = value
    return pairs


def klog_severity(text: str) -> str:
    if text.upper() in _SEVERITIES or text in ("0", "1", "2", "3"):
        return text
    raise ValueError("not a severity (INFO, WARNING, ERROR, FATAL or 0-3)")


def klog_vmodule(text: str) -> str:
    for item in filter(None, text.split(",")):
        pattern, equals, level = item.partition("=")
        if not pattern or not equals or not level.isdigit():
            raise ValueError(f"{item!r} is not pattern=N")
    return text


def klog_trace_location(text: str) -> str:
    if text and not re.fullmatch(r"[^:]+\.go:\d+", text):
        raise ValueError("not file.go:N")
    return text


def _text(text: str) -> str:
    return text


@dataclass(frozen=True, slots=True)
class HamiFlag:
    """One flag of HAMi v2.10's ``scheduler``: its pflag type (``check``), and what it does here."""

    name: str
    check: Callable[[str], object]
    does: str  # OURS, LOG or NO_EFFECT
    detail: str = ""  # OURS: our flag it sets; NO_EFFECT: why it has none
    is_bool: bool = False


def _ours(name: str, check: Callable[[str], object] = _text, ours: str = "", *, is_bool: bool = False) -> HamiFlag:
    return HamiFlag(name, check, OURS, ours or f"--{name}", is_bool=is_bool)


def _none(name: str, why: str, check: Callable[[str], object] = _text, *, is_bool: bool = False) -> HamiFlag:
    return HamiFlag(name, check, NO_EFFECT, why, is_bool=is_bool)


def _family_names(section: str, names: Sequence[str]) -> list[HamiFlag]:
    why = (f"the resource names come from --device-config-file's {section} section (HAMi v2.10 overwrites this "
           "flag with it too)")
    return [_none(name, why) for name in names]


def _fixed_family(family: str, names: Sequence[str]) -> list[HamiFlag]:
    why = f"hami-web books {family} devices under the resource names HAMi's device plugin registers (its defaults)"
    return [_none(name, why) for name in names]


def _unused_names(what: str, names: Sequence[str]) -> list[HamiFlag]:
    why = f"HAMi v2.10 reads these {what} names and schedules nothing with them; neither does hami-web"
    return [_none(name, why) for name in names]


_LOG_DESTINATION = "hami-web writes every log line to stderr in its own format (--log-format)"

# In HAMi's order: cmd/scheduler/main.go init(), then config.GlobalFlagSet() (the families' ParseConfig, --debug,
# --device-config-file), then klog.InitFlags.
HAMI_FLAGS: tuple[HamiFlag, ...] = (
    _ours("http_bind", ours="--http-bind"),
    _ours("cert_file", ours="--cert-file"),
    _ours("key_file", ours="--key-file"),
    _ours("scheduler-name"),
    _ours("node-scheduler-policy"),
    _ours("gpu-scheduler-policy"),
    _ours("metrics-bind-address"),
    _ours("node-label-selector", go_string_map),
    _ours("kube-qps", go_float),
    _ours("kube-burst", go_int),
    _ours("kube-timeout", go_int),
    _none("profiling", "hami-web has no pprof endpoint", go_bool, is_bool=True),
    _ours("node-lock-timeout", go_duration_seconds),
    _ours("node-lock-retry-timeout", go_duration_seconds),
    _ours("force-overwrite-default-scheduler", go_bool, is_bool=True),
    _ours("leader-elect", go_bool, is_bool=True),
    _ours("leader-elect-resource-name"),
    _ours("leader-elect-resource-namespace"),
    _ours("legacy-metrics", go_bool, is_bool=True),
    _ours("enable-ascend", go_bool, is_bool=True),
    *_family_names("cambricon", ("cambricon-mlu-name", "cambricon-mlu-memory", "cambricon-mlu-cores")),
    *_family_names("hygon", ("dcu-name", "dcu-memory", "dcu-cores")),
    _ours("enable-iluvatar", go_bool, is_bool=True),
    *_fixed_family("Moore Threads", ("mthreads-name", "mthreads-memory", "mthreads-cores")),
    *_fixed_family("Enflame GCU", ("enflame-gcu-resource-name",)),
    *_family_names("enflame", ("enflame-drs-gcu-resource-name", "enflame-gcu-memory-resource-name",
                               "enflame-gcu-core-resource-name", "enflame-vgcu-resource-name")),
    *_unused_names("Enflame legacy shared-vGCU", ("enflame-vgcu-legacy-resource-name",
                                                  "enflame-vgcu-percentage-resource-name")),
    *_fixed_family("MetaX GPU", ("metax-name",)),
    *_family_names("metax", ("metax-vcount", "metax-vcore", "metax-vmemory")),
    _none("sgpu-topology-aware", "sgpuTopologyAware comes from --device-config-file's metax section (HAMi v2.10 "
          "overwrites this flag with it too)", go_bool, is_bool=True),
    *_fixed_family("Kunlunxin", ("kunlun-name", "kunlun-vcount", "kunlun-vmemory")),
    HamiFlag("debug", go_bool, LOG, is_bool=True),
    _ours("device-config-file"),
    _none("add_dir_header", _LOG_DESTINATION, go_bool, is_bool=True),
    _none("alsologtostderr", _LOG_DESTINATION, go_bool, is_bool=True),
    _none("log_backtrace_at", "hami-web logs a traceback with every unexpected error already", klog_trace_location),
    _none("log_dir", _LOG_DESTINATION),
    _none("log_file", _LOG_DESTINATION),
    _none("log_file_max_size", _LOG_DESTINATION, go_uint),
    _none("logtostderr", _LOG_DESTINATION, go_bool, is_bool=True),
    _none("one_output", _LOG_DESTINATION, go_bool, is_bool=True),
    _none("skip_headers", _LOG_DESTINATION, go_bool, is_bool=True),
    _none("skip_log_headers", _LOG_DESTINATION, go_bool, is_bool=True),
    _none("stderrthreshold", _LOG_DESTINATION, klog_severity),
    HamiFlag("v", go_int, LOG),
    _none("vmodule", "hami-web has one log level per process (-v, --debug)", klog_vmodule),
)
HAMI_FLAG_BY_NAME = {flag.name: flag for flag in HAMI_FLAGS}
# Flags with the value klog and HAMi default to, for which a warning would only be noise.
_QUIET_DEFAULTS = {"logtostderr": "true", "profiling": "false"}


@dataclass(slots=True)
class HamiCommandLine:
    """What a HAMi command line asks for: our settings (flag → text), the log level, and the warnings to log."""

    settings: dict[str, str] = field(default_factory=dict)  # --log-level among them when --debug or -v is given
    warnings: list[str] = field(default_factory=list)
    show_help: bool = False
    show_version: bool = False


def parse_hami_command_line(argv: Sequence[str], environ: Mapping[str, str]) -> HamiCommandLine:
    """Read ``argv`` (without the program name) as HAMi v2.10's scheduler does; `HamiFlagError` on what it refuses."""
    given: list[tuple[str, str]] = []
    positionals: list[str] = []
    arguments = list(argv)
    while arguments:
        token = arguments.pop(0)
        if token == "--":
            positionals += arguments
            break
        if token in ("-h", "--help", "-help"):
            return HamiCommandLine(show_help=True)
        if token.startswith("--") and len(token) > 2:
            name, equals, value = token[2:].partition("=")
        elif token.startswith("-") and len(token) > 1:
            name, equals, value = _shorthand(token)
        else:
            positionals.append(token)
            continue
        flag = HAMI_FLAG_BY_NAME.get(name)
        if flag is None:
            raise HamiFlagError(f"unknown flag: {token}")
        if not equals:
            if flag.is_bool:
                value = "true"
            elif arguments:
                value = arguments.pop(0)
            else:
                raise HamiFlagError(f"flag needs an argument: {token}")
        given.append((name, value))
    if positionals:
        if positionals == ["version"]:
            return HamiCommandLine(show_version=True)
        raise HamiFlagError(f"unknown command {positionals[0]!r} for \"scheduler\"")
    return _interpret(given, environ)


def _shorthand(token: str) -> tuple[str, str, str]:
    """pflag's single-dash form: only ``-v`` (klog's verbosity) has one: ``-v=4``, ``-v4``, ``-v 4``."""
    body = token[1:]
    if body[0] != "v":
        raise HamiFlagError(f"unknown shorthand flag: {body[0]!r} in {token}")
    rest = body[1:]
    if rest.startswith("="):
        return "v", "=", rest[1:]
    return ("v", "=", rest) if rest else ("v", "", "")


def _interpret(given: Sequence[tuple[str, str]], environ: Mapping[str, str]) -> HamiCommandLine:
    line = HamiCommandLine()
    debug, verbosity, logged = False, 0, False
    for name, value in given:
        flag = HAMI_FLAG_BY_NAME[name]
        try:
            parsed = flag.check(value)
        except ValueError as error:
            raise HamiFlagError(f"invalid argument {value!r} for --{name}: {error}") from None
        if flag.does == LOG:
            logged = True
            if name == "debug":
                debug = bool(parsed)
            else:
                verbosity = int(str(parsed))
        elif flag.does == NO_EFFECT:
            if _QUIET_DEFAULTS.get(name) != str(flag.check(value)).lower():
                line.warnings.append(f"--{name}={value} has no effect: {flag.detail}")
        else:
            _set_ours(line, flag, value, parsed)
    if logged:  # else HAMI_LOG_LEVEL or our default decides
        line.settings["--log-level"] = "DEBUG" if debug or verbosity >= DEBUG_VERBOSITY else "INFO"
    _read_environment(line, environ)
    return line


def _set_ours(line: HamiCommandLine, flag: HamiFlag, value: str, parsed: object) -> None:
    if flag.name == "node-label-selector":
        assert isinstance(parsed, dict)
        value = ",".join(f"{key}={label}" for key, label in parsed.items())
    elif flag.name == "kube-timeout" and parsed == 0:
        return  # HAMi's 0: the client's own default, which ours is
    elif flag.name in ("node-lock-timeout", "node-lock-retry-timeout"):
        seconds = float(str(parsed))
        if flag.name == "node-lock-retry-timeout" and seconds > MAX_BIND_DEADLINE_SECONDS:
            line.warnings.append(
                f"--{flag.name}={value} is taken as {MAX_BIND_DEADLINE_SECONDS:g}s: with the cleanup after a failed "
                "bind, a longer wait would answer after kube-scheduler's 30s httpTimeout")
            seconds = MAX_BIND_DEADLINE_SECONDS
        value = f"{seconds:g}"
    elif flag.is_bool:
        value = str(parsed).lower()
    elif flag.check in (go_int, go_uint, go_float):
        value = str(parsed)  # 0x10 as Go reads it
    line.settings[flag.detail] = value


def _read_environment(line: HamiCommandLine, environ: Mapping[str, str]) -> None:
    expire = environ.get(NODE_LOCK_EXPIRE_ENV, "")
    if expire and "--node-lock-timeout" not in line.settings:
        try:
            seconds = go_duration_seconds(expire)
            if seconds <= 0:
                raise ValueError("must be greater than zero")
        except ValueError as error:
            line.warnings.append(f"{NODE_LOCK_EXPIRE_ENV}={expire} is ignored ({error}); the node lock expires after "
                                 "--node-lock-timeout, as HAMi does with a value it cannot parse")
        else:
            line.settings["--node-lock-timeout"] = f"{seconds:g}"
    for name, value in sorted(environ.items()):
        if name.startswith(NODE_SELECTOR_PREFIX):
            line.warnings.append(f"{name}={value} has no effect: HAMi v2.10 reads no NODE_SELECTOR_* variable "
                                 "either; to restrict the nodes, use --node-label-selector "
                                 "(the chart's scheduler.nodeLabelSelector)")
    namespace = environ.get("POD_NAMESPACE", "")
    if namespace:
        line.settings.setdefault("--settings-configmap", f"{namespace}/{SETTINGS_CONFIGMAP_NAME}")


def hami_flags_help() -> str:
    """The ``scheduler --help`` text: every flag of HAMi v2.10's scheduler and what it does here."""
    rows = []
    for flag in HAMI_FLAGS:
        spelled = "-v, --v" if flag.name == "v" else f"--{flag.name}"
        if flag.does == OURS:
            meaning = f"as hami-web serve {flag.detail}"
        elif flag.does == LOG:
            meaning = f"log level DEBUG (with -v, from {DEBUG_VERBOSITY})"
        else:
            meaning = f"accepted, no effect: {flag.detail}"
        rows.append(f"  {spelled:42} {meaning}")
    return ("usage: scheduler [flags]   (HAMi v2.10's scheduler command line; see README.md#switching-from-hami)\n"
            "       scheduler version\n\nflags:\n" + "\n".join(rows) + "\n")
