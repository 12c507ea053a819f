"""How a job's attempt ends, whichever executor ran it: a success handed to the dispatcher's next
trip, a failure recorded (fenced, retried while the lease may hold), a completion its handler's
transaction already committed, or an interruption that stops the worker."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from leasectl.core.backoff import retry_delay
from leasectl.core.config import MAX_SNOOZES
from leasectl.core.errors import ConnectionFailed
from leasectl.core.literal import echo, shorten
from leasectl.core.models import JobStatus
from leasectl.core.tracebacks import bounded_traceback, no_nul
from leasectl.db.work import WorkerStore
from leasectl.runtime.handler_errors import (
    error_text,
    failure_line,
    job_fields,
    lost_line,
    shown,
)
from leasectl.runtime.worker.config import WorkerConfig
from leasectl.runtime.worker.context import (
    JobTimedOut,
    LeaseContext,
    PermanentError,
    Snooze,
    UnusableJob,
)
from leasectl.runtime.worker.ledger import Ledger

log = logging.getLogger("leasectl.worker")


class Outcomes:
    def __init__(
        self,
        config: WorkerConfig,
        ledger: Ledger,
        store: Callable[[], WorkerStore],
        stop: Callable[[], None],
        closed: threading.Event,
    ) -> None:
        self.config = config
        self.worker_id = config.worker_id
        self.ledger = ledger
        self.store = store
        self.stop = stop
        self.closed = closed

    def unusable(self, ctx: LeaseContext) -> UnusableJob | None:
        if ctx.lease.unusable is None:
            return None
        log.warning(
            "worker %s: job %d failed without running: %s",
            self.worker_id,
            ctx.job.id,
            ctx.lease.unusable,
            extra=job_fields(ctx.lease, "failed", ctx.lease.unusable),
        )
        return UnusableJob(ctx.lease.unusable)

    def interrupted(self, ctx: LeaseContext, error: BaseException) -> None:
        """A handler raised KeyboardInterrupt: stop, as Ctrl+C does; its job is handed back."""
        log.warning(
            "%s; stopping",
            lost_line(self.worker_id, ctx.lease, f"raised {shown(error)}"),
            extra=job_fields(ctx.lease, "interrupted", error_text(error)),
        )
        with self.ledger.lock:
            self.ledger.running -= 1
        self.stop()

    @staticmethod
    def ended_with(ctx: LeaseContext, error: BaseException | None) -> BaseException | None:
        """What the attempt ended with: a handler that ran past its job's timeout fails it
        with ``JobTimedOut``, whatever it returned or raised afterwards (unless its transaction
        had committed the job)."""
        if ctx.timed_out and not ctx.committed and not ctx.lost:
            timeout = ctx.job.timeout
            seconds = timeout.total_seconds() if timeout is not None else 0
            return JobTimedOut(f"the handler ran past the job's timeout ({seconds:g}s)")
        return error

    def handler_ended(self, ctx: LeaseContext, error: BaseException | None) -> bool:
        """Hand a success to the dispatcher's next trip; True when a failure (or a lost lease)
        is left to record (``record_failure``, which blocks on the database)."""
        ctx.finishing = True
        if ctx.committed:
            self.committed(ctx, error)
            return False
        if error is None and not (ctx.lost or ctx.is_cancelled()):
            ledger = self.ledger
            with ledger.lock:
                ledger.running -= 1
                ledger.finished.append(ctx)  # written by the dispatcher's next trip
            ledger.wake.set()
            return False
        return True

    def record_failure(self, ctx: LeaseContext, error: BaseException | None) -> None:
        ledger = self.ledger
        try:
            self.finish_failed(ctx, error)
        except Exception:
            log.exception(
                "worker %s: job %d: unexpected error",
                self.worker_id,
                ctx.job.id,
                extra=job_fields(ctx.lease, None),
            )
        finally:
            with ledger.lock:
                ledger.let_go(ctx)
                ledger.running -= 1
            ledger.wake.set()

    def committed(self, ctx: LeaseContext, error: BaseException | None) -> None:
        """The handler's transaction completed the job: nothing left to write."""
        if error is not None:
            log.warning(
                "worker %s: job %d attempt %d completed in its transaction; the handler then "
                "raised %s (not recorded)",
                self.worker_id,
                ctx.job.id,
                ctx.lease.attempt,
                echo(shorten(recorded_error(error), 200)),
                extra=job_fields(ctx.lease, "completed", recorded_error(error)),
            )
        ledger = self.ledger
        with ledger.lock:
            ledger.stats.completed += 1
            ledger.let_go(ctx)
            ledger.running -= 1
        ledger.wake.set()

    def finish_failed(self, ctx: LeaseContext, error: BaseException | None) -> None:
        """Record a handler failure, fenced; retry a lost connection while the lease may hold."""
        if isinstance(error, Snooze) and ctx.job.snoozes >= MAX_SNOOZES:
            error = SnoozedTooOften(
                f"the job snoozed {ctx.job.snoozes} times, the most a job may: this attempt "
                "fails instead"
            )
        while True:
            # (A timeout sets cancelled without losing the lease: its failure is written.)
            if ctx.lost or (ctx.is_cancelled() and not ctx.timed_out) or error is None:
                self.ledger.mark_lost(ctx, "lease lost before the result could be written")
                return
            if isinstance(error, Snooze):
                try:
                    if not self.snooze(ctx, error):
                        self.ledger.mark_lost(
                            ctx, "the database refused the snooze: lease taken over"
                        )
                    return
                except ConnectionFailed as exc:
                    if time.monotonic() >= ctx.deadline:
                        self.ledger.mark_lost(ctx, f"database unreachable past the lease ({exc})")
                        return
                    self.closed.wait(0.5)
                    continue
            # The backoff counts the attempts spent, not the snoozes.
            delay = retry_delay(
                max(1, ctx.lease.attempt - ctx.job.snoozes),
                base=self.config.retry_base,
                cap=self.config.retry_cap,
            )
            try:
                status = self.store().fail(
                    ctx.lease,
                    recorded_error(error),
                    detail=traceback_text(error),
                    retry_delay=delay,
                    retry=not isinstance(error, PermanentError),
                )
            except ConnectionFailed as exc:
                if time.monotonic() >= ctx.deadline:
                    self.ledger.mark_lost(ctx, f"database unreachable past the lease ({exc})")
                    return
                self.closed.wait(0.5)
                continue
            if status is None:
                self.ledger.mark_lost(ctx, "the database refused the result: lease taken over")
            else:
                self.ledger.stats.failed += 1
                text = recorded_error(error)
                outcome = "retrying" if status is JobStatus.PENDING else "failed"
                log.warning(
                    failure_line(self.worker_id, ctx.lease, text, status, delay),
                    extra=job_fields(ctx.lease, outcome, text),
                )
            return

    def snooze(self, ctx: LeaseContext, snooze: Snooze) -> bool:
        """Write a snooze (fenced); False when the database refused it (the lease was lost)."""
        done = self.store().snooze(ctx.lease, snooze.delay)
        if done is None:
            return False
        self.ledger.stats.snoozed += 1
        log.info(
            "worker %s: job %d attempt %d (queue %s) snoozed for %gs (snooze %d of at most %d)",
            self.worker_id,
            ctx.job.id,
            ctx.lease.attempt,
            echo(ctx.job.queue),
            snooze.delay.total_seconds(),
            done[1],
            MAX_SNOOZES,
        )
        return True


def outcome_name(ctx: LeaseContext, error: BaseException | None) -> str:
    """How an attempt ended, as its span says (``leasectl.outcome``). "completed": the handler
    returned (its completion rides the next trip, fenced like any); "lost": the lease was lost
    (or handed back) before a result could be written."""
    if ctx.lost or (error is None and ctx.is_cancelled() and not ctx.committed):
        return "lost"
    if error is None:
        return "completed"
    if isinstance(error, Snooze):
        return "snoozed"
    if isinstance(error, JobTimedOut):
        return "timed out"
    return "failed"


class SnoozedTooOften(Exception):
    """The attempt's error when its handler snoozed a job that already snoozed MAX_SNOOZES
    times: the attempt fails (the retry policy applies)."""


SnoozedTooOften.__module__ = "leasectl"


def recorded_error(error: BaseException) -> str:
    """The job's last error: ``Class: message``, or an unusable job's own message, as is."""
    if isinstance(error, UnusableJob):
        return no_nul(str(error))[:4000]
    return error_text(error)


def traceback_text(error: BaseException) -> str | None:
    """The handler's traceback as ``job_fail`` stores it; None when no handler ran."""
    if isinstance(error, UnusableJob):
        return None
    return bounded_traceback(error)
