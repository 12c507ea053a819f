"""The demo's signal handling, and the guard that ends a console that hangs on its way out."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any


class Signals:
    """SIGINT, SIGTERM and SIGHUP stop the demo (a second one: at once). The handler only sets
    flags: printing from a signal handler can re-enter a stream the main thread is writing.

    While the console runs, SIGINT belongs to Python's default handler, so asyncio cancels the
    Textual app; SIGTERM and SIGHUP are turned into a SIGINT for the same reason."""

    HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self, on_signal: Callable[[int, int], None]) -> None:
        self.on_signal = on_signal
        self.count = 0
        self.received: int | None = None
        self.in_console = False
        self.previous: dict[int, Any] = {}
        self.active = False

    def __enter__(self) -> Signals:
        self.active = threading.current_thread() is threading.main_thread()
        if self.active:
            for sig in self.HANDLED:
                self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            if handler is not None:
                signal.signal(sig, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        self.received = self.received or signum
        self.on_signal(signum, self.count)
        if self.in_console and signum != signal.SIGINT:
            os.kill(os.getpid(), signal.SIGINT)

    @contextlib.contextmanager
    def console(self) -> Iterator[None]:
        if not self.active:
            yield
            return
        signal.signal(signal.SIGINT, signal.default_int_handler)
        self.in_console = True
        try:
            yield
        finally:
            self.in_console = False
            signal.signal(signal.SIGINT, self._handle)


CONSOLE_EXIT_GRACE = 5.0  # seconds a stopping console may take before the demo exits without it


def console_hang_guard(signals: list[Signals], abandon: Callable[[], None]) -> None:
    """A console asked to stop by a signal can hang in Textual's shutdown, its writer thread
    blocked on a terminal that does not read. Give it a few seconds; if it is still in front
    then, stop the fleet and the server here and leave, so nothing outlives the demo. (A
    terminal that went away is the console's own watch: leasectl/core/terminal.py.)"""
    time.sleep(CONSOLE_EXIT_GRACE)
    if not any(s.in_console for s in signals):
        return
    abandon()
    os._exit(129)
