"""The embedded server's one secret: the superuser's password, made at random and kept in a 0600
pgpass file in the server's directory (``passfile=`` in its DSN, so no DSN, argument list or log
line ever holds it); pg_hba.conf asks for it on every connection. Trust auth let any local
account run programs as the server's user (COPY ... TO PROGRAM)."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

from leasectl.db import sql as queries
from leasectl.db.embedded.common import SUPERUSER, conf_quote
from leasectl.db.embedded.programs import ServerLog
from leasectl.db.embedded.user import ServerUser

PASSFILE = "passfile"
HBA = (
    "# rewritten by leasectl.embedded on every start: every connection needs the password\n"
    "local all all scram-sha-256\n"
    "host all all 127.0.0.1/32 scram-sha-256\n"
    "host all all ::1/128 scram-sha-256\n"
    "local replication all scram-sha-256\n"
    "host replication all 127.0.0.1/32 scram-sha-256\n"
    "host replication all ::1/128 scram-sha-256\n"
)


def new_password() -> str:
    """Hex: nothing to escape in a pgpass line or an SQL literal."""
    return secrets.token_hex(24)


def read_password(passfile: Path) -> str | None:
    try:
        line = passfile.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    password = line.rsplit(":", 1)[-1]
    return password or None


def _write_private(path: Path, text: str, user: ServerUser | None = None) -> None:
    """Written whole under a temporary name and renamed: 0600 from the first byte."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    if user is not None:
        os.chown(tmp, user.uid, user.gid)
    os.replace(tmp, path)


def write_passfile(passfile: Path, password: str) -> None:
    """A pgpass file for any host, port and database of this server; its owner's alone (libpq
    ignores a pgpass file that others may read)."""
    _write_private(passfile, f"*:*:*:{SUPERUSER}:{password}\n")


def write_hba(pgdata: Path, user: ServerUser | None) -> None:
    _write_private(pgdata / "pg_hba.conf", HBA, user)


@contextlib.contextmanager
def initdb_pwfile(base_dir: Path, password: str, user: ServerUser | None) -> Iterator[Path]:
    """The password for initdb --pwfile, readable by the server's user only while initdb runs."""
    path = base_dir / ".initdb-pwfile"
    _write_private(path, password + "\n", user)
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def set_password(
    pg: Path, pgdata: Path, password: str, user: ServerUser | None, log: ServerLog
) -> None:
    """Give a stopped cluster made with trust auth (an older leasectl's) its password, in
    single-user mode: the server never listens without it. Single-user mode takes no bound
    parameters; the password is our own hex."""
    statement = queries.get("embedded_set_password").text % {"password": conf_quote(password)}
    log.mark()
    args = [str(pg / "bin" / "postgres"), "--single", "-D", str(pgdata), "postgres"]
    result = log.run(args, user, stdin=statement + ";\n")
    if result.returncode != 0 or "ERROR:" in result.stdout:
        raise log.error("could not set the embedded PostgreSQL's password", result.stdout)
