"""The console's terminal: refuse to start without one.

A full-screen console only makes sense on a terminal someone is looking at. Textual reads keys
from stdin and draws on stderr, sizes itself from stdout, and assumes an xterm-like terminal;
without those it draws an 80x24 screen into a pipe or a file and runs until killed. So the
console refuses to start (before any connection is made) unless all three are terminals and
TERM does not say the terminal cannot move the cursor. This module does not import Textual:
the core never does.
"""

from __future__ import annotations

import os

from leasectl.errors import UsageError

DUMB_TERMS = ("dumb", "unknown")  # the values Rich also treats as a terminal without controls
_STREAMS = (("stdin", 0), ("stdout", 1), ("stderr", 2))


def terminal_problem() -> str | None:
    """Why the console cannot run here, or None when stdin, stdout and stderr are terminals.

    TERM unset passes: Textual (like Rich) then assumes an xterm-like terminal, which is what a
    shell opened with `kubectl exec -it` has (it sets no TERM)."""
    for name, fd in _STREAMS:
        if not os.isatty(fd):
            return f"{name} is not a TTY"
    term = os.environ.get("TERM", "")
    if term in DUMB_TERMS:
        return f"TERM={term} has no cursor control"
    return None


def require_terminal(instead: str) -> None:
    """Raise a usage error naming the problem and ``instead`` (a command that works anywhere)."""
    problem = terminal_problem()
    if problem is not None:
        raise UsageError(f"the console needs a terminal: {problem} ({instead})")
