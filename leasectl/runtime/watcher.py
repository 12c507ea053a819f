"""The stuck watcher: finds Processing jobs whose lease lapsed and requeues or quarantines them."""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal

from leasectl.core.backoff import reconnect_delay
from leasectl.core.config import watcher_actor
from leasectl.core.errors import ConnectionFailed, UsageError
from leasectl.core.models import ExpiredJob, JobStatus, WatcherResult
from leasectl.core.pace import AdaptivePace, FixedPace
from leasectl.core.stats import DEFAULT_KEEP
from leasectl.db import stats as history
from leasectl.db.counters import FOLD_LIMIT
from leasectl.db.operations import Operations
from leasectl.runtime.schedules import prune_slots, schedule_pass

log = logging.getLogger("leasectl.watcher")

Mode = Literal["requeue", "mark"]
DEFAULT_REASON = "lease expired"
# Concurrency keys with Waiting jobs looked at per pass (one index probe each, migration 18).
HEAL_KEYS = 1000


@dataclass(frozen=True)
class WatcherConfig:
    interval: timedelta = timedelta(seconds=30)
    mode: Mode = "requeue"
    batch_size: int = 500
    # None (the default): the adaptive pace of core/pace.py, flat out on an idle server and
    # waiting after each batch in proportion to how much slower than the pass's fastest it ran.
    # A number: after each batch, wait that many times the batch's own time (the idea of
    # vacuum's cost delay): 1.0 spends at most half the time in statements, 0 runs the batches
    # back to back.
    pace: float | None = None
    queue: str | None = None
    # Only the expired leases of this lease owner (a worker id), e.g. a worker known to be gone.
    owner: str | None = None
    reason: str = DEFAULT_REASON
    actor: str = field(default_factory=watcher_actor)
    # The per-minute history (migration 20) older than this is pruned, in batches, once every
    # HISTORY_PRUNE_EVERY.
    history_keep: timedelta = DEFAULT_KEEP

    def __post_init__(self) -> None:
        if self.mode not in ("requeue", "mark"):
            raise UsageError(f"invalid mode {self.mode!r}: use requeue or mark")
        if self.interval <= timedelta(0):
            raise UsageError("the watcher interval must be greater than zero")
        if not 1 <= self.batch_size <= 100_000:
            raise UsageError("the batch size must be between 1 and 100000")
        if self.history_keep < timedelta(minutes=1):
            raise UsageError("the history must be kept for a minute at least")
        if self.pace is not None and not 0 <= self.pace <= 100:
            raise UsageError("the pace must be between 0 and 100")
        if self.owner == "":
            raise UsageError("--owner must not be empty")


def run_pass(
    ops: Operations,
    config: WatcherConfig,
    *,
    limit: int | None = None,
    dry_run: bool = False,
    stopping: threading.Event | None = None,
    listed: int | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> WatcherResult:
    """One watcher pass in batches of ``batch_size`` until no expired lease is left (or ``limit``,
    or ``stopping`` is set: the pass ends between two batches).

    Each batch is one statement, so row locks are held only for one batch. ``listed``: how many
    of the moved jobs the result lists (None: every one); once it has them, the batches return
    only how many jobs went where, which is all a daemon's pass needs. ``clock`` times the
    batches for the pace (a test gives its own).
    """
    if limit is not None and limit < 1:
        raise UsageError("--limit must be at least 1")
    if listed is not None and listed < 0:
        raise UsageError("listed must be at least 0")
    if dry_run:
        expired = ops.list_expired(limit=limit or 10_000, queue=config.queue, owner=config.owner)
        return WatcherResult(dry_run=True, jobs=tuple(expired), batches=0)
    jobs: list[ExpiredJob] = []
    counts: collections.Counter[JobStatus] = collections.Counter()
    moved = batches = 0
    wait = 0.0  # after the last batch, by the pace's rule
    pace = AdaptivePace() if config.pace is None else FixedPace(config.pace)
    stopping = stopping or threading.Event()
    while (limit is None or moved < limit) and not stopping.is_set():
        size = config.batch_size if limit is None else min(config.batch_size, limit - moved)
        # Rate limiting, not synchronisation: the pace's wait, cut short by a stop request.
        if wait and stopping.wait(wait):
            break
        started = clock()
        batch = ops.requeue_expired(
            limit=size,
            queue=config.queue,
            mark=config.mode == "mark",
            actor=config.actor,
            reason=config.reason,
            detail=listed is None or len(jobs) < listed,
            owner=config.owner,
        )
        took = clock() - started
        batches += 1
        moved += batch.total
        counts.update(batch.counts)
        jobs.extend(batch.jobs)
        if batch.total < size:
            break
        wait = pace.after(took, batch.total)
    return WatcherResult(
        requeued=counts[JobStatus.PENDING],
        failed=counts[JobStatus.FAILED],
        marked_stuck=counts[JobStatus.STUCK],
        batches=batches,
        jobs=tuple(jobs if listed is None else jobs[:listed]),
    )


# Steps of HEAL_KEYS keys one `requeue-stuck` heals at most (a million keys with Waiting jobs):
# each step is one short statement; a cron run has no cursor to go on from the next time.
HEAL_STEPS = 1000


def heal_pass(
    ops: Operations, *, stopping: threading.Event | None = None, max_steps: int = HEAL_STEPS
) -> int:
    """The concurrency keys' healing pass over every key with Waiting jobs, from the first, in
    steps of HEAL_KEYS keys (one statement each) until the walk reaches the end (or
    ``max_steps``, or ``stopping`` is set, between two steps): how many jobs it promoted. What
    `requeue-stuck` runs after its pass, so that a deployment that runs it from cron instead of
    `watch` leaves no key without a head."""
    promoted = 0
    after: tuple[str, str] | None = None
    for _ in range(max_steps):
        step, after = ops.heal_keys(max_keys=HEAL_KEYS, after=after)
        promoted += len(step)
        if after is None or (stopping is not None and stopping.is_set()):
            break
    return promoted


class Watcher:
    """Runs passes every ``interval`` until stopped; survives the database going away."""

    def __init__(self, ops: Operations, config: WatcherConfig) -> None:
        self.ops = ops
        self.config = config
        self.stopping = threading.Event()
        self.passes = 0
        self.moved = 0
        self._fold_failed = False
        self._prune_failed = False
        self._pruned_at: float | None = None  # time.monotonic() of the last history prune
        self._heal_failed = False
        self._schedules_failed = False
        self._slots_failed = False
        self._slots_pruned_at: float | None = None  # time.monotonic() of the last slots prune
        self.scheduled = 0
        self._heal_after: tuple[str, str] | None = None
        self.promoted = 0

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        failures = 0
        while not self.stopping.is_set():
            try:
                result = run_pass(self.ops, self.config, stopping=self.stopping, listed=0)
            except ConnectionFailed as exc:
                failures += 1
                delay = reconnect_delay(failures, base=0.5)
                log.warning("watcher: %s; retrying in %.1fs", exc, delay)
                self.stopping.wait(delay)
                continue
            failures = 0
            self.passes += 1
            self.moved += result.total
            if result.total:
                log.info(
                    "watcher: requeued %d, failed %d, marked stuck %d",
                    result.requeued,
                    result.failed,
                    result.marked_stuck,
                )
            self._heal_keys()
            self._run_schedules()
            self._fold_counters()
            self._prune_history()
            self._prune_slots()
            self.stopping.wait(self.config.interval.total_seconds())

    def _heal_keys(self) -> None:
        """Promote the first Waiting job of each concurrency key left without a head (a
        producer's commit that no head's exit could see, docs/design.md): HEAL_KEYS keys a
        pass, going on from the last one the next pass. Failures are logged once, as folds."""
        try:
            promoted, self._heal_after = self.ops.heal_keys(
                max_keys=HEAL_KEYS, after=self._heal_after
            )
        except Exception as exc:
            if not self._heal_failed:
                log.warning("watcher: the concurrency keys' healing pass failed: %s", exc)
            self._heal_failed = True
            return
        self._heal_failed = False
        self.promoted += len(promoted)
        if promoted:
            log.info(
                "watcher: promoted %d job(s) of concurrency keys left without a head", len(promoted)
            )

    def _run_schedules(self) -> None:
        """Enqueue the due slots of the schedules (migration 19), each once whatever the other
        watchers do. A failure (the database gone, a role granted before schedules) is logged
        once, as folds: the next pass tries again, and a late slot is caught up by its policy."""
        try:
            done = schedule_pass(self.ops, stopping=self.stopping)
        except Exception as exc:
            if not self._schedules_failed:
                log.warning("watcher: the schedules' pass failed: %s", exc)
            self._schedules_failed = True
            return
        self._schedules_failed = False
        self.scheduled += done.enqueued
        if done.enqueued or done.passed_over:
            log.info(
                "watcher: enqueued %d scheduled job(s), passed over %d slot(s)",
                done.enqueued,
                done.passed_over,
            )

    def _fold_counters(self) -> None:
        """Fold the counters' deltas (migration 11) after each pass, so that a database whose
        exporter does not run keeps a pass's worth of them, not every one since it was set up.
        A failure (an operator role granted before the counters, the database gone) is logged
        once: it changes no value, and the next pass tries again."""
        try:
            while self.ops.fold_counters() >= FOLD_LIMIT and not self.stopping.is_set():
                pass
        except Exception as exc:
            if not self._fold_failed:
                log.warning("watcher: folding the counters failed: %s", exc)
            self._fold_failed = True
        else:
            self._fold_failed = False

    def _prune_history(self) -> None:
        """Delete the per-minute history older than ``history_keep``, at most once every
        HISTORY_PRUNE_EVERY (its minutes age by one a minute). Failures are logged once, as
        folds."""
        now = time.monotonic()
        if self._pruned_at is not None and now - self._pruned_at < HISTORY_PRUNE_EVERY:
            return
        try:
            deleted = history.prune(self.ops.db, self.config.history_keep)
        except Exception as exc:
            if not self._prune_failed:
                log.warning("watcher: pruning the history failed: %s", exc)
            self._prune_failed = True
            return
        self._prune_failed = False
        self._pruned_at = now
        if deleted:
            log.info("watcher: pruned %d row(s) of history", deleted)

    def _prune_slots(self) -> None:
        """Delete the schedules' slot rows behind their next slot and older than SLOTS_KEEP,
        at most SLOTS_PRUNE_BATCHES batches once every HISTORY_PRUNE_EVERY (what is left goes the
        next time). Failures are logged once, as folds."""
        now = time.monotonic()
        if self._slots_pruned_at is not None and now - self._slots_pruned_at < HISTORY_PRUNE_EVERY:
            return
        try:
            deleted = prune_slots(self.ops, max_batches=SLOTS_PRUNE_BATCHES, stopping=self.stopping)
        except Exception as exc:
            if not self._slots_failed:
                log.warning("watcher: pruning the schedules' slots failed: %s", exc)
            self._slots_failed = True
            return
        self._slots_failed = False
        self._slots_pruned_at = now
        if deleted:
            log.info("watcher: pruned %d schedule slot(s)", deleted)


# Batches of SLOTS_PRUNE_BATCH slot rows the watcher deletes at most a minute: 10,000 rows, more
# than a hundred every-minute schedules add in a day.
SLOTS_PRUNE_BATCHES = 10

# Seconds between two prunes of the history by the watcher.
HISTORY_PRUNE_EVERY = 60.0

# Seconds a signalled watcher's pass has to end before `watch` exits without it.
STOP_GRACE = 5.0


def run_until_stopped(
    watcher: Watcher, signalled: threading.Event, grace: float = STOP_GRACE
) -> bool:
    """Run ``watcher`` on a thread of its own until it ends, or until ``grace`` seconds after
    ``signalled`` is set (and ``watcher.stop()`` called): a pass that waits for a database that
    no longer answers (a black-holed network) cannot keep SIGTERM from ending `watch`; the
    server rolls back what the pass had not committed. False: the pass was left behind. An
    error the watcher raised is raised here."""
    failed: list[BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            watcher.run()
        except BaseException as exc:
            failed.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name="leasectl-watcher", daemon=True).start()
    while not done.wait(0.2):
        if signalled.is_set():
            if not done.wait(grace):
                log.warning(
                    "watcher: the pass did not end within %gs of the signal; exiting without it",
                    grace,
                )
                return False
            break
    if failed:
        raise failed[0]
    return True
