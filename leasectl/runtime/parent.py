"""`leasectl worker --parent-pid` and `leasectl watch --parent-pid`: a process that must not
outlive the one that started it.

Two guards, so that it goes even when that process is SIGKILLed: PR_SET_PDEATHSIG (Linux: the
kernel SIGKILLs it, which also ends one that is SIGSTOPped) and a watchdog thread that stops it
gracefully when its parent pid changes (everywhere else).
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

log = logging.getLogger("leasectl.parent")

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to SIGKILL us when the parent's spawning thread ends; then close the race
    where the parent died before the request took effect."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), 0, 0, 0) != 0:
                log.warning("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
        except (OSError, AttributeError) as exc:
            log.warning("prctl(PR_SET_PDEATHSIG) unavailable: %s", exc)
    if os.getppid() != parent_pid:
        os._exit(0)


def watch_parent(
    parent_pid: int, stop: Callable[[], None], stopping: threading.Event, grace: float
) -> None:
    """Call ``stop`` when the parent is gone; exit hard if the graceful stop takes more than
    ``grace`` seconds (and 5 more)."""

    def watch() -> None:
        while not stopping.wait(0.5):
            if os.getppid() != parent_pid:
                log.warning("the parent process (pid %d) is gone: stopping", parent_pid)
                stop()
                time.sleep(grace + 5)
                os._exit(1)

    threading.Thread(target=watch, name="leasectl-parent-watch", daemon=True).start()
