"""The ``hami-web`` command: ``serve`` (production), ``demo`` (no cluster needed), ``certs`` (TLS bootstrap) and the
operator tools ``inspect``, ``explain``, ``capacity``."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

from hami_web import __version__
from hami_web.ops.command import add_commands as add_ops_commands
from hami_web.server.logs import configure_logging
from hami_web.settings import SettingsError, add_arguments, build_settings


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
