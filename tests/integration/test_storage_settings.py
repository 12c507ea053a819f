"""The queue tables' storage settings after `leasectl init` (migrations 2, 4, 11 and 23): the
fillfactors that keep heartbeats HOT and leave room for status changes, and the autovacuum
settings that bring the tables back soon after a held xmin horizon (bench/held_bloat.py)."""

from __future__ import annotations

import psycopg

from tests.integration.test_cli import cli

EXPECTED = {
    "jobs": {
        "fillfactor": "70",
        "autovacuum_vacuum_scale_factor": "0.01",
        "autovacuum_vacuum_threshold": "1000",
        "autovacuum_vacuum_cost_delay": "0",
        "vacuum_truncate": "false",
    },
    "job_attempts": {
        "fillfactor": "70",
        "autovacuum_vacuum_threshold": "1000",
        "autovacuum_vacuum_scale_factor": "0.01",
        "autovacuum_analyze_scale_factor": "0.02",
        "autovacuum_vacuum_cost_delay": "0",
        "vacuum_truncate": "false",
    },
    "workers": {
        "fillfactor": "70",
        "autovacuum_vacuum_threshold": "500",
        "autovacuum_vacuum_scale_factor": "0",
        "autovacuum_vacuum_cost_delay": "0",
    },
    "counter_deltas": {
        "autovacuum_vacuum_scale_factor": "0",
        "autovacuum_vacuum_threshold": "5000",
        "autovacuum_vacuum_cost_delay": "0",
    },
    "queue_history_deltas": {
        "autovacuum_vacuum_scale_factor": "0",
        "autovacuum_vacuum_threshold": "5000",
        "autovacuum_vacuum_cost_delay": "0",
    },
}


def reloptions(dsn: str, schema: str = "leasectl") -> dict[str, dict[str, str]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT c.relname, c.reloptions FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind = 'r'",
            (schema,),
        ).fetchall()
    return {name: dict(o.split("=", 1) for o in (opts or [])) for name, opts in rows}


def test_init_sets_the_queue_tables_storage_settings(empty_db_dsn: str) -> None:
    proc = cli("init", dsn=empty_db_dsn)
    assert proc.returncode == 0, proc.stderr
    found = reloptions(empty_db_dsn)
    for table, options in EXPECTED.items():
        assert {k: found[table].get(k) for k in options} == options, (table, found[table])
