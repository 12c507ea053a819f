"""The executor of the console's thread workers: daemon threads, so that a worker blocked in a
database call (a server that stopped answering) never holds the process's exit after `q`.

Textual runs thread workers on the event loop's default executor, and both asyncio's shutdown
and the interpreter's exit join a ThreadPoolExecutor's threads: one blocked call would keep the
console's process alive, its screen already gone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class DaemonExecutor(ThreadPoolExecutor):
    """A thread per call, each a daemon; shutdown waits for none of them. (A ThreadPoolExecutor
    only because asyncio takes no other as a loop's default; none of its pool is used.)"""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:
                future.set_exception(exc)

        threading.Thread(target=run, name="leasectl-console-worker", daemon=True).start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        return None
