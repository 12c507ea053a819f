"""Act on every job a filter matches, in batches: the engine behind `requeue`/`mark-stuck`
with a filter and the console's "act on all matching".

Each batch is one page of the filter (``History.list_jobs``, keyset paging down the ids) and
one call of the action's guarded operation with the state just read: one transaction per
batch, each job guarded and audited by the SQL function as the id form is. Nothing is held
between batches, so a stop (a signal, a crash) loses nothing: the jobs moved no longer match
(the filter is narrowed to the states the action applies to), and ``resume_after`` (the lowest
id done) lets ``--after`` continue exactly there.

The action is a parameter: an operator action of ``core/actions.py``, run through
``Operations.operator_action``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from leasectl.core.actions import ACTIONS as OPERATOR_ACTIONS
from leasectl.core.actions import (
    NO_SETTINGS,
    ActionInfo,
    JobSettings,
    OperatorAction,
    action_info,
    check_settings,
)
from leasectl.core.bulk import (
    SAMPLE,
    BulkPlan,
    BulkProgress,
    BulkResult,
    audit_reason,
    narrow,
)
from leasectl.core.filters import DEFAULT_TIMEOUT, JobFilter
from leasectl.core.models import ActionResult, JobStatus, SeenState, Skipped
from leasectl.db.history import History
from leasectl.db.operations import Operations

# A page's window of ids, at first (in batches), and at most (in ids).
WINDOW_BATCHES = 8
MAX_WINDOW = 1_000_000


class Guarded(Protocol):
    """A guarded operator operation, unbound: ``Operations.operator_requeue`` and its kin."""

    def __call__(
        self,
        ops: Operations,
        seen: Sequence[SeenState],
        /,
        *,
        actor: str,
        reason: str | None,
        force: bool = False,
        settings: JobSettings = NO_SETTINGS,
    ) -> ActionResult: ...


@dataclass(frozen=True)
class _Operate:
    """The guarded operation of an operator action, through ``Operations.operator_action``."""

    action: OperatorAction

    def __call__(
        self,
        ops: Operations,
        seen: Sequence[SeenState],
        /,
        *,
        actor: str,
        reason: str | None,
        force: bool = False,
        settings: JobSettings = NO_SETTINGS,
    ) -> ActionResult:
        return ops.operator_action(
            self.action, seen, actor=actor, reason=reason, force=force, settings=settings
        )


@dataclass(frozen=True)
class BulkAction:
    """An operator action (core/actions.py) as the engine runs it: ``run`` acts on one batch
    of the state just read."""

    name: str
    run: Guarded

    @property
    def info(self) -> ActionInfo:
        return action_info(self.name)

    @property
    def eligible(self) -> frozenset[JobStatus]:
        return self.info.eligible


# Every operator action acts on a filter: an action joins with its entry in core/actions.py.
ACTIONS: dict[str, BulkAction] = {
    a.name: BulkAction(a.name, _Operate(a.action)) for a in OPERATOR_ACTIONS.values()
}


def action(name: str) -> BulkAction:
    """The action ``name``; an unknown name is a ValueError, never some default action."""
    return ACTIONS[action_info(name).name]


def plan(
    ops: Operations,
    act: BulkAction,
    flt: JobFilter,
    *,
    after: int | None = None,
    timeout: timedelta = DEFAULT_TIMEOUT,
    cap: int | None = None,
    sample: int = SAMPLE,
) -> BulkPlan:
    """A dry run: the count of the jobs the run would read (at most ``cap``, when given) and
    the first ``sample`` of them. Changes nothing."""
    narrowed = narrow(flt, act.name, act.eligible)
    history = History(ops.db)
    count, capped = history.count_jobs(narrowed, timeout=timeout, after=after, cap=cap)
    page = history.list_jobs(narrowed, limit=sample, after=after, timeout=timeout)
    return BulkPlan(act.name, narrowed, count, capped, page)


def run(
    ops: Operations,
    act: BulkAction,
    flt: JobFilter,
    *,
    actor: str,
    reason: str | None,
    force: bool = False,
    settings: JobSettings = NO_SETTINGS,
    batch_size: int,
    after: int | None = None,
    timeout: timedelta = DEFAULT_TIMEOUT,
    stop: threading.Event | None = None,
    progress: Callable[[BulkProgress], None] | None = None,
) -> BulkResult:
    """Run ``act`` on every job ``flt`` matches (ids below ``after``), a batch at a time,
    until the last page or until ``stop`` is set (checked between batches: a batch, once
    started, commits or rolls back whole)."""
    check_settings(act.info, settings)  # before any batch: nothing changes
    narrowed = narrow(flt, act.name, act.eligible)
    reason_text = audit_reason(flt, reason)
    history = History(ops.db)
    started = time.monotonic()
    matched = changed = batches = 0
    skipped: list[Skipped] = []
    seconds: list[float] = []
    resume_after: int | None = None
    complete = False
    ids = history.id_range()
    # Pages are read a window of ids at a time (``floor`` <= id < ``cursor``): a page's read
    # scans at most its window, whatever plan the filter gets (unbounded, a page of a filter
    # the planner thinks rare became a scan of the whole table: BENCHMARKS.md, "bulk").
    cursor = min(after, ids[1] + 1) if after is not None and ids else (ids[1] + 1 if ids else 0)
    low = ids[0] if ids else cursor
    window = batch_size * WINDOW_BATCHES
    while cursor > low:
        if stop is not None and stop.is_set():
            break
        floor = max(low, cursor - window)
        page = history.list_jobs(
            narrowed, limit=batch_size, after=cursor, floor=floor, timeout=timeout
        )
        if page.jobs:
            seen = [SeenState(j.id, j.status, j.attempts, j.lease_owner) for j in page.jobs]
            t0 = time.monotonic()
            result = act.run(
                ops, seen, actor=actor, reason=reason_text, force=force, settings=settings
            )
            seconds.append(time.monotonic() - t0)
            batches += 1
            matched += len(seen)
            changed += len(result.changed)
            skipped.extend(result.skipped)
            resume_after = page.jobs[-1].id
        if page.next_after is not None:
            cursor = page.next_after  # the window holds more: the next page of it
        else:
            cursor = resume_after = floor  # the window is done: every id from floor up
            if len(page.jobs) < batch_size // 2:
                window = min(window * 2, MAX_WINDOW)  # sparse here: wider windows
        if progress is not None and page.jobs:
            progress(BulkProgress(batches, matched, changed, len(skipped), resume_after))
    else:
        complete = True
    return BulkResult(
        action=act.name,
        filter=narrowed,
        reason=reason_text,
        matched=matched,
        changed=changed,
        skipped=tuple(skipped),
        batches=batches,
        resume_after=resume_after,
        complete=complete,
        batch_seconds=tuple(seconds),
        elapsed_s=time.monotonic() - started,
    )
