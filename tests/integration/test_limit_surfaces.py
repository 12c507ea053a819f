"""Flow control where the on-call engineer looks: `status` (text and --json) and the metrics
exporter show each limited queue's limits in force and their use, read with the rest of their
round trip, on a real PostgreSQL; hostile queue names stay data."""

from __future__ import annotations

import json
import re
import subprocess
from datetime import timedelta

import psycopg

from leasectl.core.limits import LimitSpec
from leasectl.db.metrics import MetricsReads
from leasectl.runtime.exporter import families, label
from tests.exporter import exporter
from tests.exporter import scrape as scrape_url
from tests.inproc import run_in_process
from tests.integration.test_cli import _env
from tests.stores import Stores

TTL = timedelta(seconds=60)
HOSTILE = "pay[bold]ments[/]\x1b]0;PWNED\x07"


def status(*args: str, dsn: str) -> subprocess.CompletedProcess[str]:
    env = {**_env(dsn), "COLUMNS": "160"}
    return run_in_process(["status", *args], env)


def at_cap(store: Stores, queue: str = "pay", cap: int = 2) -> None:
    """``queue`` limited to ``cap`` leases and a rate, its cap reached by a claim."""
    store.ops.enqueue([{"n": i} for i in range(5)], queue=queue)
    store.ops.set_limit(
        queue, LimitSpec(concurrency=cap, rate=20.0, burst=40), actor="t", reason="test"
    )
    assert len(store.work.trip([], queue, "w1", TTL, 5).leases) == cap


def test_status_reads_the_limits_in_force_and_their_use(store: Stores) -> None:
    at_cap(store)
    store.ops.enqueue([{}], queue="free")
    report = store.ops.status()
    (lim,) = report.limits
    assert report.limits_total == 1
    assert (lim.queue, lim.cap_now, lim.live, lim.rate_now, lim.burst_now) == (
        "pay",
        2,
        2,
        20.0,
        40.0,
    )
    assert lim.at_cap and lim.throttled == 1
    # Under --queue, only that queue's limits.
    assert store.ops.status("free").limits == ()
    assert store.ops.status("pay").limits[0].queue == "pay"


def test_status_text_and_json_show_the_limits(db_dsn: str, store: Stores) -> None:
    at_cap(store)
    store.ops.set_limit(HOSTILE, LimitSpec(rate=0.5), actor="t", reason="slow partner")
    text = status(dsn=db_dsn)
    assert text.returncode == 0, text.stderr
    assert "limited queues" in text.stdout
    line = next(row for row in text.stdout.splitlines() if "2/2 running" in row)
    assert re.search(r"pay\s.*2/2 running · 20/s \(burst 40\)\s.*⏳ at cap\s.*\b1\b", line), line
    # The hostile name literally, its rate per minute.
    assert "\x1b" not in text.stdout and "\x07" not in text.stdout
    assert "\\x1b]0;PWNED\\x07" in text.stdout and "30/m" in text.stdout
    doc = json.loads(status("--json", dsn=db_dsn).stdout)
    assert doc["limits_total"] == 2
    by_queue = {d["queue"]: d for d in doc["limits"]}
    pay = by_queue["pay"]
    assert (pay["concurrency"], pay["rate_per_s"], pay["burst"]) == (2, 20.0, 40)
    assert pay["now"]["live"] == 2 and pay["now"]["held_back"] == "at cap"
    assert pay["throttled"] == 1
    assert by_queue[HOSTILE]["now"]["cap"] is None


def test_status_without_limits_says_nothing_of_them(db_dsn: str, store: Stores) -> None:
    store.ops.enqueue([{}], queue="free")
    text = status(dsn=db_dsn)
    assert text.returncode == 0 and "limited queues" not in text.stdout
    doc = json.loads(status("--json", dsn=db_dsn).stdout)
    assert doc["limits"] == [] and doc["limits_total"] == 0


def test_status_lists_the_first_limited_queues_and_counts_them_all(
    db_dsn: str, store: Stores
) -> None:
    for i in range(23):
        store.ops.set_limit(f"q{i:02}", LimitSpec(concurrency=1), actor="t", reason="r")
    text = status(dsn=db_dsn)
    assert "q19" in text.stdout and "q20" not in text.stdout
    assert "…and 3 more limited queues (all: leasectl limits)" in text.stdout


def read_families(store: Stores, **bounds: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    rows = MetricsReads(store.db, **bounds).read(timedelta(seconds=5))
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in families(rows):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def test_exporter_reports_limits_and_throttled_claims(db_dsn: str, store: Stores) -> None:
    at_cap(store)
    assert store.work.trip([], "pay", "w2", TTL, 1).leases == []  # cut short again: 2
    store.ops.set_limit(HOSTILE, LimitSpec(rate=0.5), actor="t", reason="slow partner")
    with exporter(db_dsn) as (_, url):
        got = scrape_url(url)
    assert got.families["leasectl_queue_concurrency_limit"] == "gauge"
    assert got.families["leasectl_queue_throttled_claims"] == "counter"
    assert got.series("leasectl_queue_concurrency_limit") == {frozenset({("queue", "pay")}): 2.0}
    assert got.series("leasectl_queue_rate_limit") == {
        frozenset({("queue", "pay")}): 20.0,
        frozenset({("queue", label(HOSTILE))}): 0.5,
    }
    assert got.series("leasectl_queue_throttled_claims_total") == {
        frozenset({("queue", "pay")}): 2.0,
        frozenset({("queue", label(HOSTILE))}): 0.0,
    }
    assert got.value("leasectl_scrape_truncated", part="limits") == 0.0
    # The scrape reads at most limit_limit limited queues, and says it stopped there.
    bounded = read_families(store, limit_limit=1)
    assert len(bounded["leasectl_queue_throttled_claims_total"]) == 1
    assert ({"part": "limits"}, 1.0) in bounded["leasectl_scrape_truncated"]


def test_exporter_without_limits_has_no_limit_series(db_dsn: str, store: Stores) -> None:
    store.ops.enqueue([{}], queue="free")
    found = read_families(store)
    assert "leasectl_queue_concurrency_limit" not in found
    assert "leasectl_queue_throttled_claims_total" not in found


def test_the_limits_in_force_agree_with_queue_limit_now(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    """status_limits writes queue_limit_now out (for roles without EXECUTE on it): both give
    the same cap, rate and bucket before, during and after a ramp, and without one."""
    specs = {
        "a": LimitSpec(concurrency=7),
        "b": LimitSpec(rate=0.3),
        "c": LimitSpec(concurrency=250, rate=40.0, burst=90),
        "d": LimitSpec(rate=5.0),
    }
    for queue, spec in specs.items():
        store.ops.set_limit(queue, spec, actor="t", reason="r")
    for queue in ("b", "c", "d"):
        store.ops.ramp(queue, timedelta(minutes=10), actor="t")
    # Move the ramps: b just started, c 37% of the way, d done.
    sql_conn.execute(
        "UPDATE leasectl.queue_limits SET ramp_from = now() - (ramp_until - ramp_from) * x, "
        "ramp_until = now() + (ramp_until - ramp_from) * (1 - x) "
        "FROM (VALUES ('b', 0.0), ('c', 0.37), ('d', 1.2)) AS v(q, x) WHERE queue = v.q"
    )
    with sql_conn.transaction():  # (one now() for both)
        names = ("queue", "cap_now", "rate_now", "burst_now", "tokens", "live")

        def read(name: str, params: dict[str, object]) -> list[tuple[object, ...]]:
            from leasectl.db import sql as queries
            from tests.conftest import SCHEMA

            cur = sql_conn.execute(queries.get(name).render(SCHEMA), params)
            cols = [c.name for c in cur.description or ()]
            return [tuple(row[cols.index(n)] for n in names) for row in cur.fetchall()]

        written_out = read("status_limits", {"queue": None, "limits_limit": 100})
        by_function = read("queue_limits_list", {"queues": None})
    assert written_out == by_function
    caps = {row[0]: row[1] for row in written_out}
    assert caps["a"] == 7 and caps["c"] == 93  # ceil(250 * 0.37)
