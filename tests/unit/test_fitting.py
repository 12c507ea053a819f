"""Column fitting is a pure function of a panel's columns and a width: no Textual needed."""

from __future__ import annotations

import subprocess
import sys

from hypothesis import given
from hypothesis import strategies as st

from leasectl.console.fitting import ColumnLayout

# The Pending panel's columns (console/widgets/tables.py): 48 cells + 13 of padding and scrollbar.
PENDING = ColumnLayout(
    columns=(
        ("id", "ID", 9),
        ("queue", "QUEUE", 12),
        ("priority", "PRI", 4),
        ("waiting", "WAITING", 8),
        ("attempts", "ATT", 5),
        ("run_at", "RUN AT", 10),
    ),
    flex={"queue": 8},
    drop=("priority", "attempts", "run_at"),
)


def test_importing_it_loads_no_textual() -> None:
    code = "import sys, leasectl.console.fitting; print('textual' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_every_column_at_its_width_when_they_fit() -> None:
    assert PENDING.fitted_columns(61) == (0, 1, 2, 3, 4, 5)
    assert PENDING.fitted_widths(61) == (9, 12, 4, 8, 5, 10)
    assert PENDING.fitted_widths(200) == (9, 12, 4, 8, 5, 10)


def test_a_flex_column_gives_way_first_down_to_its_minimum() -> None:
    assert PENDING.fitted_widths(60) == (9, 11, 4, 8, 5, 10)
    assert PENDING.fitted_widths(57) == (9, 8, 4, 8, 5, 10)


def test_then_columns_are_dropped_in_their_order() -> None:
    # At 56 even the queue at 8 does not fit: the priority goes, and the queue has room again.
    assert PENDING.fitted_columns(56) == (0, 1, 3, 4, 5)
    assert PENDING.fitted_widths(56) == (9, 12, 0, 8, 5, 10)
    assert PENDING.fitted_columns(45) == (0, 1, 3, 5)
    assert PENDING.fitted_columns(10) == (0, 1, 3)  # the DROP list is spent: the rest stay


def test_a_column_that_fits_its_content_is_never_shrunk() -> None:
    layout = ColumnLayout(
        columns=(("a", "A", None), ("b", "B", 10)), flex={"a": 2, "b": 4}, drop=()
    )
    assert layout.fitted_widths(12) == (None, 7)  # b gives the 3 cells missing


@given(st.integers(min_value=0, max_value=120))
def test_what_is_shown_fits_whenever_it_can(available: int) -> None:
    kept = PENDING.fitted_columns(available)
    widths = PENDING.shrunk(kept, available)
    keys = [PENDING.columns[i][0] for i in kept]
    for key, width in zip(keys, widths, strict=True):
        assert width is not None and width >= PENDING.flex.get(key, width)
    dropped = [PENDING.columns[i][0] for i in range(6) if i not in kept]
    assert dropped == list(PENDING.drop[: len(dropped)])  # in their order, none out of turn
    fits = sum(w or 0 for w in widths) + 2 * len(kept) + 1 <= available
    assert fits or len(dropped) == len(PENDING.drop)
    if dropped:  # nothing was dropped that did not have to be
        last = next(i for i, c in enumerate(PENDING.columns) if c[0] == dropped[-1])
        assert PENDING.excess(sorted([*kept, last]), available, minimal=True) > 0
