"""The Typer app, its root options, and what every command shares: the data layer's
Operations, option parsing, and the one way each command writes to stdout."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Any

import typer

from leasectl.cli import EXIT_CHECK_FAILED as EXIT_CHECK_FAILED
from leasectl.cli import EXIT_INTERRUPTED as EXIT_INTERRUPTED
from leasectl.cli import PROG as PROG

# Typer mended: no pydantic for a value that needs no coercion; flags without <bool> in --help.
from leasectl.cli import coercion, helpfix  # noqa: F401
from leasectl.cli.commands import LazyGroup
from leasectl.cli.completion import complete_queue
from leasectl.core import config
from leasectl.core.literal import visible

# psycopg and Rich are imported by the commands that use them, not by `--version` or `--help`.
if TYPE_CHECKING:
    from rich.console import RenderableType

    from leasectl.db.connection import OnNewer
    from leasectl.db.operations import Operations


@dataclass(frozen=True)
class Globals:
    """The global options, resolved only by the commands that need the database."""

    dsn: str | None
    schema: str | None

    def resolve(self) -> tuple[str, str]:
        from leasectl.db.dsn import resolve_dsn

        return resolve_dsn(self.dsn), config.resolve_schema(self.schema)


app = typer.Typer(
    name=PROG,
    cls=LazyGroup,
    help="A leased-job queue on PostgreSQL: enqueue, work, watch for stuck jobs, inspect.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from leasectl.cli import version_line

        typer.echo(version_line())
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    dsn: Annotated[
        str | None,
        typer.Option(
            "--dsn",
            metavar="DSN",
            help="PostgreSQL DSN (URI or key=value). Default: $LEASECTL_DSN, else $DATABASE_URL.",
            show_default=False,
        ),
    ] = None,
    schema: Annotated[
        str | None,
        typer.Option(
            "--schema",
            metavar="NAME",
            help="Schema holding the leasectl tables. Default: $LEASECTL_SCHEMA, else leasectl.",
            show_default=False,
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Show the version."),
    ] = False,
) -> None:
    ctx.obj = Globals(dsn=dsn, schema=schema)


# -- what the commands share -----------------------------------------------------------------------


def _globals(ctx: typer.Context) -> Globals:
    found = ctx.find_object(Globals)
    return found if found is not None else Globals(None, None)


@contextlib.contextmanager
def _operations(
    ctx: typer.Context, *, read_dsn: str | None = None, on_newer: OnNewer = None
) -> Iterator[Operations]:
    """``read_dsn``: connect there instead (reads only, on a read-only session), not to --dsn.
    ``on_newer``: a read-only command's warning for a schema newer than leasectl (else refused)."""
    from leasectl.db.connection import Database
    from leasectl.db.operations import Operations

    if read_dsn is not None:
        dsn, schema = read_dsn, config.resolve_schema(_globals(ctx).schema)
    else:
        dsn, schema = _globals(ctx).resolve()
    db = Database.connect(dsn, schema, read_only=read_dsn is not None, on_newer=on_newer)
    try:
        yield Operations(db)
    finally:
        db.close()


def _duration(text: str, option: str, *, allow_zero: bool = False) -> timedelta:
    return config.parse_duration(text, allow_zero=allow_zero, what=option)


def _queue_name(name: str, option: str = "--queue") -> str:
    return config.check_queue(name, option)


def _show(parts: Sequence[RenderableType]) -> None:
    # Data reaches these parts as present.text.lit cells; plain strings (our own) are not read as
    # markup or emoji codes either.
    from rich.console import Console

    console = Console(highlight=False, markup=False, emoji=False)
    for part in parts:
        console.print(part)


def _emit_json(document: Any, *, indent: int | None = 2) -> None:
    from leasectl.present.jsonout import dumps

    sys.stdout.write(dumps(document, indent=indent) + "\n")
    sys.stdout.flush()


def _say(message: str) -> None:
    """A one-line result on stdout; a value it names is shown, never acted on."""
    typer.echo(visible(message))


JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]
ReadDsnOpt = Annotated[
    str | None,
    typer.Option(
        "--read-dsn",
        metavar="DSN",
        help="Read from this server (a hot standby) on a read-only session; actions still go to "
        "--dsn. Default: $LEASECTL_READ_DSN, else --dsn.",
        show_default=False,
    ),
]
QueueOpt = Annotated[
    str | None,
    typer.Option(
        "--queue", "-q", help="Only this queue.", show_default=False, autocompletion=complete_queue
    ),
]
