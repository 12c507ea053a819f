"""What the console decides, as pure functions of a snapshot and a clock (no Textual, no
database): lease states, diagnoses, the filter, actions and their results. How a value looks
(styles, time phrases, counts) is leasectl/present's.

Everything time-dependent is computed from the read clock of the last snapshot plus the
local *monotonic* time elapsed since it was read: the local wall clock is never consulted, so a
skewed laptop clock cannot make a live lease look expired (or the reverse). Read from a hot
standby behind its primary, the read clock is the time of the last transaction it replayed and
does not advance between refreshes: the data is as of then, whatever the time is now.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from leasectl.core import filters
from leasectl.core.actions import ACTIONS, ActionInfo, OperatorAction
from leasectl.core.filters import JobFilter, ListedJob
from leasectl.core.limits import holding_back
from leasectl.core.literal import echo, visible
from leasectl.core.models import (
    ActionResult,
    Freshness,
    Job,
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
    """The read clock ``db_now`` was read when the local monotonic clock said ``mono``.
    ``frozen``: it is a standby's replay time (the standby was behind), which the local clock
    does not advance: only the next refresh, as replay goes on, does."""

    db_now: datetime
    mono: float
    frozen: bool = False

    @classmethod
    def of(cls, snap: Snapshot, mono: float) -> DbClock:
        """The clock of a snapshot read at ``mono``."""
        return cls(snap.db_now, mono, frozen=bool(snap.read_lag and snap.read_lag > timedelta(0)))

    def at(self, mono: float) -> datetime:
        """The database time now, estimated without ever reading the local wall clock."""
        if self.frozen:
            return self.db_now
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


def held_back(snapshot: Snapshot) -> dict[str, str]:
    """The limited queues whose due jobs wait at the refresh's instant, and why: ``at cap``
    (their live leases fill the cap in force) or ``rate-limited`` (less than a token left)."""
    found = ((lim.queue, holding_back(lim)) for lim in snapshot.limits)
    return {queue: why for queue, why in found if why is not None}


def paused_queues(snapshot: Snapshot) -> frozenset[str]:
    """The queues whose Pending jobs no worker claims: those the refresh read paused (all of
    them up to console_paused's limit of 100, far beyond what a fleet pauses at once)."""
    return frozenset(p.queue for p in snapshot.paused)


def short_owner(owner: str | None, width: int = 22) -> str:
    """An owner id cut to ``width``, escaped first (an escape is wider than the character)."""
    if owner is None:
        return "-"
    owner = visible(owner)
    return owner if len(owner) <= width else owner[: width - 1] + "…"


# -- errors --------------------------------------------------------------------------------------

_ERROR_CLASS = re.compile(r"^([A-Za-z_][\w.]{0,99}): ")


def error_parts(text: str | None) -> tuple[str, str]:
    """A last error as (its class, its first line): a worker records ``Class: message`` (then
    any further lines); an error that does not start so has no class (""). Untrusted: escape
    both (``lit``) where they are shown."""
    if not text:
        return "", ""
    first = text.strip().split("\n", 1)[0].strip()
    m = _ERROR_CLASS.match(first)
    if m is None:
        return "", first
    return m.group(1), first[m.end() :].strip()


def short_class(klass: str) -> str:
    """An error's class without its module (``billing.psp.UpstreamTimeout``: ``UpstreamTimeout``):
    what tells errors apart, where a column has room for a dozen characters; the detail screen
    shows the error whole."""
    return klass.rsplit(".", 1)[-1] or klass


def cut(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, with "…" when something was cut."""
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


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


# -- the find screen's filter ---------------------------------------------------------------------

# The words of the find screen, each the option of `leasectl list` it stands for.
FIND_WORDS = {
    "state": "states",
    "status": "states",
    "queue": "queue",
    "owner": "owner",
    "error": "error",
    "payload": "payload",
    "since": "since",
    "until": "until",
}
FIND_HINT = (
    'state:failed,stuck  queue:NAME  owner:ID  error:TEXT  payload:{"k":1}  since:1h  until:10m'
    " — the options of leasectl list; a value with spaces in double quotes. Newest first."
)
_WORD = re.compile(r"([A-Za-z]+):")


def parse_find(text: str) -> JobFilter:
    """The find screen's filter: ``word:value`` pairs, the words of `leasectl list`'s options
    (``state:`` may repeat, or list states with commas), each value validated as `list`
    validates it (``core.filters.parse_filter``). A value is the rest of the word up to a
    space; or a double-quoted string (``\\"`` and ``\\\\`` inside); or, starting with ``{`` or
    ``[``, a JSON text up to its closing bracket (spaces allowed). A FilterError or a
    UsageError (one line, the user's text quoted by ``echo``) for anything else."""
    parts: dict[str, str] = {}
    states: list[str] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            break
        m = _WORD.match(text, i)
        word = text[i:].split(None, 1)[0]
        if m is None:
            raise FilterError(
                f"{echo(word)}: use word:value, the words being {', '.join(FIND_WORDS)}"
            )
        key = m.group(1).lower()
        if key not in FIND_WORDS:
            raise FilterError(
                f"unknown word {echo(m.group(1))}: use one of {', '.join(FIND_WORDS)}"
            )
        value, i = _find_value(text, m.end(), key)
        name = FIND_WORDS[key]
        if name == "states":
            states.append(value)
        elif name in parts:
            raise FilterError(f"{key}: given twice")
        else:
            parts[name] = value
    return filters.parse_filter(states=states, **parts)


def _find_value(text: str, start: int, key: str) -> tuple[str, int]:
    """The value that starts at ``start`` and where it ends."""
    n = len(text)
    if start >= n or text[start].isspace():
        raise FilterError(f"{key}: needs a value")
    if text[start] == '"':
        out: list[str] = []
        i = start + 1
        while i < n:
            char = text[i]
            if char == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
            elif char == '"':
                return "".join(out), i + 1
            else:
                out.append(char)
                i += 1
        raise FilterError(f"{key}: the quote is not closed")
    if text[start] in "{[":
        depth, quoted, i = 0, False, start
        while i < n:
            char = text[i]
            if quoted:
                if char == "\\":
                    i += 1
                elif char == '"':
                    quoted = False
            elif char == '"':
                quoted = True
            elif char in "{[":
                depth += 1
            elif char in "}]":
                depth -= 1
                if depth == 0:
                    return text[start : i + 1], i + 1
            i += 1
        raise FilterError(f"{key}: the JSON is not closed")
    end = start
    while end < n and not text[end].isspace():
        end += 1
    return text[start:end], end


def find_text(flt: JobFilter) -> str:
    """A filter as the find screen's words (values as given: untrusted, show through ``lit``)."""
    words = {
        "--state": "state",
        "--queue": "queue",
        "--owner": "owner",
        "--error": "error",
        "--payload": "payload",
        "--since": "since",
        "--until": "until",
    }
    out = []
    for option, value in flt.parts():
        if option in ("--since", "--until"):
            value = _duration_word(flt.since if option == "--since" else flt.until)
        elif (" " in value or '"' in value or not value) and option != "--payload":
            value = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        out.append(f"{words[option]}:{value}")
    return " ".join(out)


def _duration_word(value: timedelta | None) -> str:
    """A duration as the find screen (and `leasectl list`) parses it: 2h, 90m, 45s."""
    seconds = value.total_seconds() if value is not None else 0.0
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def known_queues(snapshot: Snapshot | None) -> set[str]:
    if snapshot is None:
        return set()
    found = {j.queue for j in (*snapshot.pending, *snapshot.processing, *snapshot.stuck)}
    for o in snapshot.owners:
        found.update(o.queues)
    return found


# -- actions -----------------------------------------------------------------------------------


class Action(enum.Enum):
    """The console's actions: the operator actions (core/actions.py) and R, a requeue of every
    expired lease in the filter."""

    REQUEUE = "requeue"
    MARK_STUCK = "mark-stuck"
    REQUEUE_EXPIRED = "requeue-expired"
    CANCEL = "cancel"
    DELETE = "delete"

    @property
    def operator(self) -> OperatorAction:
        """The operator action it runs (never a default: each member has its own)."""
        return _OPERATOR[self]

    @property
    def info(self) -> ActionInfo:
        return ACTIONS[self.operator]

    @property
    def verb(self) -> str:
        return self.info.verb

    @property
    def past(self) -> str:
        return self.info.past


_OPERATOR = {
    Action.REQUEUE: OperatorAction.REQUEUE,
    Action.MARK_STUCK: OperatorAction.MARK_STUCK,
    Action.REQUEUE_EXPIRED: OperatorAction.REQUEUE,
    Action.CANCEL: OperatorAction.CANCEL,
    Action.DELETE: OperatorAction.DELETE,
}


def _or(names: Sequence[str], comma: str = "") -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])}{comma} or {names[-1]}"


def condition_text(action: Action) -> str:
    """The exact condition the guarded statement checks, per job, when it runs (the states
    from the action's entry in core/actions.py)."""
    same = "still has the status, attempt number and lease owner shown here (what you saw), and "
    info = action.info
    names = [s.value for s in info.applies_to if not (info.forceable and s is JobStatus.PROCESSING)]
    if len(names) < len(info.applies_to):  # a live lease stays unless forced: only expired ones
        names.append("Processing with an expired lease (lease_until < now() on the database clock)")
        return f"{same}is {_or(names, ',')}. {info.effect}"
    return f"{same}is {_or(names)}. {info.effect}"


def eligible(action: Action, job: PanelJob, now: datetime) -> str | None:
    """Why the guard would skip this job as seen right now, or None when it would act."""
    info = action.info
    if job.status not in info.eligible:
        if info.action is OperatorAction.CANCEL:
            return f"{job.status} is finished already"
        if info.action is OperatorAction.DELETE:
            return f"{job.status} cannot be deleted (cancel it first)"
        return f"{job.status} cannot be {info.past}"
    if job.status == JobStatus.PROCESSING and info.forceable:
        if job.lease_until is not None and job.lease_until >= now:
            return "lease still live"
    return None


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


def as_panel_job(job: Job | ListedJob) -> PanelJob:
    """A job of the detail screen or of the find screen's page as a panel lists it: what an
    action's confirmation shows and the state its guard checks (status, attempts, owner)."""
    return PanelJob(
        id=job.id,
        queue=job.queue,
        status=job.status,
        priority=job.priority,
        run_at=job.run_at,
        attempts=job.attempts,
        max_attempts=job.max_attempts,
        lease_owner=job.lease_owner,
        lease_until=job.lease_until if isinstance(job, Job) else None,
        heartbeat_at=job.heartbeat_at if isinstance(job, Job) else None,
        last_error=job.last_error,
        created_at=job.created_at,
        updated_at=job.updated_at,
        finished_at=job.finished_at,
    )
