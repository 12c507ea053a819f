"""``--log-format json``: `leasectl worker`, `watch` and `metrics`, run as the real commands, write
one JSON object per line on stderr (ts, level, logger, msg; job, attempt, queue, outcome and
error on a line about a job); hostile text stays data (JSON-escaped, no raw control character)
and the DSN's password never shows."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import conninfo

import leasectl
from tests.integration.test_cli import _env
from tests.stores import Stores
from tests.util import SUPERUSER_PASSWORD, wait_until

ROOT = Path(__file__).resolve().parents[2]
HOSTILE_QUEUE = "mail\x1b]0;PWNED\x07\u202e"
HOSTILE_ERROR = "bad invoice \x1b[2J\x9b31m\x7f\r\u2028 total"


def with_password(dsn: str) -> str:
    """The test database's DSN with the superuser's password in it (the embedded server's is
    that one; a trust server ignores it)."""
    return conninfo.make_conninfo(dsn, password=SUPERUSER_PASSWORD)


@contextmanager
def command(dsn: str, tmp_path: Path, *args: str) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """``leasectl ARGS`` running, its stderr in a file; SIGTERMed (and ended) after the block."""
    err = tmp_path / "stderr"
    with err.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "leasectl", *args],
            cwd=ROOT,
            env={**_env(dsn), "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            stderr=sink,
        )
        try:
            yield proc, err
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
            assert proc.stdout is not None
            proc.stdout.close()


def json_lines(raw: bytes) -> list[dict[str, Any]]:
    """Every line parsed as one JSON object with the four fields every line has; the raw bytes
    printable ASCII only (no control character, nothing for a terminal to act on)."""
    assert raw.endswith(b"\n"), raw
    assert all(0x20 <= byte < 0x7F or byte == 0x0A for byte in raw), raw
    lines = [json.loads(line) for line in raw.decode("ascii").splitlines()]
    for line in lines:
        assert isinstance(line, dict)
        assert {"ts", "level", "logger", "msg"} <= line.keys(), line
        assert line["ts"].endswith("Z") and "T" in line["ts"], line
    return lines


def test_worker_lines_about_jobs_carry_their_fields(
    db_dsn: str, sql_conn: psycopg.Connection[Any], store: Stores, tmp_path: Path
) -> None:
    # The password where it stands as one (a conninfo in the error): taken out of every field.
    message = f"{HOSTILE_ERROR} password={SUPERUSER_PASSWORD}"
    failed = leasectl.enqueue(
        sql_conn, queue=HOSTILE_QUEUE, payload={"message": message}, max_attempts=2
    ).id
    store.ops.pause("held", actor="test", reason="a line about a queue")
    dsn = with_password(db_dsn)
    with command(
        dsn, tmp_path, "worker", "-q", HOSTILE_QUEUE, "-q", "held",
        "--handler", "tests.handlers:raise_message", "--retry-base", "0s",
        "--log-format", "json",
    ) as (proc, err):  # fmt: skip
        wait_until(
            lambda: (
                proc.poll() is not None
                or sql_conn.execute(
                    "SELECT status::text FROM leasectl.jobs WHERE id = %s", (failed,)
                ).fetchone()
                == ("Failed",)
            ),
            timeout=60,
        )
        assert proc.poll() is None, err.read_text()
    assert proc.returncode == 0
    raw = err.read_bytes()
    assert SUPERUSER_PASSWORD.encode() not in raw
    lines = json_lines(raw)
    assert lines[0]["logger"] == "leasectl.worker" and "started" in lines[0]["msg"]
    about = [line for line in lines if line.get("job") == failed]
    shown_error = f"ValueError: {HOSTILE_ERROR} password=***".split("\n")[0]
    assert [
        (line["level"], line["attempt"], line["queue"], line["outcome"], line["error"])
        for line in about
    ] == [
        ("warning", 1, HOSTILE_QUEUE, "retrying", shown_error),
        ("warning", 2, HOSTILE_QUEUE, "failed", shown_error),
    ]
    # A line about a queue has its queue; a line about no job has no job fields.
    (paused,) = [line for line in lines if "is paused" in line["msg"]]
    assert paused["queue"] == "held" and "job" not in paused and "outcome" not in paused
    assert all("job" not in line for line in lines if "stopped" in line["msg"])


def test_a_start_up_error_is_one_json_line_without_the_password(tmp_path: Path) -> None:
    dsn = f"host=127.0.0.1 port=1 dbname=x user=u password={SUPERUSER_PASSWORD}"
    proc = subprocess.run(
        [sys.executable, "-m", "leasectl", "--dsn", dsn, "worker", "-q", "q",
         "--handler", "tests.handlers:noop", "--log-format", "json"],
        cwd=ROOT, env={**_env(None), "PYTHONPATH": str(ROOT)}, capture_output=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1
    assert SUPERUSER_PASSWORD.encode() not in proc.stderr
    (line,) = json_lines(proc.stderr)
    assert line["level"] == "error" and line["msg"].startswith("error: cannot connect to "), line


def test_watch_logs_json(db_dsn: str, tmp_path: Path) -> None:
    args = ("watch", "--interval", "100ms", "--log-format", "json")
    with command(db_dsn, tmp_path, *args) as (proc, err):
        wait_until(lambda: b"watching all queues" in err.read_bytes() or proc.poll() is not None)
    assert proc.returncode == 0
    lines = json_lines(err.read_bytes())
    assert [line["logger"] for line in lines] == ["leasectl.cli"] * len(lines)
    assert lines[0]["msg"].startswith("watching all queues every 100ms")
    assert lines[-1]["msg"].startswith("watcher stopped after")


def test_metrics_logs_json_and_writes_nothing_else(db_dsn: str, tmp_path: Path) -> None:
    with command(
        db_dsn, tmp_path, "metrics", "--listen", "127.0.0.1:0", "--log-format", "json"
    ) as (proc, err):
        wait_until(lambda: b"serving metrics" in err.read_bytes() or proc.poll() is not None)
    assert proc.returncode == 0
    assert proc.stdout is not None
    lines = json_lines(err.read_bytes())
    serving = [line for line in lines if "serving metrics" in line["msg"]]
    assert len(serving) == 1 and serving[0]["logger"] == "leasectl.metrics"
    assert "http://127.0.0.1:" in serving[0]["msg"]


@pytest.mark.parametrize("name", ["worker", "watch", "metrics"])
def test_an_unknown_log_format_is_a_usage_error(name: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "leasectl", name, "--log-format", "yaml"],
        env={**os.environ}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1 and "--log-format" in proc.stderr, proc.stderr
