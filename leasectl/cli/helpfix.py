"""Two mends of Typer's (0.29) --help. It writes a type after every option, flags too
(``--json <bool>``), as if they took a value: a flag's type column stays empty. And it keeps the
line breaks of a docstring's paragraphs after the first, which are then wrapped again at the
terminal's width, each line alone (a word left on a line of its own): such a paragraph is one
line again, as click writes it, unless it starts with click's ``\b`` (keep these lines).
Imported once, by ``cli/root.py``."""

from __future__ import annotations

from typing import Any

import typer.core
import typer.rich_utils

_shown_type = getattr(typer.core.TyperOption, "display_type_rich", None)


def _flag_shows_no_type(self: Any, ctx: Any) -> str | None:
    if self.is_flag and self.metavar is None:
        return None
    assert _shown_type is not None
    result: str | None = _shown_type(self, ctx)
    return result


if _shown_type is not None:  # (older Typers print no type for a flag: nothing to mend)
    typer.core.TyperOption.display_type_rich = _flag_shows_no_type  # type: ignore[method-assign]


_paragraphs = getattr(typer.rich_utils, "_fix_linebreaks", None)


def _paragraphs_rewrapped(paragraphs: list[str], markup_mode: Any) -> str:
    joined = [p if p.startswith("\b") else " ".join(p.split("\n")) for p in paragraphs]
    assert _paragraphs is not None
    result: str = _paragraphs(joined, markup_mode)
    return result


if _paragraphs is not None:  # (a Typer without it joins the lines itself)
    typer.rich_utils._fix_linebreaks = _paragraphs_rewrapped
