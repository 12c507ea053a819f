"""A handler's traceback as a failed attempt keeps it (job_attempts.error_detail): bounded, with
what was cut said, and nothing PostgreSQL's text cannot hold."""

from __future__ import annotations

import traceback

# A failed attempt keeps this much of the handler's traceback (job_attempts.error_detail);
# a longer one keeps its first DETAIL_HEAD characters (the handler's outer frames) and its end
# (the innermost frames and the exception), with a line saying what was cut in between.
DETAIL_LIMIT = 16_384
DETAIL_HEAD = 4_096


def bounded_traceback(error: BaseException) -> str:
    """The exception's traceback, as ``job_fail`` stores it."""
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    return cut_middle(no_nul(text.rstrip("\n")), DETAIL_LIMIT, head=DETAIL_HEAD)


def cut_middle(text: str, limit: int, *, head: int) -> str:
    """The first ``head`` and the last ``limit - head`` characters of ``text``, with a line
    between them that says what was cut (about 110 characters; migration 8's CHECK leaves 256
    above 16,384)."""
    if len(text) <= limit:
        return text
    tail = limit - head
    cut = len(text) - limit
    note = (
        f"\n… ({cut:,} characters cut here: the traceback keeps its first {head:,} and its "
        f"last {tail:,} of {len(text):,})\n"
    )
    return text[:head] + note + text[-tail:]


def no_nul(text: str) -> str:
    """PostgreSQL's text holds no NUL: a handler's message with one would fail the write."""
    return text.replace("\x00", "\\x00")
