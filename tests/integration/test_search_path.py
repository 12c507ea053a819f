"""Objects planted in ``public`` by a role that may create there never run in leasectl's
statements: every leasectl session pins ``search_path`` to
``pg_catalog, pg_temp``, and the producer's statement, which runs on the application's own
connection under whatever search_path it has, names every operator, function and type it uses.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest
from psycopg import sql

import leasectl
from leasectl.db.connection import Database
from leasectl.db.metrics import MetricsReads
from tests.integration.test_cli import cli
from tests.util import wait_until

SCHEMA = "leasectl"

# Look-alikes that win over pg_catalog's in overload resolution: exact argument types beat
# pg_catalog's polymorphic (anyenum) or coerced ones, wherever public is in the path.
_PLANT = """
CREATE TABLE public.planted_calls (what text, who text DEFAULT current_user);
GRANT INSERT, SELECT ON public.planted_calls TO PUBLIC;
CREATE FUNCTION public.planted_eq(a {s}.job_status, b {s}.job_status) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    INSERT INTO public.planted_calls (what) VALUES ('=(job_status)');
    RETURN a::text OPERATOR(pg_catalog.=) b::text;
END $$;
CREATE OPERATOR public.= (
    LEFTARG = {s}.job_status, RIGHTARG = {s}.job_status, FUNCTION = public.planted_eq
);
CREATE FUNCTION public.planted_ne(a {s}.job_status, b {s}.job_status) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    INSERT INTO public.planted_calls (what) VALUES ('<>(job_status)');
    RETURN a::text OPERATOR(pg_catalog.<>) b::text;
END $$;
CREATE OPERATOR public.<> (
    LEFTARG = {s}.job_status, RIGHTARG = {s}.job_status, FUNCTION = public.planted_ne
);
CREATE FUNCTION public.planted_text_eq(a text, b text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    INSERT INTO public.planted_calls (what) VALUES ('=(text)');
    RETURN a OPERATOR(pg_catalog.=) b;
END $$;
CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = public.planted_text_eq);
CREATE FUNCTION public.now() RETURNS timestamptz LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    INSERT INTO public.planted_calls (what) VALUES ('now()');
    RETURN pg_catalog.now();
END $$;
CREATE FUNCTION public.left(t text, n integer) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    INSERT INTO public.planted_calls (what) VALUES ('left()');
    RETURN pg_catalog.left(t, n);
END $$;
CREATE FUNCTION public.pg_notify(c text, p text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    INSERT INTO public.planted_calls (what) VALUES ('pg_notify()');
    PERFORM pg_catalog.pg_notify(c, p);
END $$;
"""


@pytest.fixture
def planted(db_dsn: str) -> Iterator[str]:
    """A role that may create in public (as before PostgreSQL 15) plants look-alikes there."""
    role = f"lc_planter_{secrets.token_hex(4)}"
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        conn.execute(
            sql.SQL("GRANT CREATE, USAGE ON SCHEMA public TO {}").format(sql.Identifier(role))
        )
        conn.execute(
            sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(
                sql.Identifier(SCHEMA), sql.Identifier(role)
            )
        )
        conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
        conn.execute(_PLANT.replace("{s}", SCHEMA).encode())
        conn.execute("RESET ROLE")
    try:
        yield role
    finally:
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def calls(db_dsn: str) -> list[str]:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        return [r[0] for r in conn.execute("SELECT what FROM public.planted_calls").fetchall()]


def test_the_plants_run_in_a_session_that_does_not_pin_its_search_path(
    db_dsn: str, planted: str
) -> None:
    """The fixture is live: an ordinary session's query on job_status runs the planted `=`."""
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO leasectl.jobs (queue, payload) VALUES ('q', '{}')")
        conn.execute("SELECT count(*) FROM leasectl.jobs WHERE status = 'Pending'")
    assert "=(job_status)" in calls(db_dsn)


def test_no_command_runs_an_object_planted_in_public(
    db_dsn: str, planted: str, run_worker: object
) -> None:
    ran: list[tuple[str, list[str]]] = []

    def check(*args: str) -> None:
        proc = cli(*args, dsn=db_dsn)
        assert proc.returncode in (0, 1), (args, proc.stderr)
        assert "Traceback" not in proc.stderr, (args, proc.stderr)
        ran.append((" ".join(args), calls(db_dsn)))

    check("enqueue", "--queue", "q", "--unique-key", "k1")
    check("enqueue", "--queue", "q", "--unique-key", "k1")  # the duplicate path
    check("enqueue", "--queue", "q", "--count", "3")
    check("status")
    check("status", "--json")
    check("list")
    check("list", "--state", "Pending")
    check("requeue-stuck", "--dry-run")
    check("inspect", "1")
    check("cancel", "2", "--reason", "x")
    check("prune", "--older-than", "1ms", "--drop-events")

    # A worker drains a job (the hot path, heartbeats, the listen connection).
    done: list[int] = []
    worker = run_worker(lambda ctx: done.append(ctx.job.id), queues=["q"])  # type: ignore[operator]
    wait_until(lambda: len(done) >= 3, what="the worker drained the queue")
    del worker
    ran.append(("worker", calls(db_dsn)))

    with Database.connect(db_dsn, SCHEMA, max_size=1) as db:
        MetricsReads(db).read(timedelta(seconds=5))
    ran.append(("metrics read", calls(db_dsn)))

    first = next(((what, c) for what, c in ran if c), None)
    assert first is None, f"{first[0]!r} ran planted objects: {first[1]}"


@pytest.mark.parametrize("path", ["public, pg_catalog", '"$user", public'])
def test_the_producer_runs_nothing_planted_under_the_applications_search_path(
    db_dsn: str, planted: str, path: str
) -> None:
    """``leasectl.enqueue`` runs on the application's connection, whose search_path is the
    application's: even public before pg_catalog runs none of the plants."""
    with psycopg.connect(db_dsn) as conn:
        conn.execute(sql.SQL("SET search_path = {}").format(sql.SQL(path)))
        first = leasectl.enqueue(conn, payload={"n": 1}, queue="p", unique_key="k")
        again = leasectl.enqueue(conn, payload={"n": 2}, queue="p", unique_key="k")
        many = leasectl.enqueue_many(conn, [leasectl.NewJob({"n": 3}, queue="p")])
        conn.commit()
    assert again.id == first.id and len(many) == 1
    assert calls(db_dsn) == []
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM leasectl.jobs WHERE queue OPERATOR(pg_catalog.=) 'p'"
        ).fetchone()
    assert row == (2,)


def test_init_and_status_warn_when_public_or_the_schema_is_writable_by_others(
    db_dsn: str, planted: str
) -> None:
    """The planter may create in public: init and status say so (stderr; status --json too)."""
    for args in (("init",), ("status",), ("status", "--json")):
        proc = cli(*args, dsn=db_dsn)
        assert proc.returncode == 0, proc.stderr
        lines = proc.stderr.splitlines()
        assert len(lines) == 1, proc.stderr
        assert "schema 'public' is writable (CREATE) by" in lines[0] and planted in lines[0]
    doc = json.loads(cli("status", "--json", dsn=db_dsn).stdout)
    assert doc["writable_schemas"] == [{"schema": "public", "roles": [planted]}]


def test_status_warns_of_nothing_on_a_default_database(db_dsn: str) -> None:
    proc = cli("status", "--json", dsn=db_dsn)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert json.loads(proc.stdout)["writable_schemas"] == []
