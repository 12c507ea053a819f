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
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from tests.integration.test_cli import _env

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
