"""Text read in bounded parts: a payload's exact text (maybe its beginning only) and the facts
of a text field cut where it was read (what anyone with a role may write can be megabytes:
a reader fetches its beginning and its size, and says how to get all of it)."""

from __future__ import annotations

from dataclasses import dataclass

# What `inspect` and the console's detail screen read of a text field a role writes (an owner,
# an error, an audit actor or reason); `inspect --full` and `--json` read all of it.
TEXT_SHOWN = 4096
# The attempts and audit events they read of one job: the latest ones.
ROWS_SHOWN = 200


@dataclass(frozen=True)
class TextCut:
    """A text field read only in part: ``record`` (``job``, ``attempt``, ``event``) and its
    ``key`` (the job's id, the attempt's number, the event's id), the column, the characters
    read and the whole value's size in bytes."""

    record: str
    key: int
    column: str
    shown_chars: int
    full_bytes: int


@dataclass(frozen=True)
class PayloadText:
    """A payload as PostgreSQL writes it (``jsonb::text``: numbers exact, never decoded), or
    its first ``len(text)`` characters when ``truncated``; ``chars``: the whole text's length."""

    text: str
    chars: int

    @property
    def truncated(self) -> bool:
        return len(self.text) < self.chars

    def pretty(self, indent: int = 2, max_indent: int = 40) -> str:
        """The text laid out one member per line, indented by nesting (at most ``max_indent``
        columns), without decoding it: numbers keep their digits, a text cut anywhere (a
        truncated one) is laid out as far as it goes, and any depth takes one pass."""
        out: list[str] = []
        depth = 0
        in_string = escaped = False
        text = self.text
        i, n = 0, len(text)

        def newline() -> None:
            out.append("\n" + " " * min(depth * indent, max_indent))

        while i < n:
            char = text[i]
            if in_string:
                out.append(char)
                if escaped:
                    escaped = False
                elif char == "\\":
                    escaped = True
                elif char == '"':
                    in_string = False
            elif char == '"':
                in_string = True
                out.append(char)
            elif char in "[{":
                closing = "]" if char == "[" else "}"
                j = i + 1
                while j < n and text[j] in " \t\r\n":
                    j += 1
                if j < n and text[j] == closing:  # empty: [] or {}
                    out.append(char + closing)
                    i = j + 1
                    continue
                depth += 1
                out.append(char)
                newline()
            elif char in "]}":
                depth = max(0, depth - 1)
                newline()
                out.append(char)
            elif char == ",":
                out.append(",")
                newline()
            elif char == ":":
                out.append(": ")
            elif char not in " \t\r\n":
                out.append(char)
            i += 1
        return "".join(out)
