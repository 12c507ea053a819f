"""Concurrency keys at scale (migration 18): with 200,000 jobs of one busy key Waiting, the
claim takes every other key's job at once (the Waiting jobs are in no index it reads), and the
statements the triggers and the healing pass run inside their functions are index probes: each
plan, logged by auto_explain for the nested statements, reads no table sequentially and no node
returns more than a few rows."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from tests.conftest import SCHEMA
from tests.stores import Stores

pytestmark = pytest.mark.full

BUSY = 200_000
OTHERS = 50
TTL = timedelta(minutes=5)
ROWS = re.compile(r"actual (?:time=\S+ )?rows=(\d+)(?:\.\d+)? loops=(\d+)")


def seed(conn: psycopg.Connection[Any]) -> None:
    """The busy key's head and its Waiting jobs first (the oldest), then each other key's head
    and two Waiting jobs; written with the triggers off (a seed, not enqueues)."""
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute(
            "INSERT INTO leasectl.jobs (queue, status, concurrency_key, run_at) "
            "SELECT 'q', CASE WHEN i = 0 THEN 'Pending' ELSE 'Waiting' END::leasectl.job_status,"
            " 'busy', now() - interval '1 hour' + i * interval '1 ms' "
            "FROM generate_series(0, %s) AS i",
            (BUSY,),
        )
        conn.execute(
            "INSERT INTO leasectl.jobs (queue, status, concurrency_key) "
            "SELECT 'q', CASE WHEN n = 0 THEN 'Pending' ELSE 'Waiting' END::leasectl.job_status,"
            " 'k' || k FROM generate_series(1, %s) AS k, generate_series(0, 2) AS n",
            (OTHERS,),
        )
    conn.execute("VACUUM ANALYZE leasectl.jobs")


class Plans:
    """The plans auto_explain logs on this connection, nested statements included."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.plans: list[str] = []
        conn.add_notice_handler(self._notice)
        conn.execute("LOAD 'auto_explain'")
        for name, value in (
            ("auto_explain.log_min_duration", "0"),
            ("auto_explain.log_analyze", "on"),
            ("auto_explain.log_nested_statements", "on"),
            ("auto_explain.log_level", "notice"),
        ):
            conn.execute("SELECT set_config(%s, %s, false)", (name, value))

    def _notice(self, diag: psycopg.errors.Diagnostic) -> None:
        if diag.message_primary and "Query Text" in diag.message_primary:
            self.plans.append(diag.message_primary)

    def nested(self, marker: str) -> list[str]:
        return [p for p in self.plans if marker in p]


def assert_probes(plans: list[str]) -> None:
    assert plans
    for plan in plans:
        assert "Seq Scan" not in plan, plan
        most = max(int(rows) for rows, _ in ROWS.findall(plan))
        assert most <= 5, plan


def test_a_busy_key_holds_up_no_other_key_and_its_promotion_is_a_probe(
    db_dsn: str, sql_conn: psycopg.Connection[Any]
) -> None:
    seed(sql_conn)
    with Stores.connect(db_dsn, SCHEMA, max_size=2) as store:
        leases = store.work.claim("q", "w1", TTL, 100)
        keys = sorted(lease.job.id for lease in leases)
        assert len(keys) == OTHERS + 1  # the busy key's head and every other key's head
        busy = min(keys)  # the busy key's head has the smallest id
        plans = Plans(sql_conn)
        sql_conn.execute(
            "UPDATE leasectl.jobs SET status = 'Completed', lease_until = NULL, "
            "finished_at = now() WHERE id = %s",
            (busy,),
        )
        # The exit trigger's statements (the head probe, the first Waiting job, its update):
        # every plan but the outer UPDATE's, which found the head by its id.
        inner = [p for p in plans.plans if "WHERE id = $1" not in p and "FROM jobs" in p]
        assert any("status = 'Waiting'" in p for p in inner)
        assert any("'Pending', 'Processing', 'Stuck'" in p for p in inner)
        assert_probes(inner)
        promoted = sql_conn.execute(
            "SELECT id FROM leasectl.jobs WHERE concurrency_key = 'busy' AND status = 'Pending'"
        ).fetchall()
        assert promoted == [(busy + 1,)]


def test_the_healing_pass_probes_each_key_once(
    db_dsn: str, sql_conn: psycopg.Connection[Any]
) -> None:
    seed(sql_conn)
    plans = Plans(sql_conn)
    rows = sql_conn.execute("SELECT * FROM leasectl.jobs_keys_heal(1000, NULL, NULL)").fetchall()
    assert rows == [(None, None, None)]  # every key has its head: nothing to promote
    walked = [p for p in plans.plans if "j.status = 'Waiting'" in p]
    assert len(walked) == OTHERS + 2  # one probe per key, and one past the last
    assert_probes(walked)
