"""Fixed data for the console's tests and pictures: a ``ConsoleSource`` with no database and
no clock, fully deterministic (``console/source.py`` has the protocol and the database's)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from leasectl.console.view import ConsoleFilter
from leasectl.core.actions import NO_SETTINGS, JobSettings, OperatorAction
from leasectl.core.bulk import SAMPLE, BulkPlan, BulkProgress, BulkResult, audit_reason, narrow
from leasectl.core.errors import JobNotFound
from leasectl.core.filters import JobFilter, JobPage, ListedJob
from leasectl.core.limits import LimitSpec, QueueLimit
from leasectl.core.models import ActionResult, JobDetail, PausedQueue, SeenState, Skipped, Snapshot
from leasectl.core.queues import QueueDetail, QueuesOverview
from leasectl.core.schedules import Schedule
from leasectl.runtime import bulk


@dataclass
class StaticSource:
    """Fixed data for tests and pictures: no database, no clock, fully deterministic.

    Actions change nothing: they report every job as changed unless ``skip`` holds its skip.
    """

    data: Snapshot
    details: dict[int, JobDetail] = field(default_factory=dict)
    writable: bool = True
    skip: dict[int, Skipped] = field(default_factory=dict)
    where: str = "db.example:5432/payments"
    read_where: str | None = None
    # What the find screen finds (newest first: by id descending), whatever its filter but
    # the states and the queue; ``find_error``, when set, is raised instead.
    found: tuple[ListedJob, ...] = ()
    find_error: Exception | None = None
    calls: list[tuple[str, tuple[SeenState, ...], str]] = field(default_factory=list)
    settings: list[JobSettings] = field(default_factory=list)  # of each act and bulk_run
    # The limits set (queue, spec) or lifted (queue, None), in order.
    limit_calls: list[tuple[str, LimitSpec | None]] = field(default_factory=list)
    # The Schedules view's rows.
    schedule_rows: tuple[Schedule, ...] = ()
    # The Queues view's rows and each queue's screen (a queue not there: an error).
    queue_view: QueuesOverview | None = None
    queue_details: dict[str, QueueDetail] = field(default_factory=dict)
    # A bulk run's batch; the batch before which it holds until ``release`` (-1: never).
    bulk_batch: int = 50
    hold_batch: int = -1
    holding: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def snapshot(self, flt: ConsoleFilter, limit: int) -> Snapshot:
        return replace(self.data, queue=flt.queue, owner=flt.owner, job_id=flt.job_id)

    def inspect(self, job_id: int) -> JobDetail:
        try:
            return self.details[job_id]
        except KeyError:
            raise JobNotFound(f"job {job_id} not found") from None

    def find(self, flt: JobFilter, after: int | None, limit: int) -> JobPage:
        if self.find_error is not None:
            raise self.find_error
        jobs = [
            j
            for j in sorted(self.found, key=lambda j: -j.id)
            if (not flt.states or j.status in flt.states)
            and (flt.queue is None or j.queue == flt.queue)
            and (after is None or j.id < after)
        ]
        page = tuple(jobs[:limit])
        return JobPage(
            filter=flt,
            jobs=page,
            next_after=page[-1].id if len(jobs) > limit else None,
            limit=limit,
            after=after,
            db_now=self.data.db_now,
        )

    def _matching(self, action: str, flt: JobFilter) -> list[ListedJob]:
        narrowed = narrow(flt, action, bulk.action(action).eligible)
        return list(self.find(narrowed, None, len(self.found) + 1).jobs)

    def bulk_plan(self, action: str, flt: JobFilter, cap: int) -> BulkPlan:
        if self.find_error is not None:
            raise self.find_error
        jobs = self._matching(action, flt)
        narrowed = narrow(flt, action, bulk.action(action).eligible)
        sample = self.find(narrowed, None, SAMPLE)
        return BulkPlan(action, narrowed, min(len(jobs), cap), len(jobs) >= cap, sample)

    def bulk_run(
        self,
        action: str,
        flt: JobFilter,
        reason: str,
        stop: threading.Event,
        progress: Callable[[BulkProgress], None],
        settings: JobSettings = NO_SETTINGS,
    ) -> BulkResult:
        """In batches of ``bulk_batch``, each reported, stopping when ``stop`` is set (or
        before the batch ``hold_batch``, until ``release`` is set: a test's run in flight)."""
        self.settings.append(settings)
        jobs = self._matching(action, flt)
        done: list[ListedJob] = []
        batches = 0
        complete = True
        for start in range(0, len(jobs), self.bulk_batch):
            if batches == self.hold_batch:
                self.holding.set()
                self.release.wait(10)
            if stop.is_set():
                complete = False
                break
            batch = jobs[start : start + self.bulk_batch]
            self._act(action, [SeenState(j.id, j.status, j.attempts, j.lease_owner) for j in batch],
                      reason)  # fmt: skip
            done.extend(batch)
            batches += 1
            skipped = sum(1 for j in done if j.id in self.skip)
            progress(BulkProgress(batches, len(done), len(done) - skipped, skipped, done[-1].id))
        return BulkResult(
            action=action,
            filter=narrow(flt, action, bulk.action(action).eligible),
            reason=audit_reason(flt, reason),
            matched=len(done),
            changed=sum(1 for j in done if j.id not in self.skip),
            skipped=tuple(self.skip[j.id] for j in done if j.id in self.skip),
            batches=batches,
            resume_after=done[-1].id if done else None,
            complete=complete,
            batch_seconds=(),
            elapsed_s=0.0,
        )

    def act(
        self,
        action: OperatorAction,
        seen: Sequence[SeenState],
        reason: str,
        settings: JobSettings = NO_SETTINGS,
    ) -> ActionResult:
        self.settings.append(settings)
        return self._act(action.value, seen, reason)

    def _act(self, action: str, seen: Sequence[SeenState], reason: str) -> ActionResult:
        self.calls.append((action, tuple(seen), reason))
        return ActionResult(
            action=action,
            changed=tuple(s.id for s in seen if s.id not in self.skip),
            skipped=tuple(self.skip[s.id] for s in seen if s.id in self.skip),
        )

    def pause(self, queue: str, reason: str) -> tuple[PausedQueue, bool]:
        self.calls.append(("pause", (), reason))
        standing = [p for p in self.data.paused if p.queue == queue]
        if standing:
            return standing[0], False
        return PausedQueue(queue, self.data.db_now, "operator:test", reason), True

    def resume(self, queue: str, reason: str | None) -> PausedQueue | None:
        self.calls.append(("resume", (), reason or ""))
        return next((p for p in self.data.paused if p.queue == queue), None)

    def set_limit(self, queue: str, spec: LimitSpec, reason: str) -> QueueLimit:
        self.calls.append(("limit", (), reason))
        self.limit_calls.append((queue, spec))
        now = self.data.db_now
        return QueueLimit(queue, spec.concurrency, spec.rate, spec.burst, None, None, now,
                          "operator:test", reason, 0, spec.concurrency, spec.rate,
                          None if spec.rate is None else float(spec.burst or max(1, spec.rate)),
                          None, 0, now)  # fmt: skip

    def clear_limit(self, queue: str, reason: str) -> QueueLimit | None:
        self.calls.append(("unlimit", (), reason))
        self.limit_calls.append((queue, None))
        return next((lim for lim in self.data.limits if lim.queue == queue), None)

    def schedules(self) -> list[Schedule]:
        return list(self.schedule_rows)

    def run_schedule(self, name: str, reason: str) -> int | None:
        self.calls.append(("schedule-run", (), reason))
        return 1 if any(s.name == name for s in self.schedule_rows) else None

    def pause_schedule(self, name: str, reason: str) -> bool | None:
        self.calls.append(("schedule-pause", (), reason))
        found = next((s for s in self.schedule_rows if s.name == name), None)
        return None if found is None else not found.paused

    def resume_schedule(self, name: str, reason: str) -> bool | None:
        self.calls.append(("schedule-resume", (), reason))
        found = next((s for s in self.schedule_rows if s.name == name), None)
        return None if found is None else found.paused

    def queues(self) -> QueuesOverview:
        if self.queue_view is None:
            return QueuesOverview(self.data.db_now, self.data.db_now, ())
        return self.queue_view

    def queue(self, name: str) -> QueueDetail:
        try:
            return self.queue_details[name]
        except KeyError:
            raise JobNotFound(f"no figures for queue {name}") from None

    def can_update(self) -> bool:
        return self.writable

    def abort(self) -> None:
        pass

    def close(self) -> None:
        pass
