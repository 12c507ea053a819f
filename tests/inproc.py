"""The command line run in this process: what `python -m leasectl` does, without its start-up.

``run_in_process`` calls ``leasectl.cli.entry.main(argv)`` (what ``__main__`` runs) with the
environment a subprocess would get, an empty stdin, and stdout and stderr captured, and returns
a ``CompletedProcess`` like ``subprocess.run``'s, so that the same assertions (the exit code, one
stderr line, no traceback, no password) hold for both. A sweep of hundreds of rejected values
costs milliseconds per value this way instead of a second; a few real subprocess runs of the
same cases check that both ways print the same (tests/integration/test_bad_input.py).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from typing import Any

import typer.main

from leasectl.cli.entry import main

# The process's environment and standard streams are global: one in-process run at a time.
_ONE_AT_A_TIME = threading.Lock()


@contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


_build_command = typer.main.get_command
_built: dict[int, Any] = {}


def _get_command_once(app: typer.Typer) -> Any:
    """Typer's Click command of ``app``, built once: building it takes ~0.15 s of every run
    (inspecting each command's signature), and a Click command keeps no state between runs."""
    if id(app) not in _built:
        _built[id(app)] = _build_command(app)
    return _built[id(app)]


@contextmanager
def _command_built_once() -> Iterator[None]:
    typer.main.get_command = _get_command_once
    try:
        yield
    finally:
        typer.main.get_command = _build_command


@contextmanager
def _stdin(data: bytes) -> Iterator[None]:
    saved = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
    try:
        yield
    finally:
        sys.stdin = saved


def run_in_process(
    args: Sequence[str], env: Mapping[str, str], *, stdin: bytes = b""
) -> subprocess.CompletedProcess[str]:
    """``main(args)`` as ``python -m leasectl ARGS`` with ``env``: its exit code and output.

    An exception that escapes ``main`` fails the calling test (a subprocess would print a
    traceback and exit 1: both fail the same assertions)."""
    out, err = io.StringIO(), io.StringIO()
    with (
        _ONE_AT_A_TIME,
        _environment(env),
        _stdin(stdin),
        _command_built_once(),
        redirect_stdout(out),
        redirect_stderr(err),
    ):
        code = main(list(args))
    return subprocess.CompletedProcess(
        [sys.executable, "-m", "leasectl", *args], code, out.getvalue(), err.getvalue()
    )
