"""The `leasectl` command line: parse, call the core, format.

Every error ends in ``main()``: one line on stderr (``leasectl: error: ...``), never a
traceback, never the DSN's password, and the exit code of docs/design.md (0 ok, 1 operational,
2 usage, 3 ``status --check`` found trouble).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import re
import signal
import sys
import threading
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from importlib import metadata
from pathlib import Path
from types import FrameType
from typing import Annotated, Any
from urllib.parse import unquote

import typer
from rich.console import Console, RenderableType

from leasectl import config, output, parent, retention
from leasectl.db import grants
from leasectl.db.connection import Database
from leasectl.db.dsn import dsn_params
from leasectl.db.operations import Operations
from leasectl.db.sql import migrations
from leasectl.errors import LeasectlError, UsageError
from leasectl.literal import ECHO_LIMIT, echo, shorten, visible
from leasectl.present.skips import action_json, skip_reason
from leasectl.terminal import require_terminal
from leasectl.watcher import DEFAULT_REASON, Watcher, WatcherConfig, run_pass
from leasectl.worker import Worker, WorkerConfig, load_handler

log = logging.getLogger("leasectl.cli")

PROG = "leasectl"
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
EXIT_CHECK_FAILED = 3
EXIT_INTERRUPTED = 130
# The longest line an error or a notice may take on stderr: a message quotes at most
# ECHO_LIMIT characters of any one value, so only a message that quotes too much gets here.
MESSAGE_LIMIT = 1000


class Mode(enum.StrEnum):
    REQUEUE = "requeue"
    MARK = "mark"


class LogLevel(enum.StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


@dataclass(frozen=True)
class Globals:
    """The global options, resolved only by the commands that need the database."""

    dsn: str | None
    schema: str | None

    def resolve(self) -> tuple[str, str]:
        return config.resolve_dsn(self.dsn), config.resolve_schema(self.schema)


app = typer.Typer(
    name=PROG,
    help="A leased-job queue on PostgreSQL: enqueue, work, watch for stuck jobs, inspect.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"{PROG} {metadata.version(PROG)}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    dsn: Annotated[
        str | None,
        typer.Option(
            "--dsn",
            metavar="DSN",
            help="PostgreSQL DSN (URI or key=value). Default: $LEASECTL_DSN, else $DATABASE_URL.",
            show_default=False,
        ),
    ] = None,
    schema: Annotated[
        str | None,
        typer.Option(
            "--schema",
            metavar="NAME",
            help="Schema holding the leasectl tables. Default: $LEASECTL_SCHEMA, else leasectl.",
            show_default=False,
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Show the version."),
    ] = False,
) -> None:
    ctx.obj = Globals(dsn=dsn, schema=schema)


# -- helpers ------------------------------------------------------------------------------------


def _globals(ctx: typer.Context) -> Globals:
    found = ctx.find_object(Globals)
    return found if found is not None else Globals(None, None)


@contextlib.contextmanager
def _operations(ctx: typer.Context) -> Iterator[Operations]:
    dsn, schema = _globals(ctx).resolve()
    db = Database.connect(dsn, schema)
    try:
        yield Operations(db)
    finally:
        db.close()


def _duration(text: str, option: str, *, allow_zero: bool = False) -> timedelta:
    return config.parse_duration(text, allow_zero=allow_zero, what=option)


def _queue_name(name: str, option: str = "--queue") -> str:
    return config.check_queue(name, option)


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


def _show(parts: Sequence[RenderableType]) -> None:
    # Data reaches these parts as output.lit cells; plain strings (our own) are not read as
    # markup or emoji codes either.
    console = Console(highlight=False, markup=False, emoji=False)
    for part in parts:
        console.print(part)


def _emit_json(document: Any, *, indent: int | None = 2) -> None:
    sys.stdout.write(output.dumps(document, indent=indent) + "\n")
    sys.stdout.flush()


def _say(message: str) -> None:
    """A one-line result on stdout; a value it names is shown, never acted on."""
    typer.echo(visible(message))


def _one_line(message: str) -> str:
    """What stderr may carry of a message: one line, every control visible, bounded."""
    return shorten(visible(message), MESSAGE_LIMIT)


def _warn(message: str) -> None:
    """A one-line notice on stderr for outcomes that are not errors but set the exit code."""
    line = _one_line(redact(message, secrets_in(_given_args)))
    print(f"{PROG}: {line}", file=sys.stderr, flush=True)


def _setup_logging(level: LogLevel) -> None:
    """Long-running commands log to stderr with timestamps."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        _SafeFormatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s", secrets_in(_given_args))
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    if level != LogLevel.DEBUG:
        logging.getLogger("psycopg").setLevel(logging.WARNING)


# -- commands -----------------------------------------------------------------------------------


@app.command()
def init(ctx: typer.Context) -> None:
    """Create or upgrade the schema (idempotent; safe to run concurrently)."""
    dsn, schema = _globals(ctx).resolve()
    with Database.connect(dsn, schema, check_schema=False) as db:
        applied = db.migrate()
    latest = migrations()[-1].version
    where = config.safe_dsn(dsn)
    if applied:
        _say(
            f"applied migration(s) {output.format_ids(applied)} to schema {echo(schema)} at "
            f"{where}; now at version {latest}"
        )
    else:
        _say(f"schema {echo(schema)} is up to date (version {latest}) at {where}")


@app.command()
def enqueue(
    ctx: typer.Context,
    queue: Annotated[str, typer.Option("--queue", "-q", help="Queue name.", show_default=False)],
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
        int, typer.Option(min=1, max=1_000_000, help="Enqueue N copies in one statement.")
    ] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Add jobs to a queue."""
    queue = _queue_name(queue)
    body = config.parse_payload(_payload_text(payload))
    wait = _duration(delay, "--delay", allow_zero=True)
    with _operations(ctx) as ops:
        ids = ops.enqueue_json(
            [body] * count, queue=queue, priority=priority, delay=wait, max_attempts=max_attempts
        )
    if as_json:
        # One line: --count may make this a million ids.
        _emit_json({"ids": ids, "queue": queue, "count": len(ids)}, indent=None)
        return
    when = f", due in {config.format_duration(wait)}" if wait else ""
    _say(f"enqueued {len(ids)} job(s) on queue {echo(queue)}{when}: {output.format_ids(ids)}")


@app.command()
def worker(
    ctx: typer.Context,
    queue: Annotated[
        list[str],
        typer.Option("--queue", "-q", help="Queue to work (repeatable).", show_default=False),
    ],
    handler: Annotated[
        str,
        typer.Option(metavar="MODULE:FUNCTION", help="Called with a JobContext per job."),
    ],
    concurrency: Annotated[int, typer.Option(min=1, max=1000, help="Jobs at once.")] = 1,
    lease_ttl: Annotated[str, typer.Option(metavar="DURATION", help="Lease length.")] = "30s",
    heartbeat_every: Annotated[
        str | None,
        typer.Option(metavar="DURATION", help="Lease renewal period. Default: lease TTL / 3."),
    ] = None,
    grace: Annotated[
        str,
        typer.Option(metavar="DURATION", help="On SIGTERM, time for running jobs to finish."),
    ] = "30s",
    poll_interval: Annotated[
        str,
        typer.Option(
            metavar="DURATION",
            help="Idle wait between claims; a busy worker reads its queues from the head "
            "at least this often.",
        ),
    ] = "1s",
    worker_id: Annotated[
        str | None,
        typer.Option(help="Lease owner name. Default: hostname:pid:random.", show_default=False),
    ] = None,
    retry_base: Annotated[
        str,
        typer.Option(
            metavar="DURATION",
            help="Delay before a failed job's second attempt; doubles per attempt (jittered).",
        ),
    ] = "1s",
    retry_cap: Annotated[
        str, typer.Option(metavar="DURATION", help="Longest delay between attempts.")
    ] = "1h",
    ready_file: Annotated[
        Path | None,
        typer.Option(
            metavar="PATH",
            help="Once registered and listening, write the worker id to this file (atomically); "
            "removed again when the worker stops.",
            show_default=False,
        ),
    ] = None,
    start_retry: Annotated[
        str,
        typer.Option(
            metavar="DURATION",
            help="If the database cannot be reached at start-up, keep trying this long "
            "(0: fail at once).",
        ),
    ] = "0s",
    parent_pid: Annotated[
        int | None,
        typer.Option(
            metavar="PID",
            help="End with process PID, this worker's parent (a supervisor that may die "
            "without stopping it): killed with it on Linux, else stopped when it is gone.",
            show_default=False,
        ),
    ] = None,
    log_level: Annotated[LogLevel, typer.Option(help="Log level.")] = LogLevel.INFO,
) -> None:
    """Run a worker until SIGTERM/SIGINT, then hand back unfinished jobs."""
    settings: dict[str, Any] = {
        "queues": tuple(_queue_name(q) for q in queue),
        "concurrency": concurrency,
        "lease_ttl": _duration(lease_ttl, "--lease-ttl"),
        "grace": _duration(grace, "--grace", allow_zero=True),
        "poll_interval": _duration(poll_interval, "--poll-interval"),
        "retry_base": _duration(retry_base, "--retry-base", allow_zero=True),
        "retry_cap": _duration(retry_cap, "--retry-cap", allow_zero=True),
    }
    if heartbeat_every is not None:
        settings["heartbeat_every"] = _duration(heartbeat_every, "--heartbeat-every")
    if worker_id is not None:
        if not worker_id.strip():
            raise UsageError("--worker-id must not be empty")
        settings["worker_id"] = worker_id
    worker_config = WorkerConfig(**settings)
    keep_trying = _duration(start_retry, "--start-retry", allow_zero=True)
    if parent_pid is not None:
        parent.die_with_parent(parent_pid)
    fn = load_handler(handler)
    dsn, schema = _globals(ctx).resolve()
    _setup_logging(log_level)
    runtime = Worker(dsn, schema, worker_config, fn)
    if parent_pid is not None:
        parent.watch_parent(runtime, parent_pid)
    failed: list[str] = []
    if ready_file is not None:
        if not ready_file.parent.is_dir():
            raise UsageError(f"--ready-file: no directory {echo(str(ready_file.parent))}")
        threading.Thread(
            target=_announce_ready,
            args=(runtime, ready_file, failed),
            name="leasectl-ready",
            daemon=True,
        ).start()
    try:
        runtime.run(start_retry=keep_trying)
    finally:
        if ready_file is not None:
            ready_file.unlink(missing_ok=True)
    if failed:
        raise LeasectlError(failed[0])


def _announce_ready(runtime: Worker, path: Path, failed: list[str]) -> None:
    """A file rather than a line on stdout: any supervisor can test for it (a readiness probe,
    a harness) without owning and draining the worker's output, and the rename means a reader
    never sees half of it. A worker that cannot say it is ready stops (exit 1)."""
    while not (runtime.started.is_set() and runtime.listening.is_set()):
        if runtime.closed.wait(0.05):
            return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(f"{runtime.worker_id}\n")
        tmp.replace(path)
    except OSError as exc:
        failed.append(f"cannot write --ready-file {echo(str(path))}: {exc.strerror or exc}")
        runtime.stop()


PaceOpt = Annotated[
    float,
    typer.Option(
        min=0.0,
        max=100.0,
        help="After each batch, wait this many times its duration (leaves the workers CPU "
        "during a large backlog; 1 = at most half the time in statements).",
    ),
]


def _watcher_config(
    *,
    mode: Mode,
    queue: str | None,
    reason: str | None,
    batch_size: int,
    pace: float = 0.0,
    interval: timedelta = timedelta(seconds=30),
) -> WatcherConfig:
    return WatcherConfig(
        interval=interval,
        mode="mark" if mode == Mode.MARK else "requeue",
        batch_size=batch_size,
        pace=pace,
        queue=_queue_name(queue) if queue is not None else None,
        reason=reason or DEFAULT_REASON,
    )


@app.command()
def watch(
    ctx: typer.Context,
    interval: Annotated[
        str, typer.Option(metavar="DURATION", help="Time between watcher passes.")
    ] = "30s",
    mode: Annotated[
        Mode, typer.Option(help="requeue: back to Pending; mark: quarantine as Stuck.")
    ] = Mode.REQUEUE,
    queue: Annotated[
        str | None, typer.Option("--queue", "-q", help="Only this queue.", show_default=False)
    ] = None,
    batch_size: Annotated[int, typer.Option(min=1, max=100_000, help="Jobs per statement.")] = 500,
    pace: PaceOpt = 0.0,
    reason: Annotated[str | None, typer.Option(help="Audit reason.", show_default=False)] = None,
    log_level: Annotated[LogLevel, typer.Option(help="Log level.")] = LogLevel.INFO,
) -> None:
    """Run the stuck watcher until SIGTERM/SIGINT."""
    watcher_config = _watcher_config(
        mode=mode,
        queue=queue,
        reason=reason,
        batch_size=batch_size,
        pace=pace,
        interval=_duration(interval, "--interval"),
    )
    _setup_logging(log_level)
    with _operations(ctx) as ops:
        watcher = Watcher(ops, watcher_config)

        def stop(signum: int, frame: FrameType | None) -> None:
            log.info("signal %d: stopping the watcher", signum)
            watcher.stop()

        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        log.info(
            "watching %s every %s (mode %s) at %s",
            f"queue {echo(queue)}" if queue else "all queues",
            config.format_duration(watcher_config.interval),
            watcher_config.mode,
            ops.db.where,
        )
        try:
            watcher.run()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        log.info("watcher stopped after %d passes; moved %d jobs", watcher.passes, watcher.moved)


@app.command("requeue-stuck")
def requeue_stuck(
    ctx: typer.Context,
    queue: Annotated[
        str | None, typer.Option("--queue", "-q", help="Only this queue.", show_default=False)
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(min=1, help="Move at most N jobs.", show_default=False),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List what would move; change nothing.")
    ] = False,
    reason: Annotated[str | None, typer.Option(help="Audit reason.", show_default=False)] = None,
    mode: Annotated[
        Mode, typer.Option(help="requeue: back to Pending; mark: quarantine as Stuck.")
    ] = Mode.REQUEUE,
    batch_size: Annotated[int, typer.Option(min=1, max=100_000, help="Jobs per statement.")] = 500,
    pace: PaceOpt = 0.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """One watcher pass over expired leases (for cron)."""
    watcher_config = _watcher_config(
        mode=mode, queue=queue, reason=reason, batch_size=batch_size, pace=pace
    )
    with _operations(ctx) as ops:
        listed = None if as_json else output.LISTED_JOBS
        result = run_pass(ops, watcher_config, limit=limit, dry_run=dry_run, listed=listed)
        if as_json:
            _emit_json(output.watcher_json(result))
            return
        db_now = ops.db.server_info()["db_now"]
    _show(output.watcher_renderables(result, db_now, mode.value))


def _operator_action(
    ctx: typer.Context,
    action: str,
    id_texts: Sequence[str],
    force: bool,
    reason: str | None,
    as_json: bool,
) -> None:
    ids = [config.parse_job_id(text) for text in id_texts]
    with _operations(ctx) as ops:
        seen = ops.seen_now(ids)
        act = ops.operator_requeue if action == "requeue" else ops.operator_mark_stuck
        result = act(seen, actor=config.operator_actor(), reason=reason, force=force)
    if as_json:
        _emit_json(action_json(result))
    else:
        _show(output.action_renderables(result))
    if result.skipped:
        verb = output.ACTION_PAST[action]
        _warn(
            f"{len(result.skipped)} of {len(result.skipped) + len(result.changed)} job(s) "
            f"not {verb}: "
            + "; ".join(f"{s.id}: {skip_reason(s)}" for s in result.skipped[:3])
            + (f"; and {len(result.skipped) - 3} more" if len(result.skipped) > 3 else "")
        )
        raise typer.Exit(1)


IdsArg = Annotated[list[str], typer.Argument(metavar="ID", help="Job ids.", show_default=False)]
ForceOpt = Annotated[
    bool, typer.Option("--force", help="Also override a live lease (the holder loses the job).")
]
ReasonOpt = Annotated[
    str | None, typer.Option(help="Audit reason, kept in job_events.", show_default=False)
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]


@app.command()
def requeue(
    ctx: typer.Context,
    ids: IdsArg,
    force: ForceOpt = False,
    reason: ReasonOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Put Stuck, Failed or expired jobs back to Pending (guarded; exit 1 if any is skipped)."""
    _operator_action(ctx, "requeue", ids, force, reason, as_json)


@app.command("mark-stuck")
def mark_stuck(
    ctx: typer.Context,
    ids: IdsArg,
    force: ForceOpt = False,
    reason: ReasonOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Quarantine Pending or expired jobs as Stuck (guarded; exit 1 if any is skipped)."""
    _operator_action(ctx, "mark-stuck", ids, force, reason, as_json)


@app.command()
def inspect(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(metavar="ID", help="Job id.", show_default=False)],
    as_json: JsonOpt = False,
) -> None:
    """Show a job, its attempts and its audit events."""
    parsed = config.parse_job_id(job_id)
    with _operations(ctx) as ops:
        detail = ops.inspect(parsed, payload_chars=None if as_json else output.PAYLOAD_SHOWN)
    if as_json:
        _emit_json(output.detail_json(detail))
    else:
        _show(output.detail_renderables(detail))


@app.command()
def status(
    ctx: typer.Context,
    queue: Annotated[
        str | None, typer.Option("--queue", "-q", help="Only this queue.", show_default=False)
    ] = None,
    as_json: JsonOpt = False,
    check: Annotated[
        bool,
        typer.Option("--check", help="Exit 3 when a lease has expired or a job is Stuck."),
    ] = False,
) -> None:
    """Counts per queue, oldest due job, expired leases, lease owners' freshness."""
    if queue is not None:
        queue = _queue_name(queue)
    with _operations(ctx) as ops:
        report = ops.status(queue)
    if as_json:
        _emit_json(output.status_json(report))
    else:
        _show(output.status_renderables(report))
    if check and (report.expired or report.stuck):
        _warn(
            f"check failed: {report.expired} expired lease(s), {report.stuck} Stuck job(s)"
            + (f" in queue {echo(queue)}" if queue else "")
        )
        raise typer.Exit(EXIT_CHECK_FAILED)


@app.command()
def prune(
    ctx: typer.Context,
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than", metavar="DURATION", help="Delete jobs finished longer ago than this."
        ),
    ],
    batch: Annotated[int, typer.Option(min=1, max=100_000, help="Jobs per statement.")] = 5000,
    queue: Annotated[
        str | None, typer.Option("--queue", "-q", help="Only this queue.", show_default=False)
    ] = None,
    drop_events: Annotated[
        bool,
        typer.Option("--drop-events", help="Also delete the pruned jobs' audit events."),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Count what would go; delete nothing.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Delete finished (Completed/Failed) jobs and their attempts in batches."""
    cutoff = _duration(older_than, "--older-than")
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
        )
    if as_json:
        _emit_json(
            {
                "dry_run": result.dry_run,
                "jobs": result.jobs,
                "events": result.events,
                "batches": result.batches,
                "older_than_s": cutoff.total_seconds(),
            }
        )
        return
    verb = "would delete" if result.dry_run else "deleted"
    events = "" if result.dry_run else f", {result.events} audit event(s)"
    typer.echo(
        f"{verb} {result.jobs} finished job(s) older than {config.format_duration(cutoff)}"
        f"{events}" + ("" if result.dry_run else f" in {result.batches} batch(es)")
    )


@app.command()
def grant(
    ctx: typer.Context,
    viewer: Annotated[
        list[str] | None,
        typer.Option(
            metavar="ROLE",
            help="May run status, inspect and the console read-only (repeatable).",
            show_default=False,
        ),
    ] = None,
    operator: Annotated[
        list[str] | None,
        typer.Option(
            metavar="ROLE",
            help="Viewer + requeue, mark-stuck, requeue-stuck, watch (repeatable).",
            show_default=False,
        ),
    ] = None,
    worker: Annotated[
        list[str] | None,
        typer.Option(metavar="ROLE", help="May run workers (repeatable).", show_default=False),
    ] = None,
    producer: Annotated[
        list[str] | None,
        typer.Option(metavar="ROLE", help="May enqueue jobs (repeatable).", show_default=False),
    ] = None,
    print_sql: Annotated[
        bool, typer.Option("--print-sql", help="Print the SQL for a DBA; change nothing.")
    ] = False,
) -> None:
    """Grant least-privilege access to existing roles (none can drop, truncate or delete)."""
    wanted = [
        grants.Grant(kind, grants.validate_role(role))
        for kind, roles in (
            (grants.Kind.VIEWER, viewer),
            (grants.Kind.OPERATOR, operator),
            (grants.Kind.WORKER, worker),
            (grants.Kind.PRODUCER, producer),
        )
        for role in roles or ()
    ]
    if not wanted:
        raise UsageError("name at least one role: --viewer, --operator, --worker or --producer")
    if print_sql:
        schema = config.resolve_schema(_globals(ctx).schema)
        # Role and schema names are the caller's own, but an escape in one must not act on the
        # terminal: such a name is shown escaped (and the SQL then names it that way).
        sys.stdout.write(visible(grants.render(wanted, schema), multiline=True))
        return
    with _operations(ctx) as ops:
        grants.apply(ops.db, wanted)
        where, schema = ops.db.where, ops.db.schema
    for g in wanted:
        _say(
            f"granted {g.kind.value} privileges on schema {echo(schema)} to role {echo(g.role)} "
            f"at {where} ({grants.WHAT[g.kind]})"
        )


@app.command()
def demo(
    ctx: typer.Context,
    fresh: Annotated[
        bool, typer.Option("--fresh", help="Start from an empty demo database.")
    ] = False,
    headless: Annotated[
        bool, typer.Option("--headless", help="Run the fleet without the console; print a summary.")
    ] = False,
    duration: Annotated[
        str | None,
        typer.Option(metavar="DURATION", help="Stop after this long.", show_default=False),
    ] = None,
    refresh: Annotated[
        str, typer.Option(metavar="DURATION", help="Console refresh interval.")
    ] = "1s",
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Embedded PostgreSQL + a simulated fleet + the console, with no setup.

    Only an explicit --dsn points the demo at another server (never LEASECTL_DSN or
    DATABASE_URL, which may name an application's database); there it uses its own schema.
    """
    from leasectl.demo import run_demo

    g = _globals(ctx)
    if g.dsn is not None:
        config.validate_dsn(g.dsn)
    schema = config.resolve_schema(g.schema)
    lasts = _duration(duration, "--duration") if duration else None
    every = _duration(refresh, "--refresh")
    if not headless:
        require_terminal("to run the demo without it, use `leasectl demo --headless`")
    summary = run_demo(
        dsn=g.dsn,
        schema=schema,
        fresh=fresh,
        headless=headless,
        duration=lasts,
        refresh=every,
    )
    if as_json:
        _emit_json(summary.to_json())
    else:
        typer.echo(summary.render())
    if summary.interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)
    if not summary.ok:
        raise typer.Exit(1)


@app.command()
def tui(
    ctx: typer.Context,
    refresh: Annotated[
        str, typer.Option(metavar="DURATION", help="Time between refreshes.")
    ] = "2s",
    queue: Annotated[
        str | None, typer.Option("--queue", "-q", help="Only this queue.", show_default=False)
    ] = None,
    read_only: Annotated[
        bool, typer.Option("--read-only", help="Disable requeue and mark-stuck.")
    ] = False,
) -> None:
    """Open the console."""
    dsn, schema = _globals(ctx).resolve()
    every = _duration(refresh, "--refresh")
    if queue is not None:
        queue = _queue_name(queue)
    require_terminal("for a one-shot view, run `leasectl status`")
    try:
        # Imported here: the core never imports Textual.
        from leasectl.console.app import run  # type: ignore[import-not-found, import-untyped, unused-ignore]
    except ModuleNotFoundError as exc:
        if exc.name in ("leasectl.console", "leasectl.console.app"):
            raise LeasectlError("the console is not part of this build of leasectl") from None
        raise LeasectlError(f"the console cannot start: {exc}") from None
    run(dsn, schema, refresh=every, queue=queue, read_only=read_only)


# -- the one place errors become lines and exit codes ------------------------------------------

# Up to the LAST "@": a raw "/" or "@" in the password makes libpq stop earlier, so this takes
# more than libpq does; the generous reading is the right one for scrubbing.
_URI_USERINFO = re.compile(r"^\s*postgres(?:ql)?://(?P<userinfo>.*)@", re.IGNORECASE | re.DOTALL)
_KV_PASSWORD = re.compile(r"\bpassword\s*=\s*")
_URI_SEPARATORS = re.compile(r"[/@:?#&,]+")
MIN_PIECE = 3  # shorter pieces of a password are not scrubbed: they would garble every message

# The arguments main() was called with: notices and log lines are scrubbed with them too.
_given_args: list[str] = []


def _dsn_candidates(args: Sequence[str]) -> list[str]:
    found = [os.environ.get("LEASECTL_DSN"), os.environ.get("DATABASE_URL")]
    for i, arg in enumerate(args):
        if arg == "--dsn" and i + 1 < len(args):
            found.append(args[i + 1])
        elif arg.startswith("--dsn="):
            found.append(arg.removeprefix("--dsn="))
    return [c for c in found if c]


def _kv_value(text: str, start: int) -> tuple[str, str]:
    """The value libpq reads at ``start`` of a key=value DSN (quoted or not, backslash escapes
    undone; an unterminated quote runs to the end) and its raw text."""
    quoted = text.startswith("'", start)
    i = start + 1 if quoted else start
    value: list[str] = []
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            value.append(text[i + 1])
            i += 2
            continue
        if (quoted and char == "'") or (not quoted and char.isspace()):
            break
        value.append(char)
        i += 1
    return "".join(value), text[start + 1 if quoted else start : i]


def _uri_password_pieces(dsn: str) -> set[str]:
    """Everything between the user's ":" and the last "@", raw and decoded, and each piece of it
    libpq may have read as a host, port or database name; for an ambiguous URI, also the host,
    port and database libpq did read."""
    found: set[str] = set()
    match = _URI_USERINFO.match(dsn)
    if match is None:
        return found
    user, colon, password = match.group("userinfo").partition(":")
    if colon and password:
        for form in (password, unquote(password)):
            found.add(form)
            found.update(p for p in _URI_SEPARATORS.split(form) if len(p) >= MIN_PIECE)
    if config.ambiguous_uri(dsn):
        with contextlib.suppress(Exception):
            params = dsn_params(dsn)
            for key in ("host", "port", "dbname"):
                value = str(params.get(key) or "")
                found.update(
                    p for p in {value, *value.split(",")} if len(p) >= MIN_PIECE and p != user
                )
    return found


def secrets_in(args: Sequence[str]) -> list[str]:
    """Passwords in any DSN we may have been given, even one too broken to parse, and in
    $PGPASSWORD; longest first, so that a password goes before the pieces of it."""
    secrets: set[str] = {os.environ.get("PGPASSWORD") or ""}
    for dsn in _dsn_candidates(args):
        with contextlib.suppress(Exception):
            secrets.add(str(dsn_params(dsn).get("password") or ""))
        secrets.update(_uri_password_pieces(dsn))
        for m in _KV_PASSWORD.finditer(dsn):
            value, raw = _kv_value(dsn, m.end())
            secrets.update({value, raw})
            if config.is_uri(dsn):  # ?password=... in a URI's query ends at "&"
                first = raw.split("&", 1)[0]
                secrets.update({first, unquote(first), unquote(raw)})
    return sorted((s for s in secrets if s), key=len, reverse=True)


def redact(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def scrub(message: str, secrets: Sequence[str]) -> str:
    message = redact(message, secrets)
    return " ".join(part.strip() for part in message.strip().splitlines() if part.strip())


class _SafeFormatter(logging.Formatter):
    """Log lines (and the tracebacks in them) without any of ``secrets``; the worker ids,
    queues and server messages they quote are shown, not acted on (newlines and tabs stay,
    for tracebacks)."""

    def __init__(self, fmt: str, secrets: Sequence[str]) -> None:
        super().__init__(fmt)
        self.secrets = list(secrets)

    def format(self, record: logging.LogRecord) -> str:
        return visible(redact(super().format(record), self.secrets), multiline=True)


def _error(message: str, args: Sequence[str], *, kind: str = "error") -> None:
    line = _one_line(scrub(message, secrets_in(args)))
    print(f"{PROG}: {kind}: {line}", file=sys.stderr, flush=True)


def _usage_hint(exc: typer.TyperException) -> str:
    ctx = getattr(exc, "ctx", None)
    path = getattr(ctx, "command_path", None)
    return f" (see `{path} --help`)" if path else ""


def _stdout_gone() -> None:
    """Output piped into `head`: stop quietly; stdout goes to /dev/null so the final flush works."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (never raises for user errors)."""
    args = list(sys.argv[1:] if argv is None else argv)
    _given_args[:] = args
    debug = os.environ.get("LEASECTL_DEBUG") == "1"
    if debug:
        logging.basicConfig(level=logging.DEBUG)
        for handler in logging.getLogger().handlers:
            handler.setFormatter(_SafeFormatter(logging.BASIC_FORMAT, secrets_in(args)))
    else:
        # Nothing logs to stderr unless a command asks for it (worker, watch).
        logging.getLogger().addHandler(logging.NullHandler())
    command = typer.main.get_command(app)
    try:
        result = command.main(args=args, prog_name=PROG, standalone_mode=False)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except LeasectlError as exc:
        _error(str(exc), args)
        return exc.exit_code
    except typer.Abort:
        _error("aborted", args)
        return 1
    except typer.TyperException as exc:  # Click's usage errors (vendored by Typer)
        if type(exc).__name__ == "NoArgsIsHelpError":
            typer.echo(exc.format_message())
            return 0
        # Click quotes the value it rejects (an option name, a choice) in full, around words of
        # its own that take well under 100 characters: keep about ECHO_LIMIT of the value.
        message = shorten(exc.format_message(), ECHO_LIMIT + 100)
        _error(message + _usage_hint(exc), args)
        return exc.exit_code
    except BrokenPipeError:
        _stdout_gone()
        return 1
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception as exc:
        hint = "" if debug else " (set LEASECTL_DEBUG=1 for the traceback)"
        _error(f"{type(exc).__name__}: {exc}{hint}", args, kind="internal error")
        if debug:
            shown = redact(traceback.format_exc(), secrets_in(args))
            print(visible(shown, multiline=True), file=sys.stderr, end="")
        return 1
    return result if isinstance(result, int) else 0
