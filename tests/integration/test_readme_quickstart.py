"""README's first example is examples/quickstart.py, word for word, and it runs as README says:
the script enqueues inside its transaction, `leasectl worker` runs the handler."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psycopg

from tests.util import wait_until

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "quickstart.py"


def test_the_readme_shows_the_example_as_it_is() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_screen = "\n".join(readme.splitlines()[:70])
    body = EXAMPLE.read_text(encoding="utf-8").split('"""\n\n', 1)[1]  # without its docstring
    assert f"```python\n{body}```" in first_screen
    assert len(body.splitlines()) <= 16


def test_the_example_enqueues_in_its_transaction_and_a_worker_runs_it(db_dsn: str) -> None:
    env = {**os.environ, "LEASECTL_DSN": db_dsn}
    enqueue = subprocess.run(
        [sys.executable, "-m", "examples.quickstart", db_dsn],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert enqueue.returncode == 0, enqueue.stderr
    worker = subprocess.Popen(
        [sys.executable, "-m", "leasectl", "worker", "-q", "emails",
         "--handler", "examples.quickstart:welcome"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        with psycopg.connect(db_dsn, autocommit=True) as conn:

            def done() -> bool:
                row = conn.execute("SELECT status::text FROM leasectl.jobs").fetchone()
                return row is not None and row[0] == "Completed"

            wait_until(done, timeout=60, what="the welcome job Completed")
            assert conn.execute("SELECT email FROM users").fetchall() == [("ada@example.com",)]
    finally:
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    assert "job 1: welcome mail to ada@example.com" in out, out + err
