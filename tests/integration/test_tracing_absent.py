"""Without OpenTelemetry, tracing costs nothing and breaks nothing: leasectl enqueues and runs
jobs with the package made unimportable, and never imports it itself when it is installed
(it traces only once the application has: docs/tracing.md)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

import psycopg

from tests.util import wait_until

# Enqueue (sync and async), drain (a sync and an async handler), then a `leasectl worker`
# process on the same interpreter; the jobs' trace context stays NULL.
SCRIPT = """
import asyncio, sys
{block}
import psycopg
import leasectl
from leasectl.testing import drain

dsn = sys.argv[1]

def handle(ctx):
    pass

async def handle_async(ctx):
    await asyncio.sleep(0)

async def produce():
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await leasectl.enqueue_async(conn, queue="b", payload=1)
        await leasectl.enqueue_many_async(conn, [leasectl.NewJob(2, queue="b")])

with psycopg.connect(dsn, autocommit=True) as conn:
    leasectl.enqueue(conn, queue="a", payload=1)
    leasectl.enqueue_many(conn, [leasectl.NewJob(2, queue="a")])
    asyncio.run(produce())
    assert [r.outcome for r in drain(dsn, "a", handle)] == ["completed"] * 2
    assert [r.outcome for r in drain(dsn, "b", handle_async)] == ["completed"] * 2
    leasectl.enqueue(conn, queue="c", payload=3)
    rows = conn.execute("SELECT count(*) FROM leasectl.jobs WHERE trace_context IS NULL")
    assert rows.fetchone()[0] == 5
loaded = [m for m, module in sys.modules.items() if m.split(".")[0] == "opentelemetry" and module]
print("imported:", sorted(loaded))
"""

BLOCK = "sys.modules['opentelemetry'] = None  # import opentelemetry: ModuleNotFoundError"


def run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_enqueue_and_handlers_run_with_opentelemetry_unimportable(
    db_dsn: str, sql_conn: psycopg.Connection[Any]
) -> None:
    proc = run(SCRIPT.format(block=BLOCK), db_dsn)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "imported: []"


def test_leasectl_never_imports_opentelemetry_itself(db_dsn: str) -> None:
    """Installed (the dev extra) but not imported by the application: not imported at all, and
    neither is it by the command line's start."""
    proc = run(SCRIPT.format(block=""), db_dsn)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "imported: []"
    cli = run(
        "import sys, leasectl.cli; print(any(m.startswith('opentelemetry') for m in sys.modules))"
    )
    assert cli.stdout.strip() == "False", cli.stderr


def test_a_worker_process_runs_jobs_with_opentelemetry_unimportable(
    db_dsn: str, sql_conn: psycopg.Connection[Any]
) -> None:
    import leasectl

    leasectl.enqueue_many(sql_conn, [leasectl.NewJob(n, queue="w") for n in range(3)])
    worker = textwrap.dedent(
        f"""
        import sys
        {BLOCK}
        from leasectl.cli import main
        sys.argv = ["leasectl", "--dsn", sys.argv[1], "worker", "-q", "w",
                    "--handler", "tests.handlers:noop", "--concurrency", "2"]
        main()
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", worker, db_dsn],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=os.getcwd(),
    )
    try:
        wait_until(
            lambda: sql_conn.execute(
                "SELECT count(*) = 3 FROM leasectl.jobs WHERE status = 'Completed'"
            ).fetchone()[0],  # type: ignore[index]
            what="the worker completed the three jobs",
        )
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
