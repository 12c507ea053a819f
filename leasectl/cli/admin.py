"""`leasectl grant`: least-privilege access for existing roles."""

from __future__ import annotations

import sys
from typing import Annotated, Any, TypeAlias

import typer

from leasectl.cli.root import _globals, _operations, _say
from leasectl.core import config
from leasectl.core.errors import UsageError
from leasectl.core.literal import echo, visible

# One kind of grant's option: the roles to grant it to.
Roles: TypeAlias = list[str] | None


def _roles(may: str) -> Any:
    return typer.Option(metavar="ROLE", help=f"{may} (repeatable).", show_default=False)


def grant(
    ctx: typer.Context,
    viewer: Annotated[Roles, _roles("May run status, inspect and the console read-only")] = None,
    operator: Annotated[Roles, _roles("Viewer + requeue, mark-stuck, requeue-stuck, watch")] = None,
    worker: Annotated[Roles, _roles("May run workers")] = None,
    producer: Annotated[Roles, _roles("May enqueue jobs")] = None,
    print_sql: Annotated[
        bool, typer.Option("--print-sql", help="Print the SQL for a DBA; change nothing.")
    ] = False,
) -> None:
    """Grant least-privilege access to existing roles (none can drop, truncate or delete)."""
    from leasectl.db import grants  # (psycopg: here, not when --help imports this module)

    wanted = [
        grants.Grant(kind, grants.validate_role(role))
        for kind, roles in (
            (grants.Kind.VIEWER, viewer),
            (grants.Kind.OPERATOR, operator),
            (grants.Kind.WORKER, worker),
            (grants.Kind.PRODUCER, producer),
        )
        for role in roles or ()
    ]
    if not wanted:
        raise UsageError("name at least one role: --viewer, --operator, --worker or --producer")
    if print_sql:
        schema = config.resolve_schema(_globals(ctx).schema)
        # Role and schema names are the caller's own, but an escape in one must not act on the
        # terminal: such a name is shown escaped (and the SQL then names it that way).
        sys.stdout.write(visible(grants.render(wanted, schema), multiline=True))
        return
    with _operations(ctx) as ops:
        grants.apply(ops.db, wanted)
        where, schema = ops.db.where, ops.db.schema
    for g in wanted:
        _say(
            f"granted {g.kind.value} privileges on schema {echo(schema)} to role {echo(g.role)} "
            f"at {where} ({grants.WHAT[g.kind]})"
        )
