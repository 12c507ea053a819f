"""EXPLAIN helpers for the benchmarks and the plan tests: a statement's plan as the worker's
(or the console's) sessions make it, and the plans of the statements a function runs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from psycopg import ClientCursor, Connection, sql
from psycopg.errors import Diagnostic

from leasectl.db.sql import WORKER_SETTINGS, numbered


class Explain(Protocol):
    def __call__(self, params: dict[str, Any], *, analyze: bool = True) -> str: ...


@contextlib.contextmanager
def generic_plan(
    conn: Connection[Any], query: sql.Composed, settings: Mapping[str, str] = WORKER_SETTINGS
) -> Iterator[Explain]:
    """``query`` prepared as a session with ``settings`` runs it (the worker's, unless given;
    set for each EXPLAIN's transaction); yields a function that runs ``EXPLAIN ANALYZE
    EXECUTE`` with given parameters (in a transaction rolled back) and returns the plan (with
    ``analyze=False``: ``EXPLAIN``, the planner's estimates). The plan is made at the first
    call and reused by the later ones, as in such a session."""
    text, names = numbered(query.as_string(conn))
    # psycopg answers a ROLLBACK (each EXPLAIN's) with DEALLOCATE ALL once it has prepared a
    # statement of its own on this connection (after prepare_threshold executions of one query),
    # which took leasectl_explained with it: a plan test failed or not by how many statements
    # ran before it on the connection. None of its own while this one lives.
    threshold = conn.prepare_threshold
    conn.prepare_threshold = None
    with conn.transaction(force_rollback=True):
        pass  # (a rollback: psycopg deallocates, and forgets, the ones it made before)
    conn.execute(sql.SQL("PREPARE leasectl_explained AS ") + sql.SQL(text))
    try:
        row = conn.execute(
            "SELECT parameter_types::text[] FROM pg_prepared_statements "
            "WHERE name = 'leasectl_explained'"
        ).fetchone()
        types = row[0] if row else []
        args = sql.SQL(", ").join(
            # (In brackets: a negative literal's cast would apply before its minus sign, and
            # `-2147483648::integer` is out of range.)
            sql.SQL("({})::{}").format(sql.Placeholder(n), sql.SQL(t))
            for n, t in zip(names, types, strict=True)
        )
        analyzed = sql.SQL("EXPLAIN (ANALYZE, COSTS OFF) EXECUTE leasectl_explained ({})")
        estimated = sql.SQL("EXPLAIN EXECUTE leasectl_explained ({})")

        def run(params: dict[str, Any], *, analyze: bool = True) -> str:
            explain = analyzed if analyze else estimated
            with conn.transaction(force_rollback=True):
                conn.execute(
                    "SELECT set_config(name, value, true) FROM unnest(%s::text[], %s::text[])"
                    " AS s(name, value)",
                    (list(settings), list(settings.values())),
                )
                # Values as literals: EXPLAIN EXECUTE takes no bound parameters.
                rows = ClientCursor(conn).execute(explain.format(args), params).fetchall()
            return "\n".join(line for (line,) in rows)

        yield run
    finally:
        conn.execute("DEALLOCATE leasectl_explained")
        conn.prepare_threshold = threshold


def explain_generic(conn: Connection[Any], query: sql.Composed, params: dict[str, Any]) -> str:
    """The plan the worker's sessions (WORKER_SETTINGS) make for ``query``, made now."""
    with generic_plan(conn, query) as explain:
        return explain(params)


# auto_explain's settings for explain_nested: every statement, with the rows each node
# returned, including the statements that functions run.
_AUTO_EXPLAIN = {
    "auto_explain.log_min_duration": "0",
    "auto_explain.log_analyze": "on",
    "auto_explain.log_timing": "off",
    "auto_explain.log_nested_statements": "on",
    "client_min_messages": "log",
}


def explain_nested(
    conn: Connection[Any],
    query: sql.Composed | str,
    params: dict[str, Any] | None = None,
    *,
    counters: bool = False,
) -> list[tuple[str, str]]:
    """The statements that running ``query`` executes and their plans, as they ran (EXPLAIN
    ANALYZE of a function call shows only a Function Scan; the audited operations of migration
    6 are functions): (statement text, plan) for each plan auto_explain logged, the innermost
    first, ``query`` itself last. In a transaction rolled back. LOAD of auto_explain needs a
    superuser."""
    plans: list[tuple[str, str]] = []

    def on_notice(diag: Diagnostic) -> None:
        message = diag.message_primary or ""
        if diag.severity_nonlocalized != "LOG" or "plan:\n" not in message:
            return
        lines = message.split("plan:\n", 1)[1].splitlines()
        # "Query Text: ..." (any number of lines), then the plan, whose first line is its
        # root node: the first line with a cost.
        root = next(i for i, line in enumerate(lines) if "  (cost=" in line)
        text = "\n".join(lines[:root]).removeprefix("Query Text: ")
        plans.append((text, "\n".join(lines[root:])))

    conn.add_notice_handler(on_notice)
    try:
        with conn.transaction(force_rollback=True):
            conn.execute("LOAD 'auto_explain'")
            conn.execute(
                "SELECT set_config(name, value, true) FROM unnest(%s::text[], %s::text[])"
                " AS s(name, value)",
                (list(_AUTO_EXPLAIN), list(_AUTO_EXPLAIN.values())),
            )
            plans.clear()  # (the statement above was logged too)
            conn.execute(query, params)
    finally:
        conn.remove_notice_handler(on_notice)
    # The counters' triggers (migration 11), which every statement that ends an attempt or
    # writes an audit row runs after it, only with ``counters`` (test_counters checks them).
    return [
        (t, p)
        for t, p in plans
        if counters or ("INTO counter_deltas" not in t and "INTO queue_history_deltas" not in t)
    ]
