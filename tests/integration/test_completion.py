"""Shell completion, through the protocol a shell speaks to `leasectl` and through real bash.

A shell runs `leasectl` with ``_LEASECTL_COMPLETE=complete_<shell>`` and the words typed so
far (bash: ``COMP_WORDS``/``COMP_CWORD``; zsh and fish: ``_TYPER_COMPLETE_ARGS``) and reads the
candidates from its stdout. Commands and options come from the command's definition, queue
names from a real database. A TAB never fails: with no database there is nothing on stdout but
the protocol's empty answer, nothing on stderr, exit 0. Hostile queue names never reach the
command line: a name is offered only if every shell takes it literally.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
import typer
from psycopg import conninfo, sql

from leasectl import cli
from leasectl.cli.completion import shell_literal
from leasectl.core.models import JobStatus
from leasectl.db import sql as queries
from tests.conftest import SCHEMA
from tests.hostile import NAMES
from tests.integration.test_cli import _env

pytestmark = pytest.mark.full

# Typed into a command line, each would run, glob, split or escape something if offered as is.
SHELL_HOSTILE = [
    "a b",
    "a:b",
    "a=b",
    "-x",
    "@splat",
    "$(touch pwned)",
    "`touch pwned`",
    "a;touch pwned",
    "a|b",
    "a&b",
    "a'b",
    'a"b',
    "a\\b",
    "*",
    "?",
    "~root",
    "a\nb",
    "#comment",
    "a,b",
    "(x)",
    "{a,b}",
    "!1",
    "<in",
]
SAFE = ["emails", "reports.eu-1", "jobs/high", "x_y+z%", "user@eu", "日本語", "Ünïcödé"]


def complete_bash(line: str, *, dsn: str | None, extra: dict[str, str] | None = None) -> list[str]:
    """The candidates for the last word of ``line`` (the word after a trailing space: none)."""
    words = line.split(" ")
    proc = subprocess.run(
        [sys.executable, "-m", "leasectl"],
        env={
            **_env(dsn),
            "_LEASECTL_COMPLETE": "complete_bash",
            "COMP_WORDS": line,
            "COMP_CWORD": str(len(words) - 1),
            **(extra or {}),
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc
    assert proc.stderr == "", proc.stderr
    return [c for c in proc.stdout.split("\n") if c]


def protocol(shell: str, line: str, dsn: str | None) -> subprocess.CompletedProcess[str]:
    """zsh and fish: the line so far in _TYPER_COMPLETE_ARGS."""
    return subprocess.run(
        [sys.executable, "-m", "leasectl"],
        env={
            **_env(dsn),
            "_LEASECTL_COMPLETE": f"complete_{shell}",
            "_TYPER_COMPLETE_ARGS": line,
            "_TYPER_COMPLETE_FISH_ACTION": "get-args",
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _enqueue(dsn: str, queue: str, status: str = "Pending") -> None:
    """A job in ``queue`` with ``status``, written as any producer or worker could write it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            """INSERT INTO leasectl.jobs (queue, payload, status, lease_owner, lease_until,
                                          attempts, finished_at)
               VALUES (%s, '{}', %s::leasectl.job_status,
                       CASE WHEN %s = 'Processing' THEN 'w1' END,
                       CASE WHEN %s = 'Processing' THEN now() + interval '1 minute' END,
                       CASE WHEN %s = 'Pending' THEN 0 ELSE 1 END,
                       CASE WHEN %s IN ('Completed', 'Failed') THEN now() END)""",
            (queue, status, status, status, status, status),
        )


def _worker_row(dsn: str, worker_id: str, queues: list[str]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            """INSERT INTO leasectl.workers (worker_id, hostname, pid, queues, lease_ttl,
                                             heartbeat_every)
               VALUES (%s, 'host', 1, %s, '30s', '10s')""",
            (worker_id, queues),
        )


# -- commands and options, from the definition --------------------------------------------------


def _group() -> typer.core.TyperGroup:
    command = typer.main.get_command(cli.app)
    assert isinstance(command, typer.core.TyperGroup)
    return command


def test_commands_complete() -> None:
    group = _group()
    names = group.list_commands(typer.Context(group))
    assert complete_bash("leasectl ", dsn=None) == names
    assert "requeue-stuck" in names
    assert complete_bash("leasectl req", dsn=None) == ["requeue-stuck", "requeue"]
    assert complete_bash("leasectl st", dsn=None) == ["status", "stats"]


def test_every_option_of_every_command_completes() -> None:
    group = _group()
    root = complete_bash("leasectl --", dsn=None)
    assert set(root) == {o for p in group.params for o in p.opts if o.startswith("--")} | {"--help"}
    assert {"--dsn", "--schema", "--install-completion", "--show-completion"} <= set(root)
    ctx = typer.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        wanted = {o for p in command.params for o in p.opts if o.startswith("--")} | {"--help"}
        assert set(complete_bash(f"leasectl {name} --", dsn=None)) == wanted, name


def test_choices_complete() -> None:
    assert complete_bash("leasectl requeue-stuck --mode ", dsn=None) == ["requeue", "mark"]
    assert complete_bash("leasectl watch --mode m", dsn=None) == ["mark"]
    levels = complete_bash("leasectl worker --log-level ", dsn=None)
    assert "info" in [level.lower() for level in levels]


# -- queue names, from the database -------------------------------------------------------------


def test_queue_names_come_from_the_database(db_dsn: str) -> None:
    _enqueue(db_dsn, "emails")
    _enqueue(db_dsn, "emails")  # one name per queue, however many jobs
    _enqueue(db_dsn, "exports", "Processing")
    _enqueue(db_dsn, "etl", "Stuck")
    _worker_row(db_dsn, "w-1", ["served-only", "emails"])
    _enqueue(db_dsn, "done-only", "Completed")  # finished history is not read

    everything = ["emails", "etl", "exports", "served-only"]
    for command in (
        "status",
        "list",
        "requeue-stuck",
        "watch",
        "prune",
        "enqueue",
        "worker",
        "tui",
    ):
        assert complete_bash(f"leasectl {command} --queue ", dsn=db_dsn) == everything, command
    assert complete_bash("leasectl status -q e", dsn=db_dsn) == ["emails", "etl", "exports"]
    assert complete_bash("leasectl status --queue ex", dsn=db_dsn) == ["exports"]
    assert complete_bash("leasectl status --queue zzz", dsn=db_dsn) == []
    # worker --queue is repeatable: every occurrence completes.
    assert complete_bash("leasectl worker -q emails -q et", dsn=db_dsn) == ["etl"]


def test_the_database_of_the_command_line_is_read(db_dsn: str) -> None:
    """--dsn and --schema typed before the TAB choose the database, not the environment."""
    _enqueue(db_dsn, "from-the-flag")
    # The test database's DSN as one word (a URI).
    params = {k: quote(str(v), safe="") for k, v in conninfo.conninfo_to_dict(db_dsn).items()}
    login = params["user"] + (f":{params['password']}" if "password" in params else "")
    uri = f"postgresql://{login}@{params['host']}:{params.get('port', '5432')}/{params['dbname']}"
    if "passfile" in params:  # the embedded server's password is in a file its DSN names
        uri += f"?passfile={params['passfile']}"
    line = f"leasectl --dsn {uri} status --queue from"
    assert complete_bash(line, dsn=None) == ["from-the-flag"]
    line = f"leasectl --dsn {uri} --schema elsewhere status --queue from"
    assert complete_bash(line, dsn=None) == []  # no such schema: nothing, and no error


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://postgres@127.0.0.1:1/nowhere",  # nothing listens
        "host=/nonexistent-socket-dir dbname=x",
        "postgresql://u:p@ss@host/db",  # refused before connecting (ambiguous URI)
        "not a dsn = = =",
    ],
)
def test_no_database_completes_nothing(dsn: str) -> None:
    for line in ("leasectl status --queue ", "leasectl enqueue -q e"):
        assert complete_bash(line, dsn=dsn) == []
    # Commands and options still complete.
    assert complete_bash("leasectl st", dsn=dsn) == ["status", "stats"]


def test_no_dsn_and_no_schema_complete_nothing(empty_db_dsn: str) -> None:
    assert complete_bash("leasectl status --queue ", dsn=None) == []
    assert complete_bash("leasectl status --queue ", dsn=empty_db_dsn) == []  # not initialised


def test_hostile_queue_names_never_reach_the_command_line(db_dsn: str) -> None:
    hostile = [n for n in NAMES if n] + SHELL_HOSTILE
    for name in hostile + SAFE:
        _enqueue(db_dsn, name)
    offered = complete_bash("leasectl status --queue ", dsn=db_dsn)
    assert offered == sorted(offered)
    assert set(offered) == set(SAFE), set(offered) ^ set(SAFE)
    for shell in ("zsh", "fish"):
        proc = protocol(shell, "leasectl status --queue ", db_dsn)
        assert proc.returncode == 0 and proc.stderr == "", proc
        for name in hostile:
            assert name not in proc.stdout.split("\n") and f'"{name}"' not in proc.stdout
        for name in SAFE:
            assert name in proc.stdout, (shell, name)
        assert "\x1b" not in proc.stdout and "\x9b" not in proc.stdout


def test_what_a_shell_can_take_literally() -> None:
    assert all(not shell_literal(name) for name in NAMES + SHELL_HOSTILE)
    assert all(shell_literal(name) for name in SAFE)


def test_job_states_complete() -> None:
    """`list --state` completes the job states."""
    assert complete_bash("leasectl list --state ", dsn=None) == [s.value for s in JobStatus]
    assert complete_bash("leasectl list --state P", dsn=None) == ["Pending", "Processing"]
    assert complete_bash("leasectl list -s Pr", dsn=None) == ["Processing"]
    assert complete_bash("leasectl list --state x", dsn=None) == []


# -- real bash ----------------------------------------------------------------------------------

BASH = shutil.which("bash")
needs_bash = pytest.mark.skipif(BASH is None, reason="bash is not installed")


def _path_with_leasectl() -> str:
    """PATH with the directory of the `leasectl` script of this environment first."""
    script = Path(sys.executable).parent / "leasectl"
    assert script.exists(), f"no leasectl script beside {sys.executable}"
    return f"{script.parent}{os.pathsep}{os.environ.get('PATH', '')}"


def _bash(
    script: str, *, dsn: str | None, home: Path, cwd: Path
) -> subprocess.CompletedProcess[str]:
    assert BASH is not None
    return subprocess.run(
        [BASH, "--norc", "--noprofile", "-c", script],
        env={**_env(dsn), "PATH": _path_with_leasectl(), "HOME": str(home)},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _tab(words: list[str]) -> str:
    """bash code that completes the last of ``words`` as bash does at a TAB, then prints each
    candidate on a line of its own."""
    quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)
    return (
        f"COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; "
        '_leasectl_completion leasectl; printf "%s\\n" "${COMPREPLY[@]}"'
    )


@needs_bash
def test_show_completion_drives_real_bash(db_dsn: str, tmp_path: Path) -> None:
    for name in ["emails", "exports", *SHELL_HOSTILE]:
        _enqueue(db_dsn, name)
    (tmp_path / "home").mkdir()
    (tmp_path / "cwd").mkdir()
    # `; true`: bash stays the parent of leasectl, which finds the shell it runs in.
    shown = _bash("leasectl --show-completion; true", dsn=None, home=tmp_path, cwd=tmp_path)
    assert shown.returncode == 0 and shown.stderr == "", shown
    assert "_LEASECTL_COMPLETE=complete_bash" in shown.stdout
    script = tmp_path / "leasectl.bash"
    script.write_text(shown.stdout)
    cwd = tmp_path / "cwd"
    ran = _bash(
        f"source {script}; {_tab(['leasectl', 'status', '--queue', 'e'])}",
        dsn=db_dsn,
        home=tmp_path / "home",
        cwd=cwd,
    )
    assert ran.returncode == 0 and ran.stderr == "", ran
    assert ran.stdout.split("\n")[:-1] == ["emails", "exports"]
    ran = _bash(
        f"source {script}; {_tab(['leasectl', 'status', '--queue', ''])}",
        dsn=db_dsn,
        home=tmp_path / "home",
        cwd=cwd,
    )
    assert ran.stdout.split("\n")[:-1] == ["emails", "exports"]
    assert list(cwd.iterdir()) == []  # nothing ran: no `pwned` file
    ran = _bash(
        f"source {script}; {_tab(['leasectl', 'requeue-s'])}",
        dsn=None,
        home=tmp_path / "home",
        cwd=cwd,
    )
    assert ran.stdout == "requeue-stuck\n"


@needs_bash
def test_install_completion_writes_the_bash_script(db_dsn: str, tmp_path: Path) -> None:
    _enqueue(db_dsn, "emails")
    installed = _bash("leasectl --install-completion; true", dsn=None, home=tmp_path, cwd=tmp_path)
    assert installed.returncode == 0, installed
    assert "bash completion installed" in installed.stdout
    script = tmp_path / ".bash_completions" / "leasectl.sh"
    assert f"source '{script}'" in (tmp_path / ".bashrc").read_text()
    ran = _bash(
        f"source ~/.bashrc; {_tab(['leasectl', 'status', '--queue', 'em'])}",
        dsn=db_dsn,
        home=tmp_path,
        cwd=tmp_path,
    )
    assert ran.returncode == 0 and ran.stderr == "", ran
    assert ran.stdout == "emails\n"


def test_queue_names_are_read_by_index_probes_not_rows(sql_conn: psycopg.Connection) -> None:
    """Finished history and a deep Pending queue cost nothing: one index probe per distinct
    queue of each live status, never a scan of the table (BENCHMARKS.md has the figure)."""
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, attempts, lease_owner, finished_at) "
        "SELECT 'done', 'Completed', 1, 'old', now() FROM generate_series(1, 20000)"
    )
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue) "
        "SELECT 'deep' || (i % 3) FROM generate_series(1, 20000) AS i"
    )
    sql_conn.execute("ANALYZE leasectl.jobs")
    query = queries.get("queues_complete").render(SCHEMA)
    params = {"prefix": "", "limit": 200, "scan": 1000, "workers": 100}
    plan = "\n".join(
        row[0] for row in sql_conn.execute(sql.SQL("EXPLAIN ANALYZE ") + query, params)
    )
    assert "Seq Scan" not in plan and "Bitmap" not in plan, plan
    for index in ("jobs_claimable_idx", "jobs_processing_idx", "jobs_stuck_idx"):
        assert f"Index Only Scan using {index}" in plan, plan
    # After the first probe, one per queue: the last one finds no next queue.
    probes = re.findall(r"Index Only Scan using jobs_claimable_idx on jobs j .*loops=(\d+)", plan)
    assert probes == ["3"], plan
    assert [r[0] for r in sql_conn.execute(query, params)] == ["deep0", "deep1", "deep2"]
