"""The status registry: what each job status is, declared once.

Whether a status is live or finished, claimable, which count it has in ``status`` and the
console, whether the finished estimate counts it, and its style key (``present/styles.py``
maps the key to a Rich style). Code that needs "the finished statuses" derives them from here;
an exhaustiveness test (``tests/unit/test_registries.py``) fails when ``JobStatus`` grows a
member without its entry. The SQL names statuses too: docs/architecture.md, "Adding a status".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from leasectl.core.models import JobStatus


@dataclass(frozen=True)
class StatusInfo:
    """``live``: not finished (the live indexes, the unique key's arbiter, bounded counts).
    ``finished``: ``finished_at`` is set; pruned by ``prune``; counted in the recent window
    (``recent_field``, a ``QueueCounts`` field) and, when ``estimated``, in the all-time
    estimate. ``terminal``: no worker nor watcher moves it again (operators may). ``claimable``:
    a worker claims it once due. ``live_field``: the ``QueueCounts`` field of its live count.
    ``style``: its look's key in ``present/styles.py``."""

    status: JobStatus
    live: bool
    finished: bool
    terminal: bool
    claimable: bool
    style: str
    live_field: str | None = None
    recent_field: str | None = None
    estimated: bool = False


STATUSES: dict[JobStatus, StatusInfo] = {
    s.status: s
    for s in (
        StatusInfo(
            JobStatus.PENDING,
            live=True,
            finished=False,
            terminal=False,
            claimable=True,
            style="waiting",
            live_field="pending",
        ),
        StatusInfo(
            JobStatus.PROCESSING,
            live=True,
            finished=False,
            terminal=False,
            claimable=False,
            style="running",
            live_field="processing",
        ),
        StatusInfo(
            JobStatus.COMPLETED,
            live=False,
            finished=True,
            terminal=True,
            claimable=False,
            style="succeeded",
            recent_field="completed_recent",
            estimated=True,
        ),
        StatusInfo(
            JobStatus.FAILED,
            live=False,
            finished=True,
            terminal=True,
            claimable=False,
            style="failed",
            recent_field="failed_recent",
            estimated=True,
        ),
        StatusInfo(
            JobStatus.STUCK,
            live=True,
            finished=False,
            terminal=False,
            claimable=False,
            style="quarantined",
            live_field="stuck",
        ),
        StatusInfo(
            JobStatus.CANCELLED,
            live=False,
            finished=True,
            terminal=True,
            claimable=False,
            style="cancelled",
            recent_field="cancelled_recent",
            estimated=True,
        ),
        # Behind the head of its concurrency key (migration 18): promoted to Pending, in queue
        # order, when the key's head leaves Pending, Processing and Stuck.
        StatusInfo(
            JobStatus.WAITING,
            live=True,
            finished=False,
            terminal=False,
            claimable=False,
            style="keyed",
            live_field="waiting",
        ),
    )
}


def info(status: JobStatus) -> StatusInfo:
    return STATUSES[status]


def _where(flag: str) -> tuple[JobStatus, ...]:
    return tuple(s for s in JobStatus if getattr(STATUSES[s], flag))


LIVE = frozenset(_where("live"))
FINISHED = frozenset(_where("finished"))
TERMINAL = frozenset(_where("terminal"))
CLAIMABLE = frozenset(_where("claimable"))
# In the all-time finished estimate (status, the console, leasectl_jobs_finished_estimate), in
# the enum's order.
ESTIMATED: tuple[JobStatus, ...] = _where("estimated")

# The QueueCounts field of each finished status's recent count, by the status's text (as rows
# carry it).
RECENT_FIELD: dict[str, str] = {
    s.value: i.recent_field for s, i in STATUSES.items() if i.recent_field is not None
}


def finished_estimate(
    estimate: dict[str, int], recent: Mapping[JobStatus, int] | None = None
) -> dict[JobStatus, int] | None:
    """Each estimated status's all-time total from the planner's statistics of the status
    column (rows by status text); None while the table has no statistics. Statistics that list
    one finished status and not another found none of it in their sample: about zero, not
    unknown. Never below ``recent``, what finished in a recent window counted exactly:
    statistics gathered before a burst are behind it, and an all-time total below the last
    hour's is no answer."""
    if not estimate:
        return None
    floor = recent or {}
    return {s: max(estimate.get(s.value, 0), floor.get(s, 0)) for s in ESTIMATED}


def named(among: Iterable[JobStatus], last: str = " or ") -> str:
    """The statuses ``among`` as help texts name them, the live ones first, each kind in the
    enum's order: "Pending, Processing, Stuck, Completed, Failed or Cancelled"."""
    order = list(JobStatus)
    names = [s.value for s in sorted(set(among), key=lambda s: (info(s).finished, order.index(s)))]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])}{last}{names[-1]}"
