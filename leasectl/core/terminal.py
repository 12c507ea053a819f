"""The console's terminal: refuse to start without one, and do not outlive it.

A full-screen console only makes sense on a terminal someone is looking at. Textual reads keys
from stdin and draws on stderr, sizes itself from stdout, and assumes an xterm-like terminal;
without those it draws an 80x24 screen into a pipe or a file and runs until killed. So the
console refuses to start (before any connection is made) unless all three are terminals and
TERM does not say the terminal cannot move the cursor.

When the terminal goes away (the window, ssh session or tmux pane closes), the kernel hangs up
the tty: a SIGHUP for the foreground process group, EOF or EIO on reads, EIO on writes. Textual
8's Linux driver handles none of these: with SIGHUP ignored (nohup) or not sent (the tty is
not the controlling terminal), its input thread spins on EOF and the console runs on, and once
its writer thread dies on EIO the next 30 queued writes block the event loop for good.
`HangupWatch` notices the hangup (the signal, or POLLHUP on the terminal's descriptors), points
stdout and stderr at /dev/null so that shutting down can write freely, asks the console to
exit, and if it has not within a few seconds, closes what ``abandon`` names and exits the
process itself. This module does not import Textual: the core never does.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType, TracebackType
from typing import Any

from leasectl.core.errors import TerminalGone, UsageError

DUMB_TERMS = ("dumb", "unknown")  # the values Rich also treats as a terminal without controls
EXIT_GRACE_S = 2.0  # how long a console may take to close after its terminal went away
CLEANUP_S = 2.0  # then: exit anyway (a server asked to stop goes on stopping without us)
POLL_INTERVAL_S = 0.2
_STREAMS = (("stdin", 0), ("stdout", 1), ("stderr", 2))
_GONE = select.POLLHUP | select.POLLERR | select.POLLNVAL


def terminal_problem() -> str | None:
    """Why the console cannot run here, or None when stdin, stdout and stderr are terminals.

    TERM unset passes: Textual (like Rich) then assumes an xterm-like terminal, which is what a
    shell opened with `kubectl exec -it` has (it sets no TERM)."""
    for name, fd in _STREAMS:
        if not os.isatty(fd):
            return f"{name} is not a TTY"
    term = os.environ.get("TERM", "")
    if term in DUMB_TERMS:
        return f"TERM={term} has no cursor control"
    return None


def require_terminal(instead: str) -> None:
    """Raise a usage error naming the problem and ``instead`` (a command that works anywhere)."""
    problem = terminal_problem()
    if problem is not None:
        raise UsageError(f"the console needs a terminal: {problem} ({instead})")


class HangupWatch:
    """While the console runs: notice that its terminal went away, and make the process follow.

    ``request_exit`` asks the console to close; it is called from a thread of the watch's own
    and may block. ``abandon`` is the last resort, called from the watch's thread when the
    console has not closed ``grace`` seconds later: it must release what the process holds
    (database connections, child processes) without help from the stuck main thread, after
    which the process exits with TerminalGone's exit code (129, as if killed by SIGHUP). A
    SIGHUP handler installed before this one (the demo's) is still called.
    """

    def __init__(
        self,
        request_exit: Callable[[], None],
        *,
        abandon: Callable[[], None],
        grace: float = EXIT_GRACE_S,
    ) -> None:
        self.request_exit = request_exit
        self.abandon = abandon
        self.grace = grace
        self.gone = threading.Event()
        self.reason: str | None = None
        self._done = threading.Event()
        self._asked = threading.Event()
        self._previous: Any = None
        self._installed = False
        self._thread = threading.Thread(target=self._watch, name="leasectl hangup-watch")
        self._thread.daemon = True

    def __enter__(self) -> HangupWatch:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGHUP, self._on_sighup)
            self._installed = True
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._done.set()
        if self._installed and self._previous is not None:  # None: not set from Python
            signal.signal(signal.SIGHUP, self._previous)
        self._thread.join(timeout=self.grace + POLL_INTERVAL_S)

    def _on_sighup(self, signum: int, frame: FrameType | None) -> None:
        # Only flags here: the main thread may be anywhere, even inside a write to the tty.
        self._hung_up("SIGHUP")
        if callable(self._previous):
            self._previous(signum, frame)

    def _hung_up(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        self.gone.set()

    def _terminal_gone(self, poller: select.poll) -> str | None:
        names = {fd: name for name, fd in _STREAMS}
        for fd, events in poller.poll(0):
            if events & _GONE:
                return f"{names[fd]} hung up"
        return None

    def _watch(self) -> None:
        poller = select.poll()
        for _, fd in _STREAMS:
            poller.register(fd, 0)  # POLLHUP, POLLERR and POLLNVAL are always reported
        while not self._done.is_set():
            if self.gone.wait(POLL_INTERVAL_S):
                break
            reason = self._terminal_gone(poller)
            if reason is not None:
                self._hung_up(reason)
                break
        if self._done.is_set():
            return
        _detach_output()
        threading.Thread(target=self._ask, name="leasectl hangup-exit", daemon=True).start()
        # The grace counts from the first ask: a thread slow to get going on a loaded machine
        # must not make the console look deaf.
        self._asked.wait(self.grace)
        if not self._done.wait(self.grace):
            self._give_up()

    def _ask(self) -> None:
        """Ask until it is heard: a console still starting up has no event loop to ask yet."""
        while not self._done.is_set():
            self._asked.set()
            try:
                self.request_exit()
            except Exception:
                self._done.wait(POLL_INTERVAL_S)
            else:
                return

    def _give_up(self) -> None:
        """Release what the process holds, for at most `CLEANUP_S`, and exit without unwinding."""

        def cleanups() -> None:
            for cleanup in [self.abandon, *reversed(_LAST_RESORT)]:
                with contextlib.suppress(Exception):
                    cleanup()

        worker = threading.Thread(target=cleanups, name="leasectl hangup-cleanup", daemon=True)
        worker.start()
        worker.join(CLEANUP_S)
        os._exit(TerminalGone.exit_code)


_LAST_RESORT: list[Callable[[], None]] = []


@contextlib.contextmanager
def last_resort(cleanup: Callable[[], None]) -> Iterator[None]:
    """Within this block, a `HangupWatch` that gives up on its console also calls ``cleanup``
    (from its own thread) before the process exits: what a caller of the console holds, such
    as the demo's fleet and server, is released too."""
    _LAST_RESORT.append(cleanup)
    try:
        yield
    finally:
        _LAST_RESORT.remove(cleanup)


def _detach_output() -> None:
    """Point stdout and stderr at /dev/null: writes to a hung-up tty fail with EIO, and the
    console's shutdown, an error line or a summary would fail (or block) on them."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        for fd in (1, 2):
            os.dup2(devnull, fd)
        os.close(devnull)
