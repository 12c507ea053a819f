"""examples/payments, run as its README says (``python -m examples.payments``), against a real
database: payments and their capture jobs created in one transaction each, two real worker
processes, one SIGKILLed while it waits for the simulated PSP's answer, a reconciliation job.
What a payment system must get from it is checked here in the database, not only in the
example's own report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

pytestmark = [pytest.mark.full, pytest.mark.serial]

ROOT = Path(__file__).resolve().parents[2]


def test_every_payment_is_charged_once_and_recorded_once_through_a_crash(
    db_dsn: str, tmp_path: Path
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "examples.payments", "--dsn", db_dsn, "--payments", "6",
         "--psp-latency", "3", "--logs", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SIGKILLed worker" in proc.stdout, proc.stdout
    assert "every payment charged once and recorded once: yes" in proc.stdout, proc.stdout
    with psycopg.connect(db_dsn) as conn:
        payments = conn.execute(
            "SELECT p.id, p.status, p.charge_id, c.charge_id, c.calls, p.reconciled "
            "FROM payments p LEFT JOIN psp_charges c ON c.idempotency_key = 'capture-' || p.id "
            "ORDER BY p.id"
        ).fetchall()
        # 6 with a capture job, 1 charged whose job never recorded it (reconciled); the payment
        # rolled back with its job is not there, and neither is a job for it.
        assert len(payments) == 7
        assert all(
            status == "captured" and mine == theirs for _, status, mine, theirs, _, _ in payments
        )
        assert [p[0] for p in payments if p[5]] == [payments[-1][0]]
        # The killed worker had charged a customer without hearing back: its job's next owner
        # asked again with the same key and got the same charge.
        assert any(calls > 1 for *_, calls, _ in payments)
        jobs = conn.execute(
            "SELECT status::text, attempts, count(*) FROM leasectl.jobs WHERE queue = 'payments' "
            "GROUP BY 1, 2"
        ).fetchall()
        assert {status for status, _, _ in jobs} == {"Completed"}
        assert sum(n for *_, n in jobs) == 6  # the double click made no second job
        # The PSP answers after 3 s, the lease is 2 s: the jobs that finished in their first
        # attempt were kept by heartbeats.
        assert any(attempts == 1 for _, attempts, _ in jobs)
        assert any(attempts > 1 for _, attempts, _ in jobs)
