"""Untrusted text made safe to put in front of a person: the one rule for the CLI and the console.

Queue names, payloads, errors, worker ids, reasons, actors and filters are written by producers,
workers and operators; they are data. Before any of it reaches a terminal it goes through
``visible``: characters that a terminal would act on or that hide or reorder text (C0 and C1
controls, ESC, DEL, bidirectional overrides and isolates, zero-width and other format
characters, line and paragraph separators) are replaced by a visible escape (``\\x1b``,
``\\u202e``). Markup is not this module's business: the CLI wraps the result in a Rich ``Text``
and the console in a Textual ``Content``/``Text``, neither of which parses markup.

No Rich, no Textual here: the core may use it too (error messages echo the user's input).
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

# What a one-line error message may echo of a value the user gave.
ECHO_LIMIT = 200

# Unicode categories shown escaped: Cc (controls), Cf (format: bidi controls, zero-width
# joiners and spaces, soft hyphen, BOM), Zl and Zp (line and paragraph separators), Cs (lone
# surrogates). Spaces of other widths (CJK text uses U+3000) and combining marks are text.
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


@lru_cache(maxsize=4096)
def _needs_escape(char: str) -> bool:
    return unicodedata.category(char) in _ESCAPED_CATEGORIES


_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape(char: str) -> str:
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def visible(text: str, *, multiline: bool = False) -> str:
    """``text`` with every control, format and separator character shown as an escape.

    With ``multiline``, newlines and tabs are kept (a traceback, a payload shown as JSON, a
    reason); otherwise they are escaped too, so that one value stays on one line of a table.
    A carriage return is always escaped: it would move the cursor back over what was written.
    """
    if text.isprintable() and text.isascii():
        return text  # the common case, without a look at each character
    out: list[str] = []
    for char in text:
        if multiline and char in "\n\t":
            out.append(char)
        elif _needs_escape(char):
            out.append(_escape(char))
        else:
            out.append(char)
    return "".join(out)


def shorten(text: str, limit: int) -> str:
    """At most ``limit`` characters; a cut is marked with ``…`` and the full length."""
    if len(text) <= limit:
        return text
    note = f"… ({len(text):,} chars)"
    keep = max(1, limit - len(note))
    return text[:keep] + note


def echo(value: str, limit: int = ECHO_LIMIT) -> str:
    """A value the user gave, as a one-line error message quotes it: cut short, in quotes,
    every character that is not printable escaped (``repr`` escapes controls, format
    characters and separators, as ``visible`` does, and newlines and tabs too)."""
    return repr(shorten(value, limit))
