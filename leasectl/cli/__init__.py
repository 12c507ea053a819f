"""The `leasectl` command line: parse, call the core, format.

One module per concern: ``root`` (the app, its options, what commands share), ``commands``
(the commands in their help order, each module imported only when its command is used), a
module per group of commands, ``stderr`` and ``redaction`` (every line on stderr, without
secrets) and ``entry`` (``main()``, where every error becomes a line and an exit code).

Importing this package loads neither Typer nor the commands: `leasectl --version` is answered
here, everything else by ``entry.main``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from leasectl.cli.root import app

PROG = "leasectl"
# The exit codes of docs/design.md that are not an error's own (LeasectlError.exit_code).
EXIT_CHECK_FAILED = 3
EXIT_INTERRUPTED = 130

__all__ = ["EXIT_CHECK_FAILED", "EXIT_INTERRUPTED", "PROG", "app", "main", "version_line"]


def version_line() -> str:
    """What `leasectl --version` prints."""
    from importlib import metadata

    return f"{PROG} {metadata.version(PROG)}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (never raises for user errors)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--version"]:
        # The one answer that needs neither Typer nor a command: an eighth of the start-up.
        try:
            line = version_line()
        except Exception:  # (no metadata: the usual path says so, as an error line)
            pass
        else:
            try:
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
            except BrokenPipeError:
                from leasectl.cli.entry import _stdout_gone

                _stdout_gone()
                return 1
            return 0
    from leasectl.cli.entry import main as run

    return run(args)


def __getattr__(name: str) -> Any:
    if name == "app":  # the Typer app, for tests and tools: importing it loads Typer
        from leasectl.cli.root import app

        return app
    raise AttributeError(f"module 'leasectl.cli' has no attribute {name!r}")
