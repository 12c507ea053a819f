"""Pausing and resuming a queue: no worker claims a paused queue's jobs; jobs in flight finish
and enqueue goes on."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

import typer

from leasectl.cli.root import JsonOpt, _duration, _emit_json, _operations, _queue_name, _show
from leasectl.cli.stderr import _warn
from leasectl.core import config
from leasectl.core.errors import UsageError
from leasectl.core.literal import echo

QueueArg = Annotated[str, typer.Argument(metavar="QUEUE", help="The queue.", show_default=False)]


def pause(
    ctx: typer.Context,
    queue: QueueArg,
    reason: Annotated[
        str,
        typer.Option(
            help="Why (required; kept in queue_events and shown by status).", show_default=False
        ),
    ],
    as_json: JsonOpt = False,
) -> None:
    """Pause a queue: workers claim none of its jobs until `resume` (exit 1 if already paused)."""
    # Here, not above: --help and a TAB import this module too (cli/commands.py).
    from leasectl.present.jsonout import paused_queue_json
    from leasectl.present.status import pause_renderables

    name = _queue_name(queue, "QUEUE")
    why = config.check_reason(reason, required="say why the queue is paused")
    assert why is not None
    with _operations(ctx) as ops:
        paused, changed = ops.pause(name, actor=config.operator_actor(), reason=why)
    if as_json:
        _emit_json({"action": "pause", "changed": changed, "queue": paused_queue_json(paused)})
    else:
        _show(pause_renderables(paused, changed=changed))
    if not changed:
        _warn(f"queue {echo(name)} is already paused; nothing changed")
        raise typer.Exit(1)


def resume(
    ctx: typer.Context,
    queue: QueueArg,
    reason: Annotated[
        str | None,
        typer.Option(help="Why (optional; kept in queue_events).", show_default=False),
    ] = None,
    ramp: Annotated[
        str | None,
        typer.Option(
            metavar="DURATION",
            help="Raise the queue's limits (`leasectl limit`) from a floor of 1 lease and 1/s "
            "to their values over DURATION (at most 24h); also for a queue not paused.",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Resume a paused queue: its workers claim again at once (exit 1 if it is not paused)."""
    from leasectl.present.jsonout import paused_queue_json
    from leasectl.present.status import pause_renderables

    name = _queue_name(queue, "QUEUE")
    why = config.check_reason(reason, required=None)
    if ramp is not None:
        _resume_ramping(ctx, name, _duration(ramp, "--ramp"), why, as_json)
        return
    with _operations(ctx) as ops:
        ended = ops.resume(name, actor=config.operator_actor(), reason=why)
    if ended is None:  # (nothing on stdout, --json or not: there is no pause to show)
        _warn(f"queue {echo(name)} is not paused; nothing changed")
        raise typer.Exit(1)
    if as_json:
        _emit_json({"action": "resume", "changed": True, "queue": paused_queue_json(ended)})
    else:
        _show(pause_renderables(ended, resumed=True))


def _resume_ramping(
    ctx: typer.Context, name: str, ramp: timedelta, why: str | None, as_json: bool
) -> None:
    """`resume --ramp`: the ramp starts and the pause, if any, ends in one transaction."""
    from leasectl.core.limits import check_ramp
    from leasectl.present.limits import limit_json, limit_renderables

    check_ramp(ramp)
    with _operations(ctx) as ops:
        ramped = ops.ramp(name, ramp, actor=config.operator_actor(), reason=why)
    if ramped is None:
        raise UsageError(
            f"queue {echo(name)} has no limits to ramp up to: set them first "
            "(leasectl limit QUEUE --concurrency N and/or --rate R/s --reason TEXT); "
            "nothing changed"
        )
    if as_json:
        _emit_json(
            {
                "action": "resume",
                "changed": True,
                "resumed": ramped.resumed,
                "limit": limit_json(ramped.limit),
            }
        )
    else:
        _show(limit_renderables(ramped.limit, ramped=ramped))
