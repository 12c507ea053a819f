"""`leasectl watch --parent-pid` (and `worker --parent-pid`, which shares its guards): the
process ends with the supervisor that started it, even when that supervisor is SIGKILLed and
cannot stop it (a real parent process, killed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_cli import _env
from tests.util import wait_until

pytestmark = pytest.mark.serial

ROOT = Path(__file__).resolve().parents[2]

# The parent: starts the command with --parent-pid (its own pid), says the child's pid, waits.
# PDEATHSIG=0 stands in for a system without PR_SET_PDEATHSIG: prctl refuses option 0, so only
# the watchdog thread can see the parent go.
PARENT = """
import os, subprocess, sys, time
log = open(sys.argv[1], "w")
child = subprocess.Popen(
    [sys.executable, "-m", "leasectl", *sys.argv[2:], "--parent-pid", str(os.getpid())],
    stdout=log, stderr=subprocess.STDOUT,
)
print(child.pid, flush=True)
time.sleep(600)
"""

NO_PDEATHSIG = """
import sys
from leasectl.runtime import parent
parent.PR_SET_PDEATHSIG = 0  # an option prctl does not know: the request fails, as off Linux
from leasectl.cli import main
sys.exit(main(sys.argv[1:]))
"""


def gone(pid: int) -> bool:
    """Exited (a zombie nobody reaped counts: it runs no more)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] in "ZX"


COMMANDS = {
    "watch": (["watch", "--interval", "200ms"], "watching all queues", "watcher stopped after"),
    "worker": (
        ["worker", "--queue", "q", "--handler", "tests.handlers:noop", "--grace", "1s"],
        "started on q",
        "stopped: ",
    ),
}


def start_parent(
    dsn: str, log: Path, command: list[str], *, pdeathsig: bool
) -> tuple[subprocess.Popen[str], int]:
    code = PARENT
    if not pdeathsig:
        wrapper = log.with_suffix(".py")
        wrapper.write_text(NO_PDEATHSIG)
        code = PARENT.replace('"-m", "leasectl"', repr(str(wrapper)))
    parent = subprocess.Popen(
        [sys.executable, "-c", code, str(log), *command],
        cwd=ROOT,
        env=_env(dsn),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    return parent, child


@pytest.mark.parametrize(
    ("name", "pdeathsig"),
    [("watch", True), ("watch", False), ("worker", False)],
    ids=["watch-pdeathsig", "watch-watchdog", "worker-watchdog"],
)
def test_ends_when_its_parent_is_sigkilled(
    db_dsn: str, tmp_path: Path, name: str, pdeathsig: bool
) -> None:
    command, running, stopped = COMMANDS[name]
    log = tmp_path / f"{name}.log"
    parent, child = start_parent(db_dsn, log, command, pdeathsig=pdeathsig)
    try:
        wait_until(lambda: running in log.read_text(), what=f"the {name} to start")
        assert not gone(child)
        parent.send_signal(signal.SIGKILL)
        assert parent.wait(10) == -signal.SIGKILL
        wait_until(lambda: gone(child), timeout=30, what="the watcher to exit")
    finally:
        if not gone(child):
            os.kill(child, signal.SIGKILL)
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        assert parent.stdout is not None
        parent.stdout.close()
    said = log.read_text()
    if not pdeathsig:
        # Without the kernel's SIGKILL the watchdog stopped it gracefully.
        assert "prctl(PR_SET_PDEATHSIG) failed" in said, said
        assert f"the parent process (pid {parent.pid}) is gone: stopping" in said, said
        assert stopped in said, said


def test_watch_with_a_parent_already_gone_exits_at_once(db_dsn: str) -> None:
    """A --parent-pid that is not (or no longer) its parent: the parent died before the request
    took effect; the watcher exits before it connects."""
    proc = subprocess.run(
        [sys.executable, "-m", "leasectl", "watch", "--parent-pid", str(os.getpid() + 1_000_000)],
        cwd=ROOT,
        env=_env(db_dsn),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (proc.returncode, proc.stderr) == (0, "")
