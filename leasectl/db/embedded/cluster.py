"""The cluster on disk: initdb with our settings, and the settings rewritten on every start."""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

from leasectl.core.errors import EmbeddedServerError
from leasectl.db.embedded.auth import initdb_pwfile, write_hba
from leasectl.db.embedded.common import (
    HOST,
    RUNTIME_CONF,
    SOCKET_PATH_MAX,
    SUPERUSER,
    conf_quote,
)
from leasectl.db.embedded.programs import ServerLog
from leasectl.db.embedded.user import ServerUser, mkdir_owned

logger = logging.getLogger(__name__)


def initdb(
    pg: Path,
    base_dir: Path,
    pgdata: Path,
    *,
    durable: bool,
    user: ServerUser | None,
    log: ServerLog,
    password: str,
) -> None:
    """initdb into a scratch dir and rename it into place, so a crash mid-init never leaves a
    half-built pgdata behind."""
    if pgdata.exists():
        if any(pgdata.iterdir()):
            raise EmbeddedServerError(
                f"{pgdata} exists but is not a PostgreSQL data directory; move it away"
            )
        pgdata.rmdir()
    scratch = base_dir / "pgdata.initdb"
    if scratch.exists():
        shutil.rmtree(scratch)
    mkdir_owned(scratch, 0o700, user)
    started = time.monotonic()
    log.mark()
    args = [
        str(pg / "bin" / "initdb"),
        "-D",
        str(scratch),
        "-U",
        SUPERUSER,
        "-A",
        "scram-sha-256",
        "-E",
        "UTF8",
        "--no-locale",
        "--no-instructions",
    ]
    if not durable:
        args.append("--no-sync")
    with initdb_pwfile(base_dir, password, user) as pwfile:
        result = log.run([*args, "--pwfile", str(pwfile)], user)
    if result.returncode != 0:
        shutil.rmtree(scratch, ignore_errors=True)
        raise log.error("initdb failed", result.stdout)
    settings = {
        "listen_addresses": conf_quote(HOST),
        "max_connections": "200",
        # A job queue leaves a dead row version and a dead claim-index entry behind every
        # claim; claims walk the dead entries until a vacuum removes them. The default
        # one-minute autovacuum cycle let them pile up (1.5 million at 12,700 jobs/s, p99
        # start latency 4.9 s); every ten seconds they stay near 200,000 (p99 21 ms).
        "autovacuum_naptime": "10s",
    }
    if not durable:
        settings |= {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
    block = "\n# added by leasectl.embedded\n" + "".join(
        f"{k} = {v}\n" for k, v in settings.items()
    )
    block += f"include_if_exists = {conf_quote(RUNTIME_CONF)}\n"
    with open(scratch / "postgresql.conf", "a", encoding="utf-8") as f:
        f.write(block)
    os.rename(scratch, pgdata)
    logger.info("initdb %s in %.1fs", pgdata, time.monotonic() - started)


def prepare_runtime(
    pgdata: Path, run_dir: Path, log_path: Path, user: ServerUser | None, port: int
) -> None:
    """Rewrite the per-start settings: the port file is the truth, the socket dir follows
    base_dir if it moved (or is dropped when the path is too long for a unix socket), and
    pg_hba.conf asks for the password (a cluster made with trust auth gets ours too)."""
    if not run_dir.is_dir():
        mkdir_owned(run_dir, 0o755, user)
    socket_path = str(run_dir / f".s.PGSQL.{port}")
    sockets = str(run_dir) if len(socket_path.encode()) <= SOCKET_PATH_MAX else ""
    conf = pgdata / RUNTIME_CONF
    conf.write_text(
        "# rewritten by leasectl.embedded on every start\n"
        f"port = {port}\n"
        f"unix_socket_directories = {conf_quote(sockets)}\n",
        encoding="utf-8",
    )
    write_hba(pgdata, user)
    if not log_path.exists():
        log_path.touch(mode=0o640)
    if user is not None:
        for path in (conf, log_path):
            os.chown(path, user.uid, user.gid)
