"""No output of leasectl ever shows a DSN password, nor a piece of one.

Passwords holding each of ``/ @ : % ? # space ' "`` (and mixtures) are given as a raw URI, a
percent-encoded URI, a quoted key=value DSN and $PGPASSWORD, through --dsn, --dsn=,
$LEASECTL_DSN and $DATABASE_URL, and every failure path runs as the real command: connection
refused, unknown host, wrong database, a real password check that fails (a dedicated embedded
server whose pg_hba.conf asks for scram-sha-256), schema missing (the right password), the demo,
the console, LEASECTL_DEBUG=1. Every password is made of the tokens in ``TOKENS``, so that no
piece libpq might have read as a host, port or database can show either.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import select
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from psycopg import conninfo, sql

from leasectl.cli import stderr
from leasectl.console.app import ConsoleApp
from leasectl.console.source import DatabaseSource
from leasectl.db import dsn as dsnlib
from leasectl.db.embedded import EmbeddedServer
from tests.conftest import SCHEMA
from tests.integration.test_cli import _env
from tests.util import wait_until

pytestmark = pytest.mark.full

TOKENS = ("Kq7v", "Wm3x", "Zr9p", "Tj5n")
SPECIALS = ("/", "@", ":", "%", "?", "#", " ", "'", '"')
SINGLE = {f"has {c!r}": f"Kq7v{c}Wm3x" for c in SPECIALS}
MIXED = {
    "slash-at": "Kq7v/Wm3x@Zr9p",
    "at-slash": "Kq7v@Wm3x/Zr9p",
    "at-at": "Kq7v@Wm3x@Zr9p",
    "uri-delims": "Kq7v:Wm3x?Zr9p#Tj5n",
    "everything": "Kq7v/@:%?# '\"Wm3x\\Zr9p",
    "quote-space": 'Kq7v" Wm3x',  # libpq quotes the URI's password back in its error
}
PASSWORDS = {**SINGLE, **MIXED}
# A smaller set for the slower paths: each special character is in one of them.
HARD = {k: PASSWORDS[k] for k in ("everything", "at-at", "uri-delims")}
FORMS = ("uri-raw", "uri-encoded", "key-value", "pgpassword")

CLOSED_PORT = 1  # nothing listens on 127.0.0.1:1: connection refused at once
UNKNOWN_HOST = "leasectl-no-such-host.invalid"  # .invalid never resolves (RFC 6761)
MISSING_DB = "leasectl_no_such_db"
LOCKED_ROLE = "leasectl_locked"  # its password is LOCKED_PASSWORD, never one of PASSWORDS
LOCKED_PASSWORD = "the-right-one-9"
EMPTY_DB = "leasectl_no_schema"
AMBIGUOUS = ("invalid DSN", "%2F, %40")


def forbidden(password: str) -> list[str]:
    """What must never show: the password, its percent-encoded form and every token of it."""
    return [password, quote(password, safe=""), *(t for t in TOKENS if t in password)]


def refused_as_written(form: str, password: str) -> bool:
    """A raw URI that libpq cannot read as meant ("/" "@") or at all ("%" " ")."""
    return form == "uri-raw" and any(c in password for c in "/@% ")


def refusal(password: str) -> tuple[str, ...]:
    """What the one line says when a raw URI is refused: the fix, for a "/" or "@"."""
    return AMBIGUOUS if "/" in password or "@" in password else ("invalid DSN",)


def cases(
    passwords: dict[str, str], forms: Sequence[str], *, connecting: bool = False
) -> list[Any]:
    """(form, password) parameters; ``connecting``: only those that get as far as the server."""
    return [
        pytest.param(form, password, id=f"{form}-{name}")
        for form in forms
        for name, password in passwords.items()
        if not (connecting and refused_as_written(form, password))
    ]


def make_dsn(
    form: str, password: str, *, host: str, port: int, dbname: str, user: str
) -> tuple[str, dict[str, str]]:
    """The DSN in the given form, and the environment it needs ($PGPASSWORD)."""
    if form == "uri-raw":
        return f"postgresql://{user}:{password}@{host}:{port}/{dbname}?connect_timeout=5", {}
    if form == "uri-encoded":
        encoded = quote(password, safe="")
        return f"postgresql://{user}:{encoded}@{host}:{port}/{dbname}?connect_timeout=5", {}
    base = f"host={host} port={port} dbname={dbname} user={user} connect_timeout=5"
    if form == "key-value":
        escaped = password.replace("\\", "\\\\").replace("'", "\\'")
        return f"{base} password='{escaped}'", {}
    assert form == "pgpassword"
    return base, {"PGPASSWORD": password}


# The commands that open the console refuse to start without a terminal: they run on a pty.
CONSOLE_COMMANDS = {"tui", "demo"}


def run(
    args: list[str],
    dsn: str,
    *,
    channel: str = "--dsn",
    env: dict[str, str] | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """The real command, with the DSN given through ``channel`` (on a terminal when it opens
    the console)."""
    environ = {k: v for k, v in _env(None).items() if k != "PGPASSWORD"}
    environ.update(env or {})
    if channel == "--dsn":
        argv = ["--dsn", dsn, *args]
    elif channel == "--dsn=":
        argv = [f"--dsn={dsn}", *args]
    else:
        argv = list(args)
        environ[channel] = dsn
    command = [sys.executable, "-m", "leasectl", *argv]
    if args[0] in CONSOLE_COMMANDS and "--headless" not in args:
        return _on_terminal(command, environ, timeout)
    return subprocess.run(
        command, env=environ, capture_output=True, text=True, timeout=timeout, check=False
    )


def _on_terminal(
    command: list[str], environ: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """``command`` with stdin, stdout and stderr on a pseudo-terminal; everything it wrote
    comes back as its stderr (a terminal does not tell the two apart)."""
    master, slave = os.openpty()
    environ = {**environ, "TERM": "xterm-256color"}
    proc = subprocess.Popen(
        command, stdin=slave, stdout=slave, stderr=slave, env=environ, start_new_session=True
    )
    os.close(slave)
    output = b""
    try:
        while True:
            ready, _, _ = select.select([master], [], [], timeout)
            if not ready:
                raise subprocess.TimeoutExpired(command, timeout, output)
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the command and its children closed the terminal
                break
            if not chunk:
                break
            output += chunk
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    text = output.decode(errors="replace").replace("\r\n", "\n")
    return subprocess.CompletedProcess(command, proc.returncode, "", text)


def assert_hidden(
    proc: subprocess.CompletedProcess[str],
    password: str,
    *fragments: str,
    one_line: bool = True,
    traceback: bool = False,
) -> str:
    """Exit 1, one error line with the fragments (with ``one_line`` off, other lines may come
    before it: the demo's progress), no traceback unless asked for, and no trace of the
    password anywhere in stdout or stderr."""
    shown = f"exit {proc.returncode}\nstdout: {proc.stdout!r}\nstderr: {proc.stderr!r}"
    assert proc.returncode == 1, shown
    errors = [line for line in proc.stderr.splitlines() if line.startswith("leasectl: ")]
    assert len(errors) == 1, shown
    if one_line:
        assert proc.stderr.splitlines() == errors, shown
    assert ("Traceback" in proc.stderr) == traceback, shown
    for fragment in fragments:
        assert fragment in errors[0], shown
    for secret in forbidden(password):
        assert secret not in proc.stdout + proc.stderr, f"{secret!r} shown\n{shown}"
    return errors[0]


# -- a server that really checks passwords ----------------------------------------------------


@dataclass(frozen=True)
class PasswordServer:
    port: int
    roles: dict[str, str]  # password -> the role that has it


HBA = """\
local all all trust
host all postgres 127.0.0.1/32 trust
host all all 127.0.0.1/32 scram-sha-256
host all all ::1/128 scram-sha-256
"""


@pytest.fixture(scope="module")
def password_server() -> Iterator[PasswordServer]:
    """A dedicated embedded server: the superuser is trusted (to set it up), every other role
    must give its password (scram-sha-256). One role per test password, and a locked role."""
    server = EmbeddedServer.temporary()
    server.start()
    try:
        roles = {password: f"leasectl_pw_{i}" for i, password in enumerate(PASSWORDS.values())}
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute("SET password_encryption = 'scram-sha-256'")
            for password, role in [*roles.items(), (LOCKED_PASSWORD, LOCKED_ROLE)]:
                # CREATE ROLE takes no bound parameters: the password goes in as a literal.
                conn.execute(
                    sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                        sql.Identifier(role), sql.Literal(password)
                    )
                )
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(EMPTY_DB)))
            (server.pgdata / "pg_hba.conf").write_text(HBA, encoding="utf-8")
            conn.execute("SELECT pg_reload_conf()")
        locked = conninfo.make_conninfo(
            server.dsn(EMPTY_DB), user=LOCKED_ROLE, password="not-the-password"
        )

        def refused() -> bool:
            try:
                psycopg.connect(locked, connect_timeout=5).close()
            except psycopg.OperationalError as exc:
                return "password authentication failed" in str(exc)
            return False

        wait_until(refused, what="pg_hba.conf to ask for passwords")
        right = conninfo.make_conninfo(locked, password=LOCKED_PASSWORD)
        psycopg.connect(right, connect_timeout=5).close()  # and the right one is accepted
        yield PasswordServer(server.port, roles)
    finally:
        server.stop(remove=True)


# -- connection refused: every password in every form -----------------------------------------


# Every password as a raw URI (how libpq reads it is the question); the other forms with the
# hard ones (test_right_password_schema_missing has every password in every form).
@pytest.mark.parametrize(
    ("form", "password"),
    cases(PASSWORDS, ["uri-raw"]) + cases(HARD, ["uri-encoded", "key-value", "pgpassword"]),
)
def test_connection_refused(form: str, password: str) -> None:
    dsn, env = make_dsn(
        form, password, host="127.0.0.1", port=CLOSED_PORT, dbname="orders", user="app"
    )
    proc = run(["status"], dsn, env=env)
    if refused_as_written(form, password):
        assert_hidden(proc, password, *refusal(password))
    else:
        assert_hidden(proc, password, f"cannot connect to 127.0.0.1:{CLOSED_PORT}/orders")


@pytest.mark.parametrize("channel", ["--dsn=", "LEASECTL_DSN", "DATABASE_URL"])
@pytest.mark.parametrize("form", FORMS)
def test_every_channel(channel: str, form: str) -> None:
    password = MIXED["everything"]
    dsn, env = make_dsn(
        form, password, host="127.0.0.1", port=CLOSED_PORT, dbname="orders", user="app"
    )
    proc = run(["status"], dsn, channel=channel, env=env)
    expected = refusal(password) if refused_as_written(form, password) else ("cannot connect",)
    assert_hidden(proc, password, *expected)


@pytest.mark.parametrize("form", FORMS)
def test_unknown_host(form: str) -> None:
    password = MIXED["uri-delims"]
    dsn, env = make_dsn(form, password, host=UNKNOWN_HOST, port=5432, dbname="orders", user="app")
    proc = run(["init"], dsn, env=env)
    if refused_as_written(form, password):
        assert_hidden(proc, password, *refusal(password))
    else:
        assert_hidden(proc, password, f"cannot connect to {UNKNOWN_HOST}:5432/orders")


# -- a real password check --------------------------------------------------------------------


AUTH_CASES = [
    pytest.param(["status"], form, password, id=f"status-{form}-{name}")
    for form in FORMS
    for name, password in HARD.items()
] + [
    pytest.param(command, form, MIXED["uri-delims"], id=f"{command[0]}-{form}-uri-delims")
    for command in (["tui"], ["grant", "--viewer", "someone"])
    for form in ("uri-raw", "key-value")
]


@pytest.mark.parametrize(("command", "form", "password"), AUTH_CASES)
def test_authentication_failure(
    password_server: PasswordServer, command: list[str], form: str, password: str
) -> None:
    dsn, env = make_dsn(
        form, password, host="127.0.0.1", port=password_server.port, dbname=EMPTY_DB,
        user=LOCKED_ROLE,
    )  # fmt: skip
    proc = run(command, dsn, env=env)
    if refused_as_written(form, password):
        assert_hidden(proc, password, *refusal(password))
    else:
        assert_hidden(proc, password, f'password authentication failed for user "{LOCKED_ROLE}"')


# Raw URIs that are refused before connecting are test_connection_refused's business.
@pytest.mark.parametrize(
    ("form", "password"),
    cases(PASSWORDS, ["uri-raw", "uri-encoded", "key-value"], connecting=True)
    + cases(HARD, ["pgpassword"]),
)
def test_right_password_schema_missing(
    password_server: PasswordServer, form: str, password: str
) -> None:
    """The right password logs in (so a raw URI that libpq reads as meant really works), and
    the schema-missing error that follows shows no trace of it."""
    dsn, env = make_dsn(
        form, password, host="127.0.0.1", port=password_server.port, dbname=EMPTY_DB,
        user=password_server.roles[password],
    )  # fmt: skip
    proc = run(["status"], dsn, env=env)
    assert_hidden(proc, password, "leasectl schema 'leasectl' is not initialised")


@pytest.mark.parametrize("form", FORMS)
def test_wrong_database(password_server: PasswordServer, form: str) -> None:
    password = MIXED["uri-delims"]
    dsn, env = make_dsn(
        form, password, host="127.0.0.1", port=password_server.port, dbname=MISSING_DB,
        user=password_server.roles[password],
    )  # fmt: skip
    proc = run(["tui"], dsn, env=env)
    if refused_as_written(form, password):
        assert_hidden(proc, password, *refusal(password))
    else:
        assert_hidden(proc, password, f'database "{MISSING_DB}" does not exist')


# -- the demo -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headless", "form", "password"),
    [
        pytest.param(True, "uri-raw", MIXED["uri-delims"], id="headless-uri-raw-uri-delims"),
        pytest.param(False, "uri-raw", MIXED["everything"], id="console-uri-raw-everything"),
        pytest.param(True, "uri-encoded", MIXED["everything"], id="headless-uri-encoded"),
        pytest.param(False, "key-value", MIXED["everything"], id="console-key-value"),
        pytest.param(True, "pgpassword", MIXED["everything"], id="headless-pgpassword"),
    ],
)
def test_demo_fails_fast(
    password_server: PasswordServer, tmp_path: Path, headless: bool, form: str, password: str
) -> None:
    """`demo --dsn` on a server that refuses the login stops at once with the error; the demo
    reads a DSN from --dsn only, so the other channels are not tried here."""
    dsn, env = make_dsn(
        form, password, host="127.0.0.1", port=password_server.port, dbname=EMPTY_DB,
        user=LOCKED_ROLE,
    )  # fmt: skip
    env["TMPDIR"] = str(tmp_path)  # the demo's log directory
    args = ["demo", "--duration", "30s", *(["--headless"] if headless else [])]
    proc = run(args, dsn, env=env, timeout=30)
    if refused_as_written(form, password):
        assert_hidden(proc, password, *refusal(password))
    else:  # the progress lines come first (with the console too, until it opens)
        assert_hidden(proc, password, "password authentication failed", one_line=False)
    for log in tmp_path.rglob("*"):
        if log.is_file():
            text = log.read_text(encoding="utf-8", errors="replace")
            assert not [s for s in forbidden(password) if s in text], log


# -- LEASECTL_DEBUG=1 ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("form", "password"),
    cases({"uri-delims": MIXED["uri-delims"]}, FORMS)
    + cases({"everything": MIXED["everything"]}, ["uri-raw"]),
)
def test_debug_mode(password_server: PasswordServer, form: str, password: str) -> None:
    """LEASECTL_DEBUG=1 turns logging on: an operational error is still one line without
    the password."""
    dsn, env = make_dsn(
        form, password, host="127.0.0.1", port=password_server.port, dbname=EMPTY_DB,
        user=LOCKED_ROLE,
    )  # fmt: skip
    proc = run(["status"], dsn, env={**env, "LEASECTL_DEBUG": "1"})
    if refused_as_written(form, password):
        assert_hidden(proc, password, *refusal(password))
    else:
        assert_hidden(proc, password, "password authentication failed")


@pytest.mark.parametrize(
    ("channel", "form"),
    [
        ("--dsn", "uri-raw"),
        ("--dsn", "key-value"),
        ("LEASECTL_DSN", "uri-encoded"),
        ("LEASECTL_DSN", "pgpassword"),
    ],
)
def test_debug_traceback_of_an_internal_error(channel: str, form: str) -> None:
    """An internal error whose message holds the whole DSN: the one line and the traceback
    LEASECTL_DEBUG=1 prints both come without the password."""
    password = MIXED["uri-delims"]
    dsn, env = make_dsn(
        form, password, host="127.0.0.1", port=CLOSED_PORT, dbname="orders", user="app"
    )
    code = (
        "import os, sys; from leasectl import cli; from leasectl.db.connection import Database\n"
        "def connect(dsn, *a, **k):\n"
        "    raise RuntimeError(f'cannot use {dsn} with {os.environ.get(\"PGPASSWORD\")}')\n"
        "Database.connect = connect\n"
        "sys.exit(cli.main(sys.argv[1:]))\n"
    )
    environ = {**_env(None), **env, "LEASECTL_DEBUG": "1"}
    argv = ["status"]
    if channel == "--dsn":
        argv = ["--dsn", dsn, "status"]
    else:
        environ[channel] = dsn
    proc = subprocess.run(
        [sys.executable, "-c", code, *argv],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "RuntimeError: cannot use" in proc.stderr
    assert_hidden(proc, password, "internal error: RuntimeError", one_line=False, traceback=True)


# -- the console's header -------------------------------------------------------------------


def _drop_role(dsn: str, role: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def _uri(dsn: str, password: str) -> str:
    params = conninfo.conninfo_to_dict(dsn)
    return (
        f"postgresql://{params['user']}:{quote(password, safe='')}@{params['host']}:"
        f"{params['port']}/{params['dbname']}"
    )


@pytest.mark.parametrize("form", ["uri-encoded", "key-value"])
def test_console_header(db_dsn: str, form: str) -> None:
    """The sub-title (the header's, the terminal's title), the status line and the whole
    screen say where the console is connected, from a
    DSN that holds a password, and show none of it."""
    password = MIXED["everything"]
    role = f"lc_header_{form.replace('-', '_')}_{os.getpid()}"
    with psycopg.connect(db_dsn, autocommit=True) as conn:  # a login with that password
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN SUPERUSER PASSWORD {}").format(
                sql.Identifier(role), sql.Literal(password)
            )
        )
    as_role = conninfo.make_conninfo(db_dsn, user=role)
    dsn = (
        _uri(as_role, password)
        if form == "uri-encoded"
        else conninfo.make_conninfo(as_role, password=password)
    )
    expected = dsnlib.safe_dsn(db_dsn)
    try:
        source = DatabaseSource.connect(dsn, SCHEMA)
    except BaseException:
        _drop_role(db_dsn, role)
        raise
    app = ConsoleApp(source, refresh=timedelta(milliseconds=300))
    seen: dict[str, str] = {}

    async def scenario() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            deadline = asyncio.get_running_loop().time() + 15
            while app.snapshot is None or not app.sub_title:
                assert asyncio.get_running_loop().time() < deadline, "no first refresh"
                await pilot.pause(0.05)
            await pilot.pause()
            seen["sub_title"] = app.sub_title
            seen["status"] = str(app.main.query_one("#status-left").render())
            seen["screen"] = app.export_screenshot()

    try:
        asyncio.run(scenario())
    finally:
        source.close()
        _drop_role(db_dsn, role)
    assert seen["sub_title"] == expected
    assert expected in seen["status"]
    for name, text in seen.items():
        for secret in forbidden(password):
            assert secret not in text, f"{secret!r} in the console's {name}"


# -- the scrub is a second net ------------------------------------------------------------------


def test_warnings_and_logs_are_scrubbed(capsys: pytest.CaptureFixture[str]) -> None:
    """_warn (a notice that sets the exit code) and the log lines of `worker`, `watch` and
    LEASECTL_DEBUG=1 go through the same scrub as errors."""
    password = MIXED["slash-at"]
    said = f"something about {password} and {quote(password, safe='')}"
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    stderr._given_args[:] = ["--dsn", f"postgresql://app:{password}@127.0.0.1/db"]
    try:
        stderr._warn(said)
        stderr._setup_logging(stderr.LogLevel.INFO)  # as `worker` and `watch` do
        record = logging.LogRecord("leasectl", logging.ERROR, __file__, 1, said, None, None)
        logged = root.handlers[0].format(record)
    finally:
        stderr._given_args.clear()
        root.handlers[:] = handlers
        root.setLevel(level)
    err = capsys.readouterr().err
    assert err.startswith("leasectl: something about ***")
    assert "leasectl: something about *** and " in logged
    assert not [s for s in forbidden(password) if s in err + logged]


def test_where_is_built_from_parsed_parameters() -> None:
    """Database.where, the banners and the console all show safe_dsn: for a URI libpq would
    misread (host "app", port "Kq7v", ...) it shows no host, port or database at all."""
    for password in (MIXED["slash-at"], MIXED["at-at"], MIXED["everything"]):
        shown = dsnlib.safe_dsn(f"postgresql://app:{password}@127.0.0.1:5432/db")
        assert shown == "<invalid DSN>"
    assert re.fullmatch(r"127\.0\.0\.1:5432/db", dsnlib.safe_dsn(
        f"postgresql://app:{quote(MIXED['everything'], safe='')}@127.0.0.1:5432/db"
    ))  # fmt: skip


def test_store_refuses_an_ambiguous_uri_before_connecting() -> None:
    """Library callers (the console, the demo, tests) go through Database.connect, which refuses
    what the command line refuses, instead of connecting to host "app", port "Kq7v"."""
    from leasectl.core.errors import ConfigError
    from leasectl.db.connection import Database

    with pytest.raises(ConfigError) as err:
        Database.connect(f"postgresql://app:{MIXED['slash-at']}@127.0.0.1:1/db", SCHEMA)
    assert "%2F, %40" in str(err.value)
    assert not [s for s in forbidden(MIXED["slash-at"]) if s in str(err.value)]
