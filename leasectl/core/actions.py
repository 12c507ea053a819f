"""The operator action registry: each guarded action on jobs, declared once.

Its name (the CLI command, ``ActionResult.action``), its words, the statuses it applies to, its
reason rule, whether ``--force`` lets it override a live lease, its SQL and ``Operations``
method, its audit event actions (what migration 11's counters trigger counts) and its keys in
the console. The CLI commands (``cli/actions.py``), the bulk engine (``runtime/bulk.py``), the
guard's skip reasons (``db/operations.py``), the console's eligibility, confirmations and
results all derive from it; an exhaustiveness test (``tests/unit/test_registries.py``) fails
when ``OperatorAction`` grows a member without its entry. An unknown name is an error, never
some default action.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from leasectl.core.config import MAX_ATTEMPTS
from leasectl.core.errors import UsageError
from leasectl.core.literal import echo
from leasectl.core.models import JobStatus

# A job's priority is a PostgreSQL integer (smaller runs first), as enqueue's is.
PRIORITY_MIN, PRIORITY_MAX = -(2**31), 2**31 - 1


class OperatorAction(enum.StrEnum):
    REQUEUE = "requeue"
    MARK_STUCK = "mark-stuck"
    CANCEL = "cancel"
    DELETE = "delete"


@dataclass(frozen=True)
class ActionInfo:
    """``applies_to``: the statuses its guard admits, in the order its words name them.
    ``reason_required``: None when ``--reason`` is optional, else what to say instead of a
    blank one. ``forceable``: it leaves a live lease alone unless ``--force`` (False: the flag
    means nothing to it; ``revokes_lease``: it takes a held lease away, live or not).
    ``query``: its guarded statement (a named block of ``db/sql/operator.sql``); ``method``:
    its ``Operations`` method. ``audit``/``audit_forced``: the ``job_events.action`` it writes
    (forced: over a live lease). ``key``: its key in the console's main, detail and find
    screens; ``bulk_key``: the find screen's key for every matching job (None: not offered).
    ``summary``: its command's help; ``effect``: what the confirmation says it does besides
    the guard. ``settings``: it takes ``--priority`` and ``--attempts`` (``JobSettings``)."""

    action: OperatorAction
    verb: str
    past: str
    applies_to: tuple[JobStatus, ...]
    reason_required: str | None
    forceable: bool
    revokes_lease: bool
    query: str
    method: str
    audit: str
    audit_forced: str | None
    key: str
    bulk_key: str | None
    summary: str
    effect: str
    settings: bool = False

    @property
    def name(self) -> str:
        return self.action.value

    @property
    def eligible(self) -> frozenset[JobStatus]:
        return frozenset(self.applies_to)


ACTIONS: dict[OperatorAction, ActionInfo] = {
    a.action: a
    for a in (
        ActionInfo(
            OperatorAction.REQUEUE,
            verb="Requeue",
            past="requeued",
            applies_to=(JobStatus.STUCK, JobStatus.FAILED, JobStatus.PROCESSING),
            reason_required=None,
            forceable=True,
            revokes_lease=False,
            query="jobs_operator_requeue",
            method="operator_requeue",
            audit="requeue",
            audit_forced="requeue_forced",
            key="r",
            bulk_key="R",
            summary="Put Stuck, Failed or expired jobs back to Pending (guarded; exit 1 if any "
            "is skipped).",
            effect="A live lease is never overridden.",
            settings=True,
        ),
        ActionInfo(
            OperatorAction.MARK_STUCK,
            verb="Mark stuck",
            past="marked stuck",
            applies_to=(JobStatus.PENDING, JobStatus.PROCESSING),
            reason_required=None,
            forceable=True,
            revokes_lease=False,
            query="jobs_operator_mark_stuck",
            method="operator_mark_stuck",
            audit="mark_stuck",
            audit_forced="mark_stuck_forced",
            key="s",
            bulk_key="S",
            summary="Quarantine Pending or expired jobs as Stuck (guarded; exit 1 if any is "
            "skipped).",
            effect="A live lease is never overridden.",
        ),
        ActionInfo(
            OperatorAction.CANCEL,
            verb="Cancel",
            past="cancelled",
            applies_to=(
                JobStatus.PENDING,
                JobStatus.STUCK,
                JobStatus.PROCESSING,
                JobStatus.WAITING,
            ),
            reason_required="say why the jobs are cancelled",
            forceable=False,
            revokes_lease=True,
            query="jobs_operator_cancel",
            method="operator_cancel",
            audit="cancel",
            audit_forced=None,
            key="c",
            bulk_key="C",
            summary="Cancel Pending, Stuck, Processing or Waiting jobs: a held lease is revoked, "
            "its handler sees ctx.cancelled and its result is never written (guarded; --reason "
            "required; exit 1 if any is skipped).",
            effect="A held lease is revoked, live or not: the worker's next heartbeat is "
            "refused, its handler is told (ctx.cancelled) and its result is never written.",
        ),
        ActionInfo(
            OperatorAction.DELETE,
            verb="Delete",
            past="deleted",
            applies_to=(
                JobStatus.COMPLETED,
                JobStatus.FAILED,
                JobStatus.CANCELLED,
                JobStatus.STUCK,
            ),
            reason_required=None,
            forceable=False,
            revokes_lease=False,
            query="jobs_operator_delete",
            method="operator_delete",
            audit="delete",
            audit_forced=None,
            key="D",
            bulk_key=None,  # every matching job, for good: the CLI's --dry-run first, not a key
            summary="Delete Completed, Failed, Cancelled or Stuck jobs for good, never a Pending "
            "or Processing one; their audit events stay (guarded; exit 1 if any is skipped).",
            effect="Never Pending or Processing: the job and its attempts are deleted for good; "
            "its audit events stay.",
        ),
    )
}


def action_info(action: str) -> ActionInfo:
    """The entry of an action by name; an unknown name is a ValueError, never a default."""
    return ACTIONS[OperatorAction(action)]


# Every job_events.action an operator action writes (migration 11's trigger counts these as
# the `operator` counter), in the registry's order.
AUDIT_ACTIONS: tuple[str, ...] = tuple(
    name for a in ACTIONS.values() for name in (a.audit, a.audit_forced) if name is not None
)


@dataclass(frozen=True)
class JobSettings:
    """What an action that takes settings (``ActionInfo.settings``: requeue) sets besides the
    status. ``priority``: the job's new priority (None: kept). ``attempts``: a fresh attempt
    budget, N more attempts from now: max_attempts := attempts + N, within MAX_ATTEMPTS (None:
    a spent budget gets one more attempt). The attempt counter never goes back: it is the
    lease's fencing token. Migration 26's requeue applies them; the job event records both."""

    priority: int | None = None
    attempts: int | None = None

    def given(self) -> bool:
        return self.priority is not None or self.attempts is not None


NO_SETTINGS = JobSettings()


def _bounded(text: str | int | None, option: str, low: int, high: int) -> int | None:
    if text is None:
        return None
    value: int | None
    if isinstance(text, int):
        value = text
    else:
        stripped = text.strip()
        try:
            value = int(stripped, 10)
        except ValueError:
            value = None
    if value is None or not low <= value <= high:
        raise UsageError(f"{option}: an integer from {low:,} to {high:,}, not {echo(str(text))}")
    return value


def parse_settings(priority: str | int | None, attempts: str | int | None) -> JobSettings:
    """``--priority`` and ``--attempts`` as typed (text, or a console field's value), checked
    before anything is read: a bad one is a UsageError (exit 2) and nothing changes."""
    return JobSettings(
        priority=_bounded(priority, "--priority", PRIORITY_MIN, PRIORITY_MAX),
        attempts=_bounded(attempts, "--attempts", 1, MAX_ATTEMPTS),
    )


def check_settings(info: ActionInfo, settings: JobSettings) -> None:
    """Settings given to an action that takes none: a UsageError, never silently dropped."""
    if settings.given() and not info.settings:
        raise UsageError(f"--priority and --attempts apply to requeue only, not {info.name}")
