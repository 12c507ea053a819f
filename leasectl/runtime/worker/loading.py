"""Loading a handler (``module:function``), and where its module was looked for, for the error
that says it was not found: a worker started from the wrong directory said only "No module
named 'myapp'"."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from leasectl.core.errors import UsageError
from leasectl.core.literal import echo, shorten
from leasectl.runtime.worker.context import AsyncHandler, Handler

SHOWN_PATHS = 3


def not_found_hint(module_name: str) -> str:
    """One line: the working directory, the head of sys.path, and what to do."""
    top = module_name.split(".", 1)[0]
    head = [p or "." for p in sys.path[:SHOWN_PATHS]]
    more = f" and {len(sys.path) - SHOWN_PATHS} more" if len(sys.path) > SHOWN_PATHS else ""
    return (
        f"looked in the working directory {echo(os.getcwd())} and on sys.path "
        f"({', '.join(echo(p) for p in head)}{more}); run the worker from the directory that "
        f"holds {echo(top, 60)}, or add that directory to PYTHONPATH"
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


def load_handler(spec: str) -> Handler | AsyncHandler:
    """``package.module:function`` -> the callable; any failure is a one-line usage error."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"invalid handler {echo(spec)}: use module:function")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: handlers next to the caller import
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        why = import_failure(module_name, exc)
        raise UsageError(f"cannot import handler module {echo(module_name)}: {why}") from None
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise UsageError(
                f"handler {echo(spec)}: module {echo(module_name)} has no {echo(attr)}"
            )
    if not callable(target):
        raise UsageError(f"handler {echo(spec)} is not callable")
    handler: Handler | AsyncHandler = target
    return handler
