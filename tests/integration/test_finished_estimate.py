"""The finished estimate counts every status the status registry says it counts: Cancelled too
(README: `leasectl_jobs_finished_estimate` gives Completed, Failed and Cancelled, "as `status`
shows"). Before the registry, the exporter and `status` each kept their own (Completed,
Failed)."""

from __future__ import annotations

import json
from datetime import timedelta

import psycopg

from leasectl.core.statuses import ESTIMATED
from tests.exporter import exporter, scrape
from tests.integration.test_cli import cli
from tests.stores import Stores


def test_cancelled_jobs_reach_the_finished_estimate(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    done = store.ops.enqueue([{}] * 30, queue="done")
    leases = store.work.claim("done", "finisher", timedelta(seconds=30), limit=30)
    assert store.work.complete(leases) == set(done)
    stopped = store.ops.enqueue([{}] * 20, queue="stopped")
    seen = store.ops.seen_now(stopped)
    assert len(store.ops.operator_cancel(seen, actor="test", reason="not wanted").changed) == 20
    sql_conn.execute("ANALYZE leasectl.jobs")

    with exporter(db_dsn) as (_, url):
        s = scrape(url)
    assert s.value("leasectl_jobs_finished_estimate", status="Completed") == 30
    assert s.value("leasectl_jobs_finished_estimate", status="Cancelled") == 20
    assert {dict(k)["status"] for k in s.series("leasectl_jobs_finished_estimate")} == {
        status.value for status in ESTIMATED
    }

    proc = cli("status", "--json", dsn=db_dsn)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["finished_estimate"] == {
        "completed": 30,
        "failed": 0,
        "cancelled": 20,
    }
    proc = cli("status", dsn=db_dsn)
    assert proc.returncode == 0, proc.stderr
    assert "cancelled 20" in " ".join(proc.stdout.split())
