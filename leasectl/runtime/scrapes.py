"""The exporter's database calls, bounded by the wall clock: one read shared by every scrape
that asks for it, a fold between scrapes, and neither ever holding up a scrape or SIGTERM.

Each connection has one thread (a ``_Session``) that runs its calls one at a time; a scrape
waits for a read at most ``--timeout`` and then answers without it. A server-side
statement_timeout ends a slow statement, but a connection whose packets vanish (a black-holed
network) never answers at all: a session that has been busy longer than the timeout has its
socket shut (the call fails at once) and is abandoned (its thread closes its connection when the
call returns: at once, or after connect_timeout while it was connecting); the next read gets a
new connection. At most ``MAX_ABANDONED`` abandoned sessions live at once, so a black hole costs
a bounded number of threads and sockets.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from leasectl.core.errors import QueryTimeout
from leasectl.core.literal import visible
from leasectl.db.metrics import MetricsReads, MetricsRows

log = logging.getLogger(__name__)

# How long a successful read answers the scrapes that follow it: concurrent and repeated scrapes
# (several Prometheus servers, a client hammering /metrics) cost one database read a second.
CACHE_FOR = 1.0

# Sessions left behind on a connection that stopped answering, still waiting for it.
MAX_ABANDONED = 4

# The server-side limit is this share of --timeout, so that a statement cancelled by the server
# (QueryTimeout, a sound connection kept) is told before the wall-clock limit gives up on it.
SERVER_SHARE = 0.8


class ScrapeTimeout(Exception):
    """The database did not answer a scrape's read within --timeout (wall clock)."""


class DatabaseNotAnswering(Exception):
    """Earlier reads still wait for a database that stopped answering; none is started."""


class _Call:
    """One call on a session; ``done`` is set when it returned or raised."""

    def __init__(self, run: Callable[[MetricsReads], MetricsRows | None]) -> None:
        self.run = run
        self.done = threading.Event()
        self.rows: MetricsRows | None = None
        self.error: BaseException | None = None
        self.took = 0.0
        self.finished = 0.0  # time.monotonic() when done


class _Session:
    """One connection (connected at its first call) and the one thread that uses it."""

    def __init__(self, reads: MetricsReads | None, connect: Callable[[], MetricsReads]) -> None:
        self.reads = reads
        self.connect = connect
        self.calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self.busy_since: float | None = None
        self._pending = 0  # calls submitted and not done
        self._count = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="leasectl-metrics-db", daemon=True)
        self.thread.start()

    @property
    def idle(self) -> bool:
        with self._count:
            return self._pending == 0

    def submit(self, call: _Call) -> _Call:
        with self._count:
            self._pending += 1
        self.calls.put(call)
        return call

    def abort(self) -> None:
        """Shut the connection of the call in progress (``MetricsReads.abort``): a call that
        waits for a server that stopped answering fails now, and the session reconnects."""
        reads = self.reads
        if reads is not None:
            reads.abort()

    def stop(self) -> None:
        """End the thread after the call in progress (if that ever returns), closing the
        connection; does not wait."""
        self.calls.put(None)

    def _run(self) -> None:
        while (call := self.calls.get()) is not None:
            self.busy_since = start = time.monotonic()
            try:
                if self.reads is None:
                    self.reads = self.connect()
                call.rows = call.run(self.reads)
            except Exception as exc:
                call.error = exc
                if self.reads is not None and not isinstance(exc, QueryTimeout):
                    # A slow statement leaves the connection sound; anything else may not.
                    self._close()
            finally:
                call.finished = time.monotonic()
                call.took = call.finished - start
                self.busy_since = None
                with self._count:
                    self._pending -= 1
                call.done.set()
        self._close()

    def _close(self) -> None:
        reads, self.reads = self.reads, None
        if reads is not None:
            with contextlib.suppress(Exception):
                reads.close()


@dataclass(frozen=True)
class Outcome:
    """What one scrape answers: the rows read, or the error's class and why."""

    rows: MetricsRows | None
    error: str | None
    took: float  # seconds the read took (or the scrape waited for it)


class SharedReads:
    """The exporter's reads and folds over one session at a time (thread-safe)."""

    def __init__(
        self,
        reads: MetricsReads | None,
        timeout: timedelta,
        connect: Callable[[], MetricsReads],
        *,
        cache_for: float = CACHE_FOR,
    ) -> None:
        self.timeout = timeout
        self.connect = connect
        self.cache_for = cache_for
        self._lock = threading.Lock()  # held for bookkeeping only, never across a call
        self._session = _Session(reads, connect)
        self._abandoned: list[_Session] = []
        self._reading: _Call | None = None
        self._cached: tuple[float, _Call] | None = None
        self._failing: str | None = None
        self._fold_failing: str | None = None
        self._told_no_fold = False
        self._closed = False

    def close(self, wait: float = 2.0) -> None:
        """Stop every session; waits at most ``wait`` seconds for the current one to close its
        connection (none for those left behind)."""
        with self._lock:
            self._closed = True
            self._session.stop()
            for session in self._abandoned:
                session.stop()
            current = self._session.thread
        current.join(wait)

    def read(self) -> Outcome:
        """One scrape's rows: a read finished less than ``cache_for`` seconds ago, the read in
        flight, or a new one; waited for at most ``timeout`` seconds from now."""
        start = time.monotonic()
        limit = self.timeout.total_seconds()
        with self._lock:
            cached = self._cached
            if cached is not None and start - cached[0] < self.cache_for:
                return self._outcome(cached[1], None)
            call = self._reading
            if call is not None and call.done.is_set():
                # A read that ended after its scrapes stopped waiting: fresh data answers this
                # scrape; a failure (or old data) is not this scrape's, which reads anew.
                self._reading = None
                if call.error is None and start - call.finished < self.cache_for:
                    self._cached = (call.finished, call)
                    return self._outcome(call, None)
                call = None
            if call is None:
                if self._stuck():
                    return self._report(Outcome(None, DatabaseNotAnswering.__name__, 0.0), "")
                server = timedelta(seconds=limit * SERVER_SHARE)
                call = self._reading = self._session.submit(_Call(lambda r: r.read(server)))
        call.done.wait(limit)
        with self._lock:
            if self._reading is call and call.done.is_set():
                self._reading = None
                if call.error is None:
                    self._cached = (call.finished, call)
            if call.done.is_set():
                return self._outcome(call, None)
            self._abandon_if_stuck(call, limit)
            waited = time.monotonic() - start
            why = f"the database did not answer within {limit:g}s"
            return self._report(Outcome(None, ScrapeTimeout.__name__, waited), why)

    def fold(self) -> None:
        """Start a fold on the session if it is idle and its role may fold (an operator's);
        never waits. A failure is logged once and left to the next fold."""
        with self._lock:
            if self._closed or not self._session.idle:
                return
            self._session.submit(_Call(self._fold))

    def _fold(self, reads: MetricsReads) -> None:
        if not reads.may_fold:
            if not self._told_no_fold:
                log.info("this role may not fold the counters (a viewer's): `leasectl watch` does")
                self._told_no_fold = True
            return None
        try:
            reads.fold(self.timeout)
        except Exception as exc:
            error = type(exc).__name__
            if error != self._fold_failing:
                log.warning("folding the counters failed: %s: %s", error, visible(str(exc)))
            self._fold_failing = error
            raise  # the session decides whether its connection is still sound
        self._fold_failing = None
        return None

    # -- under self._lock ---------------------------------------------------------------------

    def _stuck(self) -> bool:
        self._abandoned = [s for s in self._abandoned if s.thread.is_alive()]
        return len(self._abandoned) >= MAX_ABANDONED

    def _abandon_if_stuck(self, call: _Call, limit: float) -> None:
        """Leave a session behind once it has been busy past the limit: its connection no
        longer answers (the server would have cancelled the statement by now)."""
        since = self._session.busy_since
        if since is None or time.monotonic() - since < limit:
            return
        self._session.abort()
        if self._stuck():
            return
        self._session.stop()
        self._abandoned.append(self._session)
        self._session = _Session(None, self.connect)
        if self._reading is call:
            self._reading = None

    def _outcome(self, call: _Call, why: str | None) -> Outcome:
        if call.error is None:
            if self._failing is not None:
                log.warning("scrape succeeded again")
                self._failing = None
            return Outcome(call.rows, None, call.took)
        return self._report(
            Outcome(None, type(call.error).__name__, call.took), why or str(call.error)
        )

    def _report(self, outcome: Outcome, why: str) -> Outcome:
        """Log a failure once per error class (a run of timeouts is one line)."""
        if outcome.error != self._failing:
            if outcome.error == DatabaseNotAnswering.__name__:
                why = f"{MAX_ABANDONED} earlier reads still wait for the database"
            log.warning("scrape failed: %s: %s", outcome.error, visible(why))
        self._failing = outcome.error
        return outcome
