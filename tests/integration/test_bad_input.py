"""Bad input sweep: every command and option with malformed values.

Each value either gets one clear line on stderr and a non-zero exit with nothing changed, or is
stored exactly as given and harmlessly: nothing is ever interpolated into SQL. The sweeps of
rejected values and the loops over weird values run the command line in this process
(``tests/inproc.py``: ``main(argv)``, the same environment, stdout and stderr captured); a sample
of each kind of rejected case also runs as `python -m leasectl` and must print exactly what the
in-process run printed, and the payload tests (stdin, files, 16 MiB) run real processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, sql

from leasectl.core.errors import UsageError
from tests.inproc import run_in_process
from tests.integration.test_cli import _env, assert_one_line_error, cli, snapshot, with_password
from tests.seed import seed_states_at
from tests.stores import Stores
from tests.util import wait_until

ROOT = Path(__file__).resolve().parents[2]
SQLI = "'; DROP TABLE leasectl.jobs; --"
LONG = "x" * 10_000
UNICODE = "ünïcødé ✓ 🚀 中文 \u202eevil"
QUOTES = "q\"u'o`te\\"
MARKUP = "[bold red]x[/] %s %(x)s {schema}"
WEIRD = [SQLI, QUOTES, UNICODE, LONG, MARKUP]
# Queue names have at most 200 characters (a longer one is refused: REJECTED_BOUNDS).
WEIRD_QUEUES = [SQLI, QUOTES, UNICODE, LONG[:200], MARKUP]


@pytest.fixture(scope="module")
def seeded(server_dsn: str, template_db: str) -> Iterator[tuple[str, dict[str, int]]]:
    """One database for every rejected input (none may change it): a job in each state. Its
    name is this session's own: test sessions share a server (LEASECTL_TEST_DSN)."""
    name = f"leasectl_bad_input_{os.getpid()}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template_db)
            )
        )
    dsn = conninfo.make_conninfo(server_dsn, dbname=name)
    seeded = seed_states_at(dsn)
    ids = vars(seeded).copy()
    try:
        yield dsn, ids
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


ALL_BAD_DURATIONS = [
    "abc",
    "-5s",
    "5 minutes",
    "1.5.3s",
    "NaN",
    "inf",
    "1e400",
    "",
    "5x",
    SQLI,
    LONG,
]


def durations(
    *prefix: str, zero_ok: bool = False, values: list[str] | None = None
) -> list[tuple[list[str], int, list[str]]]:
    *command, option = prefix
    bad = list(values or ["-5s", SQLI])
    if not zero_ok:
        bad.append("0")
    return [([*command, option, value], 2, [f"invalid {option}"]) for value in bad]


WORKER = ["worker", "-q", "q", "--handler", "tests.handlers:noop"]

# (args, exit code, fragments of the one stderr line); @name is replaced by a seeded job id.
REJECTED: list[tuple[list[str], int, list[str]]] = [
    *durations("enqueue", "-q", "q", "--delay", zero_ok=True, values=ALL_BAD_DURATIONS),
    *durations(*WORKER, "--lease-ttl"),
    *durations(*WORKER, "--heartbeat-every"),
    *durations(*WORKER, "--grace", zero_ok=True),
    *durations(*WORKER, "--poll-interval"),
    *durations("watch", "--interval"),
    *durations("tui", "--refresh"),
    *durations("prune", "--older-than"),
    *[
        ([command, value], 2, ["invalid job id"])
        for command in ("inspect", "requeue", "mark-stuck", "delete")
        for value in (SQLI, LONG)
    ],
    *[(["cancel", value, "--reason", "x"], 2, ["invalid job id"]) for value in (SQLI, LONG, "0")],
    (["cancel", "@pending"], 2, ["--reason must not be empty"]),
    *[
        (["cancel", "@pending", "--reason", value], 2, ["--reason must not be empty"])
        for value in ("", " ", "\t")
    ],
    (["cancel", "@pending", "--reason", LONG], 2, ["--reason: at most 1000 characters"]),
    (["delete", "@pending", "--reason", LONG], 2, ["--reason: at most 1000 characters"]),
    (["requeue", "@pending", "--reason", LONG], 2, ["--reason: at most 1000 characters"]),
    (["mark-stuck", "@pending", "--reason", LONG], 2, ["--reason: at most 1000 characters"]),
    (["cancel", "--reason", "r"], 2, ["give job ids, or a filter"]),
    (["delete"], 2, ["give job ids, or a filter"]),
    (["cancel", "@completed", "--reason", SQLI], 1, ["a Completed job cannot be cancelled"]),
    (["delete", "@pending", "--reason", SQLI], 1, ["a Pending job cannot be deleted"]),
    (["delete", "@expired", "--json"], 1, ["a Processing job cannot be deleted"]),
    (["cancel", "999999", "--reason", "x"], 1, ["no such job"]),
    *[(["inspect", value], 2, ["invalid job id"]) for value in ("abc", "0", "9" * 30, "1.5", "")],
    (["inspect", "-1"], 2, ["No such option: -1"]),
    (["requeue", "@stuck", "x"], 2, ["invalid job id 'x'"]),
    (["inspect", "999999"], 1, ["job 999999 not found"]),
    (["requeue", "@pending", "--reason", SQLI], 1, ["a Pending job cannot be requeued"]),
    (["mark-stuck", "@completed", "--reason", "r"], 1, ["a Completed job cannot be marked"]),
    *[
        (["enqueue", "-q", "q", "--payload", value], 2, [fragment])
        for value, fragment in (
            ("{", "invalid JSON payload"),
            (SQLI, "invalid JSON payload"),
            (LONG, "invalid JSON payload"),
            ("", "invalid JSON payload"),
            ('{"nul": "\\u0000"}', "invalid value: unsupported Unicode escape sequence"),
            ('{"bad": "\\ud800"}', "invalid value"),
        )
    ],
    *[(["enqueue", "-q", value], 2, ["--queue must not be empty"]) for value in ("", " ", "\t")],
    (["worker", "-q", "", "--handler", "tests.handlers:noop"], 2, ["--queue must not be empty"]),
    (["--schema", "", "status"], 2, ["invalid schema name"]),
    (["--schema", "s" * 64, "status"], 2, ["invalid schema name"]),
    (["--schema", SQLI, "status"], 1, ["is not initialised", "leasectl init"]),
    (["enqueue", "-q", "q", "--priority", str(2**31)], 2, ["'--priority'"]),
    (["enqueue", "-q", "q", "--priority", SQLI], 2, ["'--priority'"]),
    (["enqueue", "-q", "q", "--count", "0"], 2, ["'--count'"]),
    (["enqueue", "-q", "q", "--count", "1000001"], 2, ["'--count'"]),
    (["enqueue", "-q", "q", "--max-attempts", "0"], 2, ["'--max-attempts'"]),
    (["enqueue", "-q", "q", "--max-attempts", LONG], 2, ["'--max-attempts'"]),
    (["requeue-stuck", "--limit", "0"], 2, ["'--limit'"]),
    (["requeue-stuck", "--batch-size", "0"], 2, ["'--batch-size'"]),
    (["watch", "--batch-size", "100001"], 2, ["'--batch-size'"]),
    (["requeue-stuck", "--pace", "-1"], 2, ["'--pace'"]),
    (["watch", "--pace", "fast"], 2, ["'--pace'"]),
    (["prune", "--older-than", "1d", "--batch", "0"], 2, ["'--batch'"]),
    (["requeue-stuck", "--mode", SQLI], 2, ["'--mode'"]),
    (["requeue-stuck", "--owner", ""], 2, ["--owner must not be empty"]),
    (["requeue-stuck", "--owner", "", "--dry-run", "--json"], 2, ["--owner must not be empty"]),
    (["watch", "--mode", "nuke"], 2, ["'--mode'"]),
    (["watch", "--log-level", "loud"], 2, ["'--log-level'"]),
    ([*WORKER, "--concurrency", "0"], 2, ["'--concurrency'"]),
    ([*WORKER, "--concurrency", "1001"], 2, ["'--concurrency'"]),
    ([*WORKER, "--worker-id", "  "], 2, ["--worker-id must not be empty"]),
    ([*WORKER, "--log-level", SQLI], 2, ["'--log-level'"]),
    (["worker", "-q", "q", "--handler", "nocolon"], 2, ["use module:function"]),
    (["worker", "-q", "q", "--handler", "os:nosuchfn"], 2, ["has no 'nosuchfn'"]),
    (["worker", "-q", "q", "--handler", f"{SQLI}:f"], 2, ["cannot import handler module"]),
    (["worker", "-q", "q", "--handler", "os:sep"], 2, ["is not callable"]),
    (
        [*WORKER, "--lease-ttl", "5s", "--heartbeat-every", "5s"],
        2,
        ["--heartbeat-every (5s) must be shorter than --lease-ttl (5s)"],
    ),
    (["grant", "--viewer", ""], 2, ["invalid role name"]),
    (["grant", "--operator", "r" * 64], 2, ["invalid role name"]),
    (["grant"], 2, ["name at least one role"]),
    (["grant", "--viewer", SQLI], 1, ["does not exist"]),
    (["--dsn", LONG, "status"], 1, ["invalid DSN"]),
    (["--dsn", "host=127.0.0.1 port=abc", "status"], 1, ["port"]),
    (["--dsn", SQLI, "status"], 1, ["invalid DSN"]),
    (["status", "--nope"], 2, ["No such option: --nope"]),
    ([SQLI], 2, ["No such command"]),
    *[(["pause", value, "--reason", "x"], 2, ["QUEUE must not be empty"]) for value in ("", " ")],
    *[(["resume", value], 2, ["QUEUE must not be empty"]) for value in ("", "\t")],
    (["pause"], 2, ["Missing argument 'QUEUE'"]),
    (["pause", "q"], 2, ["Missing option '--reason'"]),
    *[
        (["pause", "q", "--reason", value], 2, ["--reason must not be empty"])
        for value in ("", " ")
    ],
    (["resume", "q"], 1, ["queue 'q' is not paused; nothing changed"]),
    (["resume", SQLI, "--reason", SQLI], 1, ["is not paused; nothing changed"]),
    (["resume", "q", "--json"], 1, ["is not paused"]),
    # list: states, JSON, durations, the page's size and start, empty texts
    *durations("list", "--since", values=ALL_BAD_DURATIONS),
    *durations("list", "--until", zero_ok=True),
    *durations("list", "--timeout"),
    (["list", "--timeout", "11m"], 2, ["'--timeout'", "at most 10m"]),
    (["list", "--since", "1h", "--until", "2h"], 2, ["--until (2h00m ago) must be more recent"]),
    (["list", "--since", "1h", "--until", "1h"], 2, ["the window is empty"]),
    *[
        (["list", "--state", value], 2, [f"invalid --state {fragment}", "use one of Pending"])
        for value, fragment in (
            ("bogus", "'bogus'"),
            ("", "''"),
            ("failed,", "''"),
            (SQLI, "\"'"),
            ("Canceled", "'Canceled'"),
        )
    ],
    *[
        (["list", "--payload", value], 2, [f"--payload: {fragment}"])
        for value, fragment in (
            ("{", "invalid JSON payload"),
            (SQLI, "invalid JSON payload"),
            ("", "invalid JSON payload"),
            ("NaN", "invalid JSON payload: NaN is not JSON"),
            ("[" * 300 + "]" * 300, "payload nested too deep"),
        )
    ],
    *[(["list", "--limit", value], 2, ["'--limit'"]) for value in ("0", "1001", "-1", SQLI)],
    *[
        (["list", "--after", value], 2, [f"invalid --after {value!r}", "the id the previous"])
        for value in ("x", "0", "1.5", "9" * 30, SQLI)
    ],
    (["list", "--owner", ""], 2, ["--owner must not be empty"]),
    (["list", "--error", ""], 2, ["--error must not be empty"]),
    (["list", "--queue", ""], 2, ["--queue must not be empty"]),
    (["list", "-q", "8" * 8000], 2, ["--queue: a queue name has at most 200 characters"]),
    # metrics: where to listen, the scrape's timeout
    *[
        (["metrics", "--listen", value], 2, ["invalid --listen", "use HOST:PORT"])
        for value in ("", "9464", ":9464", "host", "host:", "host:port", "::1:9464", SQLI, LONG)
    ],
    *[
        (["metrics", "--listen", value], 2, ["invalid --listen", "the port must be 0 to 65535"])
        for value in ("127.0.0.1:65536", "127.0.0.1:" + "9" * 30)
    ],
    (["metrics"], 2, ["Missing option '--listen'"]),
    *durations("metrics", "--listen", "127.0.0.1:0", "--timeout"),
    (["metrics", "--listen", "127.0.0.1:0", "--log-level", "loud"], 2, ["'--log-level'"]),
    # status --check's thresholds
    *durations("status", "--max-oldest-due", zero_ok=True, values=ALL_BAD_DURATIONS),
    *[
        (["status", option, value], 2, [f"'{option}'"])
        for option in ("--max-expired", "--max-stuck", "--max-late-schedules")
        for value in ("-1", "x", "1.5", SQLI)
    ],
    (["status", "--max-late-schedules", "1001"], 2, ["'--max-late-schedules'"]),
    # The guarded actions on a filter (cli/bulk.py): ids or a filter, never neither nor both.
    *[
        (args, 2, fragments)
        for command in ("requeue", "mark-stuck")
        for args, fragments in (
            ([command], ["give job ids, or a filter", "--all"]),
            ([command, "--dry-run"], ["give job ids, or a filter"]),
            ([command, "--reason", SQLI], ["give job ids, or a filter"]),
            ([command, "@stuck", "--queue", "q"], ["give job ids or a filter, not both"]),
            ([command, "@stuck", "--all"], ["give job ids or a filter, not both"]),
            ([command, "@stuck", "--dry-run"], ["--dry-run: only with a filter"]),
            ([command, "@stuck", "--after", "5"], ["--after: only with a filter"]),
            ([command, "--all", "--queue", "q"], ["--all is for no filter at all"]),
            ([command, "--state", SQLI], ["invalid --state"]),
            ([command, "--state", "completed"], [f"{command} never applies to a Completed job"]),
            ([command, "-q", ""], ["--queue must not be empty"]),
            ([command, "-q", "8" * 8000], ["--queue: a queue name has at most 200 characters"]),
            ([command, "--owner", ""], ["--owner must not be empty"]),
            ([command, "--error", ""], ["--error must not be empty"]),
            ([command, "--payload", SQLI], ["--payload: invalid JSON payload"]),
            ([command, "--since", "1h", "--until", "2h"], ["the window is empty"]),
            ([command, "--since", SQLI], ["invalid --since"]),
            ([command, "--all", "--after", "x"], ["invalid --after 'x'"]),
            ([command, "--all", "--after", SQLI], ["invalid --after"]),
            ([command, "--all", "--batch-size", "0"], ["'--batch-size'"]),
            ([command, "--all", "--batch-size", "10001"], ["'--batch-size'"]),
            ([command, "--all", "--timeout", "11m"], ["'--timeout'", "at most 10m"]),
        )
    ],
    (["requeue", "--state", "pending", "-q", "q", "--dry-run"], 2, ["requeue never applies"]),
    (["mark-stuck", "--state", "stuck,failed"], 2, ["never applies to a Failed or Stuck job"]),
    # cancel and delete take the same forms (cancel always with its reason)
    *[
        ([command, *args, "--reason", "r"], 2, fragments)
        for command in ("cancel", "delete")
        for args, fragments in (
            ([], ["give job ids, or a filter", "--all"]),
            (["@stuck", "--queue", "q"], ["give job ids or a filter, not both"]),
            (["@stuck", "--dry-run"], ["--dry-run: only with a filter"]),
            (["--all", "--queue", "q"], ["--all is for no filter at all"]),
            (["--state", SQLI], ["invalid --state"]),
            (["--payload", SQLI], ["--payload: invalid JSON payload"]),
            (["--all", "--batch-size", "0"], ["'--batch-size'"]),
            (["--all", "--force"], [f"--force does not apply to {command}"]),
        )
    ],
    (["cancel", "--state", "completed", "--reason", "r"], 2, ["cancel never applies"]),
    (["delete", "--state", "pending"], 2, ["delete never applies to a Pending job"]),
    (["cancel", "--all"], 2, ["--reason must not be empty"]),
    (["cancel", "--all", "--reason", " "], 2, ["--reason must not be empty"]),
]


# Limits: values no command may write (each one line, exit 2, nothing changed).
REJECTED_BOUNDS: list[tuple[list[str], int, list[str]]] = [
    *[
        (["enqueue", "-q", "q", "--payload", value], 2, [fragment])
        for value, fragment in (
            ("NaN", "invalid JSON payload: NaN is not JSON"),
            ('{"x": -Infinity}', "invalid JSON payload: -Infinity is not JSON"),
            ("[" * 257 + "]" * 257, "payload nested too deep: at most 256 levels"),
            ("[" * 2000 + "]" * 2000, "payload nested too deep: at most 256 levels"),
            ('{"a": ' * 15_000, "payload nested too deep"),
            ("@/nonexistent/payload.json", "cannot read payload file '/nonexistent/payload.json'"),
            ("@/", "cannot read payload file '/'"),
            ("@" + SQLI, "cannot read payload file"),
        )
    ],
    (["enqueue", "-q", "q", "--max-attempts", "1001"], 2, ["'--max-attempts'", "1000"]),
    # All the copies of one enqueue: at most 64 MiB (one statement, all of it in memory).
    (
        ["enqueue", "-q", "q", "--payload", '"' + "x" * 100_000 + '"', "--count", "700"],
        2,
        ["--count 700 copies of a 100,002-byte payload are 70,001,400 bytes", "at most 67,108,864"],
    ),
    *[
        ([*command, "8" * 8000, *rest], 2, [f"{option}: a queue name has at most 200 characters"])
        for command, option, rest in (
            (["enqueue", "-q"], "--queue", []),
            (["worker", "-q"], "--queue", ["--handler", "tests.handlers:noop"]),
            (["status", "-q"], "--queue", []),
            (["requeue-stuck", "--dry-run", "-q"], "--queue", []),
            (["watch", "-q"], "--queue", []),
            (["prune", "--older-than", "1d", "-q"], "--queue", []),
            (["tui", "-q"], "--queue", []),
            (["pause"], "QUEUE", ["--reason", "x"]),
            (["resume"], "QUEUE", []),
        )
    ],
    (["pause", "q", "--reason", LONG], 2, ["--reason: at most 1000 characters, got 10,000"]),
    (["resume", "q", "--reason", "r" * 1001], 2, ["--reason: at most 1000 characters"]),
    *[
        (["--schema", schema, command], 2, [f"invalid schema name '{schema}'", "PostgreSQL's own"])
        for schema in ("pg_catalog", "information_schema", "pg_toast", "pg_leasectl")
        for command in ("init", "status")
    ],
    ([*WORKER, "--grace", "-1"], 2, ["invalid --grace '-1': must be zero or more"]),
]


def _sweep(
    seeded: tuple[str, dict[str, int]], cases: list[tuple[list[str], int, list[str]]]
) -> None:
    dsn, ids = seeded
    before = snapshot(dsn)

    def run(case: tuple[list[str], int, list[str]]) -> str | None:
        args, code, fragments = case
        args = [str(ids[a[1:]]) if a[:1] == "@" and a[1:] in ids else a for a in args]
        proc = run_in_process(args, _env(with_password(dsn)))
        try:
            line = assert_one_line_error(
                proc, code, *fragments, prefix="leasectl: " if code == 1 else "leasectl: error: "
            )
        except AssertionError as exc:
            return f"{[a[:40] for a in args]}: {str(exc)[:600]}"
        if args[0] in ("requeue", "mark-stuck", "cancel", "delete") and code == 1:
            return None  # a skipped operator action also prints its table on stdout
        if proc.stdout:
            return f"{[a[:40] for a in args]}: printed {proc.stdout[:200]!r}"
        if len(line) > 11_000 + len(LONG):
            return f"{[a[:40] for a in args]}: a {len(line)}-character error line"
        if any(len(a) == 8000 for a in args) and len(line) > 400:
            return f"{[a[:40] for a in args]}: echoed a {len(line)}-character line"
        return None

    failures = [f for f in map(run, cases) if f]
    assert failures == [], "\n".join(failures)
    assert snapshot(dsn) == before


def test_every_malformed_value_gets_one_clear_line_and_changes_nothing(
    seeded: tuple[str, dict[str, int]],
) -> None:
    _sweep(seeded, REJECTED)


def test_every_value_beyond_a_limit_gets_one_clear_line_and_changes_nothing(
    seeded: tuple[str, dict[str, int]],
) -> None:
    _sweep(seeded, REJECTED_BOUNDS)


# One case of each kind the sweeps hold, run both ways: a value our validation refuses, one that
# Click refuses, an unknown command, a refused DSN, a handler that cannot be imported, a job that
# does not exist, a guarded action that skips (its table on stdout), a bound, a system schema.
REAL_PROCESS_SAMPLE: list[list[str]] = [
    ["enqueue", "-q", "q", "--delay", SQLI],
    ["enqueue", "-q", "q", "--payload", '{"bad": "\\ud800"}'],
    ["status", "--nope"],
    [SQLI],
    ["--dsn", LONG, "status"],
    ["worker", "-q", "q", "--handler", f"{SQLI}:f"],
    ["inspect", "999999"],
    ["delete", "@pending", "--reason", SQLI],
    ["list", "-q", "8" * 8000],
    ["--schema", "pg_catalog", "init"],
]


@pytest.mark.parametrize("args", REAL_PROCESS_SAMPLE, ids=lambda a: " ".join(a)[:30])
def test_a_real_process_prints_what_the_in_process_sweep_saw(
    seeded: tuple[str, dict[str, int]], args: list[str]
) -> None:
    """The sweeps above are only as good as ``run_in_process`` is faithful to the command."""
    dsn, ids = seeded
    args = [str(ids[a[1:]]) if a[:1] == "@" and a[1:] in ids else a for a in args]
    before = snapshot(dsn)
    real = cli(*args, dsn=with_password(dsn))
    inside = run_in_process(args, _env(with_password(dsn)))
    assert real.returncode in (1, 2), real.stderr[:600]
    assert (inside.returncode, inside.stdout, inside.stderr) == (
        real.returncode,
        real.stdout,
        real.stderr,
    )
    assert snapshot(dsn) == before


@pytest.mark.parametrize(
    "value", ["9" * 400, "99999999999h", "9" * 10_000], ids=["400-digits", "huge-hours", "10kB"]
)
def test_durations_out_of_range_are_usage_errors(value: str) -> None:
    proc = cli("enqueue", "-q", "q", "--delay", value, dsn=None)
    assert_one_line_error(proc, 2, "invalid --delay")


# -- stored verbatim and harmlessly ----------------------------------------------------------------


def inproc(*args: str, dsn: str) -> subprocess.CompletedProcess[str]:
    """``cli`` in this process (tests/inproc.py): these loops run dozens of commands."""
    return run_in_process(args, _env(dsn))


def rows(dsn: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(query, params).fetchall()


def test_queue_names_and_payloads_are_stored_verbatim(db_dsn: str) -> None:
    for queue in WEIRD_QUEUES:
        payload = {"text": queue, "nested": [queue, {"k": queue}]}
        proc = inproc(
            "enqueue", "-q", queue, "--payload", json.dumps(payload), "--json", dsn=db_dsn
        )
        assert proc.returncode == 0, proc.stderr[:500]
        [job_id] = json.loads(proc.stdout)["ids"]
        assert rows(db_dsn, "SELECT queue, payload FROM leasectl.jobs WHERE id = %s", job_id) == [
            (queue, payload)
        ]
        inspected = json.loads(inproc("inspect", str(job_id), "--json", dsn=db_dsn).stdout)
        assert (inspected["job"]["queue"], inspected["job"]["payload"]) == (queue, payload)
    # The same names as filters: matched exactly, never parsed.
    for queue in (SQLI, UNICODE):
        status = inproc("status", "-q", queue, "--json", dsn=db_dsn)
        assert status.returncode == 0, status.stderr[:500]
        assert [q["queue"] for q in json.loads(status.stdout)["queues"]] == [queue]
        dry = inproc("requeue-stuck", "-q", queue, "--dry-run", "--json", dsn=db_dsn)
        assert dry.returncode == 0 and json.loads(dry.stdout)["jobs"] == []
    assert rows(db_dsn, "SELECT count(*) FROM leasectl.jobs") == [(len(WEIRD_QUEUES),)]


def test_list_filters_are_matched_as_values_never_as_sql(db_dsn: str) -> None:
    """Weird text in every text filter of `list` finds exactly the job that holds it."""
    for value in WEIRD_QUEUES:
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            row = conn.execute(
                "INSERT INTO leasectl.jobs (queue, lease_owner, last_error, payload) "
                "VALUES (%s, %s, %s, %s) RETURNING id",
                [value, value, value, json.dumps({"k": value})],
            ).fetchone()
        assert row is not None
        for option, given in (
            ("--queue", value),
            ("--owner", value),
            ("--error", value),
            ("--payload", json.dumps({"k": value})),
        ):
            proc = inproc("list", option, given, "--json", dsn=db_dsn)
            assert proc.returncode == 0, proc.stderr[:500]
            assert [j["id"] for j in json.loads(proc.stdout)["jobs"]] == [row[0]], option
    assert rows(db_dsn, "SELECT count(*) FROM leasectl.jobs") == [(len(WEIRD_QUEUES),)]


# Reasons are bounded like the audit column they go to (migration 15: at most 1,000 characters).
WEIRD_REASONS = [SQLI, QUOTES, UNICODE, LONG[:1000], MARKUP]


def test_reasons_are_stored_verbatim(db_dsn: str, store: Stores) -> None:
    ids = store.ops.enqueue([{}] * (3 * len(WEIRD)), queue="q")
    leases = store.work.claim("q", "owner", timedelta(seconds=30), len(WEIRD))
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE leasectl.jobs SET lease_until = now() - interval '1 minute' WHERE id = ANY(%s)",
            [[x.job_id for x in leases]],
        )
    for i, reason in enumerate(WEIRD_REASONS):
        expired, pending = leases[i].job_id, ids[len(WEIRD) + i]
        marked = inproc("mark-stuck", str(pending), "--reason", reason, dsn=db_dsn)
        assert marked.returncode == 0, marked.stderr[:500]
        requeued = inproc("requeue", str(expired), "--reason", reason, "--json", dsn=db_dsn)
        assert requeued.returncode == 0, requeued.stderr[:500]
        assert json.loads(requeued.stdout)["changed"] == [expired]
        assert rows(
            db_dsn,
            "SELECT job_id, action, reason FROM leasectl.job_events WHERE job_id = ANY(%s) "
            "ORDER BY id",
            [pending, expired],
        ) == [(pending, "mark_stuck", reason), (expired, "requeue", reason)]
        assert rows(db_dsn, "SELECT last_error FROM leasectl.jobs WHERE id = %s", pending) == [
            (reason,)
        ]
    # A watcher pass with a weird reason, on freshly lapsed leases.
    store.work.claim("q", "owner2", timedelta(seconds=30), 2)
    rows(db_dsn, "UPDATE leasectl.jobs SET lease_until = now() - interval '1 s' "
         "WHERE lease_owner = 'owner2' RETURNING id")  # fmt: skip
    swept = inproc("requeue-stuck", "--reason", SQLI, "--json", dsn=db_dsn)
    assert swept.returncode == 0, swept.stderr[:500]
    assert json.loads(swept.stdout)["requeued"] == 2
    # mark-stuck and requeue above, then the watcher's two moves.
    assert rows(db_dsn, "SELECT count(*) FROM leasectl.job_events WHERE reason = %s", SQLI) == [
        (4,)
    ]
    assert rows(db_dsn, "SELECT to_regclass('leasectl.jobs') IS NOT NULL") == [(True,)]


def test_pauses_are_stored_verbatim(db_dsn: str) -> None:
    """Queue names and reasons of pauses and resumes: stored and shown as given, as data."""
    reasons = [*WEIRD[:3], LONG[:1000], WEIRD[4]]
    for queue, reason in zip(WEIRD_QUEUES, reasons, strict=True):
        paused = inproc("pause", queue, "--reason", reason, "--json", dsn=db_dsn)
        assert paused.returncode == 0, paused.stderr[:500]
        assert json.loads(paused.stdout)["queue"]["reason"] == reason
    status = inproc("status", "--json", dsn=db_dsn)
    shown = [(p["queue"], p["reason"]) for p in json.loads(status.stdout)["paused"]]
    assert sorted(shown) == sorted(zip(WEIRD_QUEUES, reasons, strict=True))
    for queue, reason in zip(WEIRD_QUEUES, reasons, strict=True):
        resumed = inproc("resume", queue, "--reason", reason, dsn=db_dsn)
        assert resumed.returncode == 0, resumed.stderr[:500]
    assert rows(db_dsn, "SELECT count(*) FROM leasectl.queue_state") == [(0,)]
    assert rows(db_dsn, "SELECT queue, action, reason FROM leasectl.queue_events ORDER BY id") == [
        (q, "pause", r) for q, r in zip(WEIRD_QUEUES, reasons, strict=True)
    ] + [(q, "resume", r) for q, r in zip(WEIRD_QUEUES, reasons, strict=True)]


def test_schema_names_are_identifiers_never_sql(empty_db_dsn: str) -> None:
    for schema in (SQLI, QUOTES, UNICODE[:20]):
        proc = inproc("--schema", schema, "init", dsn=empty_db_dsn)
        assert proc.returncode == 0, proc.stderr[:500]
        enq = inproc("--schema", schema, "enqueue", "-q", SQLI, "--json", dsn=empty_db_dsn)
        assert enq.returncode == 0, enq.stderr[:500]
        status = inproc("--schema", schema, "status", "--json", dsn=empty_db_dsn)
        assert status.returncode == 0, status.stderr[:500]
    names = {r[0] for r in rows(empty_db_dsn, "SELECT nspname FROM pg_namespace")}
    assert {SQLI, QUOTES, UNICODE[:20]} <= names
    for schema in (SQLI, QUOTES, UNICODE[:20]):
        query = sql.SQL("SELECT queue FROM {}.jobs").format(sql.Identifier(schema))
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
            assert conn.execute(query).fetchall() == [(SQLI,)]


def test_worker_id_and_queue_with_sql_metacharacters_are_lease_owner_and_queue_verbatim(
    db_dsn: str, tmp_path: Path
) -> None:
    owner = f"{SQLI} {UNICODE}"
    with Stores.connect(db_dsn, "leasectl") as store:
        [job_id] = store.ops.enqueue([{}], queue=QUOTES)
    log = (tmp_path / "worker.log").open("w")
    worker = subprocess.Popen(
        [
            sys.executable, "-m", "leasectl", "worker", "-q", QUOTES, "--handler",
            "tests.handlers:noop", "--worker-id", owner, "--poll-interval", "50ms",
            "--grace", "1s",
        ],
        cwd=ROOT,
        env=_env(db_dsn),
        stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_until(
            lambda: (
                rows(db_dsn, "SELECT status::text FROM leasectl.jobs WHERE id = %s", job_id)
                == [("Completed",)]
            ),
            what="the worker to complete the job",
        )
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        log.close()
    assert rows(
        db_dsn, "SELECT lease_owner, outcome::text FROM leasectl.job_attempts WHERE job_id = %s",
        job_id,
    ) == [(owner, "completed")]  # fmt: skip
    assert rows(db_dsn, "SELECT worker_id, queues FROM leasectl.workers") == [(owner, [QUOTES])]


# -- payloads: exact, from a file or stdin, bounded ----------------------------------------------


def cli_stdin(data: bytes, *args: str, dsn: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "leasectl", *args],
        env=_env(dsn),
        input=data,
        capture_output=True,
        timeout=60,
        check=False,
    )
    return subprocess.CompletedProcess(
        proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode()
    )


EXACT = '{"amount": 12345678901234567.89, "rate": 0.10000000000000000001, "big": 1e400}'


def test_payloads_are_stored_exactly_as_written(db_dsn: str, tmp_path: Path) -> None:
    """Numbers keep every digit (jsonb stores numeric); 1e400 is a number, not an error."""
    (tmp_path / "p.json").write_text(EXACT, encoding="utf-8")
    given = [
        cli("enqueue", "-q", "q", "--payload", EXACT, "--json", dsn=db_dsn),
        cli("enqueue", "-q", "q", "--payload", f"@{tmp_path / 'p.json'}", "--json", dsn=db_dsn),
        cli_stdin(EXACT.encode(), "enqueue", "-q", "q", "--payload", "-", "--json", dsn=db_dsn),
        cli("enqueue", "-q", "q", "--payload", EXACT, "--count", "3", "--json", dsn=db_dsn),
    ]
    ids = []
    for proc in given:
        assert proc.returncode == 0, proc.stderr[:500]
        ids += json.loads(proc.stdout)["ids"]
    assert len(ids) == 6
    stored = rows(
        db_dsn,
        "SELECT payload = %s::jsonb, payload->>'amount', payload->>'rate', "
        "payload->'big' = '1e400'::jsonb FROM leasectl.jobs WHERE id = ANY(%s)",
        EXACT,
        ids,
    )
    assert stored == [(True, "12345678901234567.89", "0.10000000000000000001", True)] * 6
    # inspect --json gives the same exact value back (never through a float).
    shown = cli("inspect", str(ids[0]), "--json", dsn=db_dsn)
    assert shown.returncode == 0, shown.stderr[:500]
    assert '"amount": 12345678901234567.89' in shown.stdout
    assert '"rate": 0.10000000000000000001' in shown.stdout
    assert json.loads(shown.stdout)["job"]["id"] == ids[0]
    human = cli("inspect", str(ids[0]), dsn=db_dsn)
    assert human.returncode == 0 and "12345678901234567.89" in human.stdout


@pytest.mark.full  # 16 MiB through real processes
def test_a_payload_over_the_limit_is_refused_before_anything_is_written(
    db_dsn: str, tmp_path: Path
) -> None:
    big = b'"' + b"x" * (16 * 1024 * 1024) + b'"'
    (tmp_path / "big.json").write_bytes(big)
    before = snapshot(db_dsn)
    by_file = cli("enqueue", "-q", "q", "--payload", f"@{tmp_path / 'big.json'}", dsn=db_dsn)
    assert_one_line_error(by_file, 2, "payload too large: more than 16,777,216 bytes")
    by_stdin = cli_stdin(big, "enqueue", "-q", "q", "--payload", "-", dsn=db_dsn)
    assert_one_line_error(by_stdin, 2, "payload too large")
    bad_utf8 = cli_stdin(b'"\xff"', "enqueue", "-q", "q", "--payload", "-", dsn=db_dsn)
    assert_one_line_error(bad_utf8, 2, "invalid JSON payload: not valid UTF-8")
    # Just under the limit, over what a command-line argument may hold: from a file.
    fits = b'"' + b"x" * (16 * 1024 * 1024 - 2) + b'"'
    (tmp_path / "fits.json").write_bytes(fits)
    # Five copies of it are 80 MiB: over what one enqueue sends, refused before it is sent.
    five = cli("enqueue", "-q", "q", "--payload", f"@{tmp_path / 'fits.json'}", "--count", "5",
               dsn=db_dsn)  # fmt: skip
    assert_one_line_error(five, 2, "--count 5 copies of a 16,777,216-byte payload", "64 MiB")
    assert snapshot(db_dsn) == before
    ok = cli("enqueue", "-q", "q", "--payload", f"@{tmp_path / 'fits.json'}", dsn=db_dsn)
    assert ok.returncode == 0, ok.stderr[:500]
    assert rows(db_dsn, "SELECT octet_length(payload::text) FROM leasectl.jobs") == [(len(fits),)]


def test_no_system_schema_is_ever_written(empty_db_dsn: str) -> None:
    def system_tables() -> list[tuple[Any, ...]]:
        return rows(
            empty_db_dsn,
            "SELECT table_schema, table_name FROM information_schema.tables "
            "WHERE table_name IN ('jobs', 'schema_migrations')",
        )

    assert system_tables() == []
    for schema in ("information_schema", "pg_catalog", "pg_toast"):
        proc = cli("--schema", schema, "init", dsn=empty_db_dsn)
        assert_one_line_error(proc, 2, f"invalid schema name '{schema}'")
    assert system_tables() == []


def test_an_over_long_queue_name_is_a_usage_error_not_a_lost_database(
    db_dsn: str, store: Stores
) -> None:
    name = "n" * 8000
    proc = cli("enqueue", "-q", name, dsn=db_dsn)
    line = assert_one_line_error(proc, 2, "a queue name has at most 200 characters, got 8,000")
    assert "lost the database" not in line and len(line) < 400
    # Through the Python API too, and the schema refuses what gets past both.
    with pytest.raises(UsageError, match="at most 200 characters"):
        store.ops.enqueue([{}], queue="q" * 201)
    with pytest.raises(UsageError, match="max_attempts must be between 1 and 1,000"):
        store.ops.enqueue([{}], queue="q", max_attempts=1001)
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("INSERT INTO leasectl.jobs (queue) VALUES (%s)", ("q" * 201,))
        with pytest.raises(psycopg.errors.CheckViolation, match="jobs_bounded_values"):
            conn.execute("INSERT INTO leasectl.jobs (queue, max_attempts) VALUES ('q', 1001)")
    assert rows(db_dsn, "SELECT count(*) FROM leasectl.jobs") == [(0,)]
