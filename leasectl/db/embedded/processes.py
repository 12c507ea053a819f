"""Which processes are alive, and which of them belong to a data directory (from /proc)."""

from __future__ import annotations

import os
import time
from pathlib import Path


def _proc_state(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    _, _, rest = raw.rpartition(")")
    fields = rest.split()
    return fields[0] if fields else None


def pid_alive(pid: int) -> bool:
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


def proc_refers_to(pid: int, pgdata: Path) -> bool:
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


def processes_for(pgdata: Path) -> list[int]:
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    own = os.getpid()
    return [
        int(n)
        for n in names
        if n.isdigit() and int(n) != own and pid_alive(int(n)) and proc_refers_to(int(n), pgdata)
    ]


def wait_dead(pids: list[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in pids if pid_alive(p)]
        if not alive:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
