"""Schedules: recurring jobs that `leasectl watch` enqueues once per slot (`schedule add`,
`list`, `remove`, `pause`, `resume`, `run`, `sync`). Each change is audited in schedule_events."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from leasectl.cli.root import JsonOpt, _emit_json, _operations, _show
from leasectl.cli.stderr import _warn
from leasectl.core import config
from leasectl.core.literal import echo
from leasectl.core.schedules import (
    DEFAULT_CATCH_UP,
    DEFAULT_CATCH_UP_LIMIT,
    MAX_CATCH_UP_LIMIT,
    Schedule,
)

app = typer.Typer(
    name="schedule",
    help="Recurring jobs: a cron expression in a time zone; `watch` enqueues each slot once.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)

NameArg = Annotated[str, typer.Argument(metavar="NAME", help="The schedule.", show_default=False)]
ReasonOpt = Annotated[
    str | None,
    typer.Option(help="Why (optional; kept in schedule_events).", show_default=False),
]


@app.command()
def add(
    ctx: typer.Context,
    name: NameArg,
    cron: Annotated[
        str,
        typer.Option(
            metavar="EXPR",
            help="5 fields (minute hour day month weekday) or @hourly, @daily, @weekly, "
            "@monthly, @yearly.",
            show_default=False,
        ),
    ],
    queue: Annotated[
        str, typer.Option(metavar="QUEUE", help="The queue of its jobs.", show_default=False)
    ],
    payload: Annotated[str, typer.Option(metavar="JSON", help="Each job's payload.")] = "{}",
    timezone: Annotated[
        str, typer.Option(metavar="TZ", help="The IANA time zone of the expression.")
    ] = "UTC",
    priority: Annotated[int, typer.Option(help="Its jobs' priority (lower first).")] = 0,
    max_attempts: Annotated[
        int, typer.Option(min=1, max=config.MAX_ATTEMPTS, help="Its jobs' attempts.")
    ] = 5,
    catch_up: Annotated[
        str,
        typer.Option(
            metavar="none|last|all",
            help="Slots missed while no watcher ran: none, the last one, or all (at most "
            "--catch-up-limit).",
        ),
    ] = DEFAULT_CATCH_UP,
    catch_up_limit: Annotated[
        int,
        typer.Option(
            min=1, max=MAX_CATCH_UP_LIMIT, metavar="N", help="The most missed slots caught up."
        ),
    ] = DEFAULT_CATCH_UP_LIMIT,
    reason: ReasonOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Add a schedule (exit 1 if one of that name exists with other settings)."""
    # Here, not above: --help and a TAB import this module too (cli/commands.py).
    from leasectl.core.schedules import ScheduleSpec, check_catch_up, check_spec, schedule_json
    from leasectl.present.schedules import change_line

    policy, limit = check_catch_up(catch_up, catch_up_limit)
    why = config.check_reason(reason, required=None)
    spec = check_spec(
        ScheduleSpec(name, cron, queue, timezone, payload, priority, max_attempts, policy, limit)
    )
    with _operations(ctx) as ops:
        schedule, action = ops.put_schedule(
            spec, actor=config.operator_actor(), reason=why, replace=False
        )
    if action == "exists":
        _warn(f"schedule {echo(name)} exists with other settings; nothing changed")
        raise typer.Exit(1)
    if as_json:
        _emit_json({"action": action, "changed": action == "add",
                    "schedule": schedule_json(schedule)})  # fmt: skip
    else:
        _show([change_line("added" if action == "add" else "unchanged:", schedule)])


@app.command("list")
def list_schedules(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """The schedules: expression, time zone, queue, next and last slot, last outcome, late."""
    from leasectl.core.schedules import schedule_json
    from leasectl.present.schedules import schedules_table

    with _operations(ctx) as ops:
        found = ops.schedules()
    if as_json:
        _emit_json({"schedules": [schedule_json(s) for s in found]})
    else:
        _show([schedules_table(found)])


@app.command()
def remove(ctx: typer.Context, name: NameArg, reason: ReasonOpt = None) -> None:
    """Remove a schedule; the jobs it enqueued stay (exit 1 if there is none)."""
    from leasectl.present.schedules import change_line

    why = config.check_reason(reason, required=None)
    with _operations(ctx) as ops:
        ended = ops.remove_schedule(name, actor=config.operator_actor(), reason=why)
    if ended is None:
        _warn(f"no schedule {echo(name)}; nothing changed")
        raise typer.Exit(1)
    _show([change_line("removed", ended)])


@app.command()
def pause(
    ctx: typer.Context,
    name: NameArg,
    reason: Annotated[
        str, typer.Option(help="Why (required; kept in schedule_events).", show_default=False)
    ],
) -> None:
    """Pause a schedule: no slot of it is enqueued until `resume` (exit 1 if already paused)."""
    why = config.check_reason(reason, required="say why the schedule is paused")
    assert why is not None
    with _operations(ctx) as ops:
        done = ops.pause_schedule(name, actor=config.operator_actor(), reason=why)
    _show_toggle(name, done, "paused", "is already paused")


@app.command()
def resume(ctx: typer.Context, name: NameArg, reason: ReasonOpt = None) -> None:
    """Resume a paused schedule; the slots of its pause are skipped (exit 1 if not paused)."""
    why = config.check_reason(reason, required=None)
    with _operations(ctx) as ops:
        done = ops.resume_schedule(name, actor=config.operator_actor(), reason=why)
    _show_toggle(name, done, "resumed", "is not paused")


@app.command()
def run(ctx: typer.Context, name: NameArg, reason: ReasonOpt = None) -> None:
    """Enqueue a schedule's job now, outside its slots (its next slot is unchanged)."""
    why = config.check_reason(reason, required=None)
    with _operations(ctx) as ops:
        job_id = ops.run_schedule(name, actor=config.operator_actor(), reason=why)
    if job_id is None:
        _warn(f"no schedule {echo(name)}; nothing changed")
        raise typer.Exit(1)
    typer.echo(f"enqueued job {job_id} of schedule {echo(name)}")


@app.command()
def sync(
    ctx: typer.Context,
    file: Annotated[
        Path, typer.Argument(metavar="FILE.toml", help="The schedules.", show_default=False)
    ],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would change; change nothing.")
    ] = False,
    prune: Annotated[
        bool, typer.Option("--prune", help="Remove the schedules the file does not declare.")
    ] = False,
    reason: ReasonOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Declare the schedules of a TOML file: add the new, change the changed; idempotent."""
    from leasectl.cli.schedule_sync import run_sync

    why = config.check_reason(reason, required=None)
    run_sync(ctx, file, dry_run=dry_run, prune=prune, reason=why, as_json=as_json)


def _show_toggle(name: str, done: tuple[Schedule, bool] | None, verb: str, unchanged: str) -> None:
    """The outcome of a pause or a resume: the schedule changed, else why nothing did (exit 1:
    no such schedule, or it ``unchanged`` already)."""
    from leasectl.present.schedules import change_line

    if done is None:
        _warn(f"no schedule {echo(name)}; nothing changed")
        raise typer.Exit(1)
    schedule, changed = done
    if not changed:
        _warn(f"schedule {echo(name)} {unchanged}; nothing changed")
        raise typer.Exit(1)
    _show([change_line(verb, schedule)])
