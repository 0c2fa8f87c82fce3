"""HAMi scheduler flags that hami-web does not take, refused with the reason and what to use instead.

An operator may carry over a HAMi command line; a flag for a feature hami-web does not have fails loudly, naming
itself and the way out, instead of with argparse's bare "unrecognized arguments".
"""

from __future__ import annotations

import argparse
from typing import Any

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


class UnsupportedHamiFlag(argparse.Action):
    """Fails parsing with the reason hami-web does not take this HAMi flag."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        reason = UNSUPPORTED_HAMI_FLAGS.get(option_string or "", "")
        parser.error(f"{option_string} is a HAMi scheduler flag that hami-web does not support: {reason}")
