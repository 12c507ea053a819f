"""The failover soak, short: 3 `leasectl worker` processes on one multi-host DSN over a primary
and its synchronous standby; twice the standby is held back, the primary SIGKILLed and the
standby promoted (a new standby seeded each time), with worker kills and a SIGSTOP on top. Every
invariant of bench.chaos holds, and so do the handlers' own ledger's: no acknowledged write
is lost, no lease forgotten, no fencing token executed twice.

The longer runs, synchronous and asynchronous, are in RELIABILITY.md ("Failover")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.full, pytest.mark.serial]

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_synchronous_failovers_keep_every_invariant(tmp_path: Path) -> None:
    report_path = tmp_path / "failover.json"
    proc = subprocess.run(
        [
            sys.executable, "-m", "bench.chaos", "--failover", "sync", "--failovers", "2",
            "--workers", "3", "--jobs", "800", "--duration", "20s", "--action-gap", "2s",
            "--seed", "7", "--drain-timeout", "60s", "--json", str(report_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )  # fmt: skip
    shown = f"exit {proc.returncode}\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, shown
    assert "RESULT: PASS (0 violated invariants)" in proc.stdout, shown
    report = json.loads(report_path.read_text())
    assert report["violations"] == 0 and all(c["ok"] for c in report["checks"]), shown
    counts = report["counts"]
    assert counts["failover"]["failovers"] == 2, shown
    assert counts["attempts_by_outcome"]["completed"] == counts["jobs"] == 800
    assert counts["ledger_executions"] >= 800 and counts["ledger_transactions"] > 0
    assert counts["ledger_executions_lost"] == counts["ledger_transactions_lost"] == 0
    assert counts["ledger_leases_forgotten"] == counts["ledger_tokens_executed_twice"] == 0
