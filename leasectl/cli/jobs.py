"""The commands on jobs and the schema: init, enqueue, inspect, status, prune."""

from __future__ import annotations

import sys
from datetime import timedelta
from typing import Annotated

import typer

from leasectl.cli.completion import complete_queue
from leasectl.cli.root import (
    EXIT_CHECK_FAILED,
    JsonOpt,
    QueueOpt,
    ReadDsnOpt,
    _duration,
    _emit_json,
    _globals,
    _operations,
    _queue_name,
    _say,
    _show,
)
from leasectl.cli.stderr import _warn
from leasectl.core import config
from leasectl.core.checks import MAX_LATE_CHECKED
from leasectl.core.errors import PermissionDenied, UsageError
from leasectl.core.literal import echo
from leasectl.core.schedules import LATE_AFTER, SLOTS_KEEP

# The data layer, the presentation and the runtime are imported by each command as it needs
# them: `leasectl --help` and a TAB import this module too (cli/commands.py).

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def _payload_text(value: str) -> str:
    """--payload: JSON text, ``@FILE`` (a file's contents) or ``-`` (standard input); at most
    MAX_PAYLOAD_BYTES are read."""
    if value != "-" and not value.startswith("@"):
        return value
    limit = config.MAX_PAYLOAD_BYTES
    try:
        if value == "-":
            data = sys.stdin.buffer.read(limit + 1)
        else:
            with open(value[1:], "rb") as f:
                data = f.read(limit + 1)
    except OSError as exc:
        source = "standard input" if value == "-" else f"payload file {echo(value[1:])}"
        raise UsageError(f"cannot read {source}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise UsageError(f"payload too large: more than {limit:,} bytes (16 MiB)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError("invalid JSON payload: not valid UTF-8") from None


def init(ctx: typer.Context) -> None:
    """Create or upgrade the schema (idempotent; safe to run concurrently)."""
    from leasectl.db.connection import Database
    from leasectl.db.dsn import safe_dsn
    from leasectl.db.operations import Operations
    from leasectl.db.sql import migrations
    from leasectl.present.text import format_ids

    dsn, schema = _globals(ctx).resolve()
    with Database.connect(dsn, schema, check_schema=False) as db:
        applied = db.migrate()
        writable = Operations(db).writable_schemas()
    latest = migrations()[-1].version
    where = safe_dsn(dsn)
    if applied:
        _say(
            f"applied migration(s) {format_ids(applied)} to schema {echo(schema)} at "
            f"{where}; now at version {latest}"
        )
    else:
        _say(f"schema {echo(schema)} is up to date (version {latest}) at {where}")
    for found in writable:
        _warn(found.warning())


def enqueue(
    ctx: typer.Context,
    queue: Annotated[
        str,
        typer.Option(
            "--queue", "-q", help="Queue name.", show_default=False, autocompletion=complete_queue
        ),
    ],
    payload: Annotated[
        str,
        typer.Option(
            "--payload",
            "-p",
            metavar="JSON",
            help="Job payload: JSON text, @FILE (read from a file) or - (from stdin); "
            "stored exactly as written, at most 16 MiB and 256 levels deep.",
        ),
    ] = "{}",
    priority: Annotated[
        int,
        typer.Option(min=INT32_MIN, max=INT32_MAX, help="Smaller runs first."),
    ] = 0,
    delay: Annotated[
        str, typer.Option(metavar="DURATION", help="Not claimable before now + delay.")
    ] = "0",
    max_attempts: Annotated[
        int,
        typer.Option(min=1, max=config.MAX_ATTEMPTS, help="Leases before the job is Failed."),
    ] = 5,
    count: Annotated[
        int,
        typer.Option(
            min=1,
            max=1_000_000,
            help="Enqueue N copies in one statement (all or none; at most 64 MiB of payloads).",
        ),
    ] = 1,
    unique_key: Annotated[
        str | None,
        typer.Option(
            "--unique-key",
            metavar="KEY",
            help="At most one live (Pending, Processing, Stuck, Waiting) job per queue and key: "
            "if one is there, nothing is added and its id is shown. At most 200 characters.",
            show_default=False,
        ),
    ] = None,
    concurrency_key: Annotated[
        str | None,
        typer.Option(
            "--concurrency-key",
            metavar="KEY",
            help="At most one job of the queue with this key runs at a time, in queue order; "
            "the others wait (Waiting) without holding up other keys. At most 200 characters.",
            show_default=False,
        ),
    ] = None,
    timeout: Annotated[
        str | None,
        typer.Option(
            "--timeout",
            metavar="DURATION",
            help="How long one attempt's handler may run (1s to 7d): past it the worker cancels "
            "it and the attempt fails (retried as any failure).",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Add jobs to a queue."""
    from leasectl.present.text import format_ids

    queue = _queue_name(queue)
    if unique_key is not None and count > 1:
        raise UsageError("--unique-key names one job: it cannot go with --count above 1")
    body = config.parse_payload(_payload_text(payload))
    config.check_enqueue_size(len(body.encode("utf-8")), count)
    wait = _duration(delay, "--delay", allow_zero=True)
    limit = None if timeout is None else _duration(timeout, "--timeout")
    if limit is not None and not config.MIN_TIMEOUT <= limit <= config.MAX_TIMEOUT:
        raise UsageError(
            f"--timeout must be between 1s and 7d, got {config.format_duration(limit)}"
        )
    with _operations(ctx) as ops:
        done = ops.enqueue_json(
            [body] * count,
            queue=queue,
            priority=priority,
            delay=wait,
            max_attempts=max_attempts,
            unique_key=unique_key,
            concurrency_key=concurrency_key,
            timeout=limit,
        )
    ids = [e.id for e in done]
    duplicate = any(e.duplicate for e in done)
    if as_json:
        # One line: --count may make this a million ids.
        doc = {
            "ids": ids,
            "queue": queue,
            "count": len(ids),
            "unique_key": unique_key,
            "concurrency_key": concurrency_key,
            # true: nothing was added, ids holds the live job that has the key
            "duplicate": duplicate,
        }
        _emit_json(doc, indent=None)
        return
    if duplicate:
        _say(
            f"not enqueued: job {format_ids(ids)} with unique key {echo(unique_key or '')} is "
            f"already live on queue {echo(queue)}"
        )
        return
    when = f", due in {config.format_duration(wait)}" if wait else ""
    _say(f"enqueued {len(ids)} job(s) on queue {echo(queue)}{when}: {format_ids(ids)}")


def inspect(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(metavar="ID", help="Job id.", show_default=False)],
    as_json: JsonOpt = False,
    full: Annotated[
        bool,
        typer.Option(
            "--full",
            help="Show every attempt and event and every text whole (without it, long texts "
            "and long histories are cut, saying so; --json is always whole).",
        ),
    ] = False,
) -> None:
    """Show a job, its attempts and its audit events."""
    from leasectl.present.detail import PAYLOAD_SHOWN

    parsed = config.parse_job_id(job_id)
    whole = as_json or full
    with _operations(ctx, on_newer=_warn) as ops:
        detail = ops.inspect(
            parsed, payload_chars=None if whole else PAYLOAD_SHOWN, bounded=not whole
        )
    if as_json:
        from leasectl.present.jsonout import detail_json

        _emit_json(detail_json(detail))
    else:
        from leasectl.present.detail import detail_renderables

        _show(detail_renderables(detail))


def status(
    ctx: typer.Context,
    queue: QueueOpt = None,
    as_json: JsonOpt = False,
    check: Annotated[
        bool,
        typer.Option("--check", help="Exit 3 when a lease has expired or a job is Stuck."),
    ] = False,
    max_oldest_due: Annotated[
        str | None,
        typer.Option(
            metavar="DURATION",
            help="Check (implies --check): fail when a queue's oldest due job has waited "
            "longer than this.",
            show_default=False,
        ),
    ] = None,
    max_expired: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Check (implies --check): fail when a queue has more expired leases "
            "than this (--check alone: 0).",
            show_default=False,
        ),
    ] = None,
    max_stuck: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Check (implies --check): fail when a queue has more Stuck jobs than this "
            "(--check alone: 0).",
            show_default=False,
        ),
    ] = None,
    max_late_schedules: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=MAX_LATE_CHECKED,
            help="Check (implies --check): fail when more schedules than this are late (next "
            "slot over 2 minutes overdue, not paused).",
            show_default=False,
        ),
    ] = None,
    read_dsn: ReadDsnOpt = None,
) -> None:
    """Counts per queue, oldest due job, expired leases, lease owners' freshness."""
    from leasectl.core.checks import Thresholds, violations
    from leasectl.db.dsn import resolve_read_dsn
    from leasectl.db.schedules import LATE_READ
    from leasectl.db.stats import pickup_recent
    from leasectl.present.stats import pickup_json, pickup_renderables
    from leasectl.present.status import status_renderables, violation_line
    from leasectl.present.text import count_text

    reads = resolve_read_dsn(read_dsn)
    if queue is not None:
        queue = _queue_name(queue)
    limits = None
    if (
        max_oldest_due is not None
        or max_expired is not None
        or max_stuck is not None
        or max_late_schedules is not None
    ):
        limits = Thresholds(
            max_expired=max_expired or 0,
            max_stuck=max_stuck or 0,
            max_oldest_due=(
                _duration(max_oldest_due, "--max-oldest-due", allow_zero=True)
                if max_oldest_due is not None
                else None
            ),
            max_late_schedules=max_late_schedules,
        )
    with _operations(ctx, read_dsn=reads, on_newer=_warn) as ops:
        # A Stuck count stops at its cap: counted past --max-stuck, it decides the check.
        report = ops.status(queue, stuck_floor=limits.max_stuck + 1 if limits is not None else 0)
        writable = ops.writable_schemas()
        late_read = LATE_READ
        if max_late_schedules is None:
            late = ops.late_schedules_if_readable()
        else:  # checked: read one past the limit, and a role that may not read them is refused
            late_read = max(LATE_READ, max_late_schedules + 1)
            late = ops.late_schedules(LATE_AFTER, late_read)
        late_count = None if late is None else len(late)
        late_capped = late_count == late_read
        try:
            recent = pickup_recent(ops.db)
        except PermissionDenied:  # a role granted no history (a worker's): status all the same
            recent = None
        pickup = [p for p in recent or () if queue is None or p.queue == queue]
    if as_json:
        from leasectl.core.schedules import schedule_json
        from leasectl.present.jsonout import status_json

        _emit_json(
            {
                **status_json(report, limits, late_count, late_capped),
                "writable_schemas": [w.as_json() for w in writable],
                # Schedules whose next slot is overdue (null: this role may not read them).
                "late_schedules": None if late is None else [schedule_json(s) for s in late],
                "pickup": pickup_json(pickup) if recent is not None else None,
            }
        )
    else:
        from leasectl.present.schedules import late_table

        _show(
            [
                *status_renderables(report),
                *pickup_renderables(pickup),
                *([late_table(late)] if late else []),
            ]
        )
    for exposed in writable:
        _warn(exposed.warning())
    if limits is not None:
        found = violations(report, limits, late_count, late_capped)
        for violation in found:
            _warn(violation_line(violation))
        if found:
            raise typer.Exit(EXIT_CHECK_FAILED)
        return
    if check and (report.expired or report.stuck):
        _warn(
            f"check failed: {report.expired} expired lease(s), "
            f"{count_text(report.stuck, report.stuck_capped)} Stuck job(s)"
            + (f" in queue {echo(queue)}" if queue else "")
        )
        raise typer.Exit(EXIT_CHECK_FAILED)


def prune(
    ctx: typer.Context,
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than", metavar="DURATION", help="Delete jobs finished longer ago than this."
        ),
    ],
    batch: Annotated[int, typer.Option(min=1, max=100_000, help="Jobs per statement.")] = 5000,
    queue: QueueOpt = None,
    drop_events: Annotated[
        bool,
        typer.Option("--drop-events", help="Also delete the pruned jobs' audit events."),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Count what would go; delete nothing.")
    ] = False,
    history_keep: Annotated[
        str,
        typer.Option(
            metavar="DURATION",
            help="Also delete the per-minute history (`stats`) older than this.",
        ),
    ] = "7d",
    as_json: JsonOpt = False,
) -> None:
    """Delete finished (Completed/Failed/Cancelled) jobs and their attempts in batches (and old
    per-minute history and the schedules' slot rows behind their next slot)."""
    from leasectl.runtime import retention

    cutoff = _duration(older_than, "--older-than")
    keep = _duration(history_keep, "--history-keep")
    if keep < timedelta(minutes=1):
        raise UsageError("invalid --history-keep: keep the history a minute at least")
    if queue is not None:
        queue = _queue_name(queue)
    with _operations(ctx) as ops:
        result = retention.prune(
            ops,
            older_than=cutoff,
            batch=batch,
            queue=queue,
            keep_events=not drop_events,
            dry_run=dry_run,
            history_keep=keep,
            slots=True,
        )
    if as_json:
        _emit_json(
            {
                "dry_run": result.dry_run,
                "jobs": result.jobs,
                "events": result.events,
                "batches": result.batches,
                "older_than_s": cutoff.total_seconds(),
                "history_rows": result.history,
                "schedule_slots": result.slots,
            }
        )
        return
    verb = "would delete" if result.dry_run else "deleted"
    events = "" if result.dry_run else f", {result.events} audit event(s)"
    typer.echo(
        f"{verb} {result.jobs} finished job(s) older than {config.format_duration(cutoff)}"
        f"{events}" + ("" if result.dry_run else f" in {result.batches} batch(es)")
    )
    if result.history:
        typer.echo(
            f"deleted {result.history} row(s) of per-minute history older than "
            f"{config.format_duration(keep)}"
        )
    if result.slots:
        typer.echo(
            f"deleted {result.slots} schedule slot row(s) older than "
            f"{config.format_duration(SLOTS_KEEP)} (behind their schedule's next slot)"
        )
