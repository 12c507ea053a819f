"""A corpus of hostile text: what a producer, a worker or an operator could write into a field
that the on-call engineer later reads. Every string can be stored in PostgreSQL text (no NUL).

``MARKERS`` are substrings that must never survive into rendered output as live behaviour
(an action, a link, an escape sequence); ``literal_probe(s)`` is a piece of ``s`` that must be
visible, literally, wherever the field is shown wide enough.
"""

from __future__ import annotations

ESC = "\x1b"

MARKUP = [
    "[bold]bold?[/bold]",
    "[/]",
    "[/] [/]",
    "[@click=app.quit]CLICK[/]",
    "[@click=app.screenshot('victim.txt','/tmp')]CLICK[/]",
    "[link=file:///etc/passwd]passwd[/link]",
    "OOM [prod]",
    "[red",
    "]]][[[",
    "[b]unclosed",
    "[on red]  [/on red]",
    "$variable {braces} %s %(name)s",
]

TERMINAL = [
    "\x1b[2J\x1b[H",
    "\x1b]0;PWNED\x07",
    "\x1b]8;;http://evil.example/\x1b\\link\x1b]8;;\x1b\\",
    "\x1b[31mred\x1b[0m",
    "\x9b31mC1 CSI",
    "\x07bell\x08\x08back",
    "carriage\rreturn",
    "\x7fdel",
    "\x1bP+q\x1b\\dcs",
]

UNICODE = [
    "\u202eevil\u202c",
    "\u2066isolate\u2069",
    "zero\u200bwidth\u200d",
    "\ufeffbom",
    "e\u0301 combining",
    "Z\u0337\u0327\u031ba\u0338l\u0335g\u0336o\u0337",
    "\u2028line sep\u2029para sep",
    "日本語🙂wide",
]

SHAPE = [
    "line1\nline2\r\nline3",
    "\ttabbed\t",
    "x" * 100_000,
    " ",
    "-",
]

CORPUS: list[str] = MARKUP + TERMINAL + UNICODE + SHAPE

# Short enough to be a queue name, a worker id or a filter.
NAMES: list[str] = [s for s in CORPUS if len(s) <= 200]

# Migration 15 bounds what a worker or an operator writes (owners 400 characters, errors 4000,
# audit actors and reasons 1000); rows from before it may hold the corpus's 100,000 characters,
# and the readers must show them. A seed that writes it there drops these bounds first.
UNBOUNDED = [
    "ALTER TABLE leasectl.jobs DROP CONSTRAINT jobs_bounded_values",
    "ALTER TABLE leasectl.job_attempts DROP CONSTRAINT job_attempts_bounded_values",
    "ALTER TABLE leasectl.job_events DROP CONSTRAINT job_events_bounded_values",
    "ALTER TABLE leasectl.workers DROP CONSTRAINT workers_bounded_values",
]


def literal_probe(text: str) -> str:
    """The longest run (at most 20 characters) of printable ASCII in ``text``: a piece that
    must appear verbatim wherever the text is shown, escaped or not ("" when there is none of
    three characters or more)."""
    runs, run = [], []
    for char in text:
        if char.isascii() and char.isprintable():
            run.append(char)
        else:
            runs.append("".join(run))
            run = []
    runs.append("".join(run))
    best = max(runs, key=len)[:20].strip()
    return best if len(best) >= 3 else ""
