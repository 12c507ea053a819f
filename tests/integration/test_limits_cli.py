"""`leasectl limit`, `limit --clear`, `limits` and `resume --ramp` on a real database, in this
process (tests/inproc.py): results, JSON, audit rows, and bad input refused with one line and
exit 2, nothing changed."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.inproc import run_in_process
from tests.integration.test_cli import _env, assert_one_line_error, snapshot


def run(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_in_process(list(args), _env(dsn))


def test_limit_show_ramp_and_clear(db_dsn: str) -> None:
    proc = run(db_dsn, "limit", "payments", "--concurrency", "10", "--rate", "20/s",
               "--reason", "provider 503s", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    limit = json.loads(proc.stdout)["limit"]
    assert (limit["concurrency"], limit["rate_per_s"], limit["effective_burst"]) == (10, 20.0, 20.0)
    assert limit["reason"] == "provider 503s" and limit["now"]["live"] == 0
    proc = run(db_dsn, "limit", "payments", "--rate", "300/m", "--burst", "3", "--reason", "r")
    assert proc.returncode == 0, proc.stderr
    assert "limited queue payments: 5/s (burst 3)" in proc.stdout
    assert run(db_dsn, "pause", "payments", "--reason", "503").returncode == 0
    proc = run(db_dsn, "resume", "payments", "--ramp", "5m", "--json")
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    assert shown["resumed"] is True and shown["limit"]["now"]["burst"] == 1.0
    assert 0 <= shown["limit"]["ramp_progress"] < 0.1
    proc = run(db_dsn, "limits")
    assert proc.returncode == 0, proc.stderr
    assert "payments" in proc.stdout and "ramp" in proc.stdout
    proc = run(db_dsn, "limit", "payments", "--clear", "--reason", "over")
    assert proc.returncode == 0, proc.stderr
    assert "lifted the limits of queue payments" in proc.stdout
    proc = run(db_dsn, "limit", "payments", "--clear", "--reason", "again")
    assert proc.returncode == 1 and "has no limits; nothing changed" in proc.stderr
    proc = run(db_dsn, "limits", "--json")
    assert json.loads(proc.stdout) == {"limits": []}


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--concurrency", "0"), "--concurrency"),
        (("--concurrency", "-5"), "--concurrency"),
        (("--concurrency", "abc"), "--concurrency"),
        (("--concurrency", "100001"), "--concurrency"),
        (("--rate", "0/s"), "--rate"),
        (("--rate", "-1/s"), "--rate"),
        (("--rate", "abc/s"), "--rate"),
        (("--rate", "5/h"), "--rate"),
        (("--rate", "5"), "--rate"),
        (("--rate", "1e9/s"), "--rate"),
        (("--rate", "99999999/s"), "--rate"),
        (("--rate", "1/s", "--burst", "0"), "--burst"),
        (("--burst", "5"), "--concurrency N and/or --rate"),
        ((), "--concurrency N and/or --rate"),
        (("--clear", "--concurrency", "3"), "--clear takes no"),
        (("--concurrency", "3", "--reason", ""), "--reason"),
    ],
)
def test_bad_limits_are_one_line_and_change_nothing(
    db_dsn: str, args: tuple[str, ...], fragment: str
) -> None:
    before = snapshot(db_dsn)
    reason = () if "--reason" in args else ("--reason", "why")
    proc = run(db_dsn, "limit", "payments", *args, *reason)
    assert_one_line_error(proc, 2, fragment)
    assert snapshot(db_dsn) == before


@pytest.mark.parametrize(
    ("queue", "ramp", "fragment"),
    [
        ("unlimited", "5m", "has no limits to ramp up to"),
        ("payments", "2d", "at most a day"),
        ("payments", "0", "--ramp"),
        ("payments", "abc", "--ramp"),
    ],
)
def test_bad_ramps_are_one_line_and_change_nothing(
    db_dsn: str, queue: str, ramp: str, fragment: str
) -> None:
    assert run(db_dsn, "limit", "payments", "--concurrency", "3", "--reason", "r").returncode == 0
    assert run(db_dsn, "pause", queue, "--reason", "incident").returncode == 0
    before = snapshot(db_dsn)
    proc = run(db_dsn, "resume", queue, "--ramp", ramp)
    assert_one_line_error(proc, 2, fragment)
    assert snapshot(db_dsn) == before


def test_limits_show_hostile_names_and_reasons_literally(db_dsn: str) -> None:
    from leasectl.core.limits import LimitSpec
    from tests.hostile import NAMES, literal_probe
    from tests.stores import Stores

    names = [n for n in NAMES if n.strip()]
    with Stores.connect(db_dsn, "leasectl") as store:
        for name in names:
            store.ops.set_limit(name, LimitSpec(concurrency=1), actor=name, reason=name)
    proc = run_in_process(["limits"], {**_env(db_dsn), "COLUMNS": "2000"})
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "\x9b" not in proc.stdout and "\x07" not in proc.stdout
    for name in names:
        assert literal_probe(name) in proc.stdout, name


REASON = "the partner asked us to keep under one request every two seconds until Friday"


@pytest.mark.parametrize("columns", [80, 160])
def test_limits_reads_well_at_80_and_160_columns(db_dsn: str, columns: int) -> None:
    """Short cells, one fact a line, the time as an age: only the reason wraps (at its words),
    and no timestamp, actor or limit is split across lines."""
    from leasectl.core.limits import LimitSpec
    from tests.stores import Stores

    with Stores.connect(db_dsn, "leasectl") as store:
        store.ops.set_limit(
            "default-queue",
            LimitSpec(concurrency=10, rate=20.0, burst=40),
            actor="operator:root@vm",
            reason=REASON,
        )
        store.ops.set_limit("emails", LimitSpec(rate=0.5), actor="operator:alice", reason="r")
    proc = run_in_process(["limits"], {**_env(db_dsn), "COLUMNS": str(columns)})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= columns
    cells = [cell for line in lines for cell in line.split("  ") if cell.strip()]
    for whole in ("default-queue", "operator:root@vm", "10 at once", "20/s", "burst 40"):
        assert any(cell.strip() == whole for cell in cells), (whole, proc.stdout)
    assert "ago" in proc.stdout and "+00" not in proc.stdout  # an age, not a timestamp
    # The reason column, last: its text read back whole, on one line at 160, wrapped at 80.
    (header,) = [i for i, line in enumerate(lines) if line.startswith("queue ")]
    at = lines[header].index("reason")
    reason = [line[at:].strip() for line in lines[header + 2 :] if line[at:].strip()]
    assert " ".join(reason).startswith(REASON + " r"), proc.stdout
    wrapped = len([part for part in reason if part != "r"])
    assert wrapped == 1 if columns == 160 else wrapped > 1
