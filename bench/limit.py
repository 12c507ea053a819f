"""The limit: what the server itself can do, measured with pgbench on the same server.

* ``pgbench -N`` (simple-update TPC-B without the branch/teller updates) at 1, 2, 4, 16 clients.
* The leased pattern in raw SQL (bench/pgbench/*.sql) on the real leasectl schema (its indexes
  and storage settings): single-row claim + complete, and batch claim of 50 + batch complete,
  each also with the attempt history leasectl keeps; and the single-row claim resumed as a
  draining leasectl worker resumes (from its previous claim's key, not the queue's head): the
  single-row bound is the better of the two. Each run drains a seeded budget of jobs
  with ``-t`` (transactions per client) so that no transaction ever finds the queue empty; the
  bound is completed jobs per second.

All runs use ``-M prepared`` (psycopg prepares repeated statements too) and ``-j`` = min(clients,
cores) client threads. pgbench runs on the same 2 cores as the server, as the workers do.
"""

from __future__ import annotations

import os
import re
import subprocess
from typing import Any

import psycopg
from psycopg import conninfo

from bench.common import BENCH, Ctx, leasectl_init, log, seed_pending, table

# The claim key a resumed claim starts from at first: the queue's head (store.CLAIM_FROM_HEAD).
FROM_HEAD = ("-D", "p=-2147483648", "-D", "r=-infinity", "-D", "k=-9223372036854775808")
SCRIPTS: dict[str, tuple[str, int, tuple[str, ...]]] = {
    # name: (file, jobs per transaction, extra pgbench arguments)
    "single": ("claim_one.sql", 1, ()),
    "single resumed": ("claim_one_resumed.sql", 1, FROM_HEAD),
    "single+history": ("claim_one_history.sql", 1, ()),
    "batch50": ("claim_batch.sql", 50, ()),
    "batch50+history": ("claim_batch_history.sql", 50, ()),
}
# Jobs each custom run drains: sized for ~10 s at this machine's rates in full mode. A pattern
# and its +history variant drain as many: each claim walks the dead entries of the jobs drained
# before it (when it starts at the queue's head), so a shorter run is a faster one.
BUDGET_FULL = {
    "single": 100_000,
    "single resumed": 100_000,
    "single+history": 100_000,
    "batch50": 500_000,
    "batch50+history": 500_000,
}
SCALE = 10


def pgbench() -> str:
    from leasectl.db.embedded import pg_bin

    return str(pg_bin("pgbench"))


def pg_env(dsn: str) -> dict[str, str]:
    """libpq environment for pgbench (no DSN on its command line, so no password in ps)."""
    d = {k: str(v) for k, v in conninfo.conninfo_to_dict(dsn).items() if v is not None}
    keys = {
        "host": "PGHOST",
        "port": "PGPORT",
        "user": "PGUSER",
        "password": "PGPASSWORD",
        "passfile": "PGPASSFILE",  # the embedded server's password (never on a command line)
        "dbname": "PGDATABASE",
        "sslmode": "PGSSLMODE",
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.update({keys[k]: v for k, v in d.items() if k in keys})
    return env


def run_pgbench(dsn: str, args: list[str], timeout: float = 600) -> dict[str, Any]:
    out = subprocess.run(
        [pgbench(), *args],
        env=pg_env(dsn),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=BENCH,
    )
    text = out.stdout + out.stderr
    if out.returncode != 0:
        raise RuntimeError(f"pgbench {' '.join(args)} failed: {text[-1500:]}")
    tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", text)
    lat = re.search(r"latency average = ([\d.]+) ms", text)
    done = re.search(r"number of transactions actually processed: (\d+)", text)
    failed = re.search(r"number of failed transactions: (\d+)", text)
    return {
        "tps": round(float(tps.group(1)), 1) if tps else None,
        "latency_ms": float(lat.group(1)) if lat else None,
        "transactions": int(done.group(1)) if done else None,
        "failed": int(failed.group(1)) if failed else 0,
    }


def threads(clients: int) -> str:
    return str(max(1, min(clients, os.cpu_count() or 1)))


def drain_raw(
    ctx: Ctx, script: str, clients: int, jobs: int, per_tx: int = 1, extra: tuple[str, ...] = ()
) -> dict[str, Any]:
    """One pgbench run of a raw leased pattern (``bench/pgbench/SCRIPT``, ``per_tx`` jobs per
    transaction) draining about ``jobs`` seeded jobs with ``clients`` clients, in a fresh
    database of the leasectl schema: pgbench's figures, and completed jobs per second."""
    per_client = max(1, jobs // (clients * per_tx))
    jobs = per_client * clients * per_tx
    dsn = ctx.fresh_db("leased")
    try:
        leasectl_init(dsn)
        seed_pending(dsn, jobs)
        r = run_pgbench(
            dsn,
            [
                "-n",
                "-M",
                "prepared",
                "-c",
                str(clients),
                "-j",
                threads(clients),
                "-t",
                str(per_client),
                "-f",
                f"pgbench/{script}",
                *extra,
            ],
        )
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FILTER (WHERE status = 'Completed') FROM leasectl.jobs"
            ).fetchone()
        completed = int(row[0]) if row else 0
        r["jobs"] = jobs
        r["completed"] = completed
        r["jobs_per_s"] = round((r["tps"] or 0) * per_tx * completed / jobs, 1)
        return r
    finally:
        ctx.drop_db(dsn)


def run(ctx: Ctx) -> dict[str, Any]:
    sizes = ctx.sizes
    fig: dict[str, Any] = {"seconds_per_run": sizes.limit_seconds, "tpcb_n": {}, "leased": {}}

    dsn = ctx.fresh_db("pgbench")
    try:
        log(f"limit: pgbench -i -s {SCALE}")
        run_pgbench(dsn, ["-i", "-q", "-s", str(SCALE)])
        for c in sizes.limit_clients:
            log(f"limit: pgbench -N -c {c}")
            args = ["-n", "-N", "-M", "prepared", "-c", str(c), "-j", threads(c)]
            fig["tpcb_n"][str(c)] = run_pgbench(dsn, [*args, "-T", str(sizes.limit_seconds)])
    finally:
        ctx.drop_db(dsn)

    for name, (script, per_tx, extra) in SCRIPTS.items():
        fig["leased"][name] = {}
        budget = BUDGET_FULL[name] * sizes.limit_seconds // 15
        for c in sizes.limit_clients:
            log(f"limit: {name} -c {c}")
            fig["leased"][name][str(c)] = drain_raw(ctx, script, c, budget, per_tx, extra)
        best = max(fig["leased"][name].values(), key=lambda r: r["jobs_per_s"])
        fig["leased"][name]["bound_jobs_per_s"] = best["jobs_per_s"]
    return fig


def render(fig: dict[str, Any]) -> str:
    clients = sorted(int(c) for c in fig["tpcb_n"])
    rows: list[list[Any]] = [
        ["pgbench -N (TPS)", *[fig["tpcb_n"][str(c)]["tps"] for c in clients], "-"]
    ]
    for name, runs in fig["leased"].items():
        rows.append(
            [
                f"{name} (jobs/s)",
                *[runs.get(str(c), {}).get("jobs_per_s") for c in clients],
                runs.get("bound_jobs_per_s"),
            ]
        )
    return table(
        "limit: pgbench on the same server",
        ["pattern", *[f"{c} clients" for c in clients], "bound"],
        rows,
    )
