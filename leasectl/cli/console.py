"""The commands that open the console: tui, and demo (which also runs without it)."""

from __future__ import annotations

from typing import Annotated

import typer

from leasectl.cli.root import (
    EXIT_INTERRUPTED,
    QueueOpt,
    ReadDsnOpt,
    _duration,
    _emit_json,
    _globals,
    _queue_name,
)
from leasectl.core import config
from leasectl.core.errors import LeasectlError
from leasectl.core.terminal import require_terminal


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
    from leasectl.db.dsn import validate_dsn
    from leasectl.demo import run_demo

    g = _globals(ctx)
    if g.dsn is not None:
        validate_dsn(g.dsn)
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


def tui(
    ctx: typer.Context,
    refresh: Annotated[
        str, typer.Option(metavar="DURATION", help="Time between refreshes.")
    ] = "2s",
    queue: QueueOpt = None,
    read_only: Annotated[
        bool, typer.Option("--read-only", help="Disable requeue and mark-stuck.")
    ] = False,
    read_dsn: ReadDsnOpt = None,
) -> None:
    """Open the console."""
    from leasectl.db.dsn import resolve_read_dsn  # (psycopg: not when --help imports this)

    dsn, schema = _globals(ctx).resolve()
    reads = resolve_read_dsn(read_dsn)
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
    run(dsn, schema, refresh=every, queue=queue, read_only=read_only, read_dsn=reads)
