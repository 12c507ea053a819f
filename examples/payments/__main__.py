"""Run the payment example end to end: ``python -m examples.payments [--dsn DSN]``.

Without ``--dsn`` it uses the demo's embedded PostgreSQL (started if it is not running) and its
own database, ``leasectl_payments``. It creates payments and their capture jobs in one
transaction each, runs two ``leasectl worker`` processes (a lease of 2 s, a PSP that takes 3 s:
the heartbeats keep the leases), SIGKILLs one of them in the middle of a charge and starts
another, runs a reconciliation job for a capture left pending, and checks what a payment
system must guarantee: every payment captured, charged exactly once, recorded exactly once.
Exit 0 when it holds, 1 when not.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

import leasectl
from examples.payments import psp
from examples.payments.handlers import capture_key

ROOT = Path(__file__).resolve().parents[2]
DATABASE = "leasectl_payments"
LEASE_TTL = "2s"
APP_SCHEMA = """
CREATE TABLE IF NOT EXISTS payments (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    amount_cents bigint NOT NULL,
    status       text NOT NULL DEFAULT 'pending',
    charge_id    text,
    captured_at  timestamptz,
    reconciled   boolean NOT NULL DEFAULT false
)
"""


def say(text: str) -> None:
    print(f"payments: {text}", flush=True)


def embedded_dsn() -> str:
    from leasectl.db.embedded import EmbeddedServer

    server = EmbeddedServer.default()
    server.start()
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
    return server.dsn(DATABASE)


def leasectl_cli(dsn: str, *args: str, **popen: Any) -> subprocess.Popen[bytes]:
    env = {**os.environ, "LEASECTL_DSN": dsn, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "leasectl", *args], env=env, **popen)


def worker(dsn: str, queue: str, handler: str, log: Path) -> subprocess.Popen[bytes]:
    out = log.open("ab")
    return leasectl_cli(
        dsn,
        "worker",
        "--queue",
        queue,
        "--handler",
        f"examples.payments.handlers:{handler}",
        "--concurrency",
        "4",
        "--lease-ttl",
        LEASE_TTL,
        stdout=out,
        stderr=out,
    )


def until(what: str, check: Callable[[], bool], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"payments: gave up waiting for {what} after {timeout:.0f} s")
        time.sleep(0.2)


def one(conn: psycopg.Connection[Any], query: str, *args: Any) -> Any:
    row = conn.execute(query, args).fetchone()
    return None if row is None else row[0]


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m examples.payments", description=__doc__)
    ap.add_argument("--dsn", help="default: the demo's embedded server, database " + DATABASE)
    ap.add_argument("--payments", type=int, default=12)
    ap.add_argument("--psp-latency", type=float, default=3.0, metavar="SECONDS")
    ap.add_argument("--logs", type=Path, default=Path("payments-example-logs"))
    args = ap.parse_args()
    dsn = args.dsn or embedded_dsn()
    args.logs.mkdir(parents=True, exist_ok=True)
    if leasectl_cli(dsn, "init", stdout=subprocess.DEVNULL).wait() != 0:
        return 1
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(APP_SCHEMA)
        conn.execute(psp.LEDGER)
        conn.execute("TRUNCATE payments, psp_charges")

    # 1. Each payment and its capture job in one transaction: both or neither.
    with psycopg.connect(dsn) as conn:
        for n in range(args.payments):
            with conn.transaction():
                pid = one(
                    conn, "INSERT INTO payments (amount_cents) VALUES (%s) RETURNING id", 1000 + n
                )
                leasectl.enqueue(
                    conn,
                    queue="payments",
                    payload={
                        "payment_id": pid,
                        "amount_cents": 1000 + n,
                        "psp_latency": args.psp_latency,
                    },
                    unique_key=capture_key(pid),
                )
        first = one(conn, "SELECT min(id) FROM payments")
        # The customer double-clicked: the same capture again is a duplicate, not a second job.
        with conn.transaction():
            again = leasectl.enqueue(
                conn, queue="payments", payload={"payment_id": first}, unique_key=capture_key(first)
            )
        say(
            f"enqueued {args.payments} captures; a second one for payment {first}: "
            f"duplicate={again.duplicate}, job {again.id}"
        )
        # A checkout that failed after enqueueing: its transaction rolls back, job and all.
        with conn.transaction(force_rollback=True):
            lost = one(conn, "INSERT INTO payments (amount_cents) VALUES (1) RETURNING id")
            leasectl.enqueue(
                conn, queue="payments", payload={"payment_id": lost}, unique_key=capture_key(lost)
            )
        say(f"payment {lost} rolled back with its capture job")
        # A capture left pending: charged at the PSP, its job cancelled before it recorded it.
        with conn.transaction():
            orphan = one(conn, "INSERT INTO payments (amount_cents) VALUES (777) RETURNING id")
        psp.charge(dsn, capture_key(orphan), 777, 0.0)

    # 2. Two workers; one is SIGKILLed in the middle of a charge, a third takes its place.
    workers = [worker(dsn, "payments", "capture", args.logs / f"capture-{i}.log") for i in (1, 2)]
    reconciler: subprocess.Popen[bytes] | None = None
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            # Wait for a customer charged and not yet recorded: its worker is waiting for the
            # PSP's answer. Kill that worker there.
            charged = (
                "SELECT j.lease_owner FROM psp_charges AS c "
                "JOIN payments AS p ON c.idempotency_key = 'capture-' || p.id "
                "JOIN leasectl.jobs AS j ON j.unique_key = c.idempotency_key "
                "WHERE p.status = 'pending' AND j.status = 'Processing' LIMIT 1"
            )
            until("a charge made and not yet recorded", lambda: bool(one(conn, charged)))
            owner = str(one(conn, charged))
            victim = next(w for w in workers if f":{w.pid}:" in owner)
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            say(f"SIGKILLed worker pid {victim.pid} while it waited for the PSP's answer")
            workers.append(worker(dsn, "payments", "capture", args.logs / "capture-3.log"))
            until(
                "every capture job to finish",
                lambda: (
                    not one(
                        conn,
                        "SELECT count(*) FROM leasectl.jobs WHERE queue = 'payments' "
                        "AND status IN ('Pending', 'Processing')",
                    )
                ),
                timeout=180,
            )

            # 3. Reconciliation records the capture the PSP made and the application did not.
            with psycopg.connect(dsn) as tx, tx.transaction():
                job = leasectl.enqueue(
                    tx, queue="payments.reconcile", payload={}, unique_key="reconcile"
                )
            reconciler = worker(dsn, "payments.reconcile", "reconcile", args.logs / "rec.log")
            until(
                "the reconciliation",
                lambda: (
                    one(conn, "SELECT status::text FROM leasectl.jobs WHERE id = %s", job.id)
                    == "Completed"
                ),
            )
            return report(conn, args.payments + 1, lost)
    finally:
        for proc in [*workers, *([reconciler] if reconciler else [])]:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in [*workers, *([reconciler] if reconciler else [])]:
            proc.wait(timeout=60)


def report(conn: psycopg.Connection[Any], expected: int, lost: int) -> int:
    captured = one(conn, "SELECT count(*) FROM payments WHERE status = 'captured'")
    payments = one(conn, "SELECT count(*) FROM payments")
    charges = one(conn, "SELECT count(*) FROM psp_charges")
    mismatched = one(
        conn,
        "SELECT count(*) FROM payments p LEFT JOIN psp_charges c "
        "ON c.idempotency_key = 'capture-' || p.id WHERE c.charge_id IS DISTINCT FROM p.charge_id",
    )
    repeated = one(conn, "SELECT count(*) FROM psp_charges WHERE calls > 1")
    retried = one(
        conn, "SELECT count(*) FROM leasectl.jobs WHERE queue = 'payments' AND attempts > 1"
    )
    reconciled = one(conn, "SELECT count(*) FROM payments WHERE reconciled")
    lost_jobs = one(
        conn,
        "SELECT count(*) FROM leasectl.jobs WHERE payload ->> 'payment_id' = %s",
        str(lost),
    )
    say(
        f"{captured} of {payments} payments captured ({reconciled} by reconciliation); "
        f"{charges} PSP charges; {repeated} charges asked for again and answered by "
        f"idempotency key; {retried} capture jobs ran more than once"
    )
    ok = captured == payments == charges == expected and not mismatched and not lost_jobs
    say("every payment charged once and recorded once: " + ("yes" if ok else "NO"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
