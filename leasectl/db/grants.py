"""Least-privilege grants: the SQL that lets a role view, operate, work or produce, and no more.

Each kind is a named block in ``sql/grants.sql``; the schema and role names are rendered
only as quoted identifiers. Nothing here grants DELETE, TRUNCATE or ownership.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql

from leasectl.core.errors import LeasectlError, PermissionDenied, UsageError
from leasectl.core.literal import echo
from leasectl.db import sql as queries
from leasectl.db.connection import Database


class Kind(enum.StrEnum):
    VIEWER = "viewer"
    OPERATOR = "operator"
    WORKER = "worker"
    PRODUCER = "producer"


WHAT = {
    Kind.VIEWER: "status, inspect, requeue-stuck --dry-run, the console read-only",
    Kind.OPERATOR: (
        "viewer + requeue, mark-stuck, requeue-stuck, watch, pause, resume, limit, console actions"
    ),
    Kind.WORKER: "worker (claim, heartbeat, complete, fail, release)",
    Kind.PRODUCER: "enqueue",
}


@dataclass(frozen=True)
class Grant:
    kind: Kind
    role: str


def validate_role(name: str) -> str:
    if not name or not name.strip() or len(name.encode()) > 63 or "\x00" in name:
        raise UsageError(f"invalid role name {echo(name)}: 1 to 63 bytes, not blank, no NUL")
    return name


def statements(grant: Grant, schema: str) -> sql.Composed:
    """The GRANT statements of one role, with the schema and role as quoted identifiers."""
    text = queries.get(f"grant_{grant.kind.value}").text
    composed = sql.SQL(text).format(
        schema=sql.Identifier(schema), role=sql.Identifier(validate_role(grant.role))
    )
    assert isinstance(composed, sql.Composed)
    return composed


def render(grants: Sequence[Grant], schema: str) -> str:
    """The SQL a DBA can review and run by hand (``leasectl grant --print-sql``)."""
    parts = []
    for grant in grants:
        body = statements(grant, schema).as_string(None).strip()
        parts.append(f"-- {grant.kind.value} {grant.role}: {WHAT[grant.kind]}\n{body};\n")
    return "\n".join(parts)


def apply(db: Database, grants: Sequence[Grant]) -> None:
    """Run every grant in one transaction: all of them or none."""
    roles = sorted({g.role for g in grants})
    hint = (
        f"(run `leasectl grant` as the owner of schema {db.schema!r}, or use --print-sql and "
        "hand the SQL to your DBA)"
    )
    with (
        db.connection(
            schema=False,
            denied=lambda primary, _: f"permission denied: {primary or 'cannot grant'} {hint}",
            other="grant failed",
        ) as conn,
        conn.transaction(),
    ):
        rows = conn.execute(
            queries.get("roles_existing").render(db.schema), {"roles": roles}
        ).fetchall()
        missing = sorted(set(roles) - {r[0] for r in rows})
        if missing:
            raise LeasectlError(
                f"role {echo(missing[0])} does not exist in {db.where}; create it first "
                f"(CREATE ROLE {sql.Identifier(missing[0]).as_string(None)} LOGIN)"
            )
        # A GRANT by a role without the grant option only warns ("no privileges were
        # granted"): treat it as the refusal it is, and roll everything back.
        warnings: list[str] = []

        def on_notice(diag: psycopg.errors.Diagnostic) -> None:
            if diag.severity_nonlocalized == "WARNING":
                warnings.append(diag.message_primary or "")

        conn.add_notice_handler(on_notice)
        try:
            for grant in grants:
                conn.execute(statements(grant, db.schema))
        finally:
            conn.remove_notice_handler(on_notice)
        if warnings:
            raise PermissionDenied(f"permission denied: {warnings[0]} {hint}")
