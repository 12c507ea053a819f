"""The console's headline: the worst condition of a refresh, in words, under its header.

``payments: ≈2.0M due, oldest 41m, no worker serving it``; ``payments: failing 100% for 12m,
PSPError``; nothing wrong: no line. Made from the refresh's own reads (its counts, the Pending
panel's oldest rows, the owners, the paused queues, the Failed panel and the throughput): no
round trip of its own. Pure: a snapshot and the database clock in, a ``Headline`` out.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

from rich.text import Text

from leasectl.core.errorgroups import error_kind
from leasectl.core.literal import shorten
from leasectl.core.models import Freshness, PanelJob, Snapshot
from leasectl.present.text import count_text, lit

# A backlog whose oldest due job waited longer than this is worth a line even while served.
OLD_DUE = timedelta(minutes=5)
# Failures newer than this are "now"; a failure rate from this share up is worth a line.
FAILING_WINDOW = timedelta(minutes=15)
FAILING_SHARE = 0.10
SERVING = frozenset({Freshness.FRESH, Freshness.LATE})
BAD_STYLE, WARN_STYLE = "bold red", "bold yellow"


class Severity(enum.IntEnum):
    WARN = 1
    BAD = 2


@dataclass(frozen=True)
class Headline:
    text: Text
    severity: Severity


def rough(span: timedelta) -> str:
    """A wait in its largest unit: ``45s``, ``41m``, ``3h``, ``2d``."""
    seconds = max(0, int(span.total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _line(queue: str | None, words: str, severity: Severity) -> Headline:
    style = BAD_STYLE if severity is Severity.BAD else WARN_STYLE
    # One line: cut with an ellipsis at the terminal's width rather than wrapped out of sight.
    text = Text("⚑ ", style=style, no_wrap=True, overflow="ellipsis")
    if queue is not None:
        text.append_text(lit(shorten(queue, 60), style))
        text.append(": ", style=style)
    text.append(words, style=style)
    return Headline(text, severity)


def _oldest_due(snap: Snapshot, now: datetime) -> dict[str, PanelJob]:
    """Each queue's oldest due job the Pending panel shows, the oldest queue first."""
    due: dict[str, PanelJob] = {}
    for j in sorted(snap.pending, key=lambda j: (j.run_at, j.id)):
        if j.run_at <= now:
            due.setdefault(j.queue, j)
    return due


def _serving(snap: Snapshot, queue: str, now: datetime) -> bool:
    """A live worker of the queue: a fresh or late owner that declared it, or one holding an
    unexpired lease of it."""
    if any(o.freshness in SERVING and queue in o.queues for o in snap.owners):
        return True
    return any(
        j.queue == queue and j.lease_until is not None and j.lease_until >= now
        for j in snap.processing
    )


def _due_words(snap: Snapshot, queue: str, job: PanelJob, now: datetime, what: str) -> str:
    """``≈2.0M due, oldest 41m, WHAT``: the due count is the queue's when the refresh is of
    that queue alone or it is the only one with Pending jobs shown; else it comes last, said
    to be of all queues (``oldest due 3m, WHAT (1,270 due, all queues)``)."""
    c = snap.counts
    due = count_text(c.due, c.due_capped, c.due_estimated)
    waited = rough(now - job.run_at)
    only = snap.queue == queue or (
        snap.queue is None and {j.queue for j in snap.pending} == {queue} and len(snap.queues) == 1
    )
    if only:
        return f"{due} due, oldest {waited}, {what}"
    return f"oldest due {waited}, {what} ({due} due, all queues)"


def _failing(snap: Snapshot, now: datetime) -> Headline | None:
    """The queue of the latest failure, when failures are recent and a real share of what
    finished: its share over the throughput window, since when, and its commonest kind."""
    recent = [
        j
        for j in snap.failed
        if j.finished_at is not None and now - j.finished_at <= FAILING_WINDOW
    ]
    if not recent:
        return None
    queue = max(recent, key=lambda j: (j.finished_at, j.id)).queue
    mine = [j for j in recent if j.queue == queue]
    finished = snap.failed_recent + sum(snap.throughput)
    share = snap.failed_recent / finished if finished else 1.0
    if share < FAILING_SHARE:
        return None
    kinds = Counter(error_kind(j.last_error, traced=True) for j in mine)
    kind, _ = kinds.most_common(1)[0]
    since = min(j.finished_at for j in mine if j.finished_at is not None)
    severity = Severity.BAD if share >= 0.5 else Severity.WARN
    words = f"failing {share:.0%} for {rough(now - since)}, "
    line = _line(queue, words, severity)
    line.text.append_text(
        lit(shorten(kind, 80), BAD_STYLE if severity is Severity.BAD else WARN_STYLE)
    )
    return line


def headline(snap: Snapshot | None, now: datetime) -> Headline | None:
    """The worst condition, or None when nothing is wrong. In order: due work no worker
    serves, due work a paused queue holds, a failure rate of half or more, expired leases, Stuck
    jobs, a lesser failure rate, a backlog waiting longer than ``OLD_DUE``."""
    if snap is None:
        return None
    due = _oldest_due(snap, now)
    paused = {p.queue: p for p in snap.paused}
    for queue, job in due.items():  # due work that nothing will take
        if queue not in paused and not _serving(snap, queue, now):
            words = _due_words(snap, queue, job, now, "no worker serving it")
            return _line(queue, words, Severity.BAD)
    for queue, job in due.items():
        if queue in paused:
            pause = paused[queue]
            paused_for = f"paused {rough(now - pause.paused_at)} ago"
            return _line(queue, _due_words(snap, queue, job, now, paused_for), Severity.WARN)
    failing = _failing(snap, now)
    if failing is not None and failing.severity is Severity.BAD:
        return failing
    c = snap.counts
    if c.expired:
        noun = "lease" if c.expired == 1 else "leases"
        return _line(
            None, f"{c.expired:,} {noun} expired: their workers stopped renewing", Severity.BAD
        )
    if c.stuck:
        stuck = count_text(c.stuck, c.stuck_capped, c.stuck_estimated)
        words = "job waits" if c.stuck == 1 and not c.stuck_capped else "jobs wait"
        return _line(None, f"{stuck} Stuck (quarantined) {words} for an operator", Severity.WARN)
    if failing is not None:
        return failing
    if due:
        queue, job = next(iter(due.items()))
        if now - job.run_at > OLD_DUE:
            words = _due_words(snap, queue, job, now, "workers behind")
            return _line(queue, words, Severity.WARN)
    return None
