"""Why a guarded action skipped a job, in words an on-call engineer can act on: the data layer
returns a reason code and the facts (``models.Skipped``); the CLI and the console show this."""

from __future__ import annotations

from typing import Any

from leasectl.core.actions import action_info
from leasectl.core.models import ActionResult, JobStatus, SkipCode, Skipped


def skip_reason(skipped: Skipped) -> str:
    """The sentence for one skipped job (its untrusted parts, the owners, as they are: the
    caller renders the sentence through ``literal``)."""
    s = skipped
    match s.code:
        case SkipCode.NOT_FOUND:
            return "no such job"
        case SkipCode.MOVED:
            if s.status == JobStatus.PROCESSING:
                return (
                    f"moved since you looked: {s.seen_status} -> Processing "
                    f"(leased by {s.owner}, attempt {s.attempts})"
                )
            return f"moved since you looked: {s.seen_status} -> {s.status}"
        case SkipCode.RENEWED:
            return (
                f"lease renewed by {s.owner} after you looked "
                f"(attempt {s.seen_attempts} -> {s.attempts})"
            )
        case SkipCode.NOT_ELIGIBLE:
            return _not_eligible(s)
        case SkipCode.LEASE_LIVE:
            lease = s.lease_until.isoformat() if s.lease_until else "?"
            if s.heartbeat_age is not None:
                return (
                    f"lease live: held by {s.owner} until {lease}, last heartbeat "
                    f"{s.heartbeat_age.total_seconds():.0f}s ago; use --force to override"
                )
            return f"lease live: held by {s.owner} until {lease}; use --force to override"
        case SkipCode.RACED:
            return "changed while the action ran"
        case SkipCode.HELD:
            return (
                "held by another session (a worker's or an open transaction's lock): "
                "left alone, not waited for; try again"
            )


def _not_eligible(s: Skipped) -> str:
    if s.action == "cancel":
        return f"already finished: a {s.status} job cannot be cancelled"
    if s.action == "delete":
        if s.status == JobStatus.PROCESSING:
            return "a Processing job cannot be deleted (its lease may be live): cancel it first"
        return f"a {s.status} job cannot be deleted: cancel it first"
    return f"a {s.status} job cannot be {action_info(s.action).past}"


def action_json(result: ActionResult) -> dict[str, Any]:
    """A guarded action's outcome as ``--json`` writes it."""
    return {
        "action": result.action,
        "changed": list(result.changed),
        "skipped": [{"id": s.id, "reason": skip_reason(s)} for s in result.skipped],
    }
