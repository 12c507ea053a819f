"""What each part of the worker's round trip costs the server, in single-job mode: A/B/C/D.

    python -m bench.claim_cost [--dsn DSN] [--durable] [--rounds 8] [--trips 2000]

``jobs_complete_and_claim`` as a single-job worker runs it (prepared once through
``db/hot.py``, the worker's session settings, each trip completing the previous trip's job and
claiming one, resumed at its key), in four variants on four connections of one fresh database:

* *shipped*: the statement as the worker sends it;
* *no pause check*: without the ``NOT EXISTS (... queue_state ...)`` line;
* *no history*: without the ``closed`` and ``opened`` parts (no attempt row opened or closed);
* *no counters*: the shipped statement, run while ``counters_from_attempts`` (migration 11's
  statement-level trigger on ``job_attempts``) is disabled;
* *bounds of v14*: the shipped statement, run while the jobs and job_attempts CHECK constraints
  are as before migration 15 (without its bounds on owners and errors).

The variants take turns round by round (the order rotating), so that the drift of the machine
and of the claim index falls on all alike. Prints, per variant, the median over rounds of the
server backend's CPU time per trip (``/proc/PID/schedstat``: a local server) and of the
client-side time per trip. Without ``--dsn``, a temporary embedded server (``--durable``: fsync,
synchronous_commit and full_page_writes on, as users run it).
"""

from __future__ import annotations

import argparse
import re
import statistics
import types

import psycopg
from psycopg import sql

from bench.common import server_dsn
from bench.pause_cost import CHECK, NAME, SCHEMA, Variant, fresh_database
from leasectl.db import hot
from leasectl.db import sql as queries
from leasectl.db.connection import Database

TRIGGER = "counters_from_attempts"


def variants() -> dict[str, queries.Query]:
    shipped = queries.get(NAME)
    text = shipped.text
    assert text.count(CHECK) == 1, "the pause check is not in the claim as expected"
    history = re.compile(r"\), closed AS \(.*?\n\)\n(?=-- \(No ORDER BY)", re.S)
    assert len(history.findall(text)) == 1, "the history parts are not in the claim as expected"
    return {
        "shipped": shipped,
        "no pause check": queries.Query(NAME + "_nopause", "", text.replace(CHECK, "")),
        "no history": queries.Query(NAME + "_nohistory", "", history.sub(")\n", text)),
        "no counters": queries.Query(NAME + "_nocounters", "", text),
        "bounds of v14": queries.Query(NAME + "_v14bounds", "", text),
        **{
            label: queries.Query(NAME + "_" + label.replace(" ", "_"), "", text)
            for label in FUNCTIONS
        },
    }


def counters_function(drop: tuple[str, ...]) -> str:
    """Migration 11's counters_from_attempts (CREATE OR REPLACE), without the SET lines that
    start with one of ``drop``; the body's names qualified when search_path is dropped."""
    [text] = [m.text for m in queries.migrations() if m.version == 11]
    start = text.index("CREATE FUNCTION {schema}.counters_from_attempts()")
    body = text[start : text.index("$$;", start) + 3]
    lines = [ln for ln in body.splitlines() if not any(ln.startswith("SET " + d) for d in drop)]
    body = "\n".join(lines).replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")
    if "search_path" in drop:
        body = body.replace("INTO counter_deltas", "INTO {schema}.counter_deltas")
        body = body.replace("FROM jobs WHERE", "FROM {schema}.jobs WHERE")
    return body.replace("{schema}", SCHEMA)


# Migration 15's bounds taken off (as migration 5 left jobs), then put back.
V14_BOUNDS = (
    "ALTER TABLE {s}.jobs DROP CONSTRAINT jobs_bounded_values; "
    "ALTER TABLE {s}.jobs ADD CONSTRAINT jobs_bounded_values CHECK (char_length(queue) <= 200 "
    "AND max_attempts <= 1000 AND run_at BETWEEN '0001-01-02 00:00+00' AND "
    "'9999-12-30 00:00+00') NOT VALID; "
    "ALTER TABLE {s}.job_attempts DROP CONSTRAINT job_attempts_bounded_values"
)
V15_BOUNDS = (
    "ALTER TABLE {s}.jobs DROP CONSTRAINT jobs_bounded_values; "
    "ALTER TABLE {s}.jobs ADD CONSTRAINT jobs_bounded_values CHECK (char_length(queue) <= 200 "
    "AND max_attempts <= 1000 AND run_at BETWEEN '0001-01-02 00:00+00' AND "
    "'9999-12-30 00:00+00' AND char_length(lease_owner) <= 400 "
    "AND char_length(last_error) <= 4000) NOT VALID; "
    "ALTER TABLE {s}.job_attempts ADD CONSTRAINT job_attempts_bounded_values CHECK ("
    "char_length(lease_owner) <= 400 AND char_length(error) <= 4000) NOT VALID"
)

# Variants of the trigger's function, each installed for its variant's round only.
FUNCTIONS = {
    "counters w/o GUCs": ("enable_seqscan", "jit"),
    "counters w/o SET": ("enable_seqscan", "jit", "search_path"),
}


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.claim_cost", description=__doc__)
    p.add_argument("--dsn", default=None, help="default: a temporary embedded server")
    p.add_argument("--durable", action="store_true", help="embedded server: fsync etc. on")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--trips", type=int, default=2000, help="single-job trips per round")
    a = p.parse_args()
    with server_dsn(a.dsn, a.durable) as base:
        chosen = variants()
        jobs = len(chosen) * (a.rounds + 1) * a.trips + 10_000
        name = "leasectl_claim_cost"
        dsn = fresh_database(base, name, jobs)
        with psycopg.connect(dsn, autocommit=True) as conn:
            settings = conn.execute(
                "SELECT string_agg(name || '=' || setting, ' ') FROM pg_settings WHERE name IN "
                "('fsync', 'synchronous_commit', 'full_page_writes', 'server_version')"
            ).fetchone()
        print(f"server: {settings[0] if settings else '?'}; {jobs:,} jobs seeded")
        by_name = {q.name: q for q in chosen.values()}
        real = queries

        def get(query_name: str) -> queries.Query:
            return by_name.get(query_name) or real.get(query_name)

        hot.queries = types.SimpleNamespace(get=get, numbered=real.numbered)  # type: ignore[assignment,attr-defined]
        db = Database.connect(dsn, SCHEMA, max_size=len(chosen) + 2, generic_plans=True)
        admin = psycopg.connect(dsn, autocommit=True)
        toggle = sql.SQL("ALTER TABLE {}.job_attempts {} TRIGGER {}")

        def counters(on: bool) -> None:
            admin.execute(
                toggle.format(
                    sql.Identifier(SCHEMA),
                    sql.SQL("ENABLE" if on else "DISABLE"),
                    sql.Identifier(TRIGGER),
                )
            )

        try:
            runs = {label: Variant(db, q.name) for label, q in chosen.items()}
            order = list(runs)
            for r in range(a.rounds + 1):  # round 0: prepare and warm up, not counted
                for label in order[r % len(order) :] + order[: r % len(order)]:
                    v = runs[label]
                    if label == "no counters":
                        counters(False)
                    if label == "bounds of v14":
                        admin.execute(V14_BOUNDS.format(s=SCHEMA))
                    if label in FUNCTIONS:
                        admin.execute(counters_function(FUNCTIONS[label]))
                    try:
                        v.round(a.trips if r else max(1, a.trips // 10), 1)
                    finally:
                        if label == "no counters":
                            counters(True)
                        if label == "bounds of v14":
                            admin.execute(V15_BOUNDS.format(s=SCHEMA))
                        if label in FUNCTIONS:
                            admin.execute(counters_function(()))
                    if r == 0:
                        v.times.clear()
                        v.cpu.clear()
            shipped_cpu = statistics.median(runs["shipped"].cpu)
            shipped_time = statistics.median(runs["shipped"].times)
            print(f"single-job trips, medians of {a.rounds} rounds of {a.trips} trips:")
            print(
                f"{'variant':<18} {'server CPU µs/trip':>19} {'vs shipped':>11} "
                f"{'µs/trip':>9} {'vs shipped':>11}"
            )
            for label, v in runs.items():
                cpu, t = statistics.median(v.cpu), statistics.median(v.times)
                print(
                    f"{label:<18} {cpu * 1e6:>19.1f} {(cpu - shipped_cpu) * 1e6:>+11.1f} "
                    f"{t * 1e6:>9.1f} {(t - shipped_time) * 1e6:>+11.1f}"
                )
            for v in runs.values():
                db.give_back(v.conn)
        finally:
            admin.close()
            db.close()


if __name__ == "__main__":
    main()
