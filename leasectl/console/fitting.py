"""Column fitting, pure (no Textual): which of a panel's columns are shown at a width, and how
wide each is. A panel too narrow for every column first shrinks its FLEX columns down to their
minimum, then drops its DROP columns, least needed first, so that what decides an action stays."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Column = tuple[str, str, int | None]  # key, label, width (None: fit the content)


@dataclass(frozen=True)
class ColumnLayout:
    """A panel's columns and how they give way: ``flex`` maps a column to the minimum it may
    shrink to (in the order they give up width), ``drop`` lists the columns left out in turn."""

    columns: tuple[Column, ...]
    flex: Mapping[str, int]
    drop: tuple[str, ...]
    padding: int = 1  # each side of a cell

    def excess(self, kept: Sequence[int], available: int, *, minimal: bool) -> int:
        """How many cells the kept columns need beyond ``available`` (at their minimum when
        ``minimal``)."""
        columns = self.columns
        widths = [
            self.flex.get(columns[i][0], columns[i][2] or 0) if minimal else columns[i][2] or 0
            for i in kept
        ]
        padding = 2 * self.padding * len(kept) + 1  # + the vertical scrollbar
        return sum(widths) + padding - available

    def fitted_columns(self, available: int) -> tuple[int, ...]:
        """The columns (indices) shown at this width: all, less the DROP ones, in order, until
        the rest fit with their FLEX columns at their minimum."""
        keys = [key for key, _, _ in self.columns]
        kept = list(range(len(keys)))
        for key in self.drop:
            if self.excess(kept, available, minimal=True) <= 0:
                break
            kept.remove(keys.index(key))
        return tuple(kept)

    def shrunk(self, kept: Sequence[int], available: int) -> list[int | None]:
        """The kept columns' widths, the FLEX ones shrunk (down to their minimum) so that the
        rest fit."""
        widths = [self.columns[i][2] for i in kept]
        excess = self.excess(kept, available, minimal=False)
        keys = [self.columns[i][0] for i in kept]
        for key, minimum in self.flex.items():  # in the order they give up width
            if key not in keys:
                continue
            i = keys.index(key)
            width = widths[i]
            if excess <= 0 or width is None:
                continue
            give = max(0, min(excess, width - minimum))
            widths[i] = width - give
            excess -= give
        return widths

    def fitted_widths(self, available: int) -> tuple[int | None, ...]:
        """Each column's width at this width (a dropped column's is 0)."""
        kept = self.fitted_columns(available)
        widths = self.shrunk(kept, available)
        return tuple(widths[kept.index(i)] if i in kept else 0 for i in range(len(self.columns)))
