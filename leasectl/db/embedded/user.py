"""The unprivileged user PostgreSQL runs as when we are root (it refuses to run as root)."""

from __future__ import annotations

import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path

from leasectl.core.errors import EmbeddedServerError
from leasectl.db.embedded.common import DEFAULT_SERVER_USER, is_root


@dataclass(frozen=True)
class ServerUser:
    uid: int
    gid: int
    name: str


def server_user(pgdata: Path) -> ServerUser | None:
    """None when we can run postgres ourselves; else the unprivileged user to run it as. An
    existing cluster keeps its owner."""
    if not is_root():
        return None
    try:
        st = pgdata.stat()
    except FileNotFoundError:
        st = None
    if st is not None and st.st_uid != 0:
        try:
            name = pwd.getpwuid(st.st_uid).pw_name
        except KeyError:
            name = str(st.st_uid)
        return ServerUser(st.st_uid, st.st_gid, name)
    name = os.environ.get("LEASECTL_EMBEDDED_USER") or DEFAULT_SERVER_USER
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
    return ServerUser(pw.pw_uid, pw.pw_gid, name)


def check_traversable(base_dir: Path, user: ServerUser) -> None:
    """Fail early and clearly instead of with an initdb permission error. Directories we have
    yet to create will be 0755, so only existing ones are checked."""
    path = Path(os.path.realpath(base_dir))
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


def mkdir_owned(path: Path, mode: int, user: ServerUser | None) -> None:
    os.mkdir(path, mode)
    os.chmod(path, mode)  # umask-proof; we just created it
    if user is not None:
        os.chown(path, user.uid, user.gid)
