"""`leasectl metrics`: a real exporter against a real database in a known state, scraped over
HTTP and parsed with prometheus_client's own parser."""

from __future__ import annotations

import re
import socket
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest
from psycopg import conninfo, sql

from leasectl.core.counts import BoundedCount
from leasectl.db import grants
from leasectl.db.embedded import EmbeddedServer
from leasectl.db.metrics import MetricsReads
from leasectl.runtime.exporter import METRICS, label
from tests.exporter import exporter, scrape
from tests.hostile import CORPUS
from tests.integration.test_cli import assert_one_line_error, cli
from tests.integration.test_privileges import login_roles
from tests.seed import ALIVE, SILENT, seed_console
from tests.stores import Stores
from tests.util import wait_until

pytestmark = pytest.mark.full


def test_a_scrape_reports_the_known_state(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    seeded = seed_console(store, sql_conn)
    # Deterministic at any speed: the live leases end in an hour, the at-risk one in 50 s,
    # within ALIVE's heartbeat interval (made 60 s); one due job has waited ten minutes.
    sql_conn.execute(
        "UPDATE leasectl.workers SET heartbeat_every = interval '60 seconds', "
        "lease_ttl = interval '2 hours' WHERE worker_id = %s",
        (ALIVE,),
    )
    sql_conn.execute(
        "UPDATE leasectl.jobs SET lease_until = now() + interval '1 hour' WHERE id = ANY(%s)",
        ([le.job_id for le in seeded.live],),
    )
    sql_conn.execute(
        "UPDATE leasectl.jobs SET lease_until = now() + interval '50 seconds' WHERE id = %s",
        (seeded.at_risk.job_id,),
    )
    sql_conn.execute(
        "UPDATE leasectl.jobs SET run_at = now() - interval '10 minutes' WHERE id = %s",
        (seeded.pending[0],),
    )
    # Finished history: 30 Completed jobs on another queue, then statistics.
    done = store.ops.enqueue([{}] * 30, queue="done")
    leases = store.work.claim("done", "finisher", timedelta(seconds=30), limit=30)
    assert store.work.complete(leases) == set(done)
    sql_conn.execute("ANALYZE leasectl.jobs")
    store.ops.pause("emails", actor="test", reason="maintenance")

    with exporter(db_dsn) as (_, url):
        s = scrape(url)

    assert s.value("leasectl_up") == 1
    assert s.get("leasectl_scrape_error_info", error="ConnectionFailed") is None
    assert 0 < s.value("leasectl_scrape_duration_seconds") < 5
    assert all(v == 0 for v in s.series("leasectl_scrape_truncated").values())
    jobs = {
        dict(k)["queue"] + "/" + dict(k)["status"]: v for k, v in s.series("leasectl_jobs").items()
    }
    # payments: 10 enqueued = 3 due + 1 delayed retry (Pending) + 5 leased + 1 Stuck.
    assert jobs == {
        "payments/Pending": 4,
        "emails/Pending": 1,
        "payments/Processing": 5,
        "payments/Stuck": 1,
    }
    assert set(s.series("leasectl_jobs_capped").values()) == {0}
    assert 600 <= s.value("leasectl_oldest_due_job_age_seconds", queue="payments") < 900
    assert 0 <= s.value("leasectl_oldest_due_job_age_seconds", queue="emails") < 300
    assert s.value("leasectl_jobs_finished_estimate", status="Completed") == 30
    assert s.value("leasectl_jobs_finished_estimate", status="Failed") == 0
    assert s.series("leasectl_leases_expired") == {
        frozenset({("queue", "payments"), ("owner", ALIVE)}): 0,
        frozenset({("queue", "payments"), ("owner", SILENT)}): 2,
    }
    assert s.series("leasectl_leases_at_risk") == {
        frozenset({("queue", "payments"), ("owner", ALIVE)}): 1,
        frozenset({("queue", "payments"), ("owner", SILENT)}): 0,
    }
    assert s.value("leasectl_owners", freshness="fresh") == 1  # ("finisher" never registered)
    assert s.value("leasectl_owners", freshness="silent") == 1
    assert s.value("leasectl_owners", freshness="late") == 0
    assert s.value("leasectl_owner_leases", owner=ALIVE, freshness="fresh") == 3
    assert s.value("leasectl_owner_leases", owner=SILENT, freshness="silent") == 2
    assert s.value("leasectl_owner_leases_expired", owner=SILENT, freshness="silent") == 2
    assert s.value("leasectl_owner_leases_expired", owner=ALIVE, freshness="fresh") == 0
    assert s.series("leasectl_queue_paused") == {frozenset({("queue", "emails")}): 1}
    # Every family is one METRICS names, with its type; every metric but the error's is there.
    assert {name: kind for name, kind in s.families.items()} == {
        # (The parser names a counter's family without its _total.)
        name.removesuffix("_total"): kind
        for name, (kind, _, _) in METRICS.items()
        if name != "leasectl_scrape_error_info"
    }


def test_an_empty_database_scrapes_up_with_zero_counts(db_dsn: str) -> None:
    with exporter(db_dsn) as (_, url):
        s = scrape(url)
    assert s.value("leasectl_up") == 1
    assert s.series("leasectl_jobs") == {}
    assert s.value("leasectl_owners", freshness="fresh") == 0
    assert s.value("leasectl_jobs_finished_estimate", status="Completed") == 0


def test_counts_beyond_the_cap_are_the_cap_and_say_so(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    store.ops.enqueue([{}] * 7, queue="big")
    store.ops.enqueue([{}] * 3, queue="small")
    (lease,) = store.work.claim("small", "w", timedelta(seconds=30))
    sql_conn.execute(
        "UPDATE leasectl.jobs SET lease_until = now() - interval '1 minute' WHERE id = %s",
        (lease.job_id,),
    )
    moved = store.ops.operator_mark_stuck(store.ops.seen_now([lease.job_id]), actor="t", reason="r")
    assert moved.changed == (lease.job_id,)
    with Stores.connect(db_dsn, "leasectl") as other:
        # Two queues share a budget of 6: 3 each (the floor, 3, allows no less).
        rows = MetricsReads(other.db, budget=6, floor=3).read(timedelta(seconds=5))
    assert {p.queue: p.jobs for p in rows.pending} == {
        "big": BoundedCount(3, True),
        "small": BoundedCount(2, False),
    }
    assert rows.stuck == {"small": BoundedCount(1, False)}
    with Stores.connect(db_dsn, "leasectl") as other:
        # The floor wins over a small budget: 7 each, and big's 7 is exact.
        rows = MetricsReads(other.db, budget=2, floor=7).read(timedelta(seconds=5))
        assert {p.queue: p.jobs for p in rows.pending}["big"] == BoundedCount(7, False)
        # One queue alone gets the whole budget.
        sql_conn.execute("DELETE FROM leasectl.jobs WHERE queue = 'small' AND status = 'Pending'")
        rows = MetricsReads(other.db, budget=6, floor=1).read(timedelta(seconds=5))
        assert [(p.queue, p.jobs) for p in rows.pending] == [("big", BoundedCount(6, True))]


def test_reads_past_their_limits_say_they_are_truncated(db_dsn: str, store: Stores) -> None:
    for queue in ("a", "b", "c"):
        store.ops.enqueue([{}], queue=queue)
    with Stores.connect(db_dsn, "leasectl") as other:
        rows = MetricsReads(other.db, group_limit=2).read(timedelta(seconds=5))
        assert "pending" in rows.truncated
        assert [p.queue for p in rows.pending] == ["a", "b"]
        rows = MetricsReads(other.db, group_limit=3).read(timedelta(seconds=5))
        assert "pending" not in rows.truncated


def test_oldest_due_ignores_jobs_not_yet_due_in_every_priority(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    (later,) = store.ops.enqueue([{}], queue="q", priority=0, delay=timedelta(hours=1))
    (due,) = store.ops.enqueue([{}], queue="q", priority=5)
    sql_conn.execute(
        "UPDATE leasectl.jobs SET run_at = now() - interval '2 minutes' WHERE id = %s", (due,)
    )
    with Stores.connect(db_dsn, "leasectl") as other:
        rows = MetricsReads(other.db).read(timedelta(seconds=5))
        (q,) = rows.pending
        assert q.oldest_due_age is not None and 120 <= q.oldest_due_age < 400
        sql_conn.execute("DELETE FROM leasectl.jobs WHERE id = %s", (due,))
        (q,) = MetricsReads(other.db).read(timedelta(seconds=5)).pending
        assert q.oldest_due_age is None  # only the delayed one is left: nothing is due
    assert later


def test_a_port_in_use_is_one_line_and_exit_1(db_dsn: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = cli("metrics", "--listen", f"127.0.0.1:{port}", dsn=db_dsn)
    assert_one_line_error(proc, 1, f"cannot listen on '127.0.0.1:{port}'", "in use")


@pytest.mark.parametrize("listen", ["localhost:0", "[::1]:0"])
def test_other_listen_forms_serve(db_dsn: str, listen: str) -> None:
    if listen.startswith("[") and not ipv6_loopback():
        pytest.skip("no IPv6 loopback here")
    with exporter(db_dsn, listen=listen) as (_, url):
        assert scrape(url).value("leasectl_up") == 1


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


# -- the database goes away and comes back ------------------------------------------------------


@pytest.fixture(scope="module")
def private_server() -> Iterator[EmbeddedServer]:
    """A server of this module's own, to stop and start under a running exporter."""
    srv = EmbeddedServer.temporary()
    srv.start()
    try:
        yield srv
    finally:
        srv.stop(remove=True)


@pytest.mark.slow
def test_the_exporter_says_down_while_the_database_is_stopped_and_recovers(
    private_server: EmbeddedServer,
) -> None:
    name = f"metrics_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(private_server.dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = conninfo.make_conninfo(private_server.dsn(), dbname=name)
    with Stores.connect(dsn, "leasectl", check_schema=False) as store:
        store.db.migrate()
        store.ops.enqueue([{}] * 3, queue="q")

    with exporter(dsn, "--timeout", "2s") as (proc, url):
        assert scrape(url).value("leasectl_jobs", queue="q", status="Pending") == 3

        private_server.stop(mode="fast")
        down = wait_until(lambda: (d := scrape(url)).value("leasectl_up") == 0 and d)
        assert down.value("leasectl_up") == 0
        assert down.value("leasectl_scrape_error_info", error="ConnectionFailed") == 1
        assert "leasectl_jobs" not in down.families  # no stale gauges during the outage
        down = scrape(url)  # and again: each scrape tries, none ends the exporter
        assert down.value("leasectl_up") == 0 and proc.poll() is None

        private_server.start()
        back = wait_until(
            lambda: (s := scrape(url)).get("leasectl_up") == 1 and s,
            timeout=60,
            interval=0.2,
            what="a scrape to reach the restarted database",
        )
        assert back.value("leasectl_jobs", queue="q", status="Pending") == 3
        assert back.get("leasectl_scrape_error_info", error="ConnectionFailed") is None


# What a terminal acts on: C0 controls (ESC, BEL, CR...), DEL, C1 controls, bidi controls.
TERMINAL_CONTROLS = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


def test_hostile_queue_names_and_owners_come_out_escaped_and_distinct(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    """Labels are data: each name comes back from the exposition as the CLI shows it (controls,
    bidi and format characters escaped, a backslash doubled), distinct names stay distinct, and
    the raw bytes of /metrics hold no character a terminal would act on (`curl /metrics`)."""
    names = [text[:200] for text in CORPUS if text[:200].strip()]
    names += ["x'; touch /tmp/PWNED; echo '", "title\x1b]0;owned\x07", "back\\slash"]
    for i, name in enumerate(names):
        store.ops.enqueue([{}, {}, {}], queue=name)
        (lease,) = store.work.claim(name, f"{name}#{i}", timedelta(seconds=30))
        done = store.work.claim(name, f"{name}#{i}", timedelta(seconds=30))
        assert store.work.complete(done) == {done[0].job_id}
    store.ops.pause(names[0], actor="t", reason="r")
    with exporter(db_dsn) as (_, url):
        s = scrape(url)
        with urllib.request.urlopen(url, timeout=30) as response:
            raw = response.read().decode("utf-8")
    assert not TERMINAL_CONTROLS.search(raw), TERMINAL_CONTROLS.findall(raw)[:5]
    shown = [label(name) for name in names]
    assert len(set(shown)) == len(names)  # no two names became one label value
    assert label("\x1b[2J") == "\\x1b[2J" and label("a\\b") == "a\\\\b"
    assert label("a\x1bb") == "a\\x1bb" and label("plain-queue.1") == "plain-queue.1"
    assert {dict(k)["queue"] for k in s.series("leasectl_oldest_due_job_age_seconds")} == set(shown)
    assert {dict(k)["owner"] for k in s.series("leasectl_leases_expired")} == {
        label(f"{name}#{i}") for i, name in enumerate(names)
    }
    assert {dict(k)["queue"] for k in s.series("leasectl_queue_paused")} == {shown[0]}
    assert {dict(k)["queue"]: v for k, v in s.series("leasectl_jobs_completed_total").items()} == (
        dict.fromkeys(shown, 1)
    )
    assert s.series("leasectl_operator_actions_total") == {
        frozenset({("queue", shown[0]), ("action", "pause")}): 1
    }
    assert lease


def test_a_viewer_role_can_run_the_exporter(
    server_dsn: str, db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    seed_console(store, sql_conn)
    viewer = f"lc_metrics_viewer_{uuid.uuid4().hex[:8]}"
    with login_roles(server_dsn, db_dsn, {"viewer": viewer}) as roles:
        grants.apply(store.db, [grants.Grant(grants.Kind.VIEWER, viewer)])
        with exporter(roles.dsn("viewer")) as (_, url):
            s = scrape(url)
    assert s.value("leasectl_up") == 1
    assert s.value("leasectl_jobs", queue="payments", status="Processing") == 5
    assert s.value("leasectl_owner_leases_expired", owner=SILENT, freshness="silent") == 2


def test_at_risk_is_judged_by_each_owners_own_interval(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    """A lease ending in 30 s is at risk for an owner that heartbeats every 60 s, not for one
    that heartbeats every 10 s (nor for one that declared nothing: 10 s by default)."""
    for owner, every in (("slow", 60), ("quick", 10)):
        store.work.worker_register(
            owner, hostname="h", pid=1, queues=["q"], lease_ttl=timedelta(minutes=5),
            heartbeat_every=timedelta(seconds=every),
        )  # fmt: skip
    store.ops.enqueue([{}] * 3, queue="q")
    held = [
        *store.work.claim("q", "slow", timedelta(seconds=30)),
        *store.work.claim("q", "quick", timedelta(seconds=30)),
        *store.work.claim("q", "undeclared", timedelta(seconds=30)),
    ]
    sql_conn.execute(
        "UPDATE leasectl.jobs SET lease_until = now() + interval '30 seconds' WHERE id = ANY(%s)",
        ([le.job_id for le in held],),
    )
    with Stores.connect(db_dsn, "leasectl") as other:
        rows = MetricsReads(other.db).read(timedelta(seconds=5))
    assert {le.owner: le.at_risk for le in rows.leases} == {
        "slow": 1,
        "quick": 0,
        "undeclared": 0,
    }


def test_a_database_unreachable_at_start_is_one_line_and_exit_1(db_dsn: str) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: connections are refused
        proc = cli(
            "metrics", "--listen", "127.0.0.1:0",
            dsn=conninfo.make_conninfo(db_dsn, host="127.0.0.1", port=str(port)),
        )  # fmt: skip
    assert_one_line_error(proc, 1, "cannot connect to")


def test_a_scrape_past_its_timeout_says_down_and_a_new_read_answers(
    db_dsn: str, store: Stores
) -> None:
    store.ops.enqueue([{}], queue="q")
    with exporter(db_dsn, "--timeout", "500ms") as (_, url), psycopg.connect(db_dsn) as locker:
        assert scrape(url).value("leasectl_up") == 1
        locker.execute("LOCK TABLE leasectl.jobs IN ACCESS EXCLUSIVE MODE")  # held until rollback
        # (The read before answers the scrapes of the next second: scrapes.CACHE_FOR.)
        down = wait_until(lambda: (d := scrape(url)).value("leasectl_up") == 0 and d)
        assert down.value("leasectl_up") == 0
        # The server cancels the statement (QueryTimeout) a little before the wall clock gives
        # up on it (ScrapeTimeout): on a loaded machine, either may come first.
        assert {dict(k)["error"] for k in down.series("leasectl_scrape_error_info")} <= {
            "QueryTimeout", "ScrapeTimeout",
        }  # fmt: skip
        assert down.series("leasectl_scrape_error_info")
        assert 0.4 < down.value("leasectl_scrape_duration_seconds") < 5
        locker.rollback()
        up = scrape(url)
        if up.value("leasectl_up") == 0:
            # A scrape that gave up on the wall clock leaves its read running; a scrape that
            # comes while it still runs shares it, and its failure (a cancel from before the
            # rollback). The read after that is a new one.
            assert {dict(k)["error"] for k in up.series("leasectl_scrape_error_info")} == {
                "QueryTimeout"
            }
            up = scrape(url)
        assert up.value("leasectl_up") == 1
        assert up.value("leasectl_jobs", queue="q", status="Pending") == 1
