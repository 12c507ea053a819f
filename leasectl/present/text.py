"""Cells and small formats: untrusted text as a literal cell, counts, estimates, id ranges, and
the table every listing starts from.

Everything that comes from the database or the command line is data: it reaches a cell only
through ``lit`` (a Rich ``Text``, which parses no markup, of ``literal.visible``, which escapes
what a terminal would act on).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import OverflowMethod
from rich.style import StyleType
from rich.table import Table
from rich.text import Text

from leasectl.core.counts import approx
from leasectl.core.literal import visible


def lit(
    value: str,
    style: StyleType = "",
    *,
    multiline: bool = False,
    no_wrap: bool | None = None,
    overflow: OverflowMethod | None = None,
) -> Text:
    """A value from the database, the command line or the user (queue names, payloads, errors,
    worker ids, reasons, filters) as a cell: literal text, never markup, with controls, escapes
    and bidi characters shown as visible escapes. A ``Text`` is never parsed as markup, so
    ``[@click=...]`` or ``[/]`` are characters; a plain ``str`` would be parsed as markup by
    Textual, so every console cell, line and dialog that shows such text is made here too.
    ``multiline`` keeps newlines and tabs (a traceback, a reason); otherwise the value stays on
    one line."""
    return Text(
        visible(value, multiline=multiline), style=style, no_wrap=no_wrap, overflow=overflow
    )


def num(n: int, *, alert: str | None = None, capped: bool = False, estimated: bool = False) -> Text:
    """A count: dim when zero, in ``alert`` when not. ``capped``: a lower bound (counted up to
    a cap, ``core/counts.py``), shown as ``6000+``, never as an exact-looking number;
    ``estimated``: the planner's estimate past the cap, ``≈2.0M``."""
    text = approx(n) if estimated else f"{n}+" if capped else str(n)
    return Text(text, style=alert if alert and n else ("dim" if n == 0 else ""))


def count_text(n: int, capped: bool = False, estimated: bool = False) -> str:
    """A count with thousands separators; ``capped``: a lower bound, ``6,000+``;
    ``estimated``: an estimate, ``≈2.0M``."""
    if estimated:
        return approx(n)
    return f"{n:,}+" if capped else f"{n:,}"


def estimate_text(n: int | None) -> str:
    """Finished history is only ever estimated from planner statistics: show it as such."""
    if n is None:
        return "≈?"
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            value = n / size
            return f"≈{value:.1f}{unit}" if value < 100 else f"≈{value:.0f}{unit}"
    return f"≈{n}"


def format_ids(ids: Sequence[int], *, max_ranges: int = 8) -> str:
    """Compact ranges: ``1-100`` or ``3, 5-9, 12``; long lists end with ``(+N more)``."""
    ranges: list[tuple[int, int]] = []
    for i in sorted(set(ids)):
        if ranges and i == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], i)
        else:
            ranges.append((i, i))
    parts = [str(a) if a == b else f"{a}-{b}" for a, b in ranges[:max_ranges]]
    if len(ranges) > max_ranges:
        rest = sum(b - a + 1 for a, b in ranges[max_ranges:])
        parts.append(f"(+{rest} more)")
    return ", ".join(parts) if parts else "-"


def table(title: str) -> Table:
    """A listing with a bold title and a rule under its header, no frame."""
    return Table(
        title=title,
        title_justify="left",
        title_style="bold",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
