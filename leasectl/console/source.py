"""Where the console's data comes from: the database, or (for tests and pictures) fixed data.

The app only ever talks to a ``ConsoleSource``, from worker threads. ``DatabaseSource`` keeps
two stores, hence two connections: the poll never queues behind an action, nor an action behind
a poll. A store whose connection was lost is dropped and opened afresh on the next call, so the
console's own backoff (not the pool's) decides how soon it retries.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Protocol, TypeVar

from leasectl.config import operator_actor, safe_dsn
from leasectl.console.view import ConsoleFilter
from leasectl.errors import ConnectionFailed, JobNotFound
from leasectl.models import ActionResult, JobDetail, SeenState, Skipped, Snapshot
from leasectl.store import Store

T = TypeVar("T")

POLL_ROLE = "poll"
ACTION_ROLE = "action"
POOL_TIMEOUT_S = 5.0
CLOSE_TIMEOUT_S = 1.0
# The detail screen shows this much of a payload (the server cuts it: a large one is not sent).
PAYLOAD_CHARS = 4096


class ConsoleSource(Protocol):
    """What the console needs; every method may block and is only called from a worker thread."""

    @property
    def where(self) -> str: ...

    def snapshot(self, flt: ConsoleFilter, limit: int) -> Snapshot: ...

    def inspect(self, job_id: int) -> JobDetail: ...

    def requeue(self, seen: Sequence[SeenState], reason: str) -> ActionResult: ...

    def mark_stuck(self, seen: Sequence[SeenState], reason: str) -> ActionResult: ...

    def can_update(self) -> bool: ...

    def close(self) -> None: ...


class DatabaseSource:
    def __init__(
        self,
        dsn: str,
        schema: str,
        *,
        poll_store: Store | None = None,
        action_store: Store | None = None,
        risk_window: timedelta = timedelta(seconds=10),
        actor: str | None = None,
    ) -> None:
        self.dsn = dsn
        self.schema = schema
        self.risk_window = risk_window
        self.actor = actor or operator_actor()
        self._stores: dict[str, Store | None] = {POLL_ROLE: poll_store, ACTION_ROLE: action_store}
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
    ) -> DatabaseSource:
        """Open both connections now, so that a bad DSN or a missing schema fails before the app
        starts, with the core's typed one-line errors."""
        source = cls(dsn, schema, risk_window=risk_window, actor=actor)
        try:
            source._store(POLL_ROLE)
            source._store(ACTION_ROLE)
        except BaseException:
            source.close()
            raise
        return source

    @property
    def where(self) -> str:
        return safe_dsn(self.dsn)

    # -- the ConsoleSource protocol ---------------------------------------------------------

    def snapshot(self, flt: ConsoleFilter, limit: int) -> Snapshot:
        return self._call(
            POLL_ROLE,
            lambda s: s.console_snapshot(
                flt.queue, limit, owner=flt.owner, job_id=flt.job_id, risk_window=self.risk_window
            ),
        )

    def inspect(self, job_id: int) -> JobDetail:
        return self._call(ACTION_ROLE, lambda s: s.inspect(job_id, payload_chars=PAYLOAD_CHARS))

    def requeue(self, seen: Sequence[SeenState], reason: str) -> ActionResult:
        return self._call(
            ACTION_ROLE, lambda s: s.operator_requeue(seen, actor=self.actor, reason=reason)
        )

    def mark_stuck(self, seen: Sequence[SeenState], reason: str) -> ActionResult:
        return self._call(
            ACTION_ROLE, lambda s: s.operator_mark_stuck(seen, actor=self.actor, reason=reason)
        )

    def can_update(self) -> bool:
        return self._call(ACTION_ROLE, lambda s: s.can_update_jobs())

    def close(self) -> None:
        self._closed = True
        for role in (POLL_ROLE, ACTION_ROLE):
            with self._locks[role]:
                store, self._stores[role] = self._stores[role], None
            if store is not None:
                _close(store)

    # -- connections ------------------------------------------------------------------------

    def _store(self, role: str) -> Store:
        with self._locks[role]:
            store = self._stores[role]
            if store is None:
                if self._closed:
                    raise ConnectionFailed("the console is closing")
                store = Store.connect(
                    self.dsn,
                    self.schema,
                    max_size=1 if role == POLL_ROLE else 2,
                    check_schema=role == POLL_ROLE,
                    application_name=f"leasectl console ({role})",
                    pool_timeout=POOL_TIMEOUT_S,
                )
                self._stores[role] = store
            return store

    def _call(self, role: str, fn: Callable[[Store], T]) -> T:
        store = self._store(role)
        try:
            return fn(store)
        except ConnectionFailed:
            with self._locks[role]:
                if self._stores[role] is store:
                    self._stores[role] = None
            _close(store)
            raise


def _close(store: Store) -> None:
    """Close without waiting long for the pool's background threads: the server may be gone."""
    with contextlib.suppress(Exception):
        store.pool.close(timeout=CLOSE_TIMEOUT_S)


@dataclass
class StaticSource:
    """Fixed data for tests and pictures: no database, no clock, fully deterministic.

    Actions change nothing: they report every job as changed unless ``skip`` names a reason.
    """

    data: Snapshot
    details: dict[int, JobDetail] = field(default_factory=dict)
    writable: bool = True
    skip: dict[int, str] = field(default_factory=dict)
    where: str = "db.example:5432/payments"
    calls: list[tuple[str, tuple[SeenState, ...], str]] = field(default_factory=list)

    def snapshot(self, flt: ConsoleFilter, limit: int) -> Snapshot:
        return replace(self.data, queue=flt.queue, owner=flt.owner, job_id=flt.job_id)

    def inspect(self, job_id: int) -> JobDetail:
        try:
            return self.details[job_id]
        except KeyError:
            raise JobNotFound(f"job {job_id} not found") from None

    def requeue(self, seen: Sequence[SeenState], reason: str) -> ActionResult:
        return self._act("requeue", seen, reason)

    def mark_stuck(self, seen: Sequence[SeenState], reason: str) -> ActionResult:
        return self._act("mark-stuck", seen, reason)

    def _act(self, action: str, seen: Sequence[SeenState], reason: str) -> ActionResult:
        self.calls.append((action, tuple(seen), reason))
        return ActionResult(
            action=action,
            changed=tuple(s.id for s in seen if s.id not in self.skip),
            skipped=tuple(Skipped(s.id, self.skip[s.id]) for s in seen if s.id in self.skip),
        )

    def can_update(self) -> bool:
        return self.writable

    def close(self) -> None:
        pass
