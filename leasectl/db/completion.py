"""Names for shell completion: one short-lived connection, bounded in time at every step.

A TAB must answer at once or not at all, so this opens no pool and checks no schema version:
it connects (libpq's shortest connect_timeout), runs one bounded read under a statement_timeout
in one round trip, and closes. Failures are the usual typed errors; the CLI turns any of them
into no candidates.
"""

from __future__ import annotations

from typing import Any

import psycopg

from leasectl.core.errors import ConnectionFailed
from leasectl.db import sql as queries
from leasectl.db.connection import ErrorMapping, first_line
from leasectl.db.dsn import safe_dsn, validate_dsn
from leasectl.db.session import session_kwargs

# libpq's minimum: a smaller connect_timeout is read as 2 seconds.
CONNECT_TIMEOUT_S = 2
STATEMENT_TIMEOUT_MS = 500
# Distinct queues read per index, and recently seen workers whose queues are offered.
SCAN_LIMIT = 1000
WORKERS_LIMIT = 100


def queue_names(dsn: str, schema: str, prefix: str, *, limit: int = 200) -> list[str]:
    """Queue names that start with ``prefix`` (at most ``limit``, sorted): those of live jobs
    and of recently seen workers."""
    validate_dsn(dsn)
    where = safe_dsn(dsn)
    try:
        conn = psycopg.connect(
            dsn,
            **session_kwargs(
                dsn, application_name="leasectl completion", connect_timeout=CONNECT_TIMEOUT_S
            ),
        )
    except psycopg.Error as exc:
        raise ConnectionFailed(f"cannot connect to {where}: {first_line(exc)}") from None
    params: dict[str, Any] = {
        "timeout_ms": STATEMENT_TIMEOUT_MS,
        "prefix": prefix,
        "limit": limit,
        "scan": SCAN_LIMIT,
        "workers": WORKERS_LIMIT,
    }
    with ErrorMapping(where, schema=schema), conn:
        # BEGIN, the timeout, the read and COMMIT go out together: one round trip.
        with conn.pipeline(), conn.transaction():
            conn.execute(queries.get("completion_settings").render(schema), params)
            cur = conn.execute(queries.get("queues_complete").render(schema), params)
        return [row[0] for row in cur.fetchall()]
