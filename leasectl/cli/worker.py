"""`leasectl worker`: run the worker runtime, and say when it is ready through a file."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from leasectl.cli.completion import complete_queue
from leasectl.cli.root import _duration, _globals, _queue_name
from leasectl.cli.stderr import LogFormat, LogLevel, _setup_logging
from leasectl.core.config import MAX_OWNER_CHARS
from leasectl.core.errors import LeasectlError, UsageError
from leasectl.core.literal import echo

# The runtime (and psycopg) is imported when a worker starts, not when --help imports this.
if TYPE_CHECKING:
    from leasectl.runtime.worker import Worker


def worker(
    ctx: typer.Context,
    queue: Annotated[
        list[str],
        typer.Option(
            "--queue",
            "-q",
            help="Queue to work (repeatable).",
            show_default=False,
            autocompletion=complete_queue,
        ),
    ],
    handler: Annotated[
        str,
        typer.Option(
            metavar="MODULE:FUNCTION",
            help="Called with a JobContext per job; an async def handler gets an "
            "AsyncJobContext and runs its jobs as tasks of one event loop.",
        ),
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
    event_loop: Annotated[
        str,
        typer.Option(
            metavar="auto|uvloop|asyncio",
            help="An async def handler's event loop: uvloop when installed (auto), or asyncio's.",
        ),
    ] = "auto",
    log_level: Annotated[LogLevel, typer.Option(help="Log level.")] = LogLevel.INFO,
    log_format: Annotated[
        LogFormat,
        typer.Option(help="Log lines as text, or json: one JSON object per line (docs/design.md)."),
    ] = LogFormat.TEXT,
) -> None:
    """Run a worker until SIGTERM/SIGINT, then hand back unfinished jobs."""
    from leasectl.runtime import parent
    from leasectl.runtime.worker import Worker, WorkerConfig, load_handler

    settings: dict[str, Any] = {
        "queues": tuple(_queue_name(q) for q in queue),
        "concurrency": concurrency,
        "lease_ttl": _duration(lease_ttl, "--lease-ttl"),
        "grace": _duration(grace, "--grace", allow_zero=True),
        "poll_interval": _duration(poll_interval, "--poll-interval"),
        "retry_base": _duration(retry_base, "--retry-base", allow_zero=True),
        "retry_cap": _duration(retry_cap, "--retry-cap", allow_zero=True),
        "event_loop": event_loop,
    }
    if heartbeat_every is not None:
        settings["heartbeat_every"] = _duration(heartbeat_every, "--heartbeat-every")
    if worker_id is not None:
        if not worker_id.strip():
            raise UsageError("--worker-id must not be empty")
        if len(worker_id) > MAX_OWNER_CHARS:
            raise UsageError(
                f"--worker-id: at most {MAX_OWNER_CHARS} characters, got {len(worker_id):,}"
            )
        settings["worker_id"] = worker_id
    worker_config = WorkerConfig(**settings)
    keep_trying = _duration(start_retry, "--start-retry", allow_zero=True)
    _setup_logging(log_level, log_format)  # (before the parent's guard: its warning is a log line)
    if parent_pid is not None:
        parent.die_with_parent(parent_pid)
    fn = load_handler(handler)
    dsn, schema = _globals(ctx).resolve()
    runtime = Worker(dsn, schema, worker_config, fn)
    if parent_pid is not None:
        parent.watch_parent(
            parent_pid, runtime.stop, runtime.stopping, runtime.config.grace.total_seconds()
        )
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
