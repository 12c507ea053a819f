"""Models as JSON documents: every value exact, and nothing in the text a terminal acts on.

JSON keeps every value exact, but writes the characters that a terminal acts on or that
reorder text as ``\\u`` escapes, so that a JSON document is safe to ``cat`` too.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import secrets
from datetime import datetime, timedelta
from typing import Any

from leasectl.core.checks import Thresholds, violations
from leasectl.core.limits import QueueLimit, holding_back
from leasectl.core.literal import visible
from leasectl.core.models import (
    Attempt,
    Event,
    ExpiredJob,
    Job,
    JobDetail,
    OwnerHealth,
    PausedQueue,
    QueueCounts,
    StatusReport,
    WatcherResult,
)
from leasectl.core.readlag import countdowns_stale
from leasectl.core.texts import PayloadText
from leasectl.core.timestamps import infinity_label
from leasectl.present.status import finished_estimate, totals
from leasectl.present.times import due_age_s


class RawJson(str):
    """JSON text that ``dumps`` puts into its document as it is (a payload: never decoded, so
    its numbers keep their digits and any depth is fine)."""


@dataclasses.dataclass
class _Splices:
    """The RawJson texts of one ``dumps`` call, each behind a placeholder no other string of
    the document can equal (NUL, which no jsonb or text value holds, and a random tag)."""

    tag: str = dataclasses.field(default_factory=lambda: f"\x00raw-{secrets.token_hex(8)}-")
    texts: list[str] = dataclasses.field(default_factory=list)

    def add(self, text: str) -> str:
        self.texts.append(text)
        return f"{self.tag}{len(self.texts) - 1}"

    def apply(self, encoded: str) -> str:
        for i, text in enumerate(self.texts):
            encoded = encoded.replace(json.dumps(f"{self.tag}{i}"), text, 1)
        return encoded


def jsonable(value: Any, splices: _Splices | None = None) -> Any:
    """Datetimes as ISO 8601 with offset ('infinity', '-infinity' for the sentinels), intervals
    as seconds, enums as their value, a payload's text as RawJson."""
    if isinstance(value, datetime):
        return infinity_label(value) or value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, PayloadText):
        return jsonable(RawJson(value.text), splices)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: jsonable(getattr(value, f.name), splices) for f in dataclasses.fields(value)
        }
    if isinstance(value, dict):
        return {str(k): jsonable(v, splices) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v, splices) for v in value]
    if splices is not None and type(value) is RawJson:
        return splices.add(value)
    return value


# json.dumps escapes C0 controls in strings; DEL, C1 controls, bidi and other format
# characters it leaves raw. Outside strings a JSON document is ASCII, so every match is in one.
_BEYOND_ASCII = re.compile(r"[^\x00-\x7e]")


def _json_escape(match: re.Match[str]) -> str:
    char = match.group()
    if visible(char) == char:
        return char  # text: accents, CJK, emoji stay readable
    code = ord(char)
    if code > 0xFFFF:  # JSON spells these as a surrogate pair
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def dumps(document: Any, *, indent: int | None = 2) -> str:
    """JSON that parses back to the exact values and carries no byte a terminal acts on (a
    payload's text is spliced in as PostgreSQL wrote it, then escaped the same way)."""
    splices = _Splices()
    encoded = json.dumps(jsonable(document, splices), indent=indent, ensure_ascii=False)
    return terminal_safe_json(splices.apply(encoded) if splices.texts else encoded)


def terminal_safe_json(text: str) -> str:
    """JSON text with every character a terminal acts on written as a JSON escape (the same
    value once parsed; only strings hold such characters)."""
    return _BEYOND_ASCII.sub(_json_escape, text)


# -- inspect ------------------------------------------------------------------------------------


def job_json(job: Job) -> dict[str, Any]:
    result: dict[str, Any] = jsonable(job)
    return result


def attempt_json(attempt: Attempt) -> dict[str, Any]:
    result: dict[str, Any] = jsonable(attempt)
    return result


def event_json(event: Event) -> dict[str, Any]:
    result: dict[str, Any] = jsonable(event)
    return result


def detail_json(detail: JobDetail) -> dict[str, Any]:
    return {
        "job": {
            **job_json(detail.job),
            "unique_key": detail.unique_key,
            "concurrency_key": detail.concurrency_key,
            "key_holder": detail.key_holder,
        },
        "attempts": [attempt_json(a) for a in detail.attempts],
        "events": [event_json(e) for e in detail.events],
        "db_now": jsonable(detail.db_now),
        "queue_paused": paused_queue_json(detail.queue_paused) if detail.queue_paused else None,
    }


# -- status -------------------------------------------------------------------------------------


def _counts_json(q: QueueCounts, db_now: datetime) -> dict[str, Any]:
    return {
        "pending": q.pending,
        "due": q.due,
        "oldest_due_at": jsonable(q.oldest_due_at),
        "oldest_due_age_s": due_age_s(db_now, q.oldest_due_at),
        "processing": q.processing,
        "expired": q.expired,
        "stuck": q.stuck,
        "waiting": q.waiting,
        "completed_recent": q.completed_recent,
        "failed_recent": q.failed_recent,
        "cancelled_recent": q.cancelled_recent,
        # True: the count of that key is a lower bound (counted up to a cap).
        "pending_capped": q.pending_capped,
        "due_capped": q.due_capped,
        "stuck_capped": q.stuck_capped,
        "waiting_capped": q.waiting_capped,
        # True: past the cap, that key is the planner's estimate of them all (not a count).
        "pending_estimated": q.pending_estimated,
        "due_estimated": q.due_estimated,
        "stuck_estimated": q.stuck_estimated,
        "waiting_estimated": q.waiting_estimated,
    }


def check_json(
    report: StatusReport,
    limits: Thresholds | None = None,
    late_schedules: int | None = None,
    late_capped: bool = False,
) -> dict[str, Any]:
    """The check's totals; with thresholds (status --check --max-...), each violation too
    (``late_schedules``: how many are late, for --max-late-schedules)."""
    doc: dict[str, Any] = {
        "expired": report.expired,
        "stuck": report.stuck,
        "ok": report.expired == 0 and report.stuck == 0,
    }
    if limits is not None:
        found = violations(report, limits, late_schedules, late_capped)
        doc["ok"] = not found
        doc["thresholds"] = {
            "max_expired": limits.max_expired,
            "max_stuck": limits.max_stuck,
            "max_oldest_due_s": jsonable(limits.max_oldest_due),
            "max_late_schedules": limits.max_late_schedules,
        }
        doc["violations"] = [
            {
                "queue": v.queue,
                "measure": v.measure.value,
                "value": jsonable(v.value),
                "capped": v.capped,
                "estimated": v.estimated,
                "limit": jsonable(v.limit),
            }
            for v in found
        ]
    return doc


def owner_json(owner: OwnerHealth) -> dict[str, Any]:
    return {
        "owner": owner.owner,
        "freshness": owner.freshness.value,
        "held": owner.held,
        "expired": owner.expired,
        "last_seen_at": jsonable(owner.last_seen_at),
        "last_job_heartbeat_at": jsonable(owner.last_job_heartbeat_at),
        "next_expiry_at": jsonable(owner.next_expiry_at),
        "heartbeat_every_s": jsonable(owner.heartbeat_every),
        "lease_ttl_s": jsonable(owner.lease_ttl),
        "hostname": owner.hostname,
        "pid": owner.pid,
        "queues": list(owner.queues),
        "started_at": jsonable(owner.started_at),
        "stopped_at": jsonable(owner.stopped_at),
    }


def paused_queue_json(pause: PausedQueue) -> dict[str, Any]:
    return {
        "queue": pause.queue,
        "paused_at": jsonable(pause.paused_at),
        "paused_by": pause.paused_by,
        "reason": pause.reason,
    }


def status_json(
    report: StatusReport,
    limits: Thresholds | None = None,
    late_schedules: int | None = None,
    late_capped: bool = False,
) -> dict[str, Any]:
    return {
        "db_now": jsonable(report.db_now),
        "recent_window_s": report.recent_window.total_seconds(),
        "queues": [{"queue": q.queue, **_counts_json(q, report.db_now)} for q in report.queues],
        "totals": _counts_json(totals(report), report.db_now),
        "finished_estimate": finished_estimate(report),
        "owners": [owner_json(o) for o in report.owners],
        # The first paused queues by name (at most 1,000) and how many there are.
        "paused": [paused_queue_json(p) for p in report.paused],
        "paused_total": report.paused_total,
        "check": check_json(report, limits, late_schedules, late_capped),
        "truncated": report.truncated,
        # Read from a hot standby (--read-dsn): seconds behind its primary (null: a primary),
        # and whether that is more than a lease TTL (db_now is then its replay time).
        "read_lag_s": report.read_lag.total_seconds() if report.read_lag is not None else None,
        "countdowns_stale": countdowns_stale(report.read_lag, report.owners),
        # The first limited queues by name (at most 1,000), as `limits --json` lists them, and
        # how many there are.
        "limits": [limit_json(lim) for lim in report.limits],
        "limits_total": report.limits_total,
    }


def limit_json(limit: QueueLimit) -> dict[str, Any]:
    return {
        "queue": limit.queue,
        "concurrency": limit.concurrency,
        "rate_per_s": limit.rate,
        "burst": limit.burst,
        "effective_burst": limit.effective_burst,
        "ramp_from": jsonable(limit.ramp_from),
        "ramp_until": jsonable(limit.ramp_until),
        "ramp_progress": limit.ramp_progress,
        "now": {
            "cap": limit.cap_now,
            "rate_per_s": limit.rate_now,
            "burst": limit.burst_now,
            "live": limit.live,
            "tokens": limit.tokens,
            # Why its due jobs wait now: "at cap", "rate-limited", or null.
            "held_back": holding_back(limit),
        },
        "throttled": limit.throttled,
        "set_at": jsonable(limit.set_at),
        "set_by": limit.set_by,
        "reason": limit.reason,
        "db_now": jsonable(limit.db_now),
    }


# -- watcher pass -------------------------------------------------------------------------------


def expired_job_json(job: ExpiredJob) -> dict[str, Any]:
    return {
        "id": job.id,
        "queue": job.queue,
        "status": job.status.value,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "lease_owner": job.lease_owner,
        "lease_until": jsonable(job.lease_until),
        "heartbeat_at": jsonable(job.heartbeat_at),
    }


def watcher_json(result: WatcherResult, *, owner: str | None = None) -> dict[str, Any]:
    """``owner``: the lease owner whose expired leases the pass took (None: every owner)."""
    return {
        "dry_run": result.dry_run,
        "owner": owner,
        "requeued": result.requeued,
        "failed": result.failed,
        "marked_stuck": result.marked_stuck,
        "promoted": result.promoted,  # null: the keys' healing pass did not run (a dry run)
        "jobs": [expired_job_json(j) for j in result.jobs],
    }
