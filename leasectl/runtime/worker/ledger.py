"""The lease ledger: the jobs a worker holds, how many of them run, the results waiting for the
dispatcher's next trip, and the one way a lease is given up as lost. Every thread of the worker
shares it; its lock guards ``held``, ``running`` and ``finished``."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from leasectl.core.errors import ConnectionFailed
from leasectl.runtime.handler_errors import job_fields, lost_line
from leasectl.runtime.worker.context import LeaseContext

log = logging.getLogger("leasectl.worker")


@dataclass
class WorkerStats:
    claimed: int = 0
    completed: int = 0
    failed: int = 0
    lost: int = 0
    released: int = 0
    trips: int = 0  # statements that completed and/or claimed (the dispatcher's round trips)
    throttled: int = 0  # round trips whose claim the queue's limits cut short
    snoozed: int = 0  # attempts that ended in a snooze (not failures: no attempt spent)
    timed_out: int = 0  # handlers cancelled for running past their job's timeout


class Ledger:
    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self.stats = WorkerStats()
        self.lock = threading.Lock()
        self.held: dict[int, LeaseContext] = {}
        self.running = 0  # jobs handed to a handler whose handler has not returned
        self.finished: list[LeaseContext] = []  # handlers returned: results to write
        self.wake = threading.Event()  # a handler returned, or a NOTIFY said there is work
        # Told of each lease lost (the asyncio executor cancels its task after --grace).
        self.on_lost: Callable[[LeaseContext], None] | None = None
        # Told of each handler past its job's timeout (the asyncio executor cancels its task).
        self.on_timeout: Callable[[LeaseContext], None] | None = None

    def held_now(self) -> list[LeaseContext]:
        with self.lock:
            return list(self.held.values())

    def hold(self, contexts: Sequence[LeaseContext]) -> None:
        """Hold newly claimed jobs (heartbeated, released at shutdown) and count them running.

        A job held under an earlier attempt was taken over by this very worker: that lease
        lapsed while its handler still ran (no heartbeat got through), and a claim of lapsed
        leases took the job again. The earlier attempt is lost (its handler is told); only the
        new one is held, and the earlier one's end must not let go of it (``let_go``)."""
        replaced = []
        with self.lock:
            for ctx in contexts:
                earlier = self.held.get(ctx.job.id)
                if earlier is not None:
                    replaced.append((earlier, ctx.lease.attempt))
                self.held[ctx.job.id] = ctx
            self.running += len(contexts)
        for earlier, attempt in replaced:
            self.mark_lost(
                earlier, f"lease lapsed; this worker took the job over (attempt {attempt})"
            )

    def let_go(self, ctx: LeaseContext) -> None:
        """(Under the lock.) Stop holding ``ctx``'s job, unless it is held under a later
        attempt (``hold``)."""
        if self.held.get(ctx.job.id) is ctx:
            del self.held[ctx.job.id]

    def forget(self, ctx: LeaseContext) -> None:
        with self.lock:
            self.let_go(ctx)

    def written(self, finished: list[LeaseContext], refused: set[int]) -> None:
        completed = len(finished)
        if refused:
            for ctx in finished:
                if ctx.lease.job.id in refused:
                    self.mark_lost(ctx, "the database refused the result: lease taken over")
                    completed -= 1
        self.stats.completed += completed
        with self.lock:  # (one lock for the trip's jobs, not one per job)
            for ctx in finished:
                self.let_go(ctx)

    def drop_lost(self, finished: list[LeaseContext]) -> list[LeaseContext]:
        """Finished jobs whose lease is known lost are not written; the rest are."""
        live = []
        for ctx in finished:
            if ctx.lost or ctx.is_cancelled():
                self.mark_lost(ctx, "lease lost before the result could be written")
                self.forget(ctx)
            else:
                live.append(ctx)
        return live

    def lost_past_deadline(
        self, finished: list[LeaseContext], exc: ConnectionFailed, *, grace_end: float = math.inf
    ) -> None:
        """The database is unreachable: give up the results whose lease (or grace) ran out."""
        now = time.monotonic()
        for ctx in finished:
            if now >= min(ctx.deadline, grace_end):
                self.mark_lost(ctx, f"database unreachable past the lease ({exc})")

    def time_out(self, ctx: LeaseContext) -> None:
        """(The deadline thread's.) The handler ran past its job's timeout: tell it
        (``cancelled``; an async task is cancelled); the attempt fails once it has ended.
        The lease is still held (and heartbeated) until then: no other worker runs the job
        while this handler may still be running."""
        if ctx.timed_out or ctx.lost:
            return
        ctx.timed_out = True
        self.stats.timed_out += 1
        timeout = ctx.job.timeout
        log.warning(
            "worker %s: job %d attempt %d ran past its timeout (%gs): cancelling it",
            self.worker_id,
            ctx.job.id,
            ctx.lease.attempt,
            timeout.total_seconds() if timeout is not None else 0,
        )
        ctx._set_cancelled()
        if self.on_timeout is not None:
            self.on_timeout(ctx)

    def mark_lost(self, ctx: LeaseContext, why: str) -> None:
        if not ctx.lost:
            ctx.lost = True
            self.stats.lost += 1
            log.warning(
                lost_line(self.worker_id, ctx.lease, why), extra=job_fields(ctx.lease, "lost")
            )
            if self.on_lost is not None:
                self.on_lost(ctx)
        ctx._set_cancelled()
