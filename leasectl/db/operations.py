"""What producers, operators, the watcher and the CLI run: enqueue, the watcher's batches,
the guarded operator actions, reads of jobs, status and owners, retention, privileges."""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

from psycopg.rows import dict_row

from leasectl.core import counts as bounds
from leasectl.core import health
from leasectl.core.actions import (
    ACTIONS,
    NO_SETTINGS,
    JobSettings,
    OperatorAction,
    check_settings,
)
from leasectl.core.config import check_queue_length
from leasectl.core.counts import COUNT_BUDGET, COUNT_FLOOR, BoundedCount, count_fields
from leasectl.core.enqueue import CheckedJob, Enqueued, NewJob, check_job
from leasectl.core.errors import JobNotFound
from leasectl.core.exposure import WritableSchema
from leasectl.core.literal import echo
from leasectl.core.models import (
    STATUS_BY_VALUE,
    ActionResult,
    ExpiredJob,
    Job,
    JobDetail,
    JobStatus,
    MovedBatch,
    OwnerHealth,
    PausedQueue,
    QueueCounts,
    SeenState,
    StatusReport,
)
from leasectl.core.statuses import RECENT_FIELD
from leasectl.core.texts import ROWS_SHOWN, TEXT_SHOWN, PayloadText, TextCut
from leasectl.db import counters, producer
from leasectl.db import sql as queries
from leasectl.db.connection import Database
from leasectl.db.held import apply_skipping_held
from leasectl.db.keys import KeyOperations
from leasectl.db.limits import LimitOperations
from leasectl.db.rows import (
    attempt_from_row,
    event_from_row,
    expired_jobs,
    job_from_row,
    limit_from_row,
    paused_from_row,
)
from leasectl.db.schedules import ScheduleOperations
from leasectl.db.skips import held_skip, skip_of

# The paused queues `status` reads (its JSON lists them, its text the first PAUSED_SHOWN): a
# role with 20,000 paused queues made it print 20,000 lines.
PAUSED_READ = 1000
LIMITS_READ = 1000  # the limited queues `status` reads (as PAUSED_READ)


def owner_health(rows: list[dict[str, Any]], db_now: Any) -> list[OwnerHealth]:
    """OwnerHealth from status_owners rows, judged at the database time ``db_now``."""
    result = []
    for r in rows:
        last = max(
            (t for t in (r.get("last_seen_at"), r["last_job_heartbeat_at"]) if t is not None),
            default=None,
        )
        result.append(
            OwnerHealth(
                owner=r["owner"],
                hostname=r.get("hostname"),
                pid=r.get("pid"),
                queues=tuple(r.get("queues") or ()),
                lease_ttl=r.get("lease_ttl"),
                heartbeat_every=r.get("heartbeat_every"),
                started_at=r.get("started_at"),
                last_seen_at=r.get("last_seen_at"),
                stopped_at=r.get("stopped_at"),
                held=r["held"],
                expired=r["expired"],
                last_job_heartbeat_at=r["last_job_heartbeat_at"],
                next_expiry_at=r["next_expiry_at"],
                freshness=health.classify(
                    db_now,
                    last,
                    r.get("heartbeat_every"),
                    r.get("lease_ttl"),
                    r.get("stopped_at") if not r["held"] else None,
                    r["next_expiry_at"],
                ),
            )
        )
    return result


class Operations(LimitOperations, KeyOperations, ScheduleOperations):
    """The statements run on behalf of people and the watcher, over a ``Database``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def writable_schemas(self) -> list[WritableSchema]:
        """leasectl's schema and public where roles other than the owner may create."""
        rows = self.db.rows("schemas_writable_by_others", {"schema": self.db.schema})
        return [WritableSchema(r["schema"], tuple(sorted(r["roles"]))) for r in rows]

    def can_update_jobs(self) -> bool:
        """Whether this role may run the operator's actions: EXECUTE on their functions."""
        row = self.db.one("jobs_update_privilege", {"schema": self.db.schema})
        return bool(row and row["can_update"])

    # -- producer ---------------------------------------------------------------------------

    def enqueue(
        self,
        payloads: Sequence[Any],
        *,
        queue: str = "default",
        priority: int = 0,
        delay: timedelta = timedelta(0),
        max_attempts: int = 5,
    ) -> list[int]:
        """Enqueue one job per payload (Python values, sent as json.dumps writes them)."""
        jobs = [
            NewJob(p, queue=queue, priority=priority, delay=delay, max_attempts=max_attempts)
            for p in payloads
        ]
        return [e.id for e in self.enqueue_jobs(jobs)]

    def enqueue_jobs(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        """Enqueue ``jobs`` in one statement on a pooled connection (its own transaction)."""
        return self._enqueue([check_job(j) for j in jobs])

    def enqueue_json(
        self,
        texts: Sequence[str],
        *,
        queue: str = "default",
        priority: int = 0,
        delay: timedelta = timedelta(0),
        max_attempts: int = 5,
        unique_key: str | None = None,
        concurrency_key: str | None = None,
        timeout: timedelta | None = None,
    ) -> list[Enqueued]:
        """Enqueue one job per payload given as JSON text, which the server turns into jsonb
        as written: numbers stay exact (config.parse_payload checks a user's text first)."""
        check_queue_length(queue)
        job = NewJob(
            queue=queue,
            priority=priority,
            delay=delay,
            max_attempts=max_attempts,
            unique_key=unique_key,
            concurrency_key=concurrency_key,
            timeout=timeout,
        )
        # One checked job per distinct text: the copies of `enqueue --count` are one object.
        template = check_job(job, payload="")
        checked: dict[str, CheckedJob] = {}
        return self._enqueue(
            [checked.get(t) or checked.setdefault(t, replace(template, payload=t)) for t in texts]
        )

    def _enqueue(self, jobs: Sequence[CheckedJob]) -> list[Enqueued]:
        plan = producer.Enqueue(jobs, self.db.schema)
        statement = queries.get("jobs_enqueue").render(self.db.schema)
        with self.db.connection() as conn:
            return producer.run_enqueue(conn, plan, statement)

    # -- watcher ----------------------------------------------------------------------------

    def requeue_expired(
        self,
        *,
        limit: int,
        queue: str | None,
        mark: bool,
        actor: str,
        reason: str,
        detail: bool = True,
        owner: str | None = None,
    ) -> MovedBatch:
        """One watcher batch. ``detail``: return the moved jobs, not only how many went where.
        ``owner``: only the expired leases this lease owner holds."""
        names, rows = self.db.tuples(
            "jobs_requeue_expired",
            {
                "limit": limit,
                "queue": queue,
                "mark": mark,
                "actor": actor,
                "reason": reason,
                "detail": detail,
                "owner": owner,
            },
        )
        # A row per moved job (n = 1) when listed, else a row per new status with its count.
        status, count = (names.index("status"), names.index("n")) if names else (0, 0)
        counts: collections.Counter[str] = collections.Counter()
        for row in rows:
            counts[row[status]] += row[count]
        return MovedBatch(
            counts={STATUS_BY_VALUE[value]: n for value, n in counts.items()},
            jobs=expired_jobs(names, rows) if detail else (),
        )

    def list_expired(
        self, *, limit: int, queue: str | None, owner: str | None = None
    ) -> list[ExpiredJob]:
        names, rows = self.db.tuples(
            "jobs_expired_list", {"limit": limit, "queue": queue, "owner": owner}
        )
        return list(expired_jobs(names, rows))

    # -- operator ---------------------------------------------------------------------------

    def get_jobs(self, ids: Sequence[int]) -> dict[int, Job]:
        rows = self.db.rows("jobs_get_many", {"ids": list(ids)})
        return {r["id"]: job_from_row(r) for r in rows}

    def operator_action(
        self,
        action: OperatorAction,
        seen: Sequence[SeenState],
        *,
        actor: str,
        reason: str | None,
        force: bool = False,
        settings: JobSettings = NO_SETTINGS,
    ) -> ActionResult:
        """The guarded operation of ``action`` (core/actions.py: its statement, the statuses
        it applies to, whether ``force`` means anything to it, whether it takes ``settings``:
        given to one that takes none, a UsageError before any statement)."""
        info = ACTIONS[action]
        check_settings(info, settings)
        extra = (
            {"priority": settings.priority, "more_attempts": settings.attempts}
            if info.settings
            else {}
        )
        return self._guarded(info.query, action.value, seen, actor, reason, force, extra)

    def operator_requeue(
        self,
        seen: Sequence[SeenState],
        *,
        actor: str,
        reason: str | None,
        force: bool = False,
        settings: JobSettings = NO_SETTINGS,
    ) -> ActionResult:
        """Requeue; ``settings``: a new priority, N more attempts (migration 26)."""
        return self.operator_action(
            OperatorAction.REQUEUE,
            seen,
            actor=actor,
            reason=reason,
            force=force,
            settings=settings,
        )

    def operator_mark_stuck(
        self, seen: Sequence[SeenState], *, actor: str, reason: str | None, force: bool = False
    ) -> ActionResult:
        return self.operator_action(
            OperatorAction.MARK_STUCK, seen, actor=actor, reason=reason, force=force
        )

    def operator_cancel(
        self, seen: Sequence[SeenState], *, actor: str, reason: str | None, force: bool = False
    ) -> ActionResult:
        """Cancel Pending, Stuck and Processing jobs (a held lease is revoked: its holder's next
        fenced write is refused). ``force`` changes nothing: a live lease needs none."""
        return self.operator_action(
            OperatorAction.CANCEL, seen, actor=actor, reason=reason, force=force
        )

    def operator_delete(
        self, seen: Sequence[SeenState], *, actor: str, reason: str | None, force: bool = False
    ) -> ActionResult:
        """Delete Completed, Failed, Cancelled and Stuck jobs (their attempts go, their audit
        events stay, with a ``delete`` event). ``force`` changes nothing: never a Pending or
        Processing job."""
        return self.operator_action(
            OperatorAction.DELETE, seen, actor=actor, reason=reason, force=force
        )

    def _guarded(
        self,
        query: str,
        action: str,
        seen: Sequence[SeenState],
        actor: str,
        reason: str | None,
        force: bool,
        extra: dict[str, Any],
    ) -> ActionResult:
        unique = list({s.id: s for s in seen}.values())

        def params(batch: Sequence[SeenState]) -> dict[str, Any]:
            return {
                "ids": [s.id for s in batch],
                "statuses": [str(s.status) for s in batch],
                "attempts": [s.attempts for s in batch],
                "owners": [s.lease_owner for s in batch],
                "force": force,
                "actor": actor,
                "reason": reason,
                **extra,
            }

        # A job another session holds is skipped, never waited for.
        done, held = apply_skipping_held(self.db, query, unique, params)
        changed = tuple(done)
        missed = [s for s in unique if s.id not in set(changed)]
        current = self.get_jobs([s.id for s in missed]) if missed else {}
        db_now = self.db.server_info()["db_now"] if missed else None
        skipped = tuple(
            held_skip(action, s, current.get(s.id))
            if s.id in held
            else skip_of(action, s, current.get(s.id), force, db_now)
            for s in missed
        )
        return ActionResult(action=action, changed=changed, skipped=skipped)

    def seen_now(self, ids: Sequence[int]) -> list[SeenState]:
        """The current state of ids, for actions whose operator saw nothing (the CLI).

        Unknown ids get a state no job can match, so they come back as skipped ("no such job").
        """
        jobs = self.get_jobs(ids)
        return [
            jobs[i].seen() if i in jobs else SeenState(i, JobStatus.PENDING, -1, None) for i in ids
        ]

    # -- paused queues ----------------------------------------------------------------------

    def pause(self, queue: str, *, actor: str, reason: str) -> tuple[PausedQueue, bool]:
        """Pause ``queue`` (audited; its workers are told): the queue's pause, and whether this
        call made it (False: it was paused already, and that pause stands unchanged)."""
        check_queue_length(queue)
        params = {"queue": queue, "actor": actor, "reason": reason, "channel": self.db.channel}
        while True:
            rows = self.db.rows_waiting_at_most("queue_pause", params)
            row = rows[0] if rows else None
            if row is not None:
                return paused_from_row(row), True
            standing = self.paused([queue])
            if standing:
                return standing[0], False
            # (Resumed between the two statements: try again.)

    def resume(self, queue: str, *, actor: str, reason: str | None = None) -> PausedQueue | None:
        """Resume ``queue`` (audited; its workers are told): the pause it ended, or None when
        the queue was not paused (nothing changed)."""
        check_queue_length(queue)
        params = {"queue": queue, "actor": actor, "reason": reason, "channel": self.db.channel}
        rows = self.db.rows_waiting_at_most("queue_resume", params)
        row = rows[0] if rows else None
        return paused_from_row(row) if row is not None else None

    def paused(self, queues: Sequence[str] | None = None) -> list[PausedQueue]:
        """The paused queues (all, or those of ``queues``), by name."""
        rows = self.db.rows("queues_paused", {"queues": list(queues) if queues else None})
        return [paused_from_row(r) for r in rows]

    # -- reading ----------------------------------------------------------------------------

    def get_job(self, job_id: int) -> Job:
        row = self.db.one("job_get", {"id": job_id})
        if row is None:
            raise JobNotFound(self._not_found(job_id))
        return job_from_row(row)

    def inspect(
        self, job_id: int, *, payload_chars: int | None = None, bounded: bool = False
    ) -> JobDetail:
        """A job with its attempts and events; its payload as PayloadText (exact text, never
        decoded): whole, or only its first ``payload_chars`` characters. ``bounded``: its text
        fields cut to TEXT_SHOWN characters and only its latest ROWS_SHOWN attempts and events
        (what a role wrote may be megabytes, or millions of rows); ``cuts`` says what was cut."""
        text_chars = TEXT_SHOWN if bounded else None
        row = self.db.one(
            "job_inspect", {"id": job_id, "payload_chars": payload_chars, "text_chars": text_chars}
        )
        if row is None:
            raise JobNotFound(self._not_found(job_id))
        row["payload"] = PayloadText(row["payload_text"], row["payload_length"])
        job = job_from_row(row)
        shown = {"id": job_id, "text_chars": text_chars, "rows": ROWS_SHOWN if bounded else None}
        attempt_rows = self.db.rows("job_attempts_inspect", shown)
        event_rows = self.db.rows("job_events_inspect", shown)
        cuts = (
            _cuts("job", job_id, [row], ("lease_owner", "last_error"))
            + _cuts("attempt", "attempt", attempt_rows, ("lease_owner", "error"))
            + _cuts("event", "id", event_rows, ("actor", "reason"))
        )
        paused = self.paused([job.queue])
        db_now = self.db.server_info()["db_now"]
        return JobDetail(
            job,
            tuple(attempt_from_row(r) for r in attempt_rows),
            tuple(event_from_row(r) for r in event_rows),
            db_now,
            paused[0] if paused else None,
            row["unique_key"],
            row["concurrency_key"],
            row["key_holder"],
            cuts,
            attempts_total=attempt_rows[0]["total"] if attempt_rows else 0,
            events_total=event_rows[0]["total"] if event_rows else 0,
        )

    def _not_found(self, job_id: int) -> str:
        """Why a job is not there: deleted (by whom, when, why: its audit events outlive it),
        or never was."""
        events = self.db.rows("job_events_list", {"id": job_id})
        deleted = [e for e in events if e["action"] == "delete"]
        if deleted:
            e = deleted[-1]
            at = e["at"].isoformat(timespec="seconds")
            why = f" ({echo(e['reason'])})" if e["reason"] else ""
            return (
                f"job {job_id} was deleted by {echo(e['actor'])} at {at}{why}; its "
                f"{len(events)} audit event(s) remain in job_events"
            )
        return f"job {job_id} not found in {self.db.where} (schema {echo(self.db.schema)})"

    def status(
        self,
        queue: str | None = None,
        *,
        recent_window: timedelta = timedelta(hours=1),
        owner_window: timedelta = timedelta(hours=1),
        owner_limit: int = 200,
        stuck_floor: int = 0,
        group_limit: int = 1000,
    ) -> StatusReport:
        """Counts per queue at one instant. Pending, due and Stuck counts are bounded
        (``core/counts.py``): exact up to their cap, else the cap and ``*_capped``. The Stuck
        cap is at least ``stuck_floor`` (status --check's --max-stuck, so that the check is
        decided by the count). At most ``group_limit`` (queue, priority) groups of Pending jobs
        are read (``truncated``: there were more)."""
        params = {
            "queue": queue,
            "budget": COUNT_BUDGET,
            "floor": COUNT_FLOOR,
            "stuck_floor": max(COUNT_FLOOR, stuck_floor),
            "group_limit": group_limit,
            "recount_cap": bounds.RECOUNT_CAP,
            "recount_budget": bounds.RECOUNT_BUDGET,
        }
        # read_clock first: the read clock ({now}) of the statements after it; on a hot
        # standby behind its primary, the time of the last transaction it replayed.
        reads: list[tuple[str, dict[str, Any]]] = [
            ("console_snapshot_begin", {}),
            ("read_clock", {}),
            (
                "console_settings",
                {
                    "setting_names": list(queries.CONSOLE_SETTINGS),
                    "setting_values": list(queries.CONSOLE_SETTINGS.values()),
                },
            ),
            ("status_live_counts", params),
            ("status_finished_recent", {"queue": queue, "window": recent_window}),
            ("status_finished_estimate", {"schema": self.db.schema}),
            ("status_owners", {"window": owner_window, "limit": owner_limit}),
            ("status_paused", {"queue": queue, "limit": PAUSED_READ}),
            ("status_limits", {"queue": queue, "limits_limit": LIMITS_READ}),
        ]
        # One read-only REPEATABLE READ transaction with the console's settings (generic plans,
        # index paths only, no JIT, no parallel workers: each statement is a few index probes),
        # sent in one round trip: every count describes the same instant.
        with self.db.connection() as conn:
            with conn.pipeline(), conn.transaction():
                cursors = []
                for name, args in reads:
                    cur = conn.cursor(row_factory=dict_row)
                    cur.execute(queries.get(name).render(self.db.schema), args)
                    cursors.append(cur)
            clock, live, recent, estimated, owner_rows, paused_rows, limit_rows = (
                cur.fetchall() for cur in (cursors[1], *cursors[3:])
            )
        db_now = clock[0]["clock"]
        counts: dict[str, dict[str, Any]] = {}
        truncated = False
        for r in live:
            q = counts.setdefault(r["queue"], {"queue": r["queue"]})
            status = r["status"]
            if status == "Pending":
                jobs = BoundedCount.read(int(r["jobs"]), int(r["cap"]), r["estimate"])
                due = BoundedCount.read(int(r["due"]), int(r["cap"]), r["due_estimate"])
                if jobs.estimated and due.estimated:  # (the due ones are Pending too)
                    due = BoundedCount(due.value, True, min(due.shown, jobs.shown))
                q.update(
                    **count_fields("pending", jobs),
                    **count_fields("due", due),
                    oldest_due_at=r["oldest_due_at"],
                )
                truncated = truncated or bool(r["truncated"])
            elif status == "Processing":
                q.update(processing=r["jobs"], expired=r["expired"])
            else:
                count = BoundedCount.read(int(r["jobs"]), int(r["cap"]), r["estimate"])
                q.update(**count_fields("waiting" if status == "Waiting" else "stuck", count))
        for r in recent:
            q = counts.setdefault(r["queue"], {"queue": r["queue"]})
            q[RECENT_FIELD[r["status"]]] = r["jobs"]
        return StatusReport(
            db_now=db_now,
            queues=tuple(QueueCounts(**counts[name]) for name in sorted(counts)),
            owners=tuple(owner_health(owner_rows, db_now)),
            finished_estimate={r["status"]: int(r["jobs"]) for r in estimated},
            read_lag=clock[0]["lag"],
            recent_window=recent_window,
            paused=tuple(paused_from_row(r) for r in paused_rows),
            paused_total=int(paused_rows[0]["total"]) if paused_rows else 0,
            truncated=truncated,
            limits=tuple(limit_from_row(r) for r in limit_rows),
            limits_total=int(limit_rows[0]["total"]) if limit_rows else 0,
        )

    def owners(
        self, *, window: timedelta = timedelta(hours=1), limit: int = 200, db_now: Any = None
    ) -> list[OwnerHealth]:
        if db_now is None:
            db_now = self.db.server_info()["db_now"]
        rows = self.db.rows("status_owners", {"window": window, "limit": limit})
        return owner_health(rows, db_now)

    # -- retention --------------------------------------------------------------------------

    def prune_batch(
        self, older_than: timedelta, batch: int, queue: str | None, keep_events: bool
    ) -> tuple[int, int]:
        row = self.db.one(
            "jobs_prune",
            {"older_than": older_than, "batch": batch, "queue": queue, "keep_events": keep_events},
        )
        return (int(row["jobs"]), int(row["events"])) if row else (0, 0)

    def fold_counters(self, limit: int = 0) -> int:
        """Move up to ``limit`` (FOLD_LIMIT) counter deltas into their totals; how many moved.
        Bounded in time (``counters.FOLD_TIMEOUT``); never waits for another role's locks."""
        return counters.fold(self.db, limit or counters.FOLD_LIMIT)

    def prune_count(self, older_than: timedelta, queue: str | None) -> int:
        row = self.db.one("jobs_prune_count", {"older_than": older_than, "queue": queue})
        return int(row["jobs"]) if row else 0


def _cuts(
    record: str, key: int | str, rows: Sequence[dict[str, Any]], columns: Sequence[str]
) -> tuple[TextCut, ...]:
    """The text fields of ``rows`` a bounded read cut (``<column>_cut_bytes`` set); ``key``: the
    record's key, or the column that holds it."""
    return tuple(
        TextCut(record, key if isinstance(key, int) else r[key], c, len(r[c]), r[f"{c}_cut_bytes"])
        for r in rows
        for c in columns
        if r[f"{c}_cut_bytes"] is not None
    )
