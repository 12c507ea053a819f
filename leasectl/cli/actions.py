"""Getting stuck jobs moving: the watcher (watch, requeue-stuck) and the guarded operator
actions on ids or on a filter (requeue, mark-stuck, cancel, delete; made by cli/bulk.py)."""

from __future__ import annotations

import enum
import logging
import signal
import threading
from datetime import timedelta
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import typer

from leasectl.cli.bulk import guarded_command
from leasectl.cli.root import (
    JsonOpt,
    QueueOpt,
    _duration,
    _emit_json,
    _operations,
    _queue_name,
    _show,
)
from leasectl.cli.stderr import LogFormat, LogLevel, _setup_logging
from leasectl.core import config
from leasectl.core.actions import OperatorAction
from leasectl.core.errors import LeasectlError
from leasectl.core.literal import echo

# The watcher and the presentation are imported by the commands that run: `leasectl --help` and
# a TAB import this module too (cli/commands.py).
if TYPE_CHECKING:
    from leasectl.runtime.watcher import WatcherConfig

log = logging.getLogger("leasectl.cli")


class Mode(enum.StrEnum):
    REQUEUE = "requeue"
    MARK = "mark"


PaceOpt = Annotated[
    float | None,
    typer.Option(
        min=0.0,
        max=100.0,
        help="After each batch, wait this many times its duration (0 = back to back; 1 = at "
        "most half the time in statements). Default: adaptive, flat out on an idle server, "
        "waiting after each batch in proportion to how much busy workers slowed it.",
        show_default=False,
    ),
]


def _watcher_config(
    *,
    mode: Mode,
    queue: str | None,
    reason: str | None,
    batch_size: int,
    pace: float | None = None,
    interval: timedelta = timedelta(seconds=30),
    owner: str | None = None,
    history_keep: timedelta | None = None,
) -> WatcherConfig:
    from leasectl.core.stats import DEFAULT_KEEP
    from leasectl.runtime.watcher import DEFAULT_REASON, WatcherConfig

    return WatcherConfig(
        interval=interval,
        mode="mark" if mode == Mode.MARK else "requeue",
        batch_size=batch_size,
        pace=pace,
        queue=_queue_name(queue) if queue is not None else None,
        owner=owner,
        reason=reason or DEFAULT_REASON,
        history_keep=history_keep if history_keep is not None else DEFAULT_KEEP,
    )


def watch(
    ctx: typer.Context,
    interval: Annotated[
        str, typer.Option(metavar="DURATION", help="Time between watcher passes.")
    ] = "30s",
    mode: Annotated[
        Mode, typer.Option(help="requeue: back to Pending; mark: quarantine as Stuck.")
    ] = Mode.REQUEUE,
    queue: QueueOpt = None,
    batch_size: Annotated[int, typer.Option(min=1, max=100_000, help="Jobs per statement.")] = 500,
    pace: PaceOpt = None,
    reason: Annotated[str | None, typer.Option(help="Audit reason.", show_default=False)] = None,
    parent_pid: Annotated[
        int | None,
        typer.Option(
            metavar="PID",
            help="End with process PID, this watcher's parent (a supervisor that may die "
            "without stopping it): killed with it on Linux, else stopped when it is gone.",
            show_default=False,
        ),
    ] = None,
    log_level: Annotated[LogLevel, typer.Option(help="Log level.")] = LogLevel.INFO,
    log_format: Annotated[
        LogFormat,
        typer.Option(help="Log lines as text, or json: one JSON object per line (docs/design.md)."),
    ] = LogFormat.TEXT,
    history_keep: Annotated[
        str,
        typer.Option(
            metavar="DURATION",
            help="Prune the per-minute history (`stats`) older than this, once a minute.",
        ),
    ] = "7d",
) -> None:
    """Run the stuck watcher until SIGTERM/SIGINT."""
    from leasectl.runtime import parent
    from leasectl.runtime.watcher import STOP_GRACE, Watcher, run_until_stopped

    watcher_config = _watcher_config(
        mode=mode,
        queue=queue,
        reason=reason,
        batch_size=batch_size,
        pace=pace,
        interval=_duration(interval, "--interval"),
        history_keep=_duration(history_keep, "--history-keep"),
    )
    _setup_logging(log_level, log_format)
    if parent_pid is not None:
        parent.die_with_parent(parent_pid)
    with _operations(ctx) as ops:
        watcher = Watcher(ops, watcher_config)
        signalled = threading.Event()

        def stop_watcher() -> None:
            watcher.stop()
            signalled.set()

        def stop(signum: int, frame: FrameType | None) -> None:
            log.info("signal %d: stopping the watcher", signum)
            stop_watcher()

        if parent_pid is not None:
            parent.watch_parent(parent_pid, stop_watcher, watcher.stopping, STOP_GRACE)
        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        log.info(
            "watching %s every %s (mode %s) at %s",
            f"queue {echo(queue)}" if queue else "all queues",
            config.format_duration(watcher_config.interval),
            watcher_config.mode,
            ops.db.where,
        )
        try:
            run_until_stopped(watcher, signalled)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        log.info("watcher stopped after %d passes; moved %d jobs", watcher.passes, watcher.moved)


def requeue_stuck(
    ctx: typer.Context,
    queue: QueueOpt = None,
    owner: Annotated[
        str | None,
        typer.Option(
            "--owner",
            metavar="OWNER",
            help="Only the expired leases this lease owner (a worker id) holds.",
            show_default=False,
        ),
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
    pace: PaceOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """One watcher pass over expired leases, then the concurrency keys' healing pass (for cron)."""
    import dataclasses

    from leasectl.present.actions import LISTED_JOBS, watcher_renderables
    from leasectl.present.jsonout import watcher_json
    from leasectl.runtime.watcher import heal_pass, run_pass

    watcher_config = _watcher_config(
        mode=mode, queue=queue, reason=reason, batch_size=batch_size, pace=pace, owner=owner
    )
    with _operations(ctx) as ops:
        listed = None if as_json else LISTED_JOBS
        result = run_pass(ops, watcher_config, limit=limit, dry_run=dry_run, listed=listed)
        healing: LeasectlError | None = None
        if not dry_run:
            # As `watch` does after each pass: a key whose head left unseen gets its next job.
            # Its failure is said (and the exit code) after what the pass moved, not instead.
            try:
                result = dataclasses.replace(result, promoted=heal_pass(ops))
            except LeasectlError as exc:
                healing = exc
        if as_json:
            _emit_json(watcher_json(result, owner=owner))
        else:
            db_now = ops.db.server_info()["db_now"]
            _show(watcher_renderables(result, db_now, mode.value, owner=owner))
    if healing is not None:
        raise healing


# On ids or on a filter: cli/bulk.py, each from its entry in core/actions.py (an action joins
# with its entry there and its line here; cli/__init__.py lists it).
requeue = guarded_command(OperatorAction.REQUEUE)
mark_stuck = guarded_command(OperatorAction.MARK_STUCK)
cancel = guarded_command(OperatorAction.CANCEL)
delete = guarded_command(OperatorAction.DELETE)
