"""`leasectl stats`: a queue's (or every queue's) minutes from the history PostgreSQL keeps
(migration 20): counts, pickup latency, the backlog."""

from __future__ import annotations

from typing import Annotated

import typer

from leasectl.cli.root import JsonOpt, QueueOpt, _emit_json, _operations, _queue_name, _show
from leasectl.cli.stderr import _warn


def stats(
    ctx: typer.Context,
    queue: QueueOpt = None,
    since: Annotated[
        str,
        typer.Option(
            metavar="DURATION",
            help="How far back, from now (a minute each bucket; at most 31d; history is kept "
            "7d unless `watch`/`prune` keep it longer).",
        ),
    ] = "1h",
    as_json: JsonOpt = False,
) -> None:
    """Per-minute history: enqueued, started, completed, failed, retried, pickup latency
    (p50/p95), due backlog; every minute of the window, empty ones as zeros."""
    # Here, not above: --help and a TAB import this module too (cli/commands.py).
    from rich.console import Console

    from leasectl.core.stats import parse_since
    from leasectl.db.stats import read_stats
    from leasectl.present.stats import stats_json, stats_renderables

    window = parse_since(since)
    name = _queue_name(queue) if queue is not None else None
    with _operations(ctx, on_newer=_warn) as ops:
        report = read_stats(ops.db, name, window)
    if as_json:
        _emit_json(stats_json(report))
    else:
        _show(stats_renderables(report, Console().width))
