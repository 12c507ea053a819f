"""`leasectl errors` and `leasectl events`: what failed, and who did what, over a recent window."""

from __future__ import annotations

from typing import Annotated

import typer

from leasectl.cli.root import JsonOpt, QueueOpt, _duration, _emit_json, _globals, _queue_name, _show
from leasectl.cli.stderr import _warn
from leasectl.core.errors import UsageError

SinceOpt = Annotated[
    str,
    typer.Option(
        "--since", metavar="DURATION", help="How far back to look, on the database clock."
    ),
]
TimeoutOpt = Annotated[
    str, typer.Option("--timeout", metavar="DURATION", help="Give up after this long.")
]


def errors(
    ctx: typer.Context,
    queue: QueueOpt = None,
    since: SinceOpt = "1h",
    timeout: TimeoutOpt = "10s",
    as_json: JsonOpt = False,
) -> None:
    """Failed attempts grouped by kind (the exception's class, else the error's first line with
    numbers, hex and uuids made placeholders): count, first and last seen, queues, an example
    job. Reads at most the last 10,000 failures, and says so when there were more."""
    window = _duration(since, "--since")
    wait = _duration(timeout, "--timeout")
    name = _queue_name(queue) if queue is not None else None
    # Here, not above: --help and a TAB import this module too (cli/commands.py).
    from leasectl.db.connection import Database
    from leasectl.db.incident import Incident
    from leasectl.present.incident import errors_json, errors_renderables, errors_scan_note

    dsn, schema = _globals(ctx).resolve()
    with Database.connect(dsn, schema, on_newer=_warn) as db:
        report = Incident(db).errors(since=window, queue=name, timeout=wait)
    if as_json:
        _emit_json(errors_json(report))
        note = errors_scan_note(report)
        if note:
            _warn(note)
    else:
        _show(errors_renderables(report))


def events(
    ctx: typer.Context,
    since: SinceOpt = "1h",
    actor: Annotated[
        str | None,
        typer.Option("--actor", metavar="ACTOR", help="Only this actor's.", show_default=False),
    ] = None,
    queue: QueueOpt = None,
    timeout: TimeoutOpt = "10s",
    as_json: JsonOpt = False,
) -> None:
    """The timeline of operator and watcher actions (on jobs and on queues), newest first; the
    changes one statement made to many jobs are one line."""
    window = _duration(since, "--since")
    wait = _duration(timeout, "--timeout")
    name = _queue_name(queue) if queue is not None else None
    if actor is not None and not actor.strip():
        raise UsageError("--actor must not be empty")
    from leasectl.db.connection import Database
    from leasectl.db.incident import Incident
    from leasectl.present.incident import events_json, events_renderables

    dsn, schema = _globals(ctx).resolve()
    with Database.connect(dsn, schema, on_newer=_warn) as db:
        result = Incident(db).events(since=window, actor=actor, queue=name, timeout=wait)
    if as_json:
        _emit_json(events_json(result))
    else:
        _show(events_renderables(result))
