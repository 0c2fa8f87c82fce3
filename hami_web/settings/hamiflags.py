"""HAMi scheduler flags that ``hami-web serve`` does not take, refused with the reason and what to use instead.

HAMi's flags with a setting of ours are ``serve``'s flags too (``--http_bind``, ``--leader-elect``, …); the rest
(klog's, ``--debug``, ``--profiling``) are read only by the ``scheduler`` command, which takes HAMi's whole command line
(`hamicommand`). On ``serve`` such a flag fails loudly, naming itself and the way out, instead of with argparse's bare
"unrecognized arguments".
"""

from __future__ import annotations

import argparse
from typing import Any

# HAMi scheduler flags an operator may carry over, for features hami-web does not have: refused with a reason,
# so a copied command line fails loudly instead of with argparse's bare "unrecognized arguments".
UNSUPPORTED_HAMI_FLAGS: dict[str, str] = {
    "--profiling": "hami-web has no pprof endpoint",
    "--profiling-bind-address": "hami-web has no pprof endpoint",
    "--device-plugin-namespace": "hami-web has no /refit endpoint",
    "--device-plugin-service-account": "hami-web has no /refit endpoint",
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
        parser.error(f"{option_string} is a HAMi scheduler flag that hami-web serve does not support: {reason} (the "
                     "scheduler command takes HAMi's whole command line)")
