"""What the console decides, as pure functions of a snapshot and a clock (no Textual, no
database): lease states, diagnoses, the filter, actions and their results. How a value looks
(styles, time phrases, counts) is leasectl/present's.

Everything time-dependent is computed from the database clock of the last snapshot plus the
local *monotonic* time elapsed since it was read: the local wall clock is never consulted, so a
skewed laptop clock cannot make a live lease look expired (or the reverse).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from leasectl.core.literal import visible
from leasectl.core.models import (
    ActionResult,
    Freshness,
    JobStatus,
    OwnerHealth,
    PanelJob,
    Snapshot,
)
from leasectl.present.skips import skip_reason
from leasectl.present.styles import LeaseState

# -- the database clock -------------------------------------------------------------------------


@dataclass(frozen=True)
class DbClock:
    """The database time ``db_now`` was read when the local monotonic clock said ``mono``."""

    db_now: datetime
    mono: float

    def at(self, mono: float) -> datetime:
        """The database time now, estimated without ever reading the local wall clock."""
        return self.db_now + timedelta(seconds=max(0.0, mono - self.mono))


# -- leases ----------------------------------------------------------------------------------


def lease_state(job: PanelJob, now: datetime, default_window: timedelta) -> LeaseState:
    """Expired once lease_until has passed; at risk when it ends within one heartbeat interval."""
    if job.status != JobStatus.PROCESSING or job.lease_until is None:
        return LeaseState.OK
    if job.lease_until < now:
        return LeaseState.EXPIRED
    window = job.risk_window if job.risk_window is not None else default_window
    if job.lease_until < now + window:
        return LeaseState.AT_RISK
    return LeaseState.OK


# -- owners and diagnosis ---------------------------------------------------------------------


class Verdict(enum.Enum):
    """Whether requeueing a stuck job is safe, judged by its last owner's signs of life."""

    ALIVE = "alive"
    SILENT = "silent"
    UNKNOWN = "unknown"
    # A Stuck job: someone (an operator, or the watcher in mark mode) quarantined it on purpose;
    # its last owner's health no longer says anything about it.
    QUARANTINED = "quarantined"


@dataclass(frozen=True)
class Diagnosis:
    verdict: Verdict
    text: str


def diagnose(job: PanelJob, owners: dict[str, OwnerHealth]) -> Diagnosis:
    """ "owner alive, lease expired" (do not blindly requeue) versus "owner silent" (safe), for
    an expired lease; "quarantined by ACTOR: REASON" for a Stuck job, whose lease (if it had
    one) was closed when it was marked stuck, so its last owner's health is beside the point.

    An owner missing from the owners list holds no lease and has not been seen recently: it is
    silent too. The text quotes the actor and the reason escaped (``visible``): untrusted.
    """
    if job.status == JobStatus.STUCK:
        if job.quarantined_by is None:
            return Diagnosis(Verdict.QUARANTINED, "quarantined (no audit event left)")
        text = f"quarantined by {visible(job.quarantined_by)}"
        if job.quarantine_reason:
            text += f": {visible(job.quarantine_reason)}"
        return Diagnosis(Verdict.QUARANTINED, text)
    if job.lease_owner is None:
        return Diagnosis(Verdict.UNKNOWN, "never leased")
    health = owners.get(job.lease_owner)
    if health is None:
        return Diagnosis(Verdict.SILENT, "owner silent")
    if health.freshness in (Freshness.FRESH, Freshness.LATE):
        return Diagnosis(Verdict.ALIVE, "owner alive, lease expired")
    if health.freshness == Freshness.STOPPED:
        return Diagnosis(Verdict.SILENT, "owner silent (stopped)")
    if health.freshness == Freshness.SILENT:
        return Diagnosis(Verdict.SILENT, "owner silent")
    return Diagnosis(Verdict.UNKNOWN, "owner unknown")


def owners_by_id(snapshot: Snapshot) -> dict[str, OwnerHealth]:
    return {o.owner: o for o in snapshot.owners}


def short_owner(owner: str | None, width: int = 22) -> str:
    """An owner id cut to ``width``, escaped first (an escape is wider than the character)."""
    if owner is None:
        return "-"
    owner = visible(owner)
    return owner if len(owner) <= width else owner[: width - 1] + "…"


# -- the filter ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConsoleFilter:
    """What `/` narrows to. Counts follow the queue; owner and id narrow the panels."""

    queue: str | None = None
    owner: str | None = None
    job_id: int | None = None

    def __str__(self) -> str:
        parts = []
        if self.queue is not None:
            parts.append(f"queue:{self.queue}")
        if self.owner is not None:
            parts.append(f"owner:{self.owner}")
        if self.job_id is not None:
            parts.append(f"id:{self.job_id}")
        return " ".join(parts)

    @property
    def empty(self) -> bool:
        return self.queue is None and self.owner is None and self.job_id is None


class FilterError(ValueError):
    pass


_ID = re.compile(r"^#?(\d{1,18})$")


def parse_filter(
    text: str, known_queues: Iterable[str] = (), known_owners: Iterable[str] = ()
) -> ConsoleFilter:
    """``queue:NAME``, ``owner:PREFIX``, ``id:N`` (or ``#N``, or ``N``), space-separated.

    A bare word is a queue when a queue of that name is known, else an owner prefix when it
    starts a known owner id, else a queue.
    """
    queue: str | None = None
    owner: str | None = None
    job_id: int | None = None
    queues = set(known_queues)
    owners = list(known_owners)
    for token in text.split():
        key, sep, value = token.partition(":")
        key = key.lower()
        if sep and key in ("queue", "q"):
            queue = _value(value, "queue")
        elif sep and key in ("owner", "o", "worker", "w"):
            owner = _value(value, "owner")
        elif sep and key in ("id", "job"):
            job_id = _job_id(value)
        elif _ID.match(token):
            job_id = _job_id(token)
        elif token in queues:
            queue = token
        elif any(o.startswith(token) for o in owners):
            owner = token
        else:
            queue = token
    return ConsoleFilter(queue, owner, job_id)


def _value(value: str, what: str) -> str:
    if not value:
        raise FilterError(f"{what}: needs a value")
    return value


def _job_id(value: str) -> int:
    m = _ID.match(value)
    if not m or int(m.group(1)) <= 0:
        raise FilterError(f"invalid job id {value!r}: ids are positive integers")
    return int(m.group(1))


def known_queues(snapshot: Snapshot | None) -> set[str]:
    if snapshot is None:
        return set()
    found = {j.queue for j in (*snapshot.pending, *snapshot.processing, *snapshot.stuck)}
    for o in snapshot.owners:
        found.update(o.queues)
    return found


# -- actions -----------------------------------------------------------------------------------


class Action(enum.Enum):
    REQUEUE = "requeue"
    MARK_STUCK = "mark-stuck"
    REQUEUE_EXPIRED = "requeue-expired"

    @property
    def verb(self) -> str:
        return "Mark stuck" if self is Action.MARK_STUCK else "Requeue"

    @property
    def past(self) -> str:
        return "marked stuck" if self is Action.MARK_STUCK else "requeued"


def condition_text(action: Action) -> str:
    """The exact condition the guarded statement checks, per job, when it runs."""
    same = "still has the status, attempt number and lease owner shown here (what you saw), and "
    if action is Action.MARK_STUCK:
        return (
            same + "is Pending, or Processing with an expired lease (lease_until < now() on the "
            "database clock). A live lease is never overridden."
        )
    return (
        same + "is Stuck, Failed, or Processing with an expired lease (lease_until < now() on "
        "the database clock). A live lease is never overridden."
    )


def eligible(action: Action, job: PanelJob, now: datetime) -> str | None:
    """Why the guard would skip this job as seen right now, or None when it would act."""
    if job.status == JobStatus.PROCESSING:
        if job.lease_until is not None and job.lease_until >= now:
            return "lease still live"
        return None
    if action is Action.MARK_STUCK:
        return None if job.status == JobStatus.PENDING else f"{job.status} cannot be marked stuck"
    if job.status in (JobStatus.STUCK, JobStatus.FAILED):
        return None
    return f"{job.status} cannot be requeued"


Severity = Literal["information", "warning", "error"]


@dataclass(frozen=True)
class ResultText:
    title: str
    body: str
    severity: Severity


def result_text(action: Action, result: ActionResult, limit: int = 6) -> ResultText:
    """The outcome in words: how many changed, and each skipped job with its reason."""
    changed = len(result.changed)
    total = changed + len(result.skipped)
    title = f"{action.verb}: {changed} of {total} {action.past}"
    lines = []
    if result.changed:
        ids = ", ".join(f"#{i}" for i in result.changed[:limit])
        more = f" and {changed - limit} more" if changed > limit else ""
        lines.append(f"changed: {ids}{more}")
    if result.skipped:
        lines.append(f"skipped {len(result.skipped)}:")
        for s in result.skipped[:limit]:
            lines.append(f"  #{s.id}: {visible(skip_reason(s))}")  # names owners: untrusted
        if len(result.skipped) > limit:
            lines.append(f"  … and {len(result.skipped) - limit} more")
    severity: Severity = "information" if not result.skipped else "warning"
    if total and not changed:
        severity = "error"
    return ResultText(title, "\n".join(lines) or "nothing to do", severity)
