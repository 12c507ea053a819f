"""`EmbeddedServer`: one PostgreSQL cluster in one directory, started, reused, stopped and
recovered after a crash; start and stop are serialised across processes by a lock file."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import platformdirs
import psycopg
from psycopg.conninfo import make_conninfo

from leasectl.core.errors import EmbeddedServerError
from leasectl.db.embedded.auth import (
    PASSFILE,
    new_password,
    read_password,
    set_password,
    write_passfile,
)
from leasectl.db.embedded.binaries import install_dir
from leasectl.db.embedded.cluster import initdb, prepare_runtime
from leasectl.db.embedded.common import (
    HOST,
    MARKER,
    ROOT_DEFAULT_DIR,
    START_TIMEOUT,
    STOP_TIMEOUT,
    SUPERUSER,
    free_port,
    is_root,
    one_line,
)
from leasectl.db.embedded.processes import pid_alive, proc_refers_to, processes_for, wait_dead
from leasectl.db.embedded.programs import ServerLog
from leasectl.db.embedded.user import ServerUser, check_traversable, server_user
from leasectl.db.session import session_kwargs

logger = logging.getLogger(__name__)


class EmbeddedServer:
    """A PostgreSQL cluster living in one directory, listening on 127.0.0.1; every connection
    needs the superuser's random password, which only the owner of ``passfile`` can read
    (`auth.py`). A dev/test server all the same: never expose it.
    """

    def __init__(self, base_dir: Path, *, durable: bool = True) -> None:
        self.base_dir = Path(base_dir).expanduser().absolute()
        self.durable = durable
        self.pgdata = self.base_dir / "pgdata"
        self.run_dir = self.base_dir / "run"
        self.log_path = self.base_dir / "server.log"
        self.port_path = self.base_dir / "port"
        self.lock_path = self.base_dir / ".lock"
        self.passfile = self.base_dir / PASSFILE
        self._log = ServerLog(self.log_path)

    def __repr__(self) -> str:
        return f"EmbeddedServer({str(self.base_dir)!r})"

    # ---------------------------------------------------------------- constructors

    @classmethod
    def default(cls) -> EmbeddedServer:
        """The user's persistent demo server; as root never under /root (nobody can't reach it)."""
        env = os.environ.get("LEASECTL_EMBEDDED_DIR")
        if env:
            return cls(Path(env))
        if is_root():
            return cls(ROOT_DEFAULT_DIR)
        return cls(platformdirs.user_data_path("leasectl") / "embedded")

    @classmethod
    def temporary(cls, *, durable: bool = False, parent: Path | None = None) -> EmbeddedServer:
        """A throwaway server; stop(remove=True) deletes its directory. Not durable (fsync,
        synchronous_commit and full_page_writes off) unless ``durable``: the benchmarks'
        ``--durable`` runs measure what a production server's commits cost. Its directory is
        made in ``parent`` (the system's temporary directory when None)."""
        base = Path(tempfile.mkdtemp(prefix="leasectl-pg-", dir=parent))
        if is_root():
            os.chmod(base, 0o755)  # we created it: the server user must traverse it
        (base / MARKER).write_text("created by leasectl.embedded\n")
        return cls(base, durable=durable)

    # ---------------------------------------------------------------- public API

    @property
    def port(self) -> int:
        """The TCP port, allocated and persisted on first use so the DSN never changes."""
        port = self._read_port()
        if port is not None:
            return port
        with self._locked():
            return self._ensure_port()[0]

    def dsn(self, dbname: str = "postgres") -> str:
        """The password stays in the passfile: this DSN may be shown, logged or passed on."""
        return make_conninfo(
            "",
            host=HOST,
            port=self.port,
            user=SUPERUSER,
            dbname=dbname,
            passfile=str(self.passfile),
        )

    def postmaster_pid(self) -> int | None:
        """Pid of our live postmaster, or None."""
        pid = self._pidfile_pid()
        if pid is None or not pid_alive(pid):
            return None
        if not os.path.isdir("/proc/self"):
            return pid  # no /proc (macOS): trust the pid file, as pg_ctl does
        return pid if proc_refers_to(pid, self.pgdata) else None

    def is_running(self) -> bool:
        return self.postmaster_pid() is not None

    def start(self) -> None:
        """Init if needed, start if not running, reuse if running. Safe to call concurrently."""
        user = server_user(self.pgdata)
        if user is not None:
            check_traversable(self.base_dir, user)  # before creating anything
        with self._locked():
            self._start_locked()

    def stop(self, *, remove: bool = False, mode: str = "fast") -> None:
        """Stop the server (and any orphans of a crashed one); remove=True deletes base_dir if
        leasectl created it."""
        if mode not in ("smart", "fast", "immediate"):
            raise ValueError(f"bad shutdown mode {mode!r}")
        if not self.base_dir.is_dir():
            return
        with self._locked():
            self._stop_locked(mode)
            if remove:
                self._remove_base_dir()

    def kill(self) -> None:
        """SIGKILL the postmaster (a crash, for tests and chaos runs); children are left to die."""
        pid = self.postmaster_pid()
        if pid is None:
            logger.debug("kill(): %s is not running", self)
            return
        os.kill(pid, signal.SIGKILL)
        if not wait_dead([pid], 10.0):
            raise EmbeddedServerError(f"postmaster {pid} survived SIGKILL")
        logger.info("killed postmaster %d of %s", pid, self.base_dir)

    def restart(self, mode: str = "fast") -> None:
        """Stop then start again; the port comes from the port file so it stays the same."""
        self.stop(mode=mode)
        self.start()

    # ---------------------------------------------------------------- start / stop

    def _start_locked(self) -> None:
        started = time.monotonic()
        pg = install_dir()
        user = server_user(self.pgdata)
        port, fresh_port = self._ensure_port()

        password = read_password(self.passfile)
        if not (self.pgdata / "PG_VERSION").is_file():
            if password is None:
                password = new_password()
                write_passfile(self.passfile, password)
            initdb(
                pg,
                self.base_dir,
                self.pgdata,
                durable=self.durable,
                user=user,
                log=self._log,
                password=password,
            )
        elif password is None:
            self._add_password(pg, user)

        pid = self.postmaster_pid()
        if pid is not None:
            logger.debug("reusing postmaster %d of %s", pid, self.base_dir)
            self._log.mark()
            self._wait_accepting(START_TIMEOUT)
            return
        self._clean_stale()
        prepare_runtime(self.pgdata, self.run_dir, self.log_path, user, port)
        self._log.mark()
        result = self._log.run([str(pg / "bin" / "pg_ctl"), *self._pg_ctl_start_args()], user)
        if result.returncode != 0 and fresh_port and self._log.mentions("Address already in use"):
            # Someone grabbed the port we had just picked: pick again, the DSN has no history yet.
            self._clean_stale()
            port = free_port()
            self._write_port(port)
            prepare_runtime(self.pgdata, self.run_dir, self.log_path, user, port)
            self._log.mark()
            result = self._log.run([str(pg / "bin" / "pg_ctl"), *self._pg_ctl_start_args()], user)
        if result.returncode != 0:
            if self._log.mentions("Address already in use"):
                raise EmbeddedServerError(
                    f"embedded PostgreSQL could not listen on {HOST}:{port} (address in use); "
                    f"see {self.log_path}"
                )
            raise self._log.error("embedded PostgreSQL failed to start", result.stdout)
        self._wait_accepting(START_TIMEOUT)
        logger.info(
            "embedded PostgreSQL up on %s:%d (pid %s) in %.1fs",
            HOST,
            port,
            self.postmaster_pid(),
            time.monotonic() - started,
        )

    def _add_password(self, pg: Path, user: ServerUser | None) -> None:
        """A cluster an older leasectl made with trust auth: stopped, given a password, and
        only then started again, behind pg_hba.conf's password rules."""
        if self.postmaster_pid() is not None:
            logger.info("restarting %s to stop trusting local connections", self.base_dir)
            self._stop_locked("fast")
        self._clean_stale()
        password = new_password()
        set_password(pg, self.pgdata, password, user, self._log)
        write_passfile(self.passfile, password)

    def _pg_ctl_start_args(self) -> list[str]:
        timeout = str(int(START_TIMEOUT))
        return ["start", "-D", str(self.pgdata), "-l", str(self.log_path), "-w", "-t", timeout]

    def _stop_locked(self, mode: str) -> None:
        pid = self.postmaster_pid()
        if pid is not None:
            self._log.mark()
            pg = install_dir()
            args = [str(pg / "bin" / "pg_ctl"), "stop", "-D", str(self.pgdata), "-m", mode, "-w"]
            result = self._log.run([*args, "-t", str(int(STOP_TIMEOUT))], server_user(self.pgdata))
            if result.returncode != 0 and pid_alive(pid):
                logger.warning(
                    "pg_ctl stop -m %s failed (%s); killing postmaster %d",
                    mode,
                    one_line(result.stdout),
                    pid,
                )
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if not wait_dead([pid], 10.0):
                raise self._log.error(f"postmaster {pid} did not exit", result.stdout)
            logger.info("stopped embedded PostgreSQL in %s", self.base_dir)
        self._clean_stale()

    def _clean_stale(self) -> None:
        """After a crash: kill orphaned backends still attached to the old shared memory, then
        drop the stale lock files postgres would otherwise trip over (a zombie pid looks alive)."""
        if self.postmaster_pid() is not None:
            return
        leftovers = processes_for(self.pgdata)
        if leftovers:
            logger.warning("killing leftover postgres processes %s of %s", leftovers, self.pgdata)
            for pid in leftovers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if not wait_dead(leftovers, 10.0):
                raise EmbeddedServerError(
                    f"leftover postgres processes of {self.pgdata} survived SIGKILL: {leftovers}"
                )
        stale = [self.pgdata / "postmaster.pid"]
        if self.run_dir.is_dir():
            stale += self.run_dir.glob(".s.PGSQL.*")
        for path in stale:
            if path.exists() or path.is_socket():
                logger.debug("removing stale %s", path)
                path.unlink(missing_ok=True)

    def _wait_accepting(self, timeout: float) -> None:
        """Poll until a real connection succeeds; pg_ctl -w only says the postmaster is ready."""
        deadline = time.monotonic() + timeout
        last = ""
        while True:
            try:
                with psycopg.connect(self.dsn(), **session_kwargs(self.dsn(), connect_timeout=2)):
                    return
            except psycopg.OperationalError as exc:
                last = str(exc)
            if time.monotonic() > deadline:
                raise self._log.error(
                    f"embedded PostgreSQL not accepting connections after {timeout:.0f}s", last
                )
            if self.postmaster_pid() is None:
                raise self._log.error("embedded PostgreSQL exited during startup", last)
            time.sleep(0.05)

    # ---------------------------------------------------------------- helpers

    def _ensure_base_dir(self) -> None:
        """Create base_dir and its missing parents, touching the mode of only those we create."""
        mode = 0o755 if is_root() else 0o700
        missing = [d for d in [self.base_dir, *self.base_dir.parents] if not d.exists()]
        for d in reversed(missing):
            try:
                os.mkdir(d, mode)
            except FileExistsError:
                continue  # a concurrent process won; not ours to chmod
            os.chmod(d, mode)
            if d == self.base_dir:
                (d / MARKER).write_text("created by leasectl.embedded\n")

    def _read_port(self) -> int | None:
        try:
            return int(self.port_path.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def _write_port(self, port: int) -> None:
        tmp = self.port_path.with_name(f".port.{os.getpid()}")
        tmp.write_text(f"{port}\n")
        os.replace(tmp, self.port_path)

    def _ensure_port(self) -> tuple[int, bool]:
        """(port, freshly allocated?) - callers hold the lock."""
        port = self._read_port()
        if port is not None:
            return port, False
        port = free_port()
        self._write_port(port)
        return port, True

    def _pidfile_pid(self) -> int | None:
        try:
            first = (self.pgdata / "postmaster.pid").read_text().split("\n", 1)[0]
            return int(first.strip())
        except (OSError, ValueError):
            return None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Serialise start/stop of one base_dir across threads and processes."""
        self._ensure_base_dir()
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except PermissionError:
            fd = os.open(self.lock_path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _remove_base_dir(self) -> None:
        if not (self.base_dir / MARKER).is_file():
            logger.warning("not removing %s: leasectl did not create it", self.base_dir)
            return
        shutil.rmtree(self.base_dir)
        logger.info("removed %s", self.base_dir)
