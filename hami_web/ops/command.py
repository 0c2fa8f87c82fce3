"""The ``inspect``, ``explain`` and ``capacity`` subcommands, as ``hami-web …`` and as ``kubectl hami …``.

They read the cluster through the usual kubeconfig (or in-cluster config) with list and get calls only.
Anything that stops them — a pod or node that does not exist, an API that cannot be reached, a flag that
makes no sense — is one line on stderr and exit status 1, as kubectl does.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import logging
import sys
from collections.abc import Sequence

from hami_web.core.families import gated_specs
from hami_web.kube import Kube, KubeError, NotFoundError, resolve_client
from hami_web.ops.capacity import DEFAULT_LIMIT, ShapeError, plan_capacity
from hami_web.ops.explain import explain_pod
from hami_web.ops.inspect import SORT_KEYS, InspectError, inspect_cluster, only_namespace
from hami_web.ops.render import (
    OUTPUTS,
    capacity_data,
    dump,
    explain_data,
    inspect_data,
    render_capacity,
    render_explain,
    render_inspect,
)
from hami_web.ops.serversettings import ToolSettings, tool_settings
from hami_web.ops.shape import add_shape_flags, shape_from_flags
from hami_web.ops.snapshot import ClusterSnapshot, read_snapshot
from hami_web.settings import DEFAULT_SETTINGS_CONFIGMAP, argument_type, option_help
from hami_web.settings.values import whole


class CommandError(Exception):
    """Stops a command with one line on stderr and exit status 1."""


# The most nodes --top shows and the most pods --limit counts.
MAX_COUNT = 1_000_000


def _count(text: str) -> int:
    """A whole number of nodes or pods, for argparse."""
    try:
        return whole(0, MAX_COUNT)(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _connection_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", default="",
                        help="kubeconfig file (default: $KUBECONFIG, a list merged as kubectl does, else "
                             "in-cluster, else ~/.kube/config)")
    parser.add_argument("--context", default="", help="the kubeconfig context to use (default: current-context)")
    parser.add_argument("-s", "--server", default="", help="API server URL, plain HTTP (e.g. the demo's API server)")
    parser.add_argument("-o", "--output", choices=OUTPUTS, default="text", help="text (default), wide, json or yaml")


# The tools' flags for the server's settings: argparse destination → (the `Settings` field it overrides, flag).
POLICY_FLAGS = {"selector": ("node_label_selector", "--selector"),
                "node_scheduler_policy": ("node_scheduler_policy", "--node-scheduler-policy"),
                "gpu_scheduler_policy": ("gpu_scheduler_policy", "--gpu-scheduler-policy"),
                "default_mem": ("default_mem_mib", "--default-mem"),
                "default_cores": ("default_cores", "--default-cores"),
                "scheduler_name": ("scheduler_name", "--scheduler-name"),
                # the gated families' switches (the registry's): Settings.of reads ``enable_<name>``
                **{f"enable_{spec.name}": (f"enable_{spec.name}", spec.flag) for spec in gated_specs()}}


def _settings_group(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """Where the server's settings are read, and which device families are enabled (the server's catalog)."""
    group = parser.add_argument_group(
        "the server's settings: read from the ConfigMap the server publishes; a flag given here overrides one")
    group.add_argument("--settings-configmap", default=DEFAULT_SETTINGS_CONFIGMAP, metavar="NAMESPACE/NAME",
                       help=f"where the server publishes them, or off (default {DEFAULT_SETTINGS_CONFIGMAP})")
    for flag in (spec.flag for spec in gated_specs()):
        group.add_argument(flag, dest=f"enable_{flag.removeprefix('--enable-')}", nargs="?", const=True,
                           type=argument_type(flag), default=None, metavar="BOOL",
                           help=option_help(flag))
    return group


def _policy_flags(parser: argparse.ArgumentParser) -> None:
    group = _settings_group(parser)
    # Declared once, by the server (`hami_web.settings`): its parsers and help, so the tools refuse what it refuses.
    group.add_argument("-l", "--selector", "--node-label-selector", dest="selector", default=None,
                       type=argument_type("--node-label-selector"), help=option_help("--node-label-selector"))
    for flag, metavar in (("--node-scheduler-policy", "POLICY"), ("--gpu-scheduler-policy", "POLICY"),
                          ("--default-mem", "MIB"), ("--default-cores", "PERCENT"), ("--scheduler-name", "NAME")):
        group.add_argument(flag, type=argument_type(flag), default=None, metavar=metavar, help=option_help(flag))


def _settings(kube: Kube, arguments: argparse.Namespace) -> ToolSettings:
    location = "" if arguments.settings_configmap.strip().lower() == "off" else arguments.settings_configmap
    overrides = {field: (flag, getattr(arguments, dest)) for dest, (field, flag) in POLICY_FLAGS.items()
                 if hasattr(arguments, dest)}
    return tool_settings(kube, location.strip(), overrides)


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``inspect``, ``explain`` and ``capacity``."""
    inspect = commands.add_parser("inspect", help="devices per node and family: booked memory and cores, pods "
                                                  "sharing each card",
                                  description="Per node and per device (each with its family): memory and cores "
                                              "booked / total, pods sharing the card, health and cordon; totals "
                                              "of the cluster and of each family first.")
    inspect.add_argument("nodes", nargs="*", metavar="NODE", help="only these nodes")
    inspect.add_argument("-d", "--details", action="store_true", help="list the pods on each GPU with their share")
    inspect.add_argument("-l", "--selector", default="", help="node label selector")
    scope = inspect.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", default="",
                       help="with -d, list only this namespace's pods (totals always count every pod)")
    scope.add_argument("-A", "--all-namespaces", action="store_true",
                       help="with -d, list the pods of every namespace (the default)")
    inspect.add_argument("--sort", choices=SORT_KEYS, default=None,
                         help="name (default), or fullest first by memory, cores or pods")
    inspect.add_argument("--top", type=_count, default=0, metavar="N",
                         help="only the first N nodes (fullest by memory unless --sort says otherwise)")
    _connection_flags(inspect)
    _settings_group(inspect)
    inspect.set_defaults(handler=run, ops_command=run_inspect)

    explain = commands.add_parser("explain", help="why a pod is Pending: the filter's decision right now",
                                  description="The decision hami-web's filter would make for the pod on the "
                                              "current state: its placement, or the reasons grouped by cause "
                                              "and the nearest miss. Works while the server is down.")
    explain.add_argument("pod", metavar="[NAMESPACE/]POD")
    explain.add_argument("-n", "--namespace", default="",
                         help="namespace when POD has none (default: the context's namespace, else default)")
    _connection_flags(explain)
    _policy_flags(explain)
    explain.set_defaults(handler=run, ops_command=run_explain)

    capacity = commands.add_parser("capacity", help="how many more pods of a shape fit now, and where",
                                   description="Places pods of one shape one after another with the real "
                                               "policies until none fits; says where they go and what runs "
                                               "out first.")
    add_shape_flags(capacity)
    capacity.add_argument("-n", "--namespace", default="",
                          help="the namespace whose device quotas the pods count against (default: the "
                               "context's namespace, else default)")
    capacity.add_argument("--limit", type=_count, default=DEFAULT_LIMIT, metavar="N",
                          help=f"stop counting at N pods (default {DEFAULT_LIMIT})")
    _connection_flags(capacity)
    _policy_flags(capacity)
    capacity.set_defaults(handler=run, ops_command=run_capacity)


def _target(arguments: argparse.Namespace) -> tuple[Kube, str, str]:
    """The client the flags and ``KUBECONFIG`` resolve to, the context's namespace (``""`` if none) and
    where the connection came from (named in errors)."""
    if arguments.server:
        return Kube.for_url(arguments.server), "", f"--server {arguments.server}"
    try:
        target = resolve_client(arguments.kubeconfig, context=arguments.context)
    except KubeError as error:
        raise CommandError(f"error: {error}") from None
    return Kube(target.configuration), target.namespace, target.source


def _unreachable(error: KubeError, source: str) -> CommandError:
    if error.status:
        return CommandError(f"Error from server: {error}")
    return CommandError(f"cannot reach the Kubernetes API ({source}): {error}")


def _read_cluster(arguments: argparse.Namespace) -> ClusterSnapshot:
    """One read-only snapshot of the cluster, of every family the server enables, through the command's
    kubeconfig; API failures as one line."""
    kube, _, source = _target(arguments)
    try:
        catalog = _settings(kube, arguments).policies.defaults.catalog
        return read_snapshot(kube, label_selector=arguments.selector, catalog=catalog)
    except KubeError as error:
        raise _unreachable(error, source) from None
    finally:
        kube.close()


def run_inspect(arguments: argparse.Namespace) -> int:
    """``inspect [NODE…]``."""
    sort = arguments.sort or ("memory" if arguments.top else "name")
    snapshot = _read_cluster(arguments)
    try:
        report = inspect_cluster(snapshot, nodes=arguments.nodes, sort=sort, top=arguments.top)
    except InspectError as error:
        raise CommandError(f"Error: {error}") from None
    if arguments.namespace:
        report = only_namespace(report, arguments.namespace)
    if arguments.output in ("json", "yaml"):
        sys.stdout.write(dump(inspect_data(report), arguments.output))
    else:
        sys.stdout.write(render_inspect(report, wide=arguments.output == "wide", details=arguments.details,
                                        sort=sort))
    return 0


def _pod_key(arguments: argparse.Namespace, context_namespace: str) -> tuple[str, str]:
    namespace, _, name = arguments.pod.rpartition("/")
    namespace = namespace or arguments.namespace or context_namespace or "default"
    if not name or "/" in namespace:
        raise CommandError(f"error: {arguments.pod!r} is not NAMESPACE/POD or POD")
    return namespace, name


def run_explain(arguments: argparse.Namespace) -> int:
    """``explain [NAMESPACE/]POD``."""
    kube, context_namespace, source = _target(arguments)
    try:
        namespace, name = _pod_key(arguments, context_namespace)
    except CommandError:
        kube.close()
        raise
    try:
        pod = kube.get_pod(namespace, name)
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        settings = _settings(kube, arguments)
        snapshot = read_snapshot(kube, label_selector=settings.node_label_selector, leave_out_pod_uid=uid,
                                 node_rules=True, catalog=settings.policies.defaults.catalog)
    except NotFoundError:
        raise CommandError(f'Error from server (NotFound): pods "{name}" not found in namespace "{namespace}"') \
            from None
    except KubeError as error:
        raise _unreachable(error, source) from None
    finally:
        kube.close()
    explanation = explain_pod(pod, snapshot, settings.policies, preemption=settings.preemption)
    explanation.settings_source = settings.source
    if arguments.output in ("json", "yaml"):
        sys.stdout.write(dump(explain_data(explanation), arguments.output))
    else:
        sys.stdout.write(render_explain(explanation, wide=arguments.output == "wide"))
    return 0


def run_capacity(arguments: argparse.Namespace) -> int:
    """``capacity --gpus N --gpumem MIB|--gpumem-percentage P --gpucores C …``."""
    try:
        shape = shape_from_flags(arguments)
    except ShapeError as error:
        raise CommandError(f"error: {error}") from None
    kube, context_namespace, source = _target(arguments)
    shape = dataclasses.replace(shape, namespace=arguments.namespace or context_namespace or "default")
    try:
        settings = _settings(kube, arguments)
        snapshot = read_snapshot(kube, label_selector=settings.node_label_selector, node_rules=True,
                                 catalog=settings.policies.defaults.catalog)
    except KubeError as error:
        raise _unreachable(error, source) from None
    finally:
        kube.close()
    try:
        report = plan_capacity(snapshot, shape, settings.policies, limit=arguments.limit)
    except ShapeError as error:
        raise CommandError(f"error: {error}") from None
    report.settings_source = settings.source
    if arguments.output in ("json", "yaml"):
        sys.stdout.write(dump(capacity_data(report), arguments.output))
    else:
        sys.stdout.write(render_capacity(report, wide=arguments.output == "wide"))
    return 0


def run(arguments: argparse.Namespace) -> int:
    """Run a parsed ops subcommand; a `CommandError` becomes one line on stderr and exit status 1."""
    # A list of thousands of nodes and pods is millions of small dicts, and the cyclic garbage collector would
    # scan them again and again while they are decoded and joined: that alone more than doubled the time of
    # inspect at 5,000 nodes. They hold no reference cycles (reference counting frees them), and the command
    # ends right after, so the collector is off for its duration.
    gc.disable()
    # urllib3 logs every retry of an unreachable API as a warning; the tools say it once, in their own words.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    try:
        return int(arguments.ops_command(arguments) or 0)
    except CommandError as error:
        sys.stderr.write(f"{error}\n")
        return 1
    finally:
        gc.enable()


def kubectl_main(argv: Sequence[str] | None = None) -> int:
    """``kubectl-hami``: kubectl's plugin convention makes it ``kubectl hami inspect|explain|capacity``."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    parser = argparse.ArgumentParser(prog="kubectl hami", description="hami-web's operator tools (read-only)")
    add_commands(parser.add_subparsers(dest="subcommand", required=True, metavar="COMMAND"))
    try:
        return run(parser.parse_args(argv))
    except KeyboardInterrupt:
        return 130
