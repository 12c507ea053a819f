"""``main()``, the entry point: the one place every error becomes a line and an exit code.

Every error ends here: one line on stderr (``leasectl: error: ...``), never a traceback, never
the DSN's password, and the exit code of docs/design.md (0 ok, 1 operational, 2 usage, 3
``status --check`` found trouble).
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Sequence

import typer

from leasectl.cli.redaction import redact, secrets_in
from leasectl.cli.root import EXIT_INTERRUPTED, PROG, app
from leasectl.cli.stderr import _error, _given_args, _json_lines, _SafeFormatter
from leasectl.core.errors import LeasectlError
from leasectl.core.literal import ECHO_LIMIT, shorten, visible


def _usage_hint(exc: typer.TyperException) -> str:
    ctx = getattr(exc, "ctx", None)
    path = getattr(ctx, "command_path", None)
    return f" (see `{path} --help`)" if path else ""


def _stdout_gone() -> None:
    """Output piped into `head`: stop quietly; stdout goes to /dev/null so the final flush works."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (never raises for user errors)."""
    args = list(sys.argv[1:] if argv is None else argv)
    _given_args[:] = args
    _json_lines[0] = False  # (a command's --log-format json turns it on)
    debug = os.environ.get("LEASECTL_DEBUG") == "1"
    if debug:
        logging.basicConfig(level=logging.DEBUG)
        for handler in logging.getLogger().handlers:
            handler.setFormatter(_SafeFormatter(logging.BASIC_FORMAT, secrets_in(args)))
    else:
        # Nothing logs to stderr unless a command asks for it (worker, watch).
        logging.getLogger().addHandler(logging.NullHandler())
    command = typer.main.get_command(app)
    try:
        result = command.main(args=args, prog_name=PROG, standalone_mode=False)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except LeasectlError as exc:
        _error(str(exc), args)
        return exc.exit_code
    except typer.Abort:
        _error("aborted", args)
        return 1
    except typer.TyperException as exc:  # Click's usage errors (vendored by Typer)
        if type(exc).__name__ == "NoArgsIsHelpError":
            typer.echo(exc.format_message())
            return 0
        # Click quotes the value it rejects (an option name, a choice) in full, around words of
        # its own that take well under 100 characters: keep about ECHO_LIMIT of the value.
        message = shorten(exc.format_message(), ECHO_LIMIT + 100)
        _error(message + _usage_hint(exc), args)
        return exc.exit_code
    except BrokenPipeError:
        _stdout_gone()
        return 1
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception as exc:
        hint = "" if debug else " (set LEASECTL_DEBUG=1 for the traceback)"
        _error(f"{type(exc).__name__}: {exc}{hint}", args, kind="internal error")
        if debug:
            shown = redact(traceback.format_exc(), secrets_in(args))
            print(visible(shown, multiline=True), file=sys.stderr, end="")
        return 1
    return result if isinstance(result, int) else 0
