"""Pausing and resuming a queue: no worker claims a paused queue's jobs; jobs in flight finish
and enqueue goes on."""

from __future__ import annotations

from typing import Annotated

import typer

from leasectl.cli.root import JsonOpt, _emit_json, _operations, _queue_name, _show
from leasectl.cli.stderr import _warn
from leasectl.core import config
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
    as_json: JsonOpt = False,
) -> None:
    """Resume a paused queue: its workers claim again at once (exit 1 if it is not paused)."""
    from leasectl.present.jsonout import paused_queue_json
    from leasectl.present.status import pause_renderables

    name = _queue_name(queue, "QUEUE")
    why = config.check_reason(reason, required=None)
    with _operations(ctx) as ops:
        ended = ops.resume(name, actor=config.operator_actor(), reason=why)
    if ended is None:  # (nothing on stdout, --json or not: there is no pause to show)
        _warn(f"queue {echo(name)} is not paused; nothing changed")
        raise typer.Exit(1)
    if as_json:
        _emit_json({"action": "resume", "changed": True, "queue": paused_queue_json(ended)})
    else:
        _show(pause_renderables(ended, resumed=True))
