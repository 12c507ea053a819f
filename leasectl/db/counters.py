"""The counters' fold (migrations 11 and 16), bounded in time: the one call `watch` and the
exporter make; the per-minute history's fold (migration 20), which also folds the attempts'
outcome counters since migration 27, runs in the same transaction. The
fold itself skips what others hold; the transaction's statement_timeout and lock_timeout bound
what is left (a table lock, a sick server), so no caller waits on another role's transaction."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row

from leasectl.db import sql as queries
from leasectl.db.connection import Database
from leasectl.db.stats import fold_params

# The most counter deltas one fold moves: a fold of that many takes a few hundred milliseconds
# (BENCHMARKS.md, "counters").
FOLD_LIMIT = 100_000

# How long one fold may run (its statement) or wait for a lock, by default.
FOLD_TIMEOUT = timedelta(seconds=10)


def _ms(limit: timedelta) -> str:
    return str(max(1, int(limit.total_seconds() * 1000)))


def fold(db: Database, limit: int = FOLD_LIMIT, timeout: timedelta = FOLD_TIMEOUT) -> int:
    """Move up to ``limit`` counter deltas into their totals, in one transaction bounded by
    ``timeout``; how many moved (a ``QueryTimeout`` past it)."""
    with db.connection(timeout=TIMED_OUT) as conn:
        return fold_on(conn, db.schema, limit, timeout)


TIMED_OUT = "folding the counters took longer than its limit"


def fold_on(conn: psycopg.Connection[Any], schema: str, limit: int, timeout: timedelta) -> int:
    """``fold`` on a connection the caller holds (its errors mapped by the caller): the
    counters' deltas (the operator's and the watcher's actions), then the history's
    (``db/stats.py``; since migration 27 they carry the attempts' outcomes, which
    ``history_fold`` adds to the counters' totals too), in one transaction and one round
    trip. Returns how many counter deltas moved, or ``limit`` when the history's filled the
    fold (either way, at ``limit``: fold again)."""
    settings: dict[str, Any] = {
        "setting_names": ["statement_timeout", "lock_timeout"],
        "setting_values": [_ms(timeout), _ms(timeout)],
    }
    with conn.pipeline(), conn.transaction():
        conn.execute(queries.get("console_settings").render(schema), settings)
        cur = conn.cursor(row_factory=dict_row)
        cur.execute(queries.get("metrics_counters_fold").render(schema), {"fold_limit": limit})
        history = conn.cursor(row_factory=dict_row)
        history.execute(queries.get("history_fold").render(schema), fold_params(limit))
    counted, kept = _folded(cur), _folded(history)
    return limit if kept >= limit else counted


def _folded(cur: psycopg.Cursor[dict[str, Any]]) -> int:
    row = cur.fetchone()
    return int(row["folded"]) if row else 0


def may_fold(db: Database) -> bool:
    """Whether this role may run the fold (operators and the owner; not viewers)."""
    row = db.one("counters_may_fold", {"schema": db.schema})
    return bool(row and row["may_fold"])
