"""The console in the demo's foreground: loaded only when wanted, closed by the duration or a
signal while the fleet keeps running in its threads."""

from __future__ import annotations

import importlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Protocol, cast

from leasectl.core.errors import LeasectlError, TerminalGone
from leasectl.demo.session import Run
from leasectl.demo.signals import Signals
from leasectl.demo.target import Target


class ConsoleRunner(Protocol):
    def __call__(
        self,
        dsn: str,
        schema: str,
        *,
        refresh: timedelta,
        queue: str | None,
        read_only: bool,
    ) -> None: ...


def load_console() -> ConsoleRunner:
    """The console's entry point, imported only now: the core never imports Textual."""
    try:
        module = importlib.import_module("leasectl.console.app")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("leasectl.console"):
            raise LeasectlError(
                "the console is not part of this build of leasectl; "
                "run `leasectl demo --headless` instead"
            ) from None
        raise LeasectlError(f"the console cannot start: {exc}") from None
    return cast(ConsoleRunner, module.run)


def console_in_foreground(
    console_run: ConsoleRunner,
    run: Run,
    signals: Signals,
    target: Target,
    refresh: timedelta,
    duration: timedelta | None,
    say: Callable[[str], None],
) -> None:
    """The console in the foreground; the fleet keeps running in its threads.

    The console offers no handle to close it, so ``duration`` closes it with a SIGINT: asyncio
    turns that into a clean cancellation of the app. The lock keeps the timer from firing once
    the console has returned."""
    print(
        f"leasectl demo: console on {target.where} (schema {target.schema}); fleet events in "
        f"{run.log_dir / 'demo.log'}",
        file=sys.stderr,
        flush=True,
    )
    lock = threading.Lock()
    closed = threading.Event()
    fired = threading.Event()

    def close_console() -> None:
        with lock:
            if not closed.is_set():
                fired.set()
                os.kill(os.getpid(), signal.SIGINT)

    timer = None
    if duration is not None:
        timer = threading.Timer(duration.total_seconds(), close_console)
        timer.daemon = True
    say("console open")
    with signals.console():
        try:
            if timer is not None:
                timer.start()
            try:
                console_run(target.dsn, target.schema, refresh=refresh, queue=None, read_only=False)
            finally:
                with lock:
                    closed.set()
                if timer is not None:
                    timer.cancel()
        except KeyboardInterrupt:
            if not fired.is_set():
                run.interrupted.set()
        except TerminalGone as exc:
            say(str(exc))
            run.interrupted.set()
    say("console closed")
