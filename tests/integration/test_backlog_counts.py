"""`leasectl status` on a backlog: a queue past its cap shows a lower bound (text ``3000+``,
JSON ``"pending_capped": true``), a small queue stays exact, and ``--check``'s thresholds
still decide correctly, the Stuck count being counted past ``--max-stuck``."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from rich.console import Console

from leasectl.core.counts import COUNT_BUDGET
from leasectl.present.jsonout import status_json
from leasectl.present.status import status_renderables
from tests.integration.test_cli import cli
from tests.stores import Stores

# Two queues share the budget: each is counted up to COUNT_BUDGET / 2.
CAP = COUNT_BUDGET // 2
BIG_DUE, BIG_LATER, BIG_STUCK = CAP + 1000, 200, CAP + 500


def seed_backlog(sql_conn: psycopg.Connection[Any]) -> None:
    """big: CAP + 1000 due Pending jobs (3 priorities), 200 not due yet (priority 5), CAP + 500
    Stuck. small: 3 Pending (one due 10 minutes ago, two due in an hour), 2 Stuck."""
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, priority, run_at) "
        "SELECT 'big', i %% 3, now() - interval '1 second' * i FROM generate_series(1, %s) AS i",
        (BIG_DUE,),
    )
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, priority, run_at) "
        "SELECT 'big', 5, now() + interval '1 hour' FROM generate_series(1, %s)",
        (BIG_LATER,),
    )
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, updated_at) "
        "SELECT 'big', 'Stuck', now() FROM generate_series(1, %s)",
        (BIG_STUCK,),
    )
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, run_at) VALUES "
        "('small', now() - interval '10 minutes'), ('small', now() + interval '1 hour'), "
        "('small', now() + interval '1 hour')"
    )
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, updated_at) "
        "SELECT 'small', 'Stuck', now() FROM generate_series(1, 2)"
    )
    sql_conn.execute("ANALYZE leasectl.jobs")


def cells_of(line: str) -> list[str]:
    """A table row's cells, without the box's characters."""
    return [c for c in line.replace("│", " ").replace("┃", " ").split() if c]


def status_doc(dsn: str, *args: str) -> tuple[int, dict[str, Any], str]:
    proc = cli("status", "--json", *args, dsn=dsn)
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def test_status_shows_a_big_queue_as_a_lower_bound_and_a_small_one_exactly(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    seed_backlog(sql_conn)
    code, doc, _ = status_doc(db_dsn)
    assert code == 0
    by_queue = {q["queue"]: q for q in doc["queues"]}
    big, small = by_queue["big"], by_queue["small"]
    assert (big["pending"], big["pending_capped"]) == (CAP, True)
    assert (big["due"], big["due_capped"]) == (CAP, True)
    assert (big["stuck"], big["stuck_capped"]) == (CAP, True)
    assert big["oldest_due_age_s"] >= BIG_DUE - 60  # the oldest due, from the groups' heads
    assert (small["pending"], small["pending_capped"]) == (3, False)
    assert (small["due"], small["due_capped"]) == (1, False)
    assert (small["stuck"], small["stuck_capped"]) == (2, False)
    assert 590 <= small["oldest_due_age_s"] <= 700
    # A sum with a lower bound in it is a lower bound.
    totals = doc["totals"]
    assert (totals["pending"], totals["pending_capped"]) == (CAP + 3, True)
    assert (totals["stuck"], totals["stuck_capped"]) == (CAP + 2, True)
    assert doc["truncated"] is False

    # The text shows the bound as one, and says what "+" means; the small queue stays exact.
    text = cli("status", dsn=db_dsn)
    assert text.returncode == 0, text.stderr
    rows = {cells[0]: cells for cells in map(cells_of, text.stdout.splitlines()) if cells}
    # queue, pending, due, oldest due, proc., expired, stuck, done, failed
    assert rows["big"][1:3] == [f"{CAP}+", f"{CAP}+"] and rows["big"][6] == f"{CAP}+"
    assert rows["small"][1:3] == ["3", "1"] and rows["small"][6] == "2"
    assert not any("+" in cell for cell in rows["small"]), rows["small"]
    assert rows["total"][1] == f"{CAP + 3}+", rows["total"]
    assert "N+: at least N" in text.stdout


def test_an_exact_count_below_the_cap_stays_exact_with_a_queue_filter(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """One queue alone has the whole budget: CAP + 1000 is below it, so it is exact."""
    seed_backlog(sql_conn)
    _, doc, _ = status_doc(db_dsn, "--queue", "big")
    (big,) = doc["queues"]
    assert (big["pending"], big["pending_capped"]) == (BIG_DUE + BIG_LATER, False)
    assert (big["due"], big["due_capped"]) == (BIG_DUE, False)
    assert (big["stuck"], big["stuck_capped"]) == (BIG_STUCK, False)


@pytest.mark.full  # seeds a backlog past the cap
def test_max_stuck_is_decided_by_a_count_taken_past_it(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """Above the shared cap, status counts Stuck jobs up to --max-stuck + 1: a queue with more
    than the limit fails the check (its count shown as a lower bound), one with exactly as many
    as the limit passes."""
    seed_backlog(sql_conn)
    # A limit below the cap: the capped count is already more than the limit.
    code, doc, stderr = status_doc(db_dsn, "--max-stuck", "100")
    assert code == 3
    (v,) = [v for v in doc["check"]["violations"] if v["queue"] == "big"]
    assert v["measure"] == "stuck" and v["value"] >= 100
    # A limit above the cap: counted up to the limit + 1, still a lower bound past it.
    code, doc, stderr = status_doc(db_dsn, "--max-stuck", str(CAP + 100))
    assert code == 3
    (v,) = doc["check"]["violations"]
    assert (v["queue"], v["value"], v["capped"]) == ("big", CAP + 101, True)
    assert f"{CAP + 101:,}+ Stuck job(s), more than --max-stuck {CAP + 100:,}" in stderr
    # Exactly as many as the limit: counted exactly, no violation.
    code, doc, stderr = status_doc(db_dsn, "--max-stuck", str(BIG_STUCK))
    assert code == 0, stderr
    big = next(q for q in doc["queues"] if q["queue"] == "big")
    assert (big["stuck"], big["stuck_capped"]) == (BIG_STUCK, False)
    # One fewer than there are: a violation by an exact count.
    code, doc, _ = status_doc(db_dsn, "--max-stuck", str(BIG_STUCK - 1))
    assert code == 3
    (v,) = doc["check"]["violations"]
    assert (v["value"], v["capped"]) == (BIG_STUCK, False)


def test_a_queue_with_nothing_due_has_no_oldest_due(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """The oldest due is a group's head only when that head is due."""
    seed_backlog(sql_conn)
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, priority, run_at) VALUES "
        "('later', 0, now() + interval '1 hour'), ('later', 3, now() + interval '2 hours')"
    )
    _, doc, _ = status_doc(db_dsn, "--queue", "later")
    (later,) = doc["queues"]
    assert (later["pending"], later["due"], later["oldest_due_at"]) == (2, 0, None)


def test_more_groups_than_status_reads_is_said(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """Past group_limit (queue, priority) groups some queues are not listed: the report says
    so, in text and JSON, rather than leave them out silently."""
    seed_backlog(sql_conn)
    assert store.ops.status().truncated is False
    report = store.ops.status(group_limit=1)
    assert report.truncated is True
    assert status_json(report)["truncated"] is True
    console = Console(width=200, record=True)
    for part in status_renderables(report):
        console.print(part)
    assert "not every queue is listed; pass --queue" in console.export_text()
