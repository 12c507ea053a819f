"""`leasectl tui` and the demo's console: no terminal, a dumb one, and one that goes away.

Real processes on a real pseudo-terminal (os.openpty). The child is made a session leader whose
controlling terminal is the pty, as under a terminal emulator, ssh or tmux; closing the master
side is what the kernel does when that window, connection or pane closes: it hangs the
terminal up (SIGHUP for the foreground process group, EOF/EIO on reads, EIO on writes).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import struct
import subprocess
import sys
import termios
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import psycopg
import pytest

from leasectl.db.embedded import EmbeddedServer
from leasectl.demo.fleet import HANDLER
from tests.integration.test_cli import _env
from tests.util import wait_until

pytestmark = [pytest.mark.full, pytest.mark.serial]

UNREACHABLE = "postgresql://nobody@127.0.0.1:1/nothing?connect_timeout=2"
GONE_WITHIN_S = 5.0  # the promise: a console whose terminal went away exits this quickly
DRAW_TIMEOUT_S = 60.0  # python and Textual start-up on a loaded machine
# A session leader that takes the pty as its controlling terminal, then becomes
# the command (same pid). With IGNORE_HUP it starts with SIGHUP ignored, as under nohup.
EXEC = """
import fcntl, os, signal, sys, termios
if os.environ.pop("TEST_CTTY", "") == "1":
    fcntl.ioctl(next(fd for fd in (0, 1, 2) if os.isatty(fd)), termios.TIOCSCTTY, 0)
if os.environ.pop("TEST_IGNORE_HUP", "") == "1":
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""


class Terminal:
    """A pty of 140x40 and a process started on it (the streams not named get the pty)."""

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        *,
        stdin: int | None = None,
        stdout: int | None = None,
        stderr: int | None = None,
        controlling: bool = True,
        ignore_hup: bool = False,
        pass_fds: tuple[int, ...] = (),
    ) -> None:
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 140, 0, 0))
        env = {k: v for k, v in env.items() if k not in ("LINES", "COLUMNS")}
        env.setdefault("TERM", "xterm-256color")
        env["TEST_CTTY"] = "1" if controlling else "0"
        env["TEST_IGNORE_HUP"] = "1" if ignore_hup else "0"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", EXEC, *argv],
            stdin=slave if stdin is None else stdin,
            stdout=slave if stdout is None else stdout,
            stderr=slave if stderr is None else stderr,
            env=env,
            start_new_session=True,
            pass_fds=pass_fds,
        )
        os.close(slave)
        self.output = b""

    def read(self, timeout: float) -> bool:
        """Read what is there within ``timeout``; False once the pty has nothing more to give."""
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: every process closed the terminal
            return False
        self.output += chunk
        return bool(chunk)

    def wait_for(self, text: bytes) -> None:
        deadline = time.monotonic() + DRAW_TIMEOUT_S
        while text not in self.output:
            assert self.proc.poll() is None, f"exited {self.proc.returncode}: {self.output!r}"
            assert time.monotonic() < deadline, f"no {text!r} on the screen: {self.output[-500:]!r}"
            self.read(0.2)

    def finish(self, timeout: float = 30) -> str:
        """Wait for the process to exit, reading the pty until then; its output as text."""
        self.proc.wait(timeout=timeout)
        while self.read(0.05):
            pass
        return self.output.decode(errors="replace")

    def hang_up(self) -> None:
        os.close(self.master)
        self.master = -1

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.master >= 0:
            os.close(self.master)


@contextlib.contextmanager
def terminal(argv: list[str], env: dict[str, str], **kwargs: object) -> Iterator[Terminal]:
    term = Terminal(argv, env, **kwargs)  # type: ignore[arg-type]
    try:
        yield term
    finally:
        term.close()


def leasectl(*args: str) -> list[str]:
    return ["-m", "leasectl", *args]


def one_line(text: str) -> str:
    lines = [line for line in text.replace("\r", "").split("\n") if line]
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


def console_sessions(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name LIKE 'leasectl console%'"
        ).fetchone()
    assert row is not None
    return int(row[0])


def gone(term: Terminal) -> bool:
    return term.proc.poll() is not None


# -- no terminal: refuse before connecting -------------------------------------------------------


@pytest.mark.parametrize(
    ("stream", "reason"),
    [("stdin", "stdin is not a TTY"), ("stdout", "stdout is not a TTY")],
)
def test_tui_without_a_terminal_exits_2_before_connecting(
    stream: str, reason: str, tmp_path: Path
) -> None:
    """The DSN names no server: an error about connecting would mean the check came too late."""
    redirected = tmp_path / "redirected"
    with redirected.open("wb") as out, open(os.devnull, "rb") as devnull:
        target: IO[bytes] = devnull if stream == "stdin" else out
        with terminal(leasectl("tui"), _env(UNREACHABLE), **{stream: target.fileno()}) as term:
            shown = term.finish(timeout=20)
            assert term.proc.returncode == 2, shown
    line = one_line(shown)
    assert line == (
        f"leasectl: error: the console needs a terminal: {reason} "
        "(for a one-shot view, run `leasectl status`)"
    )
    assert redirected.read_bytes() == b""  # no escape codes written into the pipe or file


def test_tui_with_stderr_not_a_terminal_exits_2(tmp_path: Path) -> None:
    """Textual draws on stderr: a console with stderr in a file would draw into the file."""
    log = tmp_path / "stderr"
    with (
        log.open("wb") as err,
        terminal(leasectl("tui"), _env(UNREACHABLE), stderr=err.fileno()) as term,
    ):
        shown = term.finish(timeout=20)
        assert term.proc.returncode == 2
    assert shown == ""  # nothing on the terminal, stdout included
    line = one_line(log.read_text())
    assert "the console needs a terminal: stderr is not a TTY" in line


@pytest.mark.parametrize("term_name", ["dumb", "unknown"])
def test_tui_on_a_dumb_terminal_exits_2(term_name: str) -> None:
    env = {**_env(UNREACHABLE), "TERM": term_name}
    with terminal(leasectl("tui"), env) as term:
        shown = term.finish(timeout=20)
        assert term.proc.returncode == 2, shown
    line = one_line(shown)
    assert f"the console needs a terminal: TERM={term_name} has no cursor control" in line
    assert "leasectl status" in line


def test_demo_without_a_terminal_exits_2_before_starting_a_server(tmp_path: Path) -> None:
    server_dir = tmp_path / "embedded"
    env = {**_env(None), "LEASECTL_EMBEDDED_DIR": str(server_dir)}
    stdout = tmp_path / "stdout"
    with stdout.open("wb") as out, terminal(leasectl("demo"), env, stdout=out.fileno()) as term:
        shown = term.finish(timeout=20)
        assert term.proc.returncode == 2, shown
    line = one_line(shown)
    assert line == (
        "leasectl: error: the console needs a terminal: stdout is not a TTY "
        "(to run the demo without it, use `leasectl demo --headless`)"
    )
    assert stdout.read_bytes() == b""
    assert not server_dir.exists()  # no embedded server was set up


# -- the terminal goes away: exit within seconds ------------------------------------------------


@pytest.mark.parametrize(
    ("controlling", "ignore_hup"),
    [
        pytest.param(True, False, id="sighup"),
        pytest.param(True, True, id="sighup-ignored"),  # nohup: only the tty says it is gone
        pytest.param(False, False, id="no-controlling-tty"),  # no SIGHUP at all: POLLHUP
    ],
)
def test_tui_exits_when_its_terminal_goes_away(
    db_dsn: str, controlling: bool, ignore_hup: bool
) -> None:
    with terminal(
        leasectl("tui"), _env(db_dsn), controlling=controlling, ignore_hup=ignore_hup
    ) as term:
        term.wait_for(b"Pending")
        wait_until(lambda: console_sessions(db_dsn) > 0, what="the console's connections")
        term.hang_up()
        wait_until(lambda: gone(term), timeout=GONE_WITHIN_S, what="the console to exit")
        # Its own exit (SIGHUP's default would kill it: -1), and its connections are closed.
        assert term.proc.returncode == 129
    wait_until(lambda: console_sessions(db_dsn) == 0, timeout=10, what="the sessions to end")


WATCHED = """
import os, sys, threading
from leasectl.core.terminal import HangupWatch, last_resort

marks = int(sys.argv[1])

def mark(name):
    os.write(marks, (name + "\\n").encode())

watch = HangupWatch(lambda: mark("asked"), abandon=lambda: mark("abandoned"))
with last_resort(lambda: mark("caller released")), watch:
    mark("watching")
    threading.Event().wait()  # a console stuck for good: it never returns
"""


def test_a_console_that_does_not_close_is_abandoned() -> None:
    """The watchdog: the console is asked to close and does not; the watch releases what the
    console and its caller hold, then the process exits on its own.

    The child writes its marks into a pipe, not a file: on a loaded CI machine an append to a
    file can wait seconds behind the disk, past the watch's grace, and the process would exit
    (as it should) before the line that the test reads was written. It says it is watching
    there too, not on the terminal: a terminal closed as soon as the word showed could fail
    the print that wrote it (EIO: exit 1, one run in five)."""
    read_end, write_end = os.pipe()
    try:
        argv = ["-c", textwrap.dedent(WATCHED), str(write_end)]
        with terminal(argv, _env(None), pass_fds=(write_end,)) as term:
            os.close(write_end)
            write_end = -1
            first = _read_line(read_end, term)
            assert first == "watching", first
            term.hang_up()
            wait_until(lambda: gone(term), timeout=GONE_WITHIN_S, what="the process to exit")
            said = term.output.decode(errors="replace")[-2000:]
            marks = _read_all(read_end)
            assert term.proc.returncode == 129, f"marks: {marks!r}; on the terminal: {said!r}"
        assert marks.splitlines() == ["asked", "abandoned", "caller released"]
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)


def _read_line(fd: int, term: Terminal) -> str:
    """The first line written to a pipe (one byte at a time: nothing after it is taken)."""
    line = b""
    deadline = time.monotonic() + DRAW_TIMEOUT_S
    while not line.endswith(b"\n"):
        assert term.proc.poll() is None, f"exited {term.proc.returncode}: {term.output!r}"
        assert time.monotonic() < deadline, f"no line in the pipe: {line!r}"
        term.read(0)  # (the terminal read as it fills: a full pty would block the child)
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            byte = os.read(fd, 1)
            assert byte, f"the pipe closed: {line!r}"
            line += byte
    return line[:-1].decode()


def _read_all(fd: int) -> str:
    """Everything written to a pipe whose writers have all exited."""
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    return b"".join(chunks).decode()


def demo_workers_of(pid: int) -> list[int]:
    """Live demo worker processes started by the demo process ``pid``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{name}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        parent = argv[argv.index(b"--parent-pid") + 1] if b"--parent-pid" in argv else b""
        if HANDLER.encode() in argv and parent == str(pid).encode() and state not in "ZX":
            found.append(int(name))
    return found


@pytest.mark.slow
def test_demo_stops_its_fleet_when_its_terminal_goes_away(empty_db_dsn: str) -> None:
    with terminal(leasectl("--dsn", empty_db_dsn, "demo"), _env(None)) as term:
        term.wait_for(b"Pending")
        wait_until(lambda: demo_workers_of(term.proc.pid), what="the demo's workers")
        term.hang_up()
        wait_until(lambda: gone(term), timeout=GONE_WITHIN_S, what="the demo to exit")
        # 130: the console closed and the demo stopped like on a SIGINT. 129: the console took
        # longer than the watch's grace (seen on a loaded 2-core CI machine) and the watch's last
        # resort stopped the fleet instead. Either way nothing of the demo outlives it.
        assert term.proc.returncode in (129, 130)
        assert demo_workers_of(term.proc.pid) == []


STUCK_DEMO = """
import signal, sys, threading
from pathlib import Path
from leasectl.demo import FleetConfig, run_demo
from leasectl.core.terminal import HangupWatch

def stuck_console(dsn, schema, *, refresh, queue, read_only):
    # The real console's watch around a console that, like one stuck writing to its dead
    # terminal, never closes: not when asked, not on the SIGINTs the demo sends itself (deaf
    # to them: a KeyboardInterrupt caught in a loop can land outside its try, and the stub
    # would return).
    signal.signal(signal.SIGINT, lambda signum, frame: None)
    with HangupWatch(lambda: None, abandon=lambda: None):
        print("console up", flush=True)
        threading.Event().wait()

run_demo(dsn=None, schema="leasectl", fresh=True, headless=False, duration=None,
         fleet=FleetConfig(), log_dir=Path(sys.argv[1]), console=stuck_console)
"""


@pytest.mark.slow
def test_a_demo_whose_console_hangs_stops_its_fleet_and_server(
    embedded_dir: Path, tmp_path: Path
) -> None:
    env = {**_env(None), "LEASECTL_EMBEDDED_DIR": str(embedded_dir)}
    with terminal(["-c", STUCK_DEMO, str(tmp_path / "logs")], env) as term:
        term.wait_for(b"console up")
        pid = term.proc.pid
        wait_until(lambda: demo_workers_of(pid), what="the demo's workers")
        assert EmbeddedServer(embedded_dir).is_running()
        term.hang_up()
        wait_until(lambda: gone(term), timeout=GONE_WITHIN_S, what="the demo to exit")
        said = term.output.decode(errors="replace")[-2000:]
        assert term.proc.returncode == 129, f"on the terminal: {said!r}"
    # Its workers die with it; the server it started was told to stop before it went.
    wait_until(lambda: demo_workers_of(pid) == [], timeout=10, what="the workers to go")
    wait_until(lambda: not EmbeddedServer(embedded_dir).is_running(), timeout=30, what="the server")
