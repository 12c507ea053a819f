"""A primary and a streaming standby of embedded servers, for failover tests and chaos runs.

A standby is an `EmbeddedServer` whose pgdata comes from ``pg_basebackup -R`` of the primary
(initdb is skipped: PG_VERSION is there), started with its own port. A synchronous standby is
named in the primary's synchronous_standby_names, and the primary's commits wait for it. Either
way the primary runs with synchronous_commit on (which the non-durable embedded server turns
off), and so does its standby once promoted. The standby never inherits the synchronous names
itself: promoted, it would wait for a standby that is not there.

These are test and chaos tools, like the embedded server itself. A standby is a copy of its
primary, superuser password included: it gets a copy of the primary's passfile, and streams
with that password (kept in its pgdata, which only the server's user reads).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

from leasectl.core.errors import EmbeddedServerError
from leasectl.db import sql as queries
from leasectl.db.embedded.auth import read_password, write_passfile
from leasectl.db.embedded.binaries import install_dir
from leasectl.db.embedded.common import HOST, MARKER, SUPERUSER, conf_quote, is_root
from leasectl.db.embedded.processes import processes_for, wait_dead
from leasectl.db.embedded.programs import ServerLog
from leasectl.db.embedded.server import EmbeddedServer
from leasectl.db.embedded.user import check_traversable, mkdir_owned, server_user
from leasectl.db.session import session_kwargs

logger = logging.getLogger(__name__)

# WAL kept for a standby that falls behind: replication slots would outlive a promotion.
WAL_KEEP = "256MB"
DEFAULT_TIMEOUT = 30.0


def application_name(server: EmbeddedServer) -> str:
    """The name a standby streams under (pg_stat_replication, synchronous_standby_names)."""
    return f"leasectl_{server.port}"


def _q(name: str) -> sql.SQL:
    return sql.SQL(queries.get(name).text)  # replication's statements name no schema


def _connect(server: EmbeddedServer) -> psycopg.Connection[Any]:
    return psycopg.connect(server.dsn(), row_factory=dict_row, **session_kwargs(server.dsn()))


def _one(server: EmbeddedServer, name: str, params: dict[str, Any] | None = None) -> Any:
    with _connect(server) as conn:
        return conn.execute(_q(name), params).fetchone()


def _alter_system(server: EmbeddedServer, settings: list[tuple[str, dict[str, Any]]]) -> None:
    """ALTER SYSTEM then reload. ALTER SYSTEM takes no server-side parameters, so its values go
    through psycopg's client-side binding (still bound, never formatted by us)."""
    with _connect(server) as conn:
        cur = psycopg.ClientCursor(conn)
        for name, params in settings:
            cur.execute(_q(name), params)
        conn.execute(_q("replication_reload"))


def in_recovery(server: EmbeddedServer) -> bool:
    return bool(_one(server, "replication_in_recovery")["in_recovery"])


def _poll(what: str, predicate: Callable[[], object], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while True:
        try:
            if predicate():
                return
        except psycopg.Error as exc:
            last = f" (last error: {' '.join(str(exc).split())})"
        if time.monotonic() > deadline:
            raise EmbeddedServerError(f"timed out after {timeout:g}s waiting for {what}{last}")
        time.sleep(0.05)


def _prepare_primary(primary: EmbeddedServer) -> None:
    """Check the primary can feed a standby, and make it keep WAL for one that falls behind.
    initdb's pg_hba (trust) already admits replication connections from 127.0.0.1."""
    row = _one(primary, "replication_settings")
    if row["wal_level"] not in ("replica", "logical") or row["max_wal_senders"] < 1:
        raise EmbeddedServerError(
            f"{primary} cannot feed a standby: wal_level={row['wal_level']}, "
            f"max_wal_senders={row['max_wal_senders']}"
        )
    # A commit waits for its own WAL (the non-durable embedded server does not), as on a
    # production primary: what a failover loses is then what replication had not carried.
    _alter_system(
        primary,
        [
            ("replication_set_wal_keep", {"size": WAL_KEEP}),
            ("replication_set_sync_commit", {"value": "on"}),
        ],
    )


def make_standby(
    primary: EmbeddedServer,
    directory: Path,
    *,
    synchronous: bool,
    port: int | None = None,
    timeout: float = 60.0,
) -> EmbeddedServer:
    """A hot standby of ``primary`` in ``directory`` (which must not hold a cluster yet),
    started and streaming; ``synchronous`` makes the primary's commits wait for its flush."""
    if in_recovery(primary):
        raise EmbeddedServerError(f"{primary} is a standby, not a primary")
    _prepare_primary(primary)
    standby = EmbeddedServer(directory)
    if standby.pgdata.exists():
        raise EmbeddedServerError(f"{standby.pgdata} already exists")
    _make_base_dir(standby.base_dir)
    if port is not None:
        standby.port_path.write_text(f"{port}\n")
    name = application_name(standby)  # allocates and persists the port
    user = server_user(standby.pgdata)
    if user is not None:
        check_traversable(standby.base_dir, user)
    mkdir_owned(standby.pgdata, 0o700, user)
    password = read_password(primary.passfile)
    if password is None:
        raise EmbeddedServerError(f"{primary} has no password file ({primary.passfile})")
    write_passfile(standby.passfile, password)
    log = ServerLog(standby.log_path)
    log.mark()
    started = time.monotonic()
    args = [
        str(install_dir() / "bin" / "pg_basebackup"),
        "-D",
        str(standby.pgdata),
        "-d",
        make_conninfo("", host=HOST, port=primary.port, user=SUPERUSER),
        "-X",
        "stream",
        "-c",
        "fast",
        "-R",
        "--no-sync",
    ]
    # The server's user may not read our passfile: the password goes by the environment.
    result = log.run(args, user, env={"PGPASSWORD": password})
    if result.returncode != 0:
        shutil.rmtree(standby.pgdata, ignore_errors=True)
        raise log.error("pg_basebackup failed", result.stdout)
    conninfo = make_conninfo(
        "",
        host=HOST,
        port=primary.port,
        user=SUPERUSER,
        application_name=name,
        password=password,
    )
    # Appended after -R's own lines, so these win; the primary's synchronous names (if copied)
    # must not follow the standby into its promotion.
    with open(standby.pgdata / "postgresql.auto.conf", "a", encoding="utf-8") as f:
        f.write(
            "# added by leasectl.embedded.replication\n"
            f"primary_conninfo = {conf_quote(conninfo)}\n"
            "hot_standby = on\n"
            "synchronous_standby_names = ''\n"
        )
    standby.start()
    logger.info(
        "standby %s of %s up in %.1fs",
        standby.base_dir,
        primary.base_dir,
        time.monotonic() - started,
    )
    if synchronous:
        _alter_system(primary, [("replication_set_sync_names", {"names": name})])
    wait_streaming(primary, standby, timeout=timeout, synchronous=synchronous)
    return standby


def _make_base_dir(base: Path) -> None:
    """A base_dir made here is marked as ours, so that stop(remove=True) may delete it."""
    if base.exists():
        return
    base.mkdir(parents=True)
    if is_root():
        os.chmod(base, 0o755)  # we made it: the server user must traverse it
    (base / MARKER).write_text("created by leasectl.embedded\n")


def wait_streaming(
    primary: EmbeddedServer,
    standby: EmbeddedServer,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    synchronous: bool = False,
) -> None:
    """Until the primary sees ``standby`` streaming (and, if ``synchronous``, as its
    synchronous standby, with every session's configuration reloaded)."""
    name = application_name(standby)

    def streaming() -> bool:
        row = _one(primary, "replication_standby_state", {"name": name})
        if row is None or row["state"] != "streaming":
            return False
        if not synchronous:
            return True
        names = _one(primary, "replication_sync_names")["names"]
        return bool(row["sync_state"] == "sync" and names == name)

    _poll(f"{name} streaming from {primary}", streaming, timeout)


def wait_caught_up(
    primary: EmbeddedServer, standby: EmbeddedServer, timeout: float = DEFAULT_TIMEOUT
) -> None:
    """Until ``standby`` has replayed all the WAL the primary had inserted when called."""
    lsn = _one(primary, "replication_current_lsn")["lsn"]
    _poll(
        f"{standby} to replay up to {lsn}",
        lambda: _one(standby, "replication_replayed", {"lsn": lsn})["replayed"],
        timeout,
    )


def promote(server: EmbeddedServer, timeout: float = DEFAULT_TIMEOUT) -> None:
    """Make a standby a primary (pg_ctl promote) and wait until it accepts writes."""
    log = ServerLog(server.log_path)
    log.mark()
    args = [str(install_dir() / "bin" / "pg_ctl"), "promote", "-D", str(server.pgdata), "-w"]
    result = log.run([*args, "-t", str(int(timeout))], server_user(server.pgdata))
    if result.returncode != 0:
        raise log.error("pg_ctl promote failed", result.stdout)
    _poll(f"{server} to leave recovery", lambda: not in_recovery(server), timeout)
    logger.info("promoted %s", server.base_dir)


def kill_primary(server: EmbeddedServer) -> None:
    """SIGKILL the postmaster and every backend of the cluster: the machine is gone, so no
    backend may finish a commit or answer a query after this returns."""
    pid = server.postmaster_pid()
    if pid is None:
        raise EmbeddedServerError(f"{server} is not running")
    children = [p for p in processes_for(server.pgdata) if p != pid]
    os.kill(pid, signal.SIGKILL)
    children += [p for p in processes_for(server.pgdata) if p not in children]
    for child in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
    if not wait_dead([pid, *children], 10.0):
        raise EmbeddedServerError(f"processes of {server} survived SIGKILL")
    logger.info("killed %s (postmaster %d and %d children)", server.base_dir, pid, len(children))


def sender_pid(primary: EmbeddedServer, standby: EmbeddedServer) -> int | None:
    """The pid of the primary's WAL sender to ``standby``: a chaos run stops it (SIGSTOP) to
    let the standby fall behind, as a slow network would (WAL not sent is WAL a failover
    loses; WAL sent but not yet read would still reach the standby from its socket)."""
    row = _one(primary, "replication_standby_state", {"name": application_name(standby)})
    return None if row is None else int(row["pid"])


def multi_host_dsn(
    *servers: EmbeddedServer,
    dbname: str = "postgres",
    read_write: bool = True,
    passfile: Path | None = None,
) -> str:
    """One DSN naming every server, in order; with ``read_write`` libpq connects to whichever
    of them is the primary (target_session_attrs=read-write). ``passfile``: one that outlives
    the servers' directories (a failover removes the dead primary's, and its passfile with it);
    by default the first server's."""
    if not servers:
        raise ValueError("multi_host_dsn needs at least one server")
    params: dict[str, Any] = {
        "host": ",".join(HOST for _ in servers),
        "port": ",".join(str(s.port) for s in servers),
        "user": SUPERUSER,
        "dbname": dbname,
        # a standby's password is its primary's
        "passfile": str(passfile or servers[0].passfile),
    }
    if read_write:
        params["target_session_attrs"] = "read-write"
    return make_conninfo("", **params)


def stop_all(base_dir: Path) -> None:
    """Stop and remove every server under ``base_dir`` (one per subdirectory)."""
    if not base_dir.is_dir():
        return
    for child in sorted(base_dir.iterdir()):
        if (child / MARKER).is_file() or (child / "pgdata").is_dir():
            EmbeddedServer(child).stop(remove=True, mode="immediate")


@contextlib.contextmanager
def replicated_pair(
    base_dir: Path | None = None, *, synchronous: bool
) -> Iterator[tuple[EmbeddedServer, EmbeddedServer]]:
    """A started primary (``base_dir/primary``) and its streaming standby
    (``base_dir/standby``); on exit every server under ``base_dir`` is stopped and removed,
    standbys the caller made there later included, and ``base_dir`` too if it was made here
    (a temporary directory when None)."""
    if base_dir is None:
        base_dir = Path(tempfile.mkdtemp(prefix="leasectl-pair-"))
        if is_root():
            os.chmod(base_dir, 0o755)  # we made it: the server user must traverse it
        created = True
    else:
        base_dir = Path(base_dir).absolute()
        created = not base_dir.exists()
    _make_base_dir(base_dir)
    try:
        primary = EmbeddedServer(base_dir / "primary", durable=False)
        primary.start()
        standby = make_standby(primary, base_dir / "standby", synchronous=synchronous)
        yield primary, standby
    finally:
        stop_all(base_dir)
        if created:
            shutil.rmtree(base_dir, ignore_errors=True)
