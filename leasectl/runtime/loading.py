"""Where a handler module was looked for, for the error that says it was not found: a worker
started from the wrong directory said only "No module named 'myapp'"."""

from __future__ import annotations

import os
import sys

from leasectl.core.literal import echo, shorten

SHOWN_PATHS = 3


def not_found_hint(module_name: str) -> str:
    """One line: the working directory, the head of sys.path, and what to do."""
    top = module_name.split(".", 1)[0]
    head = [p or "." for p in sys.path[:SHOWN_PATHS]]
    more = f" and {len(sys.path) - SHOWN_PATHS} more" if len(sys.path) > SHOWN_PATHS else ""
    return (
        f"looked in the working directory {echo(os.getcwd())} and on sys.path "
        f"({', '.join(echo(p) for p in head)}{more}); run the worker from the directory that "
        f"holds {echo(top)}, or add that directory to PYTHONPATH"
    )


def import_failure(module_name: str, exc: Exception) -> str:
    """Why the handler module did not import, in a few words (no traceback: a usage error)."""
    # (A parent package missing is the same mistake: the directory that holds it.)
    missing = isinstance(exc, ModuleNotFoundError) and (
        module_name == exc.name or module_name.startswith(f"{exc.name}.")
    )
    if missing:
        return f"no such module ({not_found_hint(module_name)})"
    return f"{type(exc).__name__}: {shorten(str(exc), 100)}"
