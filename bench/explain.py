"""EXPLAIN every scheduled query on a table with 1M finished jobs (plus live ones).

Usage: python bench/explain.py DSN [--rows 1000000] [--pending 10000] [--limited]. Creates a
database ``leasectl_explain`` on that server (dropped and recreated), seeds it, and prints each
plan with its timing. ``--limited``: queue payments has limits (migration 17) that do not bind,
and the claims' plans are followed by those of the statements inside claim_budget and
claim_settle, as they ran.
"""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import conninfo, sql

from bench.plans import explain_generic, explain_nested
from leasectl.core.filters import prefix_end
from leasectl.core.throughput import GRACE
from leasectl.db import sql as queries
from leasectl.db.connection import Database
from leasectl.db.work import CLAIM_FROM_HEAD

SCHEMA = "leasectl"


def seed(dsn: str, finished: int, pending: int, processing: int, expired: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO leasectl.jobs (queue, status, attempts, lease_owner, created_at, "
            "updated_at, finished_at, run_at) "
            "SELECT (ARRAY['payments','emails','reports'])[1 + i %% 3], "
            "CASE WHEN i %% 50 = 0 THEN 'Failed' ELSE 'Completed' END::leasectl.job_status, 1, "
            "'w-' || (i %% 20), ts, ts, ts, ts "
            "FROM generate_series(1, %s) AS i, "
            "LATERAL (SELECT now() - interval '1 second' * i / 10 AS ts) AS t",
            (finished,),
        )
        conn.execute(
            "INSERT INTO leasectl.jobs (queue, priority, run_at) "
            "SELECT (ARRAY['payments','emails','reports'])[1 + i %% 3], i %% 3, "
            "now() - interval '1 millisecond' * i FROM generate_series(1, %s) AS i",
            (pending,),
        )
        conn.execute(
            "INSERT INTO leasectl.jobs (queue, status, attempts, lease_owner, lease_until, "
            "heartbeat_at) SELECT (ARRAY['payments','emails','reports'])[1 + i %% 3], "
            "'Processing', 1, 'w-' || (i %% 20), "
            "now() + CASE WHEN i <= %s THEN - interval '1 minute' ELSE interval '1 minute' END, "
            "now() FROM generate_series(1, %s) AS i",
            (expired, processing + expired),
        )
        conn.execute("VACUUM ANALYZE leasectl.jobs")


# The worker's statements run with plan_cache_mode = force_generic_plan (see Database.connect).
WORKER_GENERIC = {"jobs_complete_and_claim", "jobs_heartbeat"}
# The claims, whose LIMIT calls claim_budget (and claim_settle after): with --limited, the
# plans of the statements inside them too.
CLAIMS = {"jobs_complete_and_claim", "jobs_claim_expired", "job_claim_by_id"}
# Calls of the audited functions of migration 6: what is shown is the plan of the statement
# inside, as the function ran it (auto_explain; needs a superuser).
FUNCTIONS = {"jobs_requeue_expired", "jobs_operator_requeue", "jobs_operator_mark_stuck"}
# Guarded actions on two expired leases (ids of the seed's Processing rows), forced.
OPERATOR = {
    "ids": [1_010_001, 1_010_002],
    "statuses": ["Processing", "Processing"],
    "attempts": [1, 1],
    "owners": ["w-1", "w-2"],
    "force": True,
    "actor": "explain",
    "reason": None,
}

PARAMS: dict[str, dict[str, Any]] = {
    "jobs_complete_and_claim": {
        "done_ids": [1_010_100, 1_010_120],
        "done_attempts": [1, 1],
        "queue": "payments",
        "owner": "w-1",
        "ttl": timedelta(seconds=30),
        "limit": 10,
        **CLAIM_FROM_HEAD,
    },
    "jobs_claim_expired": {
        "queue": "payments",
        "owner": "w-x",
        "ttl": timedelta(seconds=30),
        "limit": 10,
    },
    "job_claim_by_id": {"id": 1_000_500, "owner": "w-x", "ttl": timedelta(seconds=30)},
    "queues_paused": {"queues": ["payments", "emails"]},
    "jobs_heartbeat": {
        "ids": [1_010_100, 1_010_200],
        "attempts": [1, 1],
        "owner": "w-1",
        "ttl": timedelta(seconds=30),
        "progress": [0.5, None],
        "messages": ["half", None],
    },
    "jobs_requeue_expired": {
        "limit": 500,
        "queue": None,
        "mark": False,
        "actor": "w",
        "reason": "explain",
        "detail": False,
        "owner": None,
    },
    "jobs_operator_requeue": {**OPERATOR, "priority": None, "more_attempts": None},
    "jobs_operator_mark_stuck": OPERATOR,
    "jobs_expired_list": {"limit": 500, "queue": None, "owner": None},
    "status_live_counts": {
        "queue": None,
        "budget": 6000,
        "floor": 100,
        "stuck_floor": 100,
        "group_limit": 1000,
    },
    "status_finished_recent": {"queue": None, "window": timedelta(hours=1)},
    "status_owners": {"window": timedelta(hours=1), "limit": 200},
}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("dsn")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--pending", type=int, default=10_000)
    p.add_argument("--limited", action="store_true")
    p.add_argument("--only", nargs="*")
    a = p.parse_args()
    name = "leasectl_explain"
    with psycopg.connect(a.dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = conninfo.make_conninfo(a.dsn, dbname=name)
    with Database.connect(dsn, SCHEMA, check_schema=False) as db:
        db.migrate()
    seed(dsn, a.rows, a.pending, 2_000, 500)
    if a.limited:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "SELECT leasectl.queue_limit_set('payments', 100000, 1000000, 1000000, "
                "'explain', 'explain', 'explain')"
            )
    console = {
        "queue": None,
        "owner": None,
        "owner_end": None,
        "job_id": None,
        "limit": 50,
        "minutes": 30,
        "since": None,  # console_throughput's first count: the whole window
        "grace": GRACE,
        "risk_window": timedelta(seconds=10),
        "schema": SCHEMA,
        "queue_limit": 200,
        "failed_scan": 5000,
        "paused_limit": 100,
        "budget": 6000,  # the console's bounded counts (core/counts.py's COUNT_BUDGET)
        "group_limit": 1000,
    }
    extra = {
        name: console
        for name in queries.all_queries()
        if name.startswith("console_")
        and name not in ("console_snapshot_begin", "console_settings")
    }
    # The match counts run only under an owner filter (a prefix: one range of the owner index).
    extra["console_match_counts"] = {**console, "owner": "w-1", "owner_end": prefix_end("w-1")}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for qname, params in {**PARAMS, **extra}.items():
            if a.only and qname not in a.only:
                continue
            query = queries.get(qname).render(SCHEMA)
            explain = sql.SQL("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) ") + query
            try:
                if qname in WORKER_GENERIC:  # as the worker runs them: one plan, made once
                    lines = explain_generic(conn, query, params).splitlines()
                elif qname in FUNCTIONS:
                    _, plan = explain_nested(conn, query, params)[0]
                    lines = plan.splitlines()
                else:
                    with conn.transaction(force_rollback=True):
                        lines = [r[0] for r in conn.execute(explain, params or None)]
            except psycopg.Error as exc:
                print(f"== {qname}: cannot explain ({exc})", file=sys.stderr)
                continue
            generic = " (generic plan)" if qname in WORKER_GENERIC else ""
            if qname in FUNCTIONS:
                generic = " (the statement inside the function, as it ran)"
            print(f"== {qname}{generic}")
            for line in lines:
                print("   " + line)
            seq = [line for line in lines if "Seq Scan on jobs" in line]
            print(f"   -> sequential scans of jobs: {len(seq)}\n")
            if a.limited and qname in CLAIMS:
                for text, plan in explain_nested(conn, query, params)[:-1]:
                    print(f"== {qname}: inside, as it ran: {' '.join(text.split())[:160]}")
                    for line in plan.splitlines():
                        print("   " + line)
                    print()


if __name__ == "__main__":
    main()
