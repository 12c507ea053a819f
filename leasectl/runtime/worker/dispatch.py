"""The dispatcher (the worker's main thread): each round trip completes the jobs that finished
since the last one and claims as many as there are free slots, in one statement, then hands the
claimed jobs to the executor."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from leasectl.core.backoff import reconnect_delay
from leasectl.core.errors import ConnectionFailed, LeasectlError
from leasectl.core.limits import ANNOUNCED_RECHECK_S, CAP_RECHECK_S
from leasectl.core.literal import echo
from leasectl.core.models import ClaimKey
from leasectl.db.work import WorkerStore
from leasectl.runtime.handler_errors import queue_fields
from leasectl.runtime.worker.config import WorkerConfig
from leasectl.runtime.worker.context import LeaseContext
from leasectl.runtime.worker.executors import Executor
from leasectl.runtime.worker.keepers import Signals
from leasectl.runtime.worker.ledger import Ledger

log = logging.getLogger("leasectl.worker")

BATCH_WAIT = 0.01  # seconds a busy worker may wait to claim a fuller batch


class Dispatcher:
    def __init__(
        self,
        config: WorkerConfig,
        ledger: Ledger,
        store: Callable[[], WorkerStore],
        signals: Signals,
        executor: Executor,
    ) -> None:
        self.config = config
        self.worker_id = config.worker_id
        self.ledger = ledger
        self.store = store
        self.signals = signals
        self.executor = executor
        self.paused: set[str] = set()  # our queues last seen paused (logged once each)

    def run(self) -> list[LeaseContext]:
        """Complete what finished and claim for the free slots, one statement per trip.

        Returns the finished jobs whose results are not written yet (when stopping).
        """
        ledger, signals, executor = self.ledger, self.signals, self.executor
        wake, announced, stopping = ledger.wake, signals.announced, signals.stopping
        store = self.store()
        failures = 0
        queue_index = 0
        # Under load, claim in batches: with most slots busy, wait a moment (at most
        # BATCH_WAIT) for a quarter of them to free up rather than making one trip per job.
        min_batch = max(1, self.config.concurrency // 4)
        short_since: float | None = None
        finished: list[LeaseContext] = []
        poll_s = self.config.poll_interval.total_seconds()
        expired_checked: dict[str, float] = {}  # queue -> when lapsed leases were looked for
        # queue -> (claim key to resume from, when the queue was last read from its head).
        # While claims come back full (a backlog), each starts at the first job of the one
        # before instead of at the queue's head, over the index entries every claim since the
        # last vacuum left behind (WorkerStore.complete_and_claim). A job that lands ahead of that
        # point (a higher priority, a released lease) is reached when the queue is read from
        # its head again: after a short claim (at once), an announced enqueue, or at the
        # latest one poll interval after the last head read.
        resume: dict[str, tuple[ClaimKey, float]] = {}
        # A claim of a paused queue takes nothing (the statement looks); whether our queues are
        # paused is read only to say so in the log: after an announcement (a pause or resume
        # sends one) when a claim from the head comes back empty, at most once a second (not
        # once per enqueue into a paused queue).
        pauses_every = min(poll_s, 1.0)
        pauses_read_at = time.monotonic()
        look_for_pauses = False
        # queue -> when it may be claimed again: its limits cut the last claim short (the
        # claim said when its next token is due, or only the cap did: CAP_RECHECK_S). Until
        # then it is not claimed unless finished jobs ride the trip (their slots may be free).
        # An announcement (a limit set or cleared, an enqueue) shortens the wait to at most
        # ANNOUNCED_RECHECK_S: a new limit takes effect within it, and an enqueue storm into a
        # throttled queue makes no busy loop.
        throttled: dict[str, float] = {}
        queues = self.config.queues
        while True:
            wake.clear()  # cleared before looking, so no wake-up between is lost
            if announced.is_set():
                announced.clear()
                resume.clear()
                look_for_pauses = True
                recheck = time.monotonic() + ANNOUNCED_RECHECK_S
                for q, due in throttled.items():
                    throttled[q] = min(due, recheck)
            with ledger.lock:
                finished += ledger.finished
                ledger.finished.clear()
                free = self.config.concurrency - ledger.running
            if stopping.is_set():
                return finished
            if free <= 0:  # every slot busy (finished jobs free theirs): a handler wakes us
                wake.wait(1.0)
                continue
            if free < min_batch:
                now = time.monotonic()
                short_since = now if short_since is None else short_since
                if now - short_since < BATCH_WAIT:
                    wake.wait(BATCH_WAIT - (now - short_since))
                    continue
            short_since = None
            name = queues[queue_index % len(queues)]
            queue_index += 1
            now = time.monotonic()
            if throttled.get(name, now) > now and not finished:
                soonest = min(throttled.get(q, now) for q in queues)
                if soonest > now:  # every queue throttled: until one is due, or woken
                    wake.wait(soonest - now)
                continue
            finished = ledger.drop_lost(finished)
            sent = time.monotonic()  # the lease runs from the server's now(): after this
            from_key, head_read_at = resume.pop(name, (None, sent))
            if sent - head_read_at >= poll_s:
                from_key, head_read_at = None, sent
            # Lapsed leases are the watcher's to requeue; a worker that found too little Pending
            # work (read from the queue's head) looks for them too, at most once per poll
            # interval and queue.
            take_expired = from_key is None and sent - expired_checked.get(name, 0.0) >= poll_s
            try:
                trip = store.trip(
                    [c.lease for c in finished],
                    name,
                    self.worker_id,
                    self.config.lease_ttl,
                    free,
                    take_expired=take_expired,
                    from_key=from_key,
                )
                leases, refused = trip.leases, trip.refused
                failures = 0
                ledger.stats.trips += 1
            except ConnectionFailed as exc:
                # Safe to retry the completions: they are fenced, a second try cannot apply
                # twice. Those whose lease ran out meanwhile are given up.
                failures += 1
                ledger.lost_past_deadline(finished, exc)
                delay = reconnect_delay(failures, base=0.2)
                log.warning("worker %s: %s; retrying in %.1fs", self.worker_id, exc, delay)
                stopping.wait(delay)
                continue
            if take_expired and len(leases) < free:
                expired_checked[name] = sent
            if trip.throttle_wait is not None:
                throttled[name] = time.monotonic() + (trip.throttle_wait or CAP_RECHECK_S)
                ledger.stats.throttled += 1
            else:
                throttled.pop(name, None)
            if leases and name in self.paused:
                self.paused.discard(name)
                log.info(
                    "worker %s: queue %s was resumed",
                    self.worker_id,
                    echo(name),
                    extra=queue_fields(name),
                )
            if (
                look_for_pauses
                and not leases
                and from_key is None
                and sent - pauses_read_at >= pauses_every
            ):
                look_for_pauses = not self.look_for_pauses()
                pauses_read_at = sent
            if len(leases) == free:
                resume[name] = (leases[0].job.claim_order, head_read_at)
            ledger.written(finished, refused)
            finished = []
            deadline = sent + self.config.lease_ttl.total_seconds()
            executor.hand(leases, deadline)
            # (A short claim from a resume point is no sign of an idle queue: the next trip
            # reads it from its head, without waiting.)
            if not leases and from_key is None and queue_index % len(queues) == 0:
                with ledger.lock:
                    idle = not ledger.finished
                if idle:
                    now = time.monotonic()
                    wake.wait(min([poll_s, *(due - now for due in throttled.values())]))

    def look_for_pauses(self) -> bool:
        """Read which of our queues are paused and log each change once; False when the
        database could not be read (look again later)."""
        try:
            now_paused = self.store().paused(self.config.queues)
        except LeasectlError as exc:  # (only the log needs it: the claims enforce a pause)
            log.debug("worker %s: reading paused queues: %s", self.worker_id, exc)
            return False
        for pause in now_paused:
            if pause.queue not in self.paused:
                log.warning(
                    "worker %s: queue %s is paused (since %s, by %s: %s); its jobs wait until "
                    "`leasectl resume`",
                    self.worker_id,
                    echo(pause.queue),
                    pause.paused_at.isoformat(timespec="seconds"),
                    echo(pause.paused_by),
                    echo(pause.reason),
                    extra=queue_fields(pause.queue),
                )
        names = {pause.queue for pause in now_paused}
        for name in sorted(self.paused - names):
            log.info(
                "worker %s: queue %s was resumed",
                self.worker_id,
                echo(name),
                extra=queue_fields(name),
            )
        self.paused = names
        return True
