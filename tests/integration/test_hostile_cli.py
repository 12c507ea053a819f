"""Hostile text in every field the command line shows, through the real database and the real CLI.

Producers, workers and operators write queue names, payloads, errors, worker ids, hostnames,
actors and reasons; an on-call engineer reads them in `status`, `inspect` and the action
results. Each value here is written as those writers could write it (plain SQL), then every
command that shows it runs as `python -m leasectl`: nothing it prints may act on a terminal (no
ESC, no C1 CSI, no BEL, no OSC 8 hyperlink, no bidi override), the value is still there to read
(as ``literal.visible`` shows it), and ``--json`` gives back the exact value.

Most commands run through ``cli.main``, the entry point of both `leasectl` and `python -m
leasectl`, several in one subprocess (one interpreter start for a batch: the machine is small)
with its stdout and stderr file descriptors captured per command.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, sql
from psycopg.types.json import Jsonb

from leasectl.cli.stderr import MESSAGE_LIMIT
from leasectl.core.literal import ECHO_LIMIT, echo, visible
from leasectl.present.jsonout import dumps
from tests.hostile import CORPUS, ESC, MARKUP, NAMES, TERMINAL, UNICODE
from tests.integration.test_cli import _env
from tests.util import wait_until

pytestmark = pytest.mark.full

WIDTH = "400"  # wide enough that no hostile value of NAMES wraps in a table cell
LONG = ESC + "[2J" + "x" * 100_000
JOINED_TERMINAL = "".join(TERMINAL)  # every terminal attack in one value
JOINED_UNICODE = "".join(UNICODE)
JOINED_MARKUP = "".join(MARKUP)
# A unique key holds at most 200 characters: terminal attacks and markup in one.
HOSTILE_KEY = (JOINED_TERMINAL + JOINED_MARKUP)[:200]
SHORT = "\x1b]0;PWNED\x07\x1b[2J"  # short enough to be a schema or role name


@dataclass(frozen=True)
class Ran:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def run(*args: str, dsn: str | None) -> Ran:
    """One `python -m leasectl` process."""
    proc = subprocess.run(
        [sys.executable, "-m", "leasectl", *args],
        env={**_env(dsn), "COLUMNS": WIDTH},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return Ran(list(args), proc.returncode, proc.stdout, proc.stderr)


# Runs cli.main once per command, file descriptors 1 and 2 pointed at a fresh file each time,
# and prints [exit code, stdout, stderr] of each as JSON on the real stdout at the end.
DRIVER = """
import json, os, sys, tempfile
from leasectl.cli import main

results = []
for args in json.load(sys.stdin):
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        saved = os.dup(1), os.dup(2)
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            code = main(args)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        out.seek(0)
        err.seek(0)
        results.append([code, out.read().decode(), err.read().decode()])
print(json.dumps(results))
"""


def run_all(commands: Sequence[Sequence[str]], dsn: str) -> list[Ran]:
    """Each command through cli.main, in order, in one subprocess."""
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER],
        input=json.dumps([list(c) for c in commands]),
        env={**_env(dsn), "COLUMNS": WIDTH},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout)
    return [Ran(list(c), *r) for c, r in zip(commands, results, strict=True)]


def inert(text: str, what: str) -> None:
    """Nothing in ``text`` that a terminal acts on or that reorders or hides text."""
    assert ESC not in text, f"{what}: ESC in {text[:2000]!r}"
    assert "\x9b" not in text, f"{what}: C1 CSI in {text[:2000]!r}"
    assert "\x07" not in text, f"{what}: BEL in {text[:2000]!r}"
    assert "\x1b]8;" not in text, f"{what}: OSC 8 hyperlink in {text[:2000]!r}"
    acting = sorted({c for c in text if c != "\n" and visible(c) != c})
    assert not acting, f"{what}: {acting!r} in {text[:2000]!r}"


def shown(stdout: str, value: str, what: str, *, multiline: bool = False) -> None:
    """``value`` is readable in ``stdout``, as ``visible`` shows it (a multi-line value line by
    line; Rich expands tabs)."""
    pieces = (
        re.split(r"[\n\t]", visible(value, multiline=multiline)) if multiline else [visible(value)]
    )
    for piece in pieces:
        assert piece.strip() in stdout, f"{what}: {piece.strip()!r} not shown"


def checked(proc: Ran, code: int, what: str) -> Ran:
    context = f"{what}: exit {proc.returncode}, stderr {proc.stderr[:1000]!r}"
    assert proc.returncode == code, context
    assert "Traceback" not in proc.stderr, context
    inert(proc.stdout, f"{what} stdout")
    inert(proc.stderr, f"{what} stderr")
    return proc


# -- one database with hostile text in every field, seeded once for the module -----------------


@dataclass(frozen=True)
class Hostile:
    dsn: str
    expired: dict[str, int]  # hostile value -> a Processing job of that queue, owner and error
    live: dict[str, int]  # hostile value -> a job whose live lease that value holds
    showcase: int  # one job with every value in its payload, attempts and events


def _seed(dsn: str) -> Hostile:
    conn = psycopg.connect(dsn, autocommit=True)

    def job(queue: str, owner: str, error: str, payload: Any, until: str) -> int:
        row = conn.execute(
            "INSERT INTO leasectl.jobs (queue, payload, status, attempts, max_attempts, "
            "lease_owner, lease_until, heartbeat_at, last_error) "
            "VALUES (%s, %s, 'Processing', 1, 5, %s, now() + %s::interval, now(), %s) "
            "RETURNING id",
            [queue, Jsonb(payload), owner, until, error],
        ).fetchone()
        assert row is not None
        return int(row[0])

    expired: dict[str, int] = {}
    live: dict[str, int] = {}
    for value in NAMES:
        expired[value] = job(value, value, value, {"value": value, value: [value]}, "-1 minute")
        live[value] = job(value, value, value, {}, "1 day")
        # What its handler reported (ctx.progress, migration 21): the message is untrusted too.
        conn.execute(
            "UPDATE leasectl.jobs SET progress = 0.42, progress_message = %s, "
            "progress_attempt = attempts WHERE id = %s",
            [value, live[value]],
        )
        conn.execute(
            "INSERT INTO leasectl.workers (worker_id, hostname, pid, queues, lease_ttl, "
            "heartbeat_every) VALUES (%s, %s, 4242, %s, '30s', '10s')",
            [value, value, [value, "q"]],
        )
    payload = {value: value for value in CORPUS}  # the 100,000-character value too
    showcase = job(JOINED_TERMINAL, JOINED_UNICODE, "\n".join(NAMES), payload, "-1 minute")
    conn.execute(
        "UPDATE leasectl.jobs SET attempts = %s, max_attempts = %s, unique_key = %s WHERE id = %s",
        [len(NAMES), len(NAMES) + 1, HOSTILE_KEY, showcase],
    )
    for n, value in enumerate(NAMES, start=1):
        conn.execute(
            "INSERT INTO leasectl.job_attempts (job_id, attempt, lease_owner, ended_at, outcome, "
            "error, error_detail) VALUES (%s, %s, %s, now(), 'failed', %s, %s)",
            [showcase, n, value, value, f"Traceback {n}\n{value}"],
        )
        conn.execute(
            "INSERT INTO leasectl.job_events (job_id, actor, action, reason, before, after) "
            "VALUES (%s, %s, %s, %s, %s, %s)",
            [showcase, value, value, value, Jsonb({"status": value}), Jsonb({"status": value})],
        )
    # Documents that are not objects: whoever can write the table can write these too.
    conn.execute(
        "INSERT INTO leasectl.job_events (job_id, actor, action, before, after) "
        "VALUES (%s, 'operator:x', 'requeue', %s, %s)",
        [showcase, Jsonb(JOINED_TERMINAL), Jsonb([JOINED_TERMINAL])],
    )
    conn.close()
    return Hostile(dsn, expired, live, showcase)


@pytest.fixture(scope="module")
def hostile(server_dsn: str, template_db: str) -> Iterator[Hostile]:
    name = f"leasectl_hostile_{uuid.uuid4().hex[:12]}"
    drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template_db)
            )
        )
    dsn = conninfo.make_conninfo(server_dsn, dbname=name)
    try:
        yield _seed(dsn)
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(drop)


# -- reading: status, inspect, a dry run, and guarded actions that skip ------------------------


def test_status_shows_every_queue_and_owner_as_text(hostile: Hostile) -> None:
    checks = (JOINED_TERMINAL, *TERMINAL[:3])
    human, as_json, check, *of_queue = run_all(
        [
            ["status"],
            ["status", "--json"],
            ["status", "--check"],
            *(["status", "--check", "-q", value] for value in checks),
        ],
        hostile.dsn,
    )
    checked(human, 0, "status")
    for value in NAMES:
        shown(human.stdout, value, "status queue/owner")
    shown(human.stdout, JOINED_TERMINAL, "status queue")
    shown(human.stdout, JOINED_UNICODE, "status owner")

    checked(as_json, 0, "status --json")
    document = json.loads(as_json.stdout)
    assert {q["queue"] for q in document["queues"]} == {*NAMES, JOINED_TERMINAL}
    owners = {o["owner"]: o for o in document["owners"]}
    assert set(owners) == {*NAMES, JOINED_UNICODE}
    for value in NAMES:
        assert (owners[value]["hostname"], owners[value]["queues"]) == (value, [value, "q"])

    checked(check, 3, "status --check")
    assert check.stderr.startswith("leasectl: check failed: ")
    assert len(check.stderr.splitlines()) == 1
    for value, proc in zip(checks, of_queue, strict=True):
        checked(proc, 3, "status --check -q")
        assert proc.stderr.splitlines() == [
            f"leasectl: check failed: 1 expired lease(s), 0 Stuck job(s) in queue {echo(value)}"
        ]


def test_inspect_shows_every_field_as_text(hostile: Hostile) -> None:
    # `python -m leasectl` itself, once: the entry point the driver's cli.main stands for.
    human = checked(run("inspect", str(hostile.showcase), dsn=hostile.dsn), 0, "inspect")
    shown(human.stdout, JOINED_TERMINAL, "inspect queue")
    shown(human.stdout, JOINED_UNICODE, "inspect lease owner")
    shown(human.stdout, HOSTILE_KEY, "inspect unique key")
    for value in NAMES:
        shown(human.stdout, value, "inspect last error", multiline=True)
        shown(human.stdout, value, "inspect attempt owner, event actor and action")
        shown(human.stdout, value, "inspect attempt error, event reason", multiline=True)
        # The payload is shown as its JSON text: string contents escaped the way --json does.
        assert dumps(value) in human.stdout, f"payload {value!r}"
    # The last attempt's traceback, in its own panel (the others: --json).
    last = len(NAMES)
    assert f"traceback of attempt {last} (failed)" in human.stdout
    assert f"Traceback {last}" in human.stdout and "Traceback 1\n" not in human.stdout
    shown(
        human.stdout.split(f"traceback of attempt {last}")[1],
        NAMES[-1],
        "traceback",
        multiline=True,
    )

    [as_json] = run_all([["inspect", str(hostile.showcase), "--json"]], hostile.dsn)
    checked(as_json, 0, "inspect --json")
    document = json.loads(as_json.stdout)
    job = document["job"]
    assert (job["queue"], job["lease_owner"]) == (JOINED_TERMINAL, JOINED_UNICODE)
    assert job["last_error"] == "\n".join(NAMES)
    assert job["unique_key"] == HOSTILE_KEY
    assert job["payload"] == {value: value for value in CORPUS}
    assert [(a["lease_owner"], a["error"], a["error_detail"]) for a in document["attempts"]] == [
        (value, value, f"Traceback {n}\n{value}") for n, value in enumerate(NAMES, start=1)
    ]
    events = [(e["actor"], e["action"], e["reason"], e["before"]) for e in document["events"]]
    assert events[:-1] == [(value, value, value, {"status": value}) for value in NAMES]
    assert document["events"][-1]["before"] == JOINED_TERMINAL


def test_inspect_shows_a_handlers_progress_message_as_text(hostile: Hostile) -> None:
    values = [value for value in NAMES if value.strip() not in ("", "-")]
    commands = [["inspect", str(hostile.live[value])] for value in values]
    commands.append(["inspect", str(hostile.live[values[0]]), "--json"])
    *human, as_json = run_all(commands, hostile.dsn)
    for value, proc in zip(values, human, strict=True):
        checked(proc, 0, "inspect")
        progress = proc.stdout.split("progress", 1)[1]
        assert progress.lstrip().startswith("42%"), proc.stdout
        shown(progress, value, "inspect progress message")
    document = json.loads(checked(as_json, 0, "inspect --json").stdout)
    assert (document["job"]["progress"], document["job"]["progress_message"]) == (
        pytest.approx(0.42),
        values[0],
    )


def test_dry_run_and_skip_reasons_show_hostile_queues_and_owners_as_text(
    hostile: Hostile,
) -> None:
    """A dry run lists expired leases; a live lease is skipped, and the reason names its owner,
    in the table and on stderr (which names the first three skipped ids: the worst of the
    corpus, a different three per action)."""
    live = list(hostile.live.items())
    dry, dry_json, requeued, marked, as_json = run_all(
        [
            ["requeue-stuck", "--dry-run"],
            ["requeue-stuck", "--dry-run", "--json"],
            ["requeue", *(str(i) for _, i in live)],
            ["mark-stuck", *(str(i) for _, i in live[3:] + live[:3])],
            ["requeue", "--json", *(str(i) for _, i in live)],
        ],
        hostile.dsn,
    )
    checked(dry, 0, "requeue-stuck --dry-run")
    for value in NAMES:
        shown(dry.stdout, value, "dry run queue/owner")
    checked(dry_json, 0, "requeue-stuck --dry-run --json")
    jobs = {j["id"]: j for j in json.loads(dry_json.stdout)["jobs"]}
    for value, job_id in hostile.expired.items():
        assert (jobs[job_id]["queue"], jobs[job_id]["lease_owner"]) == (value, value)

    for proc, first, what in ((requeued, live[:3], "requeue"), (marked, live[3:6], "mark-stuck")):
        checked(proc, 1, what)
        for value in NAMES:
            shown(proc.stdout, value, f"{what} skip reason")
        [line] = proc.stderr.splitlines()
        assert line.startswith(f"leasectl: {len(live)} of {len(live)} job(s) not ")
        for value, job_id in first:
            assert f"{job_id}: lease live: held by {visible(value)} until " in line, line
    checked(as_json, 1, "requeue --json")
    reasons = {s["id"]: s["reason"] for s in json.loads(as_json.stdout)["skipped"]}
    for value, job_id in live:
        assert reasons[job_id].startswith(f"lease live: held by {value} until ")


def test_requeue_stuck_for_a_hostile_owner_lists_that_owner_only_as_text(
    hostile: Hostile,
) -> None:
    """`requeue-stuck --owner` with each hostile worker id (a dry run: the module's database is
    shared): the header names the owner as text, the listing has that owner's expired lease
    and no other, and --json gives back the exact owner."""
    owners = [value for value in NAMES if value.strip()]
    procs = run_all(
        [
            args
            for value in owners
            for args in (
                ["requeue-stuck", "--owner", value, "--dry-run"],
                ["requeue-stuck", "--owner", value, "--dry-run", "--json"],
            )
        ],
        hostile.dsn,
    )
    for n, value in enumerate(owners):
        human, as_json = procs[2 * n], procs[2 * n + 1]
        checked(human, 0, f"requeue-stuck --owner {value!r} --dry-run")
        assert f"only the expired leases of owner {visible(value)}\n" in human.stdout, value
        assert "dry run: 1 expired lease(s) would be moved" in human.stdout, value
        checked(as_json, 0, f"requeue-stuck --owner {value!r} --dry-run --json")
        document = json.loads(as_json.stdout)
        assert document["owner"] == value
        assert [(j["id"], j["lease_owner"]) for j in document["jobs"]] == [
            (hostile.expired[value], value)
        ]


def test_list_shows_every_field_and_filter_as_text(hostile: Hostile) -> None:
    """Every hostile queue, owner, error and payload in a listing (text and JSON), and each
    one as the filter that finds it (shown in the listing's filter line)."""
    filtered = [(option, value) for value in NAMES for option in ("--queue", "--owner", "--error")]
    everything, as_json, *found = run_all(
        [
            ["list", "--limit", "1000"],
            ["list", "--limit", "1000", "--json"],
            *(["list", option, value, "--json"] for option, value in filtered[:6]),
            *(["list", option, value] for option, value in filtered),
        ],
        hostile.dsn,
    )
    checked(everything, 0, "list")
    for value in NAMES:
        # Cells are cut at the column's width: what is shown is the start of the value.
        start = visible(value)[:12].strip()
        if start:
            assert start in everything.stdout, f"list: {start!r} not shown"
    checked(as_json, 0, "list --json")
    jobs = {j["id"]: j for j in json.loads(as_json.stdout)["jobs"]}
    for value, job_id in hostile.expired.items():
        job = jobs[job_id]
        assert (job["queue"], job["lease_owner"]) == (value, value)
        assert job["last_error"] == value[:1000] and job["last_error_chars"] == len(value)
        if job["payload_chars"] <= len(job["payload_text"]):  # whole: it parses back
            assert json.loads(job["payload_text"]) == {"value": value, value: [value]}
        else:
            assert len(job["payload_text"]) == 1000
    for (option, value), proc in zip(filtered[:6], found[:6], strict=True):
        checked(proc, 0, f"list {option} --json")
        ids = {j["id"] for j in json.loads(proc.stdout)["jobs"]}
        assert {hostile.expired[value], hostile.live[value]} <= ids, (option, value)
    for (option, value), proc in zip(filtered, found[6:], strict=True):
        if option == "--queue" and not value.strip():  # as every --queue: not blank
            checked(proc, 2, f"list {option}")
            continue
        checked(proc, 0, f"list {option}")
        filter_line = next(line for line in proc.stdout.splitlines() if line.startswith("filter:"))
        assert f"{option} " in filter_line
        shown(proc.stdout, value, f"list {option} filter line")


def test_an_action_on_a_filter_shows_the_filter_and_its_sample_as_text(hostile: Hostile) -> None:
    """A dry run by each hostile owner and queue: the filter line and the sample show them as
    text; the JSON has them exactly."""
    filtered = [(option, value) for value in NAMES for option in ("--queue", "--owner")]
    procs = run_all(
        [
            *(["requeue", option, value, "--dry-run"] for option, value in filtered),
            *(["mark-stuck", option, value, "--dry-run", "--json"] for option, value in filtered),
        ],
        hostile.dsn,
    )
    for (option, value), proc in zip(filtered, procs[: len(filtered)], strict=True):
        if option == "--queue" and not value.strip():
            checked(proc, 2, f"requeue {option}")
            continue
        checked(proc, 0, f"requeue {option} --dry-run")
        assert "dry run: 2 job(s) would be requeued" in proc.stdout, proc.stdout[:500]
        filter_line = next(line for line in proc.stdout.splitlines() if line.startswith("filter:"))
        assert f"{option} " in filter_line
        shown(proc.stdout, value, f"requeue {option} filter line")
    for (option, value), proc in zip(filtered, procs[len(filtered) :], strict=True):
        if option == "--queue" and not value.strip():
            checked(proc, 2, f"mark-stuck {option}")
            continue
        checked(proc, 0, f"mark-stuck {option} --dry-run --json")
        doc = json.loads(proc.stdout)
        assert doc["filter"][option] == value and doc["matched"] == 2
        assert {j["id"] for j in doc["sample"]} == {hostile.expired[value], hostile.live[value]}


# -- errors that quote what was typed ------------------------------------------------------------

TYPED = [JOINED_TERMINAL, JOINED_UNICODE, JOINED_MARKUP, LONG, SHORT]


def _error_cases(value: str) -> list[tuple[list[str], int, str | None]]:
    """(args, exit code, the quote of ``value`` the line must carry, if the message is ours)."""
    fits_identifier = len(value.encode()) <= 63
    return [
        (["enqueue", "-q", value, "--delay", value], 2, echo(value)),
        (["enqueue", "-q", value, "--priority", value], 2, None),
        (["enqueue", "-q", value, "--payload", "{" + value], 2, None),
        (["requeue-stuck", "--mode", value], 2, None),
        (["status", "--" + value], 2, None),
        (["inspect", value], 2, echo(value)),
        (["requeue", "1", value, "--reason", value], 2, echo(value)),
        (["--schema", value, "status"], 1 if fits_identifier else 2, echo(value)),
        (["grant", "--viewer", value], 1 if fits_identifier else 2, echo(value)),
        (["worker", "-q", value, "--handler", value], 2, None),
        (["worker", "-q", "q", "--handler", value], 2, None if ":" in value else echo(value)),
        (["worker", "-q", "q", "--handler", f"{value}:f"], 2, None),
        (["list", "--state", value], 2, None),
        (["list", "--since", value], 2, echo(value)),
        (["list", "--after", value], 2, echo(value)),
        (["list", "--payload", value], 2, None),
        (["requeue", "--state", value], 2, None),
        (["mark-stuck", "--since", value], 2, echo(value)),
        (["requeue", "--all", "--after", value], 2, echo(value)),
        (["requeue", "--payload", value, "--dry-run"], 2, None),
    ]


def test_errors_quote_typed_input_escaped_and_bounded(hostile: Hostile) -> None:
    cases = [(value, *case) for value in TYPED for case in _error_cases(value)]
    procs = run_all([args for _, args, _, _ in cases], hostile.dsn)
    for (value, args, code, quote), proc in zip(cases, procs, strict=True):
        what = f"{[a[:20] for a in args]}"
        checked(proc, code, what)
        assert proc.stdout == "", what
        [line] = proc.stderr.splitlines()
        assert line.startswith("leasectl: error: "), f"{what}: {line[:300]!r}"
        assert len(line) <= len("leasectl: error: ") + MESSAGE_LIMIT, what
        if quote is not None:
            assert quote in line, f"{what}: {quote[:80]!r} not in {line[:400]!r}"
        if value is LONG:
            assert line.count("x") <= ECHO_LIMIT + 100, f"{what}: echoes {line.count('x')} chars"


# -- writing: a watcher pass with a hostile reason, enqueue, init, a worker --------------------


HANDLER_MODULE = """
def fail(ctx):
    raise RuntimeError(ctx.payload["say"])
"""


def test_commands_that_write_show_what_they_wrote_as_text(db_dsn: str, tmp_path: Path) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        ids = {
            value: conn.execute(
                "INSERT INTO leasectl.jobs (queue, status, attempts, lease_owner, lease_until) "
                "VALUES (%s, 'Processing', 1, %s, now() - interval '1 minute') RETURNING id",
                [value, value],
            ).fetchone()[0]  # type: ignore[index]
            for value in NAMES
        }
    job_id = ids[TERMINAL[0]]
    enqueues = [
        ["enqueue", "-q", value, *flag]
        for value in (JOINED_TERMINAL, JOINED_UNICODE)
        for flag in ([], ["--json"])
    ]
    swept, human, as_json, *enqueued, initialised = run_all(
        [
            ["requeue-stuck", "--reason", JOINED_TERMINAL],
            ["inspect", str(job_id)],
            ["inspect", str(job_id), "--json"],
            *enqueues,
            ["--schema", SHORT, "init"],
        ],
        db_dsn,
    )
    checked(swept, 0, "requeue-stuck")
    assert f"requeued {len(NAMES)}," in swept.stdout
    for value in NAMES:
        shown(swept.stdout, value, "moved job queue/owner")
    checked(human, 0, "inspect after the pass")
    shown(human.stdout, JOINED_TERMINAL, "event reason", multiline=True)
    checked(as_json, 0, "inspect --json after the pass")
    assert json.loads(as_json.stdout)["events"][-1]["reason"] == JOINED_TERMINAL
    for proc in enqueued:
        value = proc.args[2]
        checked(proc, 0, "enqueue")
        if "--json" in proc.args:
            assert json.loads(proc.stdout)["queue"] == value
        else:
            assert proc.stdout.startswith(f"enqueued 1 job(s) on queue {echo(value)}: ")
    checked(initialised, 0, "init")
    assert f"to schema {echo(SHORT)} at " in initialised.stdout

    # A worker named by a hostile id whose handler fails with a hostile message: its log on
    # stderr, and what it wrote to the job, are shown as text.
    (tmp_path / "hostile_handlers.py").write_text(textwrap.dedent(HANDLER_MODULE))
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        (failing,) = conn.execute(
            "INSERT INTO leasectl.jobs (queue, payload, max_attempts) VALUES ('work', %s, 1) "
            "RETURNING id",
            [Jsonb({"say": JOINED_TERMINAL})],
        ).fetchone()  # type: ignore[misc]

        def failed() -> bool:
            row = conn.execute("SELECT status::text FROM leasectl.jobs WHERE id = %s", [failing])
            return row.fetchone() == ("Failed",)

        worker = subprocess.Popen(
            [
                sys.executable, "-m", "leasectl", "worker", "-q", "work",
                "--handler", "hostile_handlers:fail", "--poll-interval", "100ms",
                "--grace", "1s", "--worker-id", JOINED_UNICODE,
            ],
            cwd=tmp_path,
            env=_env(db_dsn),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        try:
            wait_until(failed, timeout=60, what="the worker to fail the job")
            worker.send_signal(signal.SIGTERM)
            out, err = worker.communicate(timeout=30)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.communicate()
    assert worker.returncode == 0, err[:2000]
    inert(out + err, "worker log")
    assert f"worker {visible(JOINED_UNICODE)} started on work" in err
    [failure] = run_all([["inspect", str(failing)]], db_dsn)
    checked(failure, 0, "inspect of the failure")
    shown(failure.stdout, JOINED_UNICODE, "attempt owner")
    shown(failure.stdout, JOINED_TERMINAL, "the worker's error", multiline=True)


def test_pauses_show_hostile_queues_actors_and_reasons_as_text(db_dsn: str) -> None:
    """Paused queues as an owner's SQL could write them (queue, actor, reason), in `status` and
    in `inspect` of their jobs; and `pause`/`resume` of hostile queues with hostile reasons, in
    what they print."""
    jobs: list[int] = []
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        for value in NAMES:
            conn.execute(
                "INSERT INTO leasectl.queue_state (queue, paused_by, reason) VALUES (%s, %s, %s)",
                [value, value, value],
            )
            row = conn.execute(
                "INSERT INTO leasectl.jobs (queue) VALUES (%s) RETURNING id", [value]
            ).fetchone()
            assert row is not None
            jobs.append(row[0])
    fresh = [JOINED_TERMINAL, JOINED_UNICODE]
    inspected = run_all(
        [
            *(["inspect", str(job_id)] for job_id in jobs),
            *(["inspect", str(j), "--json"] for j in jobs),
        ],
        db_dsn,
    )
    for value, proc in zip(NAMES, inspected[: len(jobs)], strict=True):
        checked(proc, 0, "inspect of a paused queue's job")
        assert "but its queue is paused" in proc.stdout
        shown(proc.stdout, value, "paused by, reason")
    for value, proc in zip(NAMES, inspected[len(jobs) :], strict=True):
        checked(proc, 0, "inspect --json of a paused queue's job")
        pause = json.loads(proc.stdout)["queue_paused"]
        assert (pause["queue"], pause["paused_by"], pause["reason"]) == (value, value, value)
    human, as_json, *written = run_all(
        [
            ["status"],
            ["status", "--json"],
            *(["pause", value, "--reason", MARKUP[3] + value] for value in fresh),
            *(["pause", value, "--reason", "again", "--json"] for value in fresh),
            *(["resume", value, "--reason", value] for value in fresh),
            *(["resume", value] for value in fresh),
        ],
        db_dsn,
    )
    checked(human, 0, "status")
    for value in NAMES:
        shown(human.stdout, value, "paused queue/actor/reason")
    checked(as_json, 0, "status --json")
    assert [
        (p["queue"], p["paused_by"], p["reason"]) for p in json.loads(as_json.stdout)["paused"]
    ] == sorted((value, value, value) for value in NAMES)
    paused, again, resumed, not_paused = written[0:2], written[2:4], written[4:6], written[6:8]
    for value, proc in zip(fresh, paused, strict=True):
        checked(proc, 0, "pause")
        shown(proc.stdout, value, "paused queue")
        shown(proc.stdout, MARKUP[3] + value, "pause reason")
    for value, proc in zip(fresh, again, strict=True):
        checked(proc, 1, "pause of a paused queue")
        assert json.loads(proc.stdout)["queue"]["reason"] == MARKUP[3] + value
        assert proc.stderr == f"leasectl: queue {echo(value)} is already paused; nothing changed\n"
    for value, proc in zip(fresh, resumed, strict=True):
        checked(proc, 0, "resume")
        shown(proc.stdout, value, "resumed queue")
    for value, proc in zip(fresh, not_paused, strict=True):
        checked(proc, 1, "resume of a queue not paused")
        assert proc.stderr == f"leasectl: queue {echo(value)} is not paused; nothing changed\n"


def test_cancel_and_delete_show_hostile_actors_and_reasons_as_text(db_dsn: str) -> None:
    """Cancel and delete with hostile reasons, as a hostile operator name ($USER, in the actor):
    what they print, and `inspect` of a job deleted so ("deleted by ACTOR ... (REASON)"), stay
    inert text; the reasons are kept exactly."""
    fresh = [JOINED_TERMINAL, JOINED_UNICODE]
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        ids = [
            row[0]
            for row in conn.execute(
                "INSERT INTO leasectl.jobs (queue) SELECT %s FROM generate_series(1, 2) "
                "RETURNING id",
                [MARKUP[3]],
            ).fetchall()
        ]
    ran = run_all(
        [
            *(["cancel", str(i), "--reason", value] for i, value in zip(ids, fresh, strict=True)),
            *(["cancel", str(i), "--reason", value] for i, value in zip(ids, fresh, strict=True)),
            *(
                ["delete", str(i), "--reason", value, "--json"]
                for i, value in zip(ids, fresh, strict=True)
            ),
            *(["inspect", str(i)] for i in ids),
        ],
        db_dsn,
    )
    cancelled, again, deleted, inspected = ran[0:2], ran[2:4], ran[4:6], ran[6:8]
    for proc in cancelled:
        checked(proc, 0, "cancel")
    for proc in again:
        checked(proc, 1, "cancel of a cancelled job")
        assert "already finished" in proc.stderr
    for proc in deleted:
        checked(proc, 0, "delete --json")
    for value, proc in zip(fresh, inspected, strict=True):
        checked(proc, 1, "inspect of a deleted job")
        assert "was deleted by" in proc.stderr and echo(value)[:40] in proc.stderr
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        reasons = conn.execute(
            "SELECT action, reason FROM leasectl.job_events ORDER BY id"
        ).fetchall()
    assert reasons == [
        *(("cancel", value) for value in fresh),
        *(("delete", value) for value in fresh),
    ]


def test_schedules_show_hostile_names_queues_and_pauses_as_text(db_dsn: str) -> None:
    """Schedules as an owner's SQL could write them (name, expression, time zone, queue,
    pause's actor and reason, payload), late: `schedule list`, its JSON, and `status`'s late
    schedules show each as text; the JSON gives each back exactly."""
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        for i, value in enumerate(NAMES):
            conn.execute(
                "INSERT INTO leasectl.schedules (name, cron, timezone, queue, payload, next_slot, "
                "created_by, updated_by, paused_at, paused_by, paused_reason) VALUES "
                "(%s, %s, %s, %s, %s, now() - interval '1 hour', %s, %s, "
                "CASE WHEN %s THEN now() END, CASE WHEN %s THEN %s END, CASE WHEN %s THEN %s END)",
                [f"{i:02d}{value}"[:200], value, value[:100], value, Jsonb({"v": value}), value,
                 value, i % 2 == 1, i % 2 == 1, value, i % 2 == 1, value],
            )  # fmt: skip
    listed, as_json, status, status_json = run_all(
        [["schedule", "list"], ["schedule", "list", "--json"], ["status"], ["status", "--json"]],
        db_dsn,
    )
    for proc, what in ((listed, "schedule list"), (status, "status")):
        checked(proc, 0, what)
    for i, value in enumerate(NAMES):
        shown(listed.stdout, f"{i:02d}{value}"[:200], "schedule name")
        shown(listed.stdout, value, "schedule cron/queue")
        if i % 2 == 0:  # late (the paused ones are not)
            shown(status.stdout, f"{i:02d}{value}"[:200], "late schedule")
    checked(as_json, 0, "schedule list --json")
    got = {s["name"]: s for s in json.loads(as_json.stdout)["schedules"]}
    for i, value in enumerate(NAMES):
        s = got[f"{i:02d}{value}"[:200]]
        assert (s["cron"], s["queue"], s["payload"]) == (value, value, {"v": value})
        assert s["paused_reason"] == (value if i % 2 == 1 else None)
    checked(status_json, 0, "status --json")
    late = [s["name"] for s in json.loads(status_json.stdout)["late_schedules"]]
    assert sorted(late) == sorted(f"{i:02d}{v}"[:200] for i, v in enumerate(NAMES) if i % 2 == 0)


def test_stats_and_pickup_latency_show_hostile_queues_as_text(hostile: Hostile) -> None:
    """The seed's jobs and attempts (hostile queue names) are in the history: `stats` of each
    queue, and `status`'s pickup latency, show them as text; --json gives them back exactly."""
    values = (JOINED_TERMINAL, *TERMINAL[:3], *UNICODE[:2], MARKUP[3])
    with psycopg.connect(hostile.dsn, autocommit=True) as conn:
        # A start of each queue, as a claim writes it (the seed writes its attempts itself, as
        # no claim does: none of them is counted).
        conn.execute(
            "INSERT INTO leasectl.queue_history_deltas (queue, minute, counter, bucket, delta) "
            "SELECT q, date_trunc('minute', now(), 'UTC'), 'pickup', 20, 1 "
            "FROM unnest(%s::text[]) AS q",
            [[*NAMES, JOINED_TERMINAL]],
        )
    human, as_json, status, *of_queue = run_all(
        [
            ["stats", "--since", "10m"],
            ["status", "--json"],
            ["status"],
            *(["stats", "-q", value, "--json"] for value in values),
            *(["stats", "-q", value] for value in values),
        ],
        hostile.dsn,
    )
    checked(human, 0, "stats")
    checked(as_json, 0, "status --json")
    pickup = {p["queue"] for p in json.loads(as_json.stdout)["pickup"]}
    assert {*NAMES, JOINED_TERMINAL} <= pickup
    checked(status, 0, "status")
    assert "Pickup latency" in status.stdout
    for value in NAMES:
        shown(status.stdout, value, "status pickup queue")
    documents, tables = of_queue[: len(values)], of_queue[len(values) :]
    for value, proc in zip(values, documents, strict=True):
        checked(proc, 0, "stats -q --json")
        doc = json.loads(proc.stdout)
        assert doc["queue"] == value
        assert sum(b["enqueued"] for b in doc["buckets"]) >= 1
    for value, proc in zip(values, tables, strict=True):
        checked(proc, 0, "stats -q")
        shown(proc.stdout, value, "stats queue")


def test_errors_and_events_show_hostile_errors_queues_actors_and_reasons_as_text(
    hostile: Hostile,
) -> None:
    """`errors` groups the hostile errors of the showcase job's failed attempts (its queue is
    hostile too) and `events` lists the hostile actors, actions and reasons of its audit rows:
    nothing they print acts on a terminal, and --json gives the exact values back."""
    from leasectl.core.errorgroups import error_kind

    errors, errors_json, events, events_json = run_all(
        [["errors"], ["errors", "--json"], ["events"], ["events", "--json"]], hostile.dsn
    )
    checked(errors, 0, "errors")
    checked(errors_json, 0, "errors --json")
    groups = json.loads(errors_json.stdout)["groups"]
    assert sum(g["count"] for g in groups) == len(NAMES)
    expected = {error_kind(value.split("\n", 1)[0][:200], traced=True) for value in NAMES}
    assert {g["error"] for g in groups} == expected
    assert {q for g in groups for q in g["queues"]} == {JOINED_TERMINAL}
    for group in groups:
        start = visible(group["error"])[:12].strip()
        if start:
            assert start in errors.stdout, f"errors: {start!r} not shown"
    checked(events, 0, "events")
    checked(events_json, 0, "events --json")
    seen = {
        (e["actor"], e["action"], e["reason"]) for e in json.loads(events_json.stdout)["events"]
    }
    assert {(value, value, value) for value in NAMES} <= seen
    for value in NAMES:
        start = visible(value)[:12].strip()
        if start:
            assert start in events.stdout, f"events: {start!r} not shown"
