"""Flow control: a queue's concurrency cap and rate (`limit`), lifting them (`limit --clear`),
and the limited queues with their use (`limits`). PostgreSQL enforces them in every claim."""

from __future__ import annotations

from typing import Annotated

import typer

from leasectl.cli.root import JsonOpt, _emit_json, _operations, _queue_name, _show
from leasectl.cli.stderr import _warn
from leasectl.core import config
from leasectl.core.errors import UsageError
from leasectl.core.limits import MAX_BURST, MAX_CONCURRENCY
from leasectl.core.literal import echo

QueueArg = Annotated[str, typer.Argument(metavar="QUEUE", help="The queue.", show_default=False)]


def limit(
    ctx: typer.Context,
    queue: QueueArg,
    reason: Annotated[
        str,
        typer.Option(help="Why (required; kept in queue_events).", show_default=False),
    ],
    concurrency: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=MAX_CONCURRENCY,
            metavar="N",
            help="At most N of its jobs leased at once, across every worker.",
            show_default=False,
        ),
    ] = None,
    rate: Annotated[
        str | None,
        typer.Option(
            metavar="R/s|R/m",
            help="At most R starts a second (20/s) or a minute (300/m), across every worker.",
            show_default=False,
        ),
    ] = None,
    burst: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=MAX_BURST,
            metavar="B",
            help="Starts the rate may bunch up to after a quiet spell (default: one second's).",
            show_default=False,
        ),
    ] = None,
    clear: Annotated[
        bool, typer.Option("--clear", help="Lift the queue's limits (exit 1 if it has none).")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Limit a queue: a cap on its live leases and/or a rate of starts, set while workers run."""
    # Here, not above: --help and a TAB import this module too (cli/commands.py).
    from leasectl.core.limits import LimitSpec, check_spec, parse_rate
    from leasectl.present.limits import limit_json, limit_renderables

    name = _queue_name(queue, "QUEUE")
    why = config.check_reason(reason, required="say why the queue is limited")
    assert why is not None
    if clear:
        if concurrency is not None or rate is not None or burst is not None:
            raise UsageError("--clear takes no --concurrency, --rate or --burst")
        with _operations(ctx) as ops:
            ended = ops.clear_limit(name, actor=config.operator_actor(), reason=why)
        if ended is None:
            _warn(f"queue {echo(name)} has no limits; nothing changed")
            raise typer.Exit(1)
        if as_json:
            _emit_json({"action": "unlimit", "changed": True, "limit": limit_json(ended)})
        else:
            _show(limit_renderables(ended, cleared=True))
        return
    spec = check_spec(LimitSpec(concurrency, parse_rate(rate) if rate is not None else None, burst))
    with _operations(ctx) as ops:
        now = ops.set_limit(name, spec, actor=config.operator_actor(), reason=why)
    if as_json:
        _emit_json({"action": "limit", "changed": True, "limit": limit_json(now)})
    else:
        _show(limit_renderables(now))


def limits(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """The limited queues: their limits, live leases / cap, tokens, ramp, throttled claims."""
    from leasectl.present.limits import limit_json, limits_table

    with _operations(ctx) as ops:
        found = ops.limits()
    if as_json:
        _emit_json({"limits": [limit_json(lim) for lim in found]})
    else:
        _show([limits_table(found)])
