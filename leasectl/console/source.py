"""Where the console's data comes from: the database, or (for tests and pictures) fixed data.

The app only ever talks to a ``ConsoleSource``, from worker threads. ``DatabaseSource`` keeps
two databases, hence two connections: the poll never queues behind an action, nor an action behind
a poll. Given a read DSN, the poll reads from that server (a hot standby) on a read-only session;
the actions, their privilege check, inspect and find stay on the primary. A database whose
connection was lost is dropped and opened afresh on the next call, so the console's own backoff
(not the pool's) decides how soon it retries.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Protocol, TypeVar

from leasectl.console.panels import Panels
from leasectl.console.view import ConsoleFilter
from leasectl.core.actions import NO_SETTINGS, JobSettings, OperatorAction
from leasectl.core.bulk import (
    DEFAULT_BATCH,
    SAMPLE,
    BulkPlan,
    BulkProgress,
    BulkResult,
)
from leasectl.core.config import operator_actor
from leasectl.core.errors import ConnectionFailed
from leasectl.core.filters import DEFAULT_TIMEOUT, JobFilter, JobPage
from leasectl.core.limits import LimitSpec, QueueLimit
from leasectl.core.models import (
    ActionResult,
    JobDetail,
    PausedQueue,
    SeenState,
    Snapshot,
)
from leasectl.core.queues import QueueDetail, QueuesOverview
from leasectl.core.schedules import Schedule
from leasectl.db.connection import Database
from leasectl.db.console import ConsoleReads
from leasectl.db.dsn import safe_dsn
from leasectl.db.history import History
from leasectl.db.operations import Operations
from leasectl.db.queues_view import QueuesReads
from leasectl.runtime import bulk

T = TypeVar("T")

POLL_ROLE = "poll"
ACTION_ROLE = "action"
POOL_TIMEOUT_S = 5.0
CLOSE_TIMEOUT_S = 1.0
# How soon `q` ends the console, whatever the server does.
QUIT_TIMEOUT_S = 2.0
# A refresh's statements stop at the snapshot's statement_timeout (5 s, server-side); a server
# that does not answer at all is cut off a second later: the console says it is unreachable.
POLL_CALL_BOUND_S = 6.0
# The detail screen shows this much of a payload (the server cuts it: a large one is not sent).
PAYLOAD_CHARS = 4096


class ConsoleSource(Protocol):
    """What the console needs; every method may block and is only called from a worker thread."""

    @property
    def where(self) -> str: ...

    @property
    def read_where(self) -> str | None:
        """Where the panels are read from when not ``where`` (a hot standby); else None."""
        ...

    def snapshot(self, flt: ConsoleFilter, limit: int) -> Snapshot: ...

    def inspect(self, job_id: int) -> JobDetail: ...

    def find(self, flt: JobFilter, after: int | None, limit: int) -> JobPage: ...

    def act(
        self,
        action: OperatorAction,
        seen: Sequence[SeenState],
        reason: str,
        settings: JobSettings = NO_SETTINGS,
    ) -> ActionResult:
        """The guarded operation of ``action`` on the jobs as the operator saw them (with the
        settings of a requeue's dialog)."""
        ...

    def bulk_plan(self, action: str, flt: JobFilter, cap: int) -> BulkPlan:
        """How many jobs ``action`` on ``flt`` would read (counting stops at ``cap``)."""
        ...

    def bulk_run(
        self,
        action: str,
        flt: JobFilter,
        reason: str,
        stop: threading.Event,
        progress: Callable[[BulkProgress], None],
        settings: JobSettings = NO_SETTINGS,
    ) -> BulkResult:
        """``action`` on every job ``flt`` matches, in batches, until done or ``stop`` is set."""
        ...

    def pause(self, queue: str, reason: str) -> tuple[PausedQueue, bool]:
        """Pause ``queue`` (audited): its pause, and whether this call made it."""
        ...

    def resume(self, queue: str, reason: str | None) -> PausedQueue | None:
        """Resume ``queue`` (audited): the pause it ended, or None if it was not paused."""
        ...

    def set_limit(self, queue: str, spec: LimitSpec, reason: str) -> QueueLimit:
        """Set ``queue``'s limits (audited; its workers are told): the limits now set."""
        ...

    def clear_limit(self, queue: str, reason: str) -> QueueLimit | None:
        """Lift ``queue``'s limits (audited): those lifted, or None if it had none."""
        ...

    def schedules(self) -> list[Schedule]:
        """The schedules, by name, with their last job's status (the Schedules view)."""
        ...

    def run_schedule(self, name: str, reason: str) -> int | None:
        """Enqueue ``name``'s job now (audited): its id, None when there is no such schedule."""
        ...

    def pause_schedule(self, name: str, reason: str) -> bool | None:
        """Pause ``name`` (audited): whether this call paused it; None: no such schedule."""
        ...

    def resume_schedule(self, name: str, reason: str) -> bool | None:
        """Resume ``name`` (audited): whether this call resumed it; None: no such schedule."""
        ...

    def queues(self) -> QueuesOverview:
        """Every queue, the most urgent first, and its last hour (the Queues view)."""
        ...

    def queue(self, name: str) -> QueueDetail:
        """One queue's figures, last hour, error groups and audit events (its screen)."""
        ...

    def can_update(self) -> bool: ...

    def abort(self) -> None:
        """End the calls under way now, from any thread (the console quits: nothing waits)."""
        ...

    def close(self) -> None: ...


class DatabaseSource:
    def __init__(
        self,
        dsn: str,
        schema: str,
        *,
        risk_window: timedelta = timedelta(seconds=10),
        actor: str | None = None,
        find_timeout: timedelta = DEFAULT_TIMEOUT,
        read_dsn: str | None = None,
    ) -> None:
        self.dsn = dsn
        # The poll's server when not the primary (a hot standby): read on a read-only session.
        self.read_dsn = read_dsn
        # The find screen's statement timeout: `leasectl list`'s default.
        self.find_timeout = find_timeout
        self.schema = schema
        self.risk_window = risk_window
        self.actor = actor or operator_actor()
        # The poll's database and the panels read through it; the actions' database.
        self._poll: tuple[Database, Panels] | None = None
        self._action: tuple[Database, Operations] | None = None
        self._locks = {POLL_ROLE: threading.Lock(), ACTION_ROLE: threading.Lock()}
        self._closed = False

    @classmethod
    def connect(
        cls,
        dsn: str,
        schema: str,
        *,
        risk_window: timedelta = timedelta(seconds=10),
        actor: str | None = None,
        read_dsn: str | None = None,
    ) -> DatabaseSource:
        """Open both connections now, so that a bad DSN or a missing schema fails before the app
        starts, with the core's typed one-line errors. A read server (``read_dsn``) that cannot
        be reached does not stop the console: the actions work on the primary, and the header
        says the reads are failing until the standby answers."""
        source = cls(dsn, schema, risk_window=risk_window, actor=actor, read_dsn=read_dsn)
        try:
            source._operations()
            try:
                source._panels()
            except ConnectionFailed:
                if read_dsn is None:
                    raise
        except BaseException:
            source.close()
            raise
        return source

    @property
    def where(self) -> str:
        return safe_dsn(self.dsn)

    @property
    def read_where(self) -> str | None:
        return safe_dsn(self.read_dsn) if self.read_dsn is not None else None

    # -- the ConsoleSource protocol ---------------------------------------------------------

    def snapshot(self, flt: ConsoleFilter, limit: int) -> Snapshot:
        db, panels = self._panels()
        return self._call(
            POLL_ROLE,
            db,
            lambda: panels.snapshot(
                flt.queue, limit, owner=flt.owner, job_id=flt.job_id, risk_window=self.risk_window
            ),
        )

    def inspect(self, job_id: int) -> JobDetail:
        db, ops = self._operations()
        return self._call(
            ACTION_ROLE, db, lambda: ops.inspect(job_id, payload_chars=PAYLOAD_CHARS, bounded=True)
        )

    def find(self, flt: JobFilter, after: int | None, limit: int) -> JobPage:
        """One page of the find screen, read as `leasectl list` reads it (History.list_jobs,
        under the same statement timeout), over the actions' database: the poll pauses while
        the find screen is open, and an action never waits for a search (two connections)."""
        db, _ = self._operations()
        return self._call(
            ACTION_ROLE,
            db,
            lambda: History(db).list_jobs(flt, limit=limit, after=after, timeout=self.find_timeout),
        )

    def act(
        self,
        action: OperatorAction,
        seen: Sequence[SeenState],
        reason: str,
        settings: JobSettings = NO_SETTINGS,
    ) -> ActionResult:
        """The guarded operation of ``action`` (as the CLI's id form calls it), on the actions'
        database."""
        db, ops = self._operations()
        return self._call(
            ACTION_ROLE,
            db,
            lambda: ops.operator_action(
                action, seen, actor=self.actor, reason=reason, settings=settings
            ),
        )

    def bulk_plan(self, action: str, flt: JobFilter, cap: int) -> BulkPlan:
        """Counted as `--dry-run` counts, but stopping at ``cap`` and under the find screen's
        statement timeout: the confirmation says "at least" rather than wait for a scan."""
        db, ops = self._operations()
        return self._call(
            ACTION_ROLE,
            db,
            lambda: bulk.plan(
                ops, bulk.action(action), flt, timeout=self.find_timeout, cap=cap, sample=SAMPLE
            ),
        )

    def bulk_run(
        self,
        action: str,
        flt: JobFilter,
        reason: str,
        stop: threading.Event,
        progress: Callable[[BulkProgress], None],
        settings: JobSettings = NO_SETTINGS,
    ) -> BulkResult:
        """The CLI's run (runtime.bulk.run, its default batch), on the actions' database."""
        db, ops = self._operations()
        return self._call(
            ACTION_ROLE,
            db,
            lambda: bulk.run(
                ops,
                bulk.action(action),
                flt,
                actor=self.actor,
                reason=reason,
                settings=settings,
                batch_size=DEFAULT_BATCH,
                timeout=self.find_timeout,
                stop=stop,
                progress=progress,
            ),
        )

    def pause(self, queue: str, reason: str) -> tuple[PausedQueue, bool]:
        db, ops = self._operations()
        return self._call(
            ACTION_ROLE, db, lambda: ops.pause(queue, actor=self.actor, reason=reason)
        )

    def resume(self, queue: str, reason: str | None) -> PausedQueue | None:
        db, ops = self._operations()
        return self._call(
            ACTION_ROLE, db, lambda: ops.resume(queue, actor=self.actor, reason=reason)
        )

    def set_limit(self, queue: str, spec: LimitSpec, reason: str) -> QueueLimit:
        db, ops = self._operations()
        return self._call(
            ACTION_ROLE, db, lambda: ops.set_limit(queue, spec, actor=self.actor, reason=reason)
        )

    def clear_limit(self, queue: str, reason: str) -> QueueLimit | None:
        db, ops = self._operations()
        return self._call(
            ACTION_ROLE, db, lambda: ops.clear_limit(queue, actor=self.actor, reason=reason)
        )

    def schedules(self) -> list[Schedule]:
        db, ops = self._operations()
        return self._call(ACTION_ROLE, db, ops.schedules)

    def run_schedule(self, name: str, reason: str) -> int | None:
        db, ops = self._operations()
        why = reason or None
        return self._call(
            ACTION_ROLE, db, lambda: ops.run_schedule(name, actor=self.actor, reason=why)
        )

    def pause_schedule(self, name: str, reason: str) -> bool | None:
        db, ops = self._operations()
        done = self._call(
            ACTION_ROLE, db, lambda: ops.pause_schedule(name, actor=self.actor, reason=reason)
        )
        return None if done is None else done[1]

    def resume_schedule(self, name: str, reason: str) -> bool | None:
        db, ops = self._operations()
        why = reason or None
        done = self._call(
            ACTION_ROLE, db, lambda: ops.resume_schedule(name, actor=self.actor, reason=why)
        )
        return None if done is None else done[1]

    def queues(self) -> QueuesOverview:
        """Read where the panels are (a standby with --read-dsn), on the poll's connection: the
        main screen does not poll while the Queues view is in front of it."""
        db, _ = self._panels()
        return self._call(POLL_ROLE, db, QueuesReads(db).overview)

    def queue(self, name: str) -> QueueDetail:
        db, _ = self._panels()
        return self._call(POLL_ROLE, db, lambda: QueuesReads(db).queue(name))

    def can_update(self) -> bool:
        db, ops = self._operations()
        return self._call(ACTION_ROLE, db, ops.can_update_jobs)

    def abort(self) -> None:
        for held in (self._poll, self._action):
            if held is not None:
                held[0].abort()

    def close(self) -> None:
        self._closed = True
        self.abort()
        for role in (POLL_ROLE, ACTION_ROLE):
            # A role whose connection is being made (its lock held up to a connect timeout) is
            # left to its thread, a daemon: the console's exit waits for no server.
            if not self._locks[role].acquire(timeout=QUIT_TIMEOUT_S / 4):
                continue
            try:
                db = self._drop(role)
            finally:
                self._locks[role].release()
            if db is not None:
                _close(db, QUIT_TIMEOUT_S / 4)

    # -- connections ------------------------------------------------------------------------

    def _connect(self, role: str) -> Database:
        if self._closed:
            raise ConnectionFailed("the console is closing")
        reads = role == POLL_ROLE and self.read_dsn is not None
        return Database.connect(
            self.read_dsn if reads and self.read_dsn is not None else self.dsn,
            self.schema,
            max_size=1 if role == POLL_ROLE else 2,
            # The poll's server is checked; the primary too when the poll reads elsewhere.
            check_schema=role == POLL_ROLE or self.read_dsn is not None,
            application_name=f"leasectl console ({role})",
            pool_timeout=POOL_TIMEOUT_S,
            read_only=reads,
            call_bound=POLL_CALL_BOUND_S if role == POLL_ROLE else None,
        )

    def _panels(self) -> tuple[Database, Panels]:
        with self._locks[POLL_ROLE]:
            if self._poll is None:
                db = self._connect(POLL_ROLE)
                self._poll = (db, Panels(ConsoleReads(db)))
            return self._poll

    def _operations(self) -> tuple[Database, Operations]:
        with self._locks[ACTION_ROLE]:
            if self._action is None:
                db = self._connect(ACTION_ROLE)
                self._action = (db, Operations(db))
            return self._action

    def _drop(self, role: str, db: Database | None = None) -> Database | None:
        """Forget the role's database (only if it is ``db``, when given); returns it."""
        held = self._poll if role == POLL_ROLE else self._action
        if held is None or (db is not None and held[0] is not db):
            return None
        if role == POLL_ROLE:
            self._poll = None
        else:
            self._action = None
        return held[0]

    def _call(self, role: str, db: Database, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except ConnectionFailed:
            with self._locks[role]:
                self._drop(role, db)
            _close(db)
            raise


def _close(db: Database, timeout: float = CLOSE_TIMEOUT_S) -> None:
    """Close without waiting long for the pool's background threads: the server may be gone."""
    with contextlib.suppress(Exception):
        db.close(timeout=timeout)


# Fixed data for tests and pictures (console/static.py), where it always was imported from.
from leasectl.console.static import StaticSource  # noqa: E402

__all__ = ["ConsoleSource", "DatabaseSource", "StaticSource"]
