"""`leasectl list`: the jobs a filter matches, newest first, a page at a time."""

from __future__ import annotations

from typing import Annotated

import typer

from leasectl.cli.completion import complete_queue, complete_state
from leasectl.cli.root import JsonOpt, _duration, _emit_json, _globals, _show
from leasectl.cli.stderr import _warn
from leasectl.core import filters, statuses
from leasectl.core.models import JobStatus


def list_jobs(
    ctx: typer.Context,
    state: Annotated[
        list[str] | None,
        typer.Option(
            "--state",
            "-s",
            metavar="STATE",
            help=f"Only jobs in this status: {statuses.named(JobStatus)} (any case; repeat it or "
            "separate with commas).",
            show_default=False,
            autocompletion=complete_state,
        ),
    ] = None,
    queue: Annotated[
        str | None,
        typer.Option(
            "--queue",
            "-q",
            metavar="QUEUE",
            help="Only this queue.",
            show_default=False,
            autocompletion=complete_queue,
        ),
    ] = None,
    owner: Annotated[
        str | None,
        typer.Option(
            "--owner",
            metavar="OWNER",
            help="Only jobs whose current or last lease this worker id holds or held.",
            show_default=False,
        ),
    ] = None,
    error: Annotated[
        str | None,
        typer.Option(
            "--error",
            metavar="TEXT",
            help="Only jobs whose last error contains TEXT (any case; % and _ are literal).",
            show_default=False,
        ),
    ] = None,
    payload: Annotated[
        str | None,
        typer.Option(
            "--payload",
            metavar="JSON",
            help="Only jobs whose payload contains this JSON (e.g. '{\"tenant\": 7}').",
            show_default=False,
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="DURATION",
            help="Only jobs created at most this long ago (finished, when every --state is "
            f"{statuses.named(statuses.FINISHED)}), on the database clock.",
            show_default=False,
        ),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option(
            "--until",
            metavar="DURATION",
            help="Only jobs created (finished, as for --since) more than this long ago.",
            show_default=False,
        ),
    ] = None,
    limit: Annotated[
        int, typer.Option(min=1, max=filters.MAX_LIMIT, help="Jobs per page.")
    ] = filters.DEFAULT_LIMIT,
    after: Annotated[
        str | None,
        typer.Option(
            "--after",
            metavar="ID",
            help="The next page: jobs with ids below this one (the last id shown).",
            show_default=False,
        ),
    ] = None,
    timeout: Annotated[
        str,
        typer.Option(
            metavar="DURATION",
            help="Give up after this long (a filter no index serves scans the history).",
        ),
    ] = "5s",
    as_json: JsonOpt = False,
) -> None:
    """List jobs that match a filter, newest first, a page at a time."""
    flt = filters.parse_filter(
        states=state or (),
        queue=queue,
        owner=owner,
        error=error,
        payload=payload,
        since=since,
        until=until,
    )
    page_after = filters.parse_after(after)
    wait = _duration(timeout, "--timeout")
    if wait > filters.MAX_TIMEOUT:
        raise typer.BadParameter("at most 10m", param_hint="'--timeout'")
    # Here, not above: --help and a TAB import this module too (cli/commands.py).
    from leasectl.db.connection import Database
    from leasectl.db.history import History
    from leasectl.present.history import list_renderables, page_json

    dsn, schema = _globals(ctx).resolve()
    with Database.connect(dsn, schema, on_newer=_warn) as db:
        page = History(db).list_jobs(flt, limit=limit, after=page_after, timeout=wait)
    if as_json:
        _emit_json(page_json(page))
    else:
        _show(list_renderables(page))
