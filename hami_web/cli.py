"""The ``hami-web`` command: ``serve`` (production), ``demo`` (no cluster needed), ``certs`` (TLS bootstrap) and the
operator tools ``inspect``, ``explain``, ``capacity``; and ``scheduler``, HAMi v2.10's command line, so that HAMi's
Helm chart runs our image unchanged (README.md#switching-from-hami)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from hami_web import __version__
from hami_web.ops.command import add_commands as add_ops_commands
from hami_web.server.logs import configure_logging
from hami_web.settings import SettingsError, add_arguments, build_settings, build_settings_from_flags
from hami_web.settings.hamicommand import HamiFlagError, hami_flags_help, parse_hami_command_line

log = logging.getLogger("hami_web.scheduler")
# Loggers kept at INFO under HAMi's --debug / -v=4: one line per API request is not what klog's V(4) shows.
CHATTY_LOGGERS = ("urllib3", "kubernetes")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one sub-parser per subcommand."""
    parser = argparse.ArgumentParser(prog="hami-web", description=__doc__)
    parser.add_argument("--version", action="version", version=f"hami-web {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="run the webhook and scheduler extender under gunicorn")
    add_arguments(serve)
    serve.set_defaults(handler=_serve)

    add_ops_commands(commands)
    _add_later_commands(commands)
    return parser


def _add_later_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Subcommands whose modules are optional at import time (demo, certs)."""
    try:
        from hami_web import demo
    except ImportError:
        pass
    else:
        demo.add_command(commands)
    try:
        from hami_web import certs
    except ImportError:
        pass
    else:
        certs.add_command(commands)


def _serve(arguments: argparse.Namespace) -> int:
    settings = build_settings(arguments)
    from hami_web.server.serving import serve

    configure_logging(settings.serving.log_level, settings.serving.log_format)
    return serve(settings)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit status (2 for a bad flag value, as argparse does)."""
    configure_logging(logging.INFO)
    parser = build_parser()
    arguments = parser.parse_args(argv)
    try:
        return int(arguments.handler(arguments) or 0)
    except SettingsError as error:
        parser.exit(2, f"hami-web: error: {error}\n")
    except KeyboardInterrupt:
        return 130


def scheduler_main(argv: Sequence[str] | None = None) -> int:
    """``scheduler``: HAMi v2.10's scheduler command line (`settings.hamicommand`), then `serve`.

    A flag HAMi does not define or a value it would refuse (and a value our setting refuses): one line naming the
    flag and the value, exit 2. Each flag that has no effect here: one warning line saying why.
    """
    configure_logging(logging.INFO)
    arguments = sys.argv[1:] if argv is None else list(argv)
    try:
        line = parse_hami_command_line(arguments, os.environ)
        if line.show_help:
            sys.stdout.write(hami_flags_help())
            return 0
        if line.show_version:
            sys.stdout.write(f"hami-web {__version__} (HAMi v2.10 scheduler command line)\n")
            return 0
        settings = build_settings_from_flags(line.settings)
    except (HamiFlagError, SettingsError) as error:
        sys.stderr.write(f"scheduler: error: {error}\n")
        return 2
    configure_logging(settings.serving.log_level, settings.serving.log_format)
    if settings.serving.log_level == "DEBUG":
        for name in CHATTY_LOGGERS:
            logging.getLogger(name).setLevel(logging.INFO)
    for warning in line.warnings:
        log.warning("%s", warning)
    log.info("HAMi command line read as: %s", " ".join(f"{flag}={value}" for flag, value in line.settings.items()))
    from hami_web.server.serving import serve

    try:
        return serve(settings)
    except SettingsError as error:
        sys.stderr.write(f"scheduler: error: {error}\n")
        return 2
    except KeyboardInterrupt:
        return 130
