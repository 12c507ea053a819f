"""The Queues view's pure parts: the backlog's trend (samples, capped samples, the flow when
there are none), what needs attention first, the columns at a width, and the cells (estimates,
ages, hostile names literal and cut to fit)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from rich.console import Console

from leasectl.core.counts import BoundedCount
from leasectl.core.queues import QueueRow, Trend, attention_order, trend
from leasectl.core.stats import MinuteStats
from leasectl.present.queues import layout, oldest_text, queue_cells, queue_renderables
from tests.console.queues_sample import HOSTILE, detail, rows
from tests.console.sample import NOW


def sampled(*samples: int | tuple[int, bool] | None, **counts: int) -> tuple[MinuteStats, ...]:
    out = []
    for i, sample in enumerate(samples):
        pending, capped = sample if isinstance(sample, tuple) else (sample, False)
        out.append(MinuteStats(NOW + timedelta(minutes=i), pending=pending,
                               pending_capped=capped, **counts))  # fmt: skip
    return tuple(out)


@pytest.mark.parametrize(
    ("samples", "expected"),
    [
        ((100, 120, 150), Trend.GROWING),
        ((150, 120, 100), Trend.SHRINKING),
        ((100, 104, 105), Trend.STEADY),  # within a tenth of the backlog
        ((0, 0, 0), Trend.STEADY),
        ((0, 1), Trend.STEADY),  # one job is noise
        ((0, 3), Trend.GROWING),
        ((4000, (6000, True)), Trend.GROWING),  # went past the count's cap
        (((6000, True), 4000), Trend.SHRINKING),
        ((None, 10, None, 40), Trend.GROWING),  # the minutes not sampled are skipped
    ],
)
def test_the_trend_compares_the_first_and_last_samples(
    samples: tuple[int | tuple[int, bool] | None, ...], expected: Trend
) -> None:
    assert trend(sampled(*samples)) is expected


def test_capped_samples_or_none_fall_back_to_the_flow() -> None:
    capped = ((6000, True), (6000, True))
    assert trend(sampled(*capped, enqueued=100, completed=50)) is Trend.GROWING
    assert trend(sampled(*capped, enqueued=50, completed=100)) is Trend.SHRINKING
    assert trend(sampled(*capped, enqueued=100, completed=95)) is Trend.STEADY
    assert trend(sampled(None, None, enqueued=0)) is Trend.UNKNOWN
    assert trend(sampled(None, None, enqueued=10, failed=2)) is Trend.GROWING
    # Only the last TREND_MINUTES count: an old surge is not a trend.
    old = sampled(*[None] * 20, enqueued=0)
    surge = (replace(old[0], enqueued=1000), *old[1:])
    assert trend(surge) is Trend.UNKNOWN


def test_attention_puts_growing_failing_and_old_work_first_then_the_largest() -> None:
    ordered = [r.queue for r in rows()]
    assert ordered[:2] == ["payments", "emails"]
    assert ordered[-2:] == ["webhooks", "reports"]
    quiet = [r for r in rows() if r.queue in ("webhooks", "reports")]
    calm = [replace(r, minutes=tuple(replace(m, pending=None) for m in r.minutes),
                    oldest_due_age=None) for r in quiet]  # fmt: skip
    by_size = attention_order(calm)
    assert [r.queue for r in by_size] == ["webhooks", "reports"]  # 240 before 3 Pending
    big = replace(by_size[1], pending=BoundedCount(6000, True, 2_000_000))
    assert [r.queue for r in attention_order([by_size[0], big])] == ["reports", "webhooks"]


def test_columns_fit_the_width() -> None:
    narrow, wide = layout(80), layout(160)
    assert narrow.narrow and not wide.narrow
    assert len(narrow.columns) == len(wide.columns) == 9
    assert 8 <= narrow.spark_chars <= 13 and narrow.name_chars == 16
    assert layout(400).spark_chars == 60  # a character a minute, no more
    assert layout(40).spark_chars == 8


def _text(cells: list[object]) -> list[str]:
    return [str(c) for c in cells]


def test_cells_say_estimates_ages_and_states_shortly_when_narrow() -> None:
    payments = rows()[0]
    wide = _text(queue_cells(payments, layout(160)))
    narrow = _text(queue_cells(payments, layout(80)))
    assert wide[:8] == ["payments", "≈2.0M", "41m00s", "↑ growing", "729", "10✖", "12.5s",
                        "10/10 running · 20/s (burst 20)"]  # fmt: skip
    assert narrow[3] == "↑" and narrow[7] == "⏳"
    assert oldest_text(None).plain == "-" and oldest_text(3600 * 5).plain == "5h00m"
    empty = QueueRow("idle", BoundedCount(0, False), None, 0, 0, BoundedCount(0, False), None,
                     None, (), None)  # fmt: skip
    assert _text(queue_cells(empty, layout(80)))[1:8] == ["0", "-", "?", "0", "0", "-", "-"]


def test_a_hostile_name_is_literal_and_cut_to_fit() -> None:
    [row] = [r for r in rows() if r.queue == HOSTILE]
    for width, chars in ((80, 16), (160, 40)):
        name = queue_cells(row, layout(width))[0]
        assert name.plain.startswith("[@click=app.qui") and "\x1b" not in name.plain
        assert name.cell_len == chars and name.plain.endswith("…")
    # The queue screen: the name, the pause's actor and reason, the error and the event, all
    # literal, whatever the console's width.
    console = Console(width=80, record=True, color_system=None)
    for part in queue_renderables(detail(row), 80):
        console.print(part)
    shown = console.export_text()
    assert "\x1b" not in shown and "\u202e" not in shown
    assert "[@click=app.quit]ops[/]\\x1b]0;PWNED\\x07" in shown.replace("\n", "")
