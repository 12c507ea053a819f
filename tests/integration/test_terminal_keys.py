"""Keys pressed in a real terminal: ctrl+c quits the console and the demo (with
Textual 8.2 it opened a pop-up reading `Press [b]q[/b] to quit`), and `q:` typed in one burst
quits cleanly (it printed a NoMatches traceback from the command palette and exited 0).

The console runs on a pty (tests/integration/test_terminal.py's Terminal); a key is what is
written to the master side: ctrl+c is the byte 0x03, which the console, in raw mode, reads as
a key, not as a SIGINT.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from leasectl.db.embedded import EmbeddedServer
from tests.integration.test_cli import _env
from tests.integration.test_terminal import Terminal, demo_workers_of, gone, leasectl, terminal
from tests.util import wait_until

pytestmark = [pytest.mark.full, pytest.mark.serial]

QUIT_WITHIN_S = 15.0  # Textual's shutdown and the pools' close, on a loaded machine
DEMO_STOP_WITHIN_S = 60.0  # the demo also stops its fleet and counts what it left


def press_and_wait(term: Terminal, keys: bytes, timeout: float) -> str:
    """Write ``keys`` to the terminal, then read it (a process writing to a pty nobody reads
    would block) until the process exits; what it drew, as text."""
    os.write(term.master, keys)
    # (read returns False once every process closed the terminal)
    wait_until(lambda: not term.read(0.05) or gone(term), timeout=timeout, what="the exit")
    return term.finish()


def assert_clean(output: str) -> None:
    assert "Traceback" not in output and "NoMatches" not in output, output[-3000:]
    assert "[b]" not in output, "a Textual message showed its markup as text"


def test_ctrl_c_quits_the_console(db_dsn: str) -> None:
    with terminal(leasectl("tui"), _env(db_dsn)) as term:
        term.wait_for(b"Pending")
        output = press_and_wait(term, b"\x03", QUIT_WITHIN_S)
        assert term.proc.returncode == 0, output[-2000:]
        assert_clean(output)


def test_q_and_colon_in_one_burst_quit_without_a_traceback(db_dsn: str) -> None:
    with terminal(leasectl("tui"), _env(db_dsn)) as term:
        term.wait_for(b"Pending")
        output = press_and_wait(term, b"q:", QUIT_WITHIN_S)
        assert term.proc.returncode == 0, output[-2000:]
        assert_clean(output)


def test_ctrl_c_stops_the_demo_and_its_fleet(empty_db_dsn: str) -> None:
    with terminal(leasectl("--dsn", empty_db_dsn, "demo"), _env(None)) as term:
        term.wait_for(b"Pending")
        pid = term.proc.pid
        wait_until(lambda: demo_workers_of(pid), what="the demo's workers")
        output = press_and_wait(term, b"\x03", DEMO_STOP_WITHIN_S)
        assert term.proc.returncode == 0, output[-2000:]
        assert_clean(output)
        assert demo_workers_of(pid) == []


@pytest.mark.slow
def test_ctrl_c_stops_the_demo_its_fleet_and_its_embedded_server(embedded_dir: Path) -> None:
    """README's first screen: Ctrl+C stops the fleet and the server (here the embedded one the
    demo started)."""
    env = {**_env(None), "LEASECTL_EMBEDDED_DIR": str(embedded_dir)}
    with terminal(leasectl("demo", "--fresh"), env) as term:
        term.wait_for(b"Pending")
        pid = term.proc.pid
        wait_until(lambda: demo_workers_of(pid), what="the demo's workers")
        assert EmbeddedServer(embedded_dir).is_running()
        output = press_and_wait(term, b"\x03", DEMO_STOP_WITHIN_S)
        assert term.proc.returncode == 0, output[-2000:]
        assert_clean(output)
    assert demo_workers_of(pid) == []
    wait_until(lambda: not EmbeddedServer(embedded_dir).is_running(), timeout=30, what="server")
