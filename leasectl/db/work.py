"""The worker's hot path: claim, complete-and-claim, heartbeat, fail, release, the enqueue
channel it listens on and the workers registry it keeps up to date.

The round trip (``jobs_complete_and_claim``) runs on a connection each thread keeps out of the
pool, through ``hot.HotConnection`` (prepared once, sent through libpq).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql

from leasectl.core import errorgroups
from leasectl.core.config import MAX_ERROR_CHARS, MAX_SNOOZES
from leasectl.core.errors import ConnectionFailed
from leasectl.core.literal import echo
from leasectl.core.models import ClaimKey, Job, JobStatus, Lease, PausedQueue
from leasectl.core.tracing import claimed, clock
from leasectl.db.connection import Database
from leasectl.db.hot import HotConnection
from leasectl.db.loaders import fast_adapters, job_maker, unusable
from leasectl.db.rows import job_from_row, paused_from_row
from leasectl.db.session import session_kwargs
from leasectl.db.watchdog import WATCHDOG

log = logging.getLogger(__name__)

# Enqueue notifications carry the first characters of the queue name (NOTIFY payloads are small).
NOTIFY_QUEUE_CHARS = 128

_NO_TTL = timedelta(0)  # the TTL of a call that claims nothing
CLAIM_MAX = 1000  # jobs one claim may lease (the claim statement's inner LIMIT)
# Round trips that may fail on attempts at the integer's maximum, each failing such jobs alone.
UNCLAIMABLE_TRIES = 4
# The claim statement's start key when it reads a queue from its head: before every job's
# (priority is an integer, run_at may be any timestamp, ids are bigints).
CLAIM_FROM_HEAD: dict[str, Any] = {
    "from_priority": -(2**31),
    "from_run_at": "-infinity",
    "from_id": -(2**63),
}


def claim_from(key: ClaimKey | None) -> dict[str, Any]:
    """The claim statement's start-key parameters: at ``key``, or the head (None)."""
    if key is None:
        return CLAIM_FROM_HEAD
    return {"from_priority": key[0], "from_run_at": key[1], "from_id": key[2]}


def _int_array(values: Sequence[int]) -> str:
    """An integer array as its text literal: cheaper to pass than a list, which psycopg
    inspects element by element on every call to choose a type (and whose changing element
    type, int2/int4/int8 by magnitude, would prepare the statement again)."""
    return "{" + ",".join(map(str, values)) + "}"


def _leases(rows: Sequence[Sequence[Any]], names: Sequence[str], tolerated: bool) -> list[Lease]:
    """Rows of a claim (``jobs.*`` columns) -> the leases they grant. ``tolerated``: the rows
    hold values only the tolerant loaders could load; each lease then says whether its job is
    unusable."""
    if not rows:
        return []
    make = job_maker(tuple(names))
    if tolerated:
        leases = [_lease_of(make(row), checked=True) for row in rows]
    else:
        leases = [_lease_of(make(row)) for row in rows]
    # The enqueuing span's context (migration 28), on the few leases whose job has one.
    at = names.index("trace_context") if "trace_context" in names else None
    if at is not None:
        for n, row in enumerate(rows):
            if row[at] is not None:
                leases[n] = dataclasses.replace(leases[n], trace_context=row[at])
    return leases


def _claim_order(lease: Lease) -> ClaimKey:
    return lease.job.claim_order


def _lease_of(job: Job, *, checked: bool = False) -> Lease:
    """The lease a claim just granted on ``job`` (its owner, attempt and lease end); with
    ``checked``, and why the job cannot be handled (``unusable``), if it cannot."""
    assert job.lease_owner is not None and job.lease_until is not None
    return Lease(
        job=job,
        owner=job.lease_owner,
        attempt=job.attempts,
        until=job.lease_until,
        unusable=unusable(job) if checked else None,
    )


@dataclass(frozen=True)
class Trip:
    """A round trip's result: the new leases, the completions refused (lease lost), and
    ``throttle_wait``: None, or the queue's limits cut the claim short (seconds until its next
    token is due; 0 when only its cap did, with no time known)."""

    leases: list[Lease]
    refused: set[int]
    throttle_wait: float | None = None


class WorkerStore:
    """The statements a worker runs, over a ``Database``; each thread's round trips go through
    the connection it keeps (handed back when the database closes)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._kept: dict[int, HotConnection] = {}  # thread id -> its hot path connection
        db.on_close(self._hand_back)

    def _hand_back(self) -> None:
        while self._kept:
            _, kept = self._kept.popitem()
            self.db.give_back(kept.conn)

    def close(self) -> None:
        self.db.close()

    def claim(self, queue: str, owner: str, ttl: timedelta, limit: int = 1) -> list[Lease]:
        """Lease up to ``limit`` (at most CLAIM_MAX) claimable jobs of ``queue``: due Pending
        ones first, then lapsed leases (taken over) when Pending ones do not fill the batch."""
        return self.complete_and_claim((), queue, owner, ttl, limit)[0]

    def complete_and_claim(
        self,
        done: Sequence[Lease],
        queue: str,
        owner: str,
        ttl: timedelta,
        limit: int,
        *,
        take_expired: bool = True,
        from_key: ClaimKey | None = None,
    ) -> tuple[list[Lease], set[int]]:
        """``trip``'s new leases and refused completions."""
        result = self.trip(
            done, queue, owner, ttl, limit, take_expired=take_expired, from_key=from_key
        )
        return result.leases, result.refused

    def trip(
        self,
        done: Sequence[Lease],
        queue: str,
        owner: str,
        ttl: timedelta,
        limit: int,
        *,
        take_expired: bool = True,
        from_key: ClaimKey | None = None,
    ) -> Trip:
        """Complete the finished leases ``done`` (fenced) and lease up to ``limit`` (at most
        CLAIM_MAX) due Pending jobs of ``queue`` in one statement: a worker's round trip.

        ``from_key``: lease only jobs at or after this claim key (a job's ``claim_order``), not
        from the queue's head; the worker's resume point while a backlog drains.

        With ``take_expired``, when Pending jobs do not fill the batch a second statement
        takes over lapsed leases of the queue for the rest. Returns the new leases, the ids
        of ``done`` whose completion was refused (their lease was lost) and, when the queue's
        limits cut the claim short, how long to wait before claiming it again.
        """
        limit = max(0, min(limit, CLAIM_MAX))
        fence = self._fence(done, owner)
        params = {
            "done_ids": fence["ids"],
            "done_attempts": fence["attempts"],
            "owner": owner,
            "queue": queue,
            "ttl": ttl,
            "limit": limit,
            **claim_from(from_key),
        }
        started = clock()  # (None unless the process traces: core/tracing.py)
        rows, names, tolerated = self._round_trip(params)
        accepted = set(rows[0][names.index("completed_ids")] or ()) if rows else set()
        throttle_wait = rows[0][names.index("throttle_wait")] if rows else None
        leases = _leases(rows, names, tolerated) if rows and rows[0][0] is not None else []
        if started is not None:
            claimed(queue, owner, started, leases)
        if take_expired and throttle_wait is None and len(leases) < limit:
            params = {"queue": queue, "owner": owner, "ttl": ttl, "limit": limit - len(leases)}
            try:
                started = clock()
                found = self._hot("jobs_claim_expired", params)
                taken_over = _leases(*found)
                if started is not None:
                    claimed(queue, owner, started, taken_over)
                if found[0]:
                    throttle_wait = found[0][0][found[1].index("throttle_wait")]
            except ConnectionFailed as exc:
                # The completions above are committed: report them, not a failed round trip
                # (the caller would retry them and take the refusal for lost leases).
                log.warning("taking over lapsed leases failed: %s", exc)
                taken_over = []
            leases += taken_over
        if len(leases) > 1:  # one batch, in claim order
            leases.sort(key=_claim_order)
        refused = {lease.job_id for lease in done} - accepted
        return Trip(leases, refused, throttle_wait)

    def _round_trip(self, params: dict[str, Any]) -> tuple[list[tuple[Any, ...]], list[str], bool]:
        """``jobs_complete_and_claim``; when a due job's attempts cannot count one more (its
        integer at the maximum: a role wrote it), the whole statement fails, at every claim of
        every worker of the queue. Then the jobs on the claim's walk that cannot are failed alone
        (``jobs_fail_unclaimable``) and the round trip runs again: the hot statement itself
        checks nothing more."""
        with self.db.errors(), self._kept_connection() as kept:
            # Bounded by the wall clock like every hot-path call (_hot): a silent network must
            # not hold the dispatcher past it.
            token = WATCHDOG.start(kept.conn, self.db.call_bound, self.db)
            try:
                return self._claim_failing_unclaimable(kept, params)
            finally:
                WATCHDOG.stop(token)

    def _claim_failing_unclaimable(
        self, kept: HotConnection, params: dict[str, Any]
    ) -> tuple[list[tuple[Any, ...]], list[str], bool]:
        for tries in range(UNCLAIMABLE_TRIES):
            try:
                rows, names = kept.run("jobs_complete_and_claim", params)
                return rows, names, kept.tolerated
            except pg_errors.NumericValueOutOfRange:
                if tries + 1 == UNCLAIMABLE_TRIES:
                    raise
                walk = ("queue", "limit", "from_priority", "from_run_at", "from_id")
                failed, _ = kept.run("jobs_fail_unclaimable", {k: params[k] for k in walk})
                log.warning(
                    "queue %s: failed jobs %s: attempts at the integer's maximum",
                    echo(params["queue"]),
                    ", ".join(str(row[0]) for row in failed) or "(none found)",
                )
        raise AssertionError("unreachable")  # (mypy: the loop returns or raises)

    def _hot(
        self, name: str, params: dict[str, Any]
    ) -> tuple[list[tuple[Any, ...]], list[str], bool]:
        """Run a statement of the worker's hot path: tuple rows, their column names, and
        whether only the tolerant loaders could load them (HotConnection.tolerated)."""
        with self.db.errors(), self._kept_connection() as kept:
            token = WATCHDOG.start(kept.conn, self.db.call_bound, self.db)
            try:
                rows, names = kept.run(name, params)
            finally:
                WATCHDOG.stop(token)
            return rows, names, kept.tolerated

    @contextlib.contextmanager
    def _kept_connection(self) -> Iterator[HotConnection]:
        """The calling thread's own connection for the hot path, kept out of the pool between
        calls: a worker's dispatcher sends every round trip to the same backend (its caches
        and prepared plans warm) without a pool hand-off. Worth a quarter of the drain rate
        at concurrency 50 on two cores against taking turns between pooled connections."""
        key = threading.get_ident()
        kept = self._kept.pop(key, None)
        if kept is None or kept.conn.broken or kept.conn.closed:
            if kept is not None:
                self.db.give_back(kept.conn)  # the pool discards it and opens a replacement
            conn = self.db.borrow()
            kept = HotConnection(conn, self.db.schema, fast_adapters(conn))
        try:
            yield kept
        except BaseException as exc:
            self.db.give_back(kept.conn, exc)  # after any failure the pool checks it
            raise
        self._kept[key] = kept

    def claim_by_id(self, job_id: int, owner: str, ttl: timedelta) -> Lease | None:
        row = self.db.one("job_claim_by_id", {"id": job_id, "owner": owner, "ttl": ttl})
        if not row:
            return None
        lease = _lease_of(job_from_row(row), checked=True)
        return dataclasses.replace(lease, trace_context=row.get("trace_context"))

    @staticmethod
    def _fence(leases: Sequence[Lease], owner: str | None = None) -> dict[str, Any]:
        """The fencing parameters of leases of one owner (``owner``, when given, must be it):
        ids and attempts as array literals, and the owner."""
        owners = {lease.owner for lease in leases} | ({owner} if owner is not None else set())
        if len(owners) != 1:
            raise ValueError("one call fences the leases of one owner")
        return {
            "ids": _int_array([lease.job_id for lease in leases]),
            "attempts": _int_array([lease.attempt for lease in leases]),
            "owner": owners.pop(),
        }

    def heartbeat(
        self,
        leases: Sequence[Lease],
        ttl: timedelta,
        *,
        progress: Sequence[tuple[float, str | None] | None] | None = None,
    ) -> dict[int, Any]:
        """Extend the leases still held; returns {job_id: new lease_until}. Missing ids are lost.

        ``progress``: per lease, its handler's progress to store (a fraction 0..1 and a message
        of at most 200 characters, as ``ctx.progress`` leaves them), or None to leave it."""
        if not leases:
            return {}
        if progress is None or not any(progress):
            fractions: list[float | None] | None = None
            messages: list[str | None] | None = None
        else:
            fractions = [p[0] if p else None for p in progress]
            messages = [p[1] if p else None for p in progress]
        params = {**self._fence(leases), "ttl": ttl, "progress": fractions, "messages": messages}
        rows = self.db.rows("jobs_heartbeat", params)
        return {r["id"]: r["lease_until"] for r in rows}

    def cancelled(self, job_ids: Sequence[int]) -> set[int]:
        """Which of ``job_ids`` an operator cancelled: read only when a heartbeat was refused
        (never on the hot path), to say why in the worker's log."""
        if not job_ids:
            return set()
        return {r["id"] for r in self.db.rows("jobs_cancelled_of", {"ids": list(job_ids)})}

    def complete(self, leases: Sequence[Lease]) -> set[int]:
        """Complete fenced leases; returns the ids accepted (the others were lost)."""
        if not leases:
            return set()
        owner = leases[0].owner  # (complete_and_claim checks that all leases are its)
        _, refused = self.complete_and_claim(leases, "", owner, _NO_TTL, 0, take_expired=False)
        return {lease.job_id for lease in leases} - refused

    def fail(
        self,
        lease: Lease,
        error: str,
        *,
        retry_delay: timedelta,
        retry: bool = True,
        detail: str | None = None,
    ) -> JobStatus | None:
        """Record a failure (``detail``: the handler's traceback, kept with the attempt);
        returns the new status, or None when the lease was lost."""
        stored = error[:MAX_ERROR_CHARS]  # (migration 15's bound: never refused)
        row = self.db.one(
            "job_fail",
            {
                "id": lease.job_id,
                "attempt": lease.attempt,
                "owner": lease.owner,
                "error": stored,
                "detail": detail,
                # Its group for `errors`, made here once rather than at every read (migration 29).
                "kind": errorgroups.attempt_kind(stored, traced=detail is not None),
                "delay": retry_delay,
                "retry": retry,
            },
        )
        return JobStatus(row["status"]) if row else None

    def snooze(
        self, lease: Lease, delay: timedelta, *, max_snoozes: int = MAX_SNOOZES
    ) -> tuple[Any, int] | None:
        """Snooze a fenced lease: Pending again ``delay`` from now, its attempt not spent.
        Returns the job's new run_at and snooze count, or None when the lease was lost (or the
        job already snoozed ``max_snoozes`` times: the worker fails such an attempt instead)."""
        row = self.db.one(
            "job_snooze",
            {
                "id": lease.job_id,
                "attempt": lease.attempt,
                "owner": lease.owner,
                "delay": delay,
                "max_snoozes": max_snoozes,
            },
        )
        return (row["run_at"], row["snoozes"]) if row else None

    def release(self, leases: Sequence[Lease]) -> set[int]:
        if not leases:
            return set()
        return {r["id"] for r in self.db.rows("jobs_release", self._fence(leases))}

    def paused(self, queues: Sequence[str]) -> list[PausedQueue]:
        """Which of ``queues`` are paused (their claims take nothing until resumed)."""
        rows = self.db.rows("queues_paused", {"queues": list(queues)})
        return [paused_from_row(r) for r in rows]

    # -- the enqueue channel ------------------------------------------------------------------

    @contextlib.contextmanager
    def listen(self) -> Iterator[Callable[[Callable[[], bool]], Iterator[str]]]:
        """A dedicated connection LISTENing on the enqueue channel (never a pooled one).

        Yields a function that iterates notification payloads until its stop() returns true.
        """
        with self.db.errors():
            conn = psycopg.connect(self.db.dsn, **session_kwargs(self.db.dsn))
        try:
            with self.db.errors():
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.db.channel)))

            def payloads(stop: Callable[[], bool]) -> Iterator[str]:
                # Each notification is handed on as it arrives; the timeout only bounds how
                # long a stop() request waits to be seen.
                while not stop():
                    batch = conn.notifies(timeout=1.0)
                    while True:
                        with self.db.errors():
                            note = next(batch, None)
                        if note is None:
                            break
                        yield note.payload

            yield payloads
        finally:
            conn.close()

    # -- the workers registry -----------------------------------------------------------------

    def worker_register(
        self,
        worker_id: str,
        *,
        hostname: str,
        pid: int,
        queues: Sequence[str],
        lease_ttl: timedelta,
        heartbeat_every: timedelta,
    ) -> None:
        self.db.rows(
            "worker_register",
            {
                "worker_id": worker_id,
                "hostname": hostname,
                "pid": pid,
                "queues": list(queues),
                "lease_ttl": lease_ttl,
                "heartbeat_every": heartbeat_every,
            },
        )

    def worker_seen(self, worker_id: str) -> None:
        self.db.rows("worker_seen", {"worker_id": worker_id})

    def worker_stopped(self, worker_id: str) -> None:
        self.db.rows("worker_stopped", {"worker_id": worker_id})
