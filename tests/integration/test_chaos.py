"""The chaos soak, short: 3 worker processes, 1,500 jobs, kills, a SIGSTOP past the lease, and
server restarts (fast and immediate) while they work; then every invariant of bench.chaos
(among them: each job completed in its handler's transaction has exactly one business row);
with threaded handlers, and with async def ones.

The full run is ``python -m bench.chaos`` (10 minutes, 6 workers, 20,000 jobs); see
RELIABILITY.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.full, pytest.mark.serial]

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.parametrize("handlers", [(), ("--async-handlers",)], ids=["threads", "async"])
def test_short_chaos_soak_keeps_every_invariant(tmp_path: Path, handlers: tuple[str, ...]) -> None:
    """(``async``: the handler is ``async def``; its jobs are tasks of the worker's event loop,
    its transactions ``async with ctx.transaction()`` on AsyncConnections.)"""
    report_path = tmp_path / "chaos.json"
    proc = subprocess.run(
        [
            sys.executable, "-m", "bench.chaos",
            "--workers", "3", "--jobs", "1500", "--duration", "25s",
            "--action-gap", "1.5s", "--seed", "6", "--drain-timeout", "90s",
            "--json", str(report_path), *handlers,
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
    assert report["violations"] == 0
    assert all(check["ok"] for check in report["checks"]), shown
    tally, counts = report["tally"], report["counts"]
    assert tally["kills"] >= 1, shown
    assert tally["stops"] >= 1 and tally["longest_stop_s"] > report["settings"]["lease_ttl"]
    assert tally["restarts"].get("fast", 0) >= 1 and tally["restarts"].get("immediate", 0) >= 1
    assert counts["jobs"] == 1500
    assert counts["attempts_by_outcome"]["completed"] == 1500
    assert counts["executions"] >= 1500
    # About half the jobs complete inside their handler's transaction (ctx.transaction()), each
    # with exactly one business row (an invariant checked above).
    assert 0 < counts["transaction_jobs"] < 1500
    assert counts["business_rows"] == counts["transaction_jobs"]
