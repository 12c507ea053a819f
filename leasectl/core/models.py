"""Frozen value types that the data layer returns and the CLI, worker and console consume."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any

from leasectl.core.counts import BoundedCount
from leasectl.core.limits import QueueLimit
from leasectl.core.texts import TextCut


@dataclass(frozen=True)
class Undecodable:
    """A stored JSON value Python cannot decode (nested deeper than its decoder allows), in
    place of the value; ``reason`` says why."""

    reason: str


class JobStatus(enum.StrEnum):
    PENDING = "Pending"
    PROCESSING = "Processing"
    COMPLETED = "Completed"
    FAILED = "Failed"
    STUCK = "Stuck"
    CANCELLED = "Cancelled"  # by an operator: terminal, like Completed and Failed
    WAITING = "Waiting"  # behind its concurrency key's head (migration 18): live, not claimable


# The members by value: a dict lookup, cheaper than JobStatus(value), for code that turns many
# rows into jobs (a claim batch, a watcher pass).
STATUS_BY_VALUE: dict[str, JobStatus] = {status.value: status for status in JobStatus}


class Freshness(enum.StrEnum):
    """How recently a lease owner showed signs of life, against its own declared intervals."""

    FRESH = "fresh"
    LATE = "late"
    SILENT = "silent"
    STOPPED = "stopped"
    UNKNOWN = "unknown"


# Where a job stands in its queue's claim order: (priority, run_at, id), smallest first.
ClaimKey = tuple[int, datetime, int]


class _JobRow:
    """What a Job and a PanelJob (two views of a row of ``jobs``) share besides their fields.

    The fields are listed in each class: a base dataclass would put its fields first and so
    reorder Job's, whose field order is the key order of ``inspect --json`` and the column order
    the worker builds Jobs by. The annotations here only tell the type checker what the methods
    read; a plain class's annotations are no dataclass fields.
    """

    id: int
    status: JobStatus
    attempts: int
    lease_owner: str | None
    priority: int
    run_at: datetime

    def seen(self) -> SeenState:
        return SeenState(self.id, self.status, self.attempts, self.lease_owner)

    @property
    def claim_order(self) -> ClaimKey:
        """Claims take jobs in this order: priority (smaller first), run_at, id."""
        return (self.priority, self.run_at, self.id)


@dataclass(frozen=True)
class Job(_JobRow):
    id: int
    queue: str
    payload: Any
    status: JobStatus
    priority: int
    run_at: datetime
    attempts: int
    max_attempts: int
    lease_owner: str | None
    lease_until: datetime | None
    heartbeat_at: datetime | None
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    # Migration 21: how many times handlers snoozed the job; how long one attempt may run
    # (None: no limit but the lease's); the running handler's last reported progress (a
    # fraction 0..1 and a message, or None), cleared by each claim.
    snoozes: int = 0
    timeout: timedelta | None = None
    progress: float | None = None
    progress_message: str | None = None


JOB_FIELDS = tuple(f.name for f in fields(Job))


@dataclass(frozen=True)
class Lease:
    """A lease this worker holds; ``attempt`` is the fencing token. ``unusable``: why the job
    cannot be handed to a handler (a payload Python cannot decode, a timestamp it cannot hold),
    or None. ``trace_context``: the job's column as the claim read it (migration 28: the
    enqueuing span's context, untrusted text; core/tracing.py reads it), or None."""

    job: Job
    owner: str
    attempt: int
    until: datetime
    unusable: str | None = None
    trace_context: str | None = None

    @property
    def job_id(self) -> int:
        return self.job.id


@dataclass(frozen=True)
class Attempt:
    job_id: int
    attempt: int
    lease_owner: str
    started_at: datetime
    heartbeat_at: datetime | None
    ended_at: datetime | None
    outcome: str
    error: str | None
    # The handler's traceback of a failed attempt (bounded: see core/tracebacks.DETAIL_LIMIT);
    # None for other outcomes, a job that failed without running, rows from before migration 8.
    error_detail: str | None = None


@dataclass(frozen=True)
class Event:
    id: int
    job_id: int
    at: datetime
    actor: str
    action: str
    reason: str | None
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    # The database role that made the change (the login role, recorded by the database; the
    # actor is only the name the client gave). None in rows written before migration 6.
    db_role: str | None = None


@dataclass(frozen=True)
class JobDetail:
    """What `inspect` shows: the job, its attempts and its audit events."""

    job: Job
    attempts: tuple[Attempt, ...]
    events: tuple[Event, ...]
    db_now: datetime
    queue_paused: PausedQueue | None = None  # its queue's pause: no worker claims it meanwhile
    # The producer's unique key (migration 12): at most one live job per queue has it.
    unique_key: str | None = None
    # The producer's concurrency key (migration 18): one job of the queue with it at a time; and
    # for a Waiting job, the job that holds the key now (None: none, until a promotion).
    concurrency_key: str | None = None
    key_holder: int | None = None
    # A bounded read (inspect, the console): the texts read only in part, and how many attempts
    # and events the job has (only the latest ROWS_SHOWN of each are read).
    cuts: tuple[TextCut, ...] = ()
    attempts_total: int | None = None
    events_total: int | None = None


@dataclass(frozen=True)
class SeenState:
    """The state an operator saw; a guarded action only proceeds while the job still has it."""

    id: int
    status: JobStatus
    attempts: int
    lease_owner: str | None


class SkipCode(enum.StrEnum):
    """Why a guarded action left a job alone (``present.skips`` words it)."""

    NOT_FOUND = "not-found"  # no such job
    MOVED = "moved"  # its status changed since the operator looked
    RENEWED = "renewed"  # same status, but another attempt or owner: the lease was renewed
    NOT_ELIGIBLE = "not-eligible"  # the action does not apply to its status
    LEASE_LIVE = "lease-live"  # a live lease, and no force
    RACED = "raced"  # it changed while the action ran
    HELD = "held"  # another session held its row past the lock timeout: left alone, not waited for


@dataclass(frozen=True)
class Skipped:
    """A job a guarded action skipped: the reason's code and the facts behind it (its state
    as seen and as it is now, read at the database time)."""

    id: int
    code: SkipCode
    action: str  # an OperatorAction's name (core/actions.py): never a default
    seen_status: JobStatus | None = None
    status: JobStatus | None = None  # now
    owner: str | None = None  # its lease owner now
    seen_attempts: int | None = None
    attempts: int | None = None  # now
    lease_until: datetime | None = None
    heartbeat_age: timedelta | None = None  # since its last heartbeat, by the database clock


@dataclass(frozen=True)
class ActionResult:
    """Outcome of a guarded operator action: which ids changed and which were skipped, and why."""

    action: str
    changed: tuple[int, ...]
    skipped: tuple[Skipped, ...]


@dataclass(frozen=True)
class ExpiredJob:
    """A job the watcher moved (or, in a dry run, would move)."""

    id: int
    queue: str
    status: JobStatus
    attempts: int
    max_attempts: int
    lease_owner: str | None
    lease_until: datetime | None
    heartbeat_at: datetime | None


@dataclass(frozen=True)
class MovedBatch:
    """One watcher batch: how many jobs it moved to each status, and the jobs themselves when
    the caller asked for them."""

    counts: dict[JobStatus, int]
    jobs: tuple[ExpiredJob, ...] = ()

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass(frozen=True)
class WatcherResult:
    """Counts of one watcher pass (all its batches). ``jobs``: the jobs moved, or the first
    of them when the pass was asked to list only some (``run_pass(listed=...)``); in a dry
    run, the jobs that would move. ``promoted``: the Waiting jobs the concurrency keys' healing
    pass promoted after it (``requeue-stuck``; not counted in ``total``); None: it did not run
    (a dry run, `watch`'s pass, which heals on its own) or failed."""

    requeued: int = 0
    failed: int = 0
    marked_stuck: int = 0
    batches: int = 0
    dry_run: bool = False
    jobs: tuple[ExpiredJob, ...] = ()
    promoted: int | None = None

    @property
    def total(self) -> int:
        return self.requeued + self.failed + self.marked_stuck


@dataclass(frozen=True)
class PausedQueue:
    """A paused queue: since when (database clock), by whom and why. No worker claims its jobs."""

    queue: str
    paused_at: datetime
    paused_by: str
    reason: str


@dataclass(frozen=True)
class QueueCounts:
    queue: str
    pending: int = 0
    due: int = 0
    processing: int = 0
    expired: int = 0
    stuck: int = 0
    completed_recent: int = 0
    failed_recent: int = 0
    cancelled_recent: int = 0
    waiting: int = 0
    oldest_due_at: datetime | None = None
    # True: counted up to a cap and there are more (core/counts.py): the count above is the
    # cap, a lower bound; or, when also estimated, the planner's estimate of them all.
    pending_capped: bool = False
    due_capped: bool = False
    stuck_capped: bool = False
    waiting_capped: bool = False
    pending_estimated: bool = False
    due_estimated: bool = False
    stuck_estimated: bool = False
    waiting_estimated: bool = False

    def bounded(self, name: str) -> BoundedCount:
        """``pending``, ``due``, ``stuck`` or ``waiting`` as the count it was read as."""
        value: int = getattr(self, name)
        if getattr(self, f"{name}_estimated"):
            return BoundedCount(value, True, value)
        return BoundedCount(value, getattr(self, f"{name}_capped"))


@dataclass(frozen=True)
class OwnerHealth:
    owner: str
    hostname: str | None
    pid: int | None
    queues: tuple[str, ...]
    lease_ttl: timedelta | None
    heartbeat_every: timedelta | None
    started_at: datetime | None
    last_seen_at: datetime | None
    stopped_at: datetime | None
    held: int
    expired: int
    last_job_heartbeat_at: datetime | None
    next_expiry_at: datetime | None
    freshness: Freshness

    @property
    def last_sign_of_life(self) -> datetime | None:
        times = [t for t in (self.last_seen_at, self.last_job_heartbeat_at) if t is not None]
        return max(times) if times else None


@dataclass(frozen=True)
class StatusReport:
    db_now: datetime
    queues: tuple[QueueCounts, ...]
    owners: tuple[OwnerHealth, ...]
    finished_estimate: dict[str, int] = field(default_factory=dict)
    recent_window: timedelta = timedelta(hours=1)
    paused: tuple[PausedQueue, ...] = ()  # the first ones, by name (bounded)
    paused_total: int = 0  # how many queues are paused
    # True: more (queue, priority) groups of Pending jobs than status reads; queues are missing.
    truncated: bool = False
    # Read from a hot standby: how far behind its primary (db_now is its read clock); None: a
    # primary.
    read_lag: timedelta | None = None
    limits: tuple[QueueLimit, ...] = ()  # the first limited queues, by name (bounded)
    limits_total: int = 0  # how many queues are limited

    @property
    def expired(self) -> int:
        return sum(q.expired for q in self.queues)

    @property
    def stuck(self) -> int:
        return sum(q.stuck for q in self.queues)

    @property
    def stuck_capped(self) -> bool:
        """True: ``stuck`` is a lower bound (some queue's count stopped at its cap)."""
        return any(q.stuck_capped for q in self.queues)

    @property
    def stuck_estimated(self) -> bool:
        """True: ``stuck`` is (in part) an estimate."""
        return any(q.stuck_estimated for q in self.queues)

    @property
    def oldest_due_at(self) -> datetime | None:
        times = [q.oldest_due_at for q in self.queues if q.oldest_due_at is not None]
        return min(times) if times else None


# -- console


@dataclass(frozen=True)
class PanelJob(_JobRow):
    """A job as a console panel lists it: no payload, the error cut short.

    ``risk_window`` is the owner's heartbeat interval (or the console's fixed window when the
    owner never declared one): a lease ending sooner than that is at risk. ``lapsed_at`` is when
    the lease lapsed (the quarantine time for a Stuck job that never had a lease).
    ``quarantined_by``/``quarantine_reason``/``quarantined_at``: the audit event that last
    marked a Stuck job stuck (its actor, reason and time); None when there is none.
    ``finished_at``: when a finished job (the Failed panel's) finished.
    """

    id: int
    queue: str
    status: JobStatus
    priority: int
    run_at: datetime
    attempts: int
    max_attempts: int
    lease_owner: str | None
    lease_until: datetime | None
    heartbeat_at: datetime | None
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    risk_window: timedelta | None = None
    lapsed_at: datetime | None = None
    quarantined_by: str | None = None
    quarantine_reason: str | None = None
    quarantined_at: datetime | None = None
    finished_at: datetime | None = None
    # Its concurrency key (migration 18) and, for a Waiting job, the job that holds the key.
    concurrency_key: str | None = None
    key_holder: int | None = None
    # What a Processing job's handler last reported (ctx.progress, migration 21), 0..1.
    progress: float | None = None


@dataclass(frozen=True)
class ConsoleCounts:
    """Counts of the live states: Processing and expired leases exact, Pending, due and Stuck
    counted up to a cap (``*_capped``: the count is a lower bound, core/counts.py); finished
    history only as planner estimates."""

    pending: int = 0
    due: int = 0
    oldest_due_at: datetime | None = None
    processing: int = 0
    at_risk: int = 0
    expired: int = 0
    stuck: int = 0
    completed_estimate: int | None = None
    failed_estimate: int | None = None
    pending_capped: bool = False
    due_capped: bool = False
    stuck_capped: bool = False
    # Behind their concurrency key (migration 18), counted up to the cap as Stuck is.
    waiting: int = 0
    waiting_capped: bool = False
    # Past the cap, the count above is the planner's estimate (core/counts.py).
    pending_estimated: bool = False
    due_estimated: bool = False
    stuck_estimated: bool = False
    waiting_estimated: bool = False

    def bounded(self, name: str) -> BoundedCount:
        """``pending``, ``due``, ``stuck`` or ``waiting`` as the count it was read as."""
        value: int = getattr(self, name)
        if getattr(self, f"{name}_estimated"):
            return BoundedCount(value, True, value)
        return BoundedCount(value, getattr(self, f"{name}_capped"))


@dataclass(frozen=True)
class Snapshot:
    """One console refresh: everything read in one transaction, at the database time db_now."""

    db_now: datetime
    server_version: str
    database: str
    counts: ConsoleCounts
    # Completed jobs per clock minute, oldest first; the last is the current minute so far.
    throughput: tuple[int, ...]
    failed_recent: int
    pending: tuple[PanelJob, ...]
    processing: tuple[PanelJob, ...]
    stuck: tuple[PanelJob, ...]
    owners: tuple[OwnerHealth, ...]
    queue: str | None = None
    owner: str | None = None
    job_id: int | None = None
    limit: int = 100
    risk_window: timedelta = timedelta(seconds=10)
    # Under a queue filter, the counts of every queue (``counts`` follow the queue); under an
    # owner or job filter, what it matches (the panels list the matching rows, up to ``limit``).
    # None: the same as ``counts``.
    all_counts: ConsoleCounts | None = None
    matched: ConsoleCounts | None = None
    # Every owner listed before the filter narrowed them (empty: those of ``owners``).
    all_owners: tuple[str, ...] = ()
    queues: tuple[str, ...] = ()  # every queue with live jobs, whatever the filter
    # The Failed panel: the Failed jobs among the last ``failed_scan`` finished, newest first.
    failed: tuple[PanelJob, ...] = ()
    failed_scan: int = 0
    # The paused queues, whatever the filter (by name, the first of them), and how many there
    # are: no worker claims their jobs until they are resumed.
    paused: tuple[PausedQueue, ...] = ()
    paused_total: int = 0
    # The limited queues, whatever the filter (by name, the first of them; their limits in
    # force and use at db_now), and how many there are.
    limits: tuple[QueueLimit, ...] = ()
    limits_total: int = 0
    # Read from a hot standby: how far behind its primary (db_now is its read clock, the time
    # of the last transaction it replayed while behind); None: read from a primary.
    read_lag: timedelta | None = None

    @property
    def filtered(self) -> bool:
        return self.queue is not None or self.owner is not None or self.job_id is not None

    @property
    def totals(self) -> ConsoleCounts:
        """The counts of every queue, unfiltered."""
        return self.all_counts or self.counts

    @property
    def matching(self) -> ConsoleCounts:
        """The counts of what the whole filter (queue, owner, job) matches."""
        return self.matched or self.counts
