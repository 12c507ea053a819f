"""README's "Metrics" table is the exporter's list (``runtime/exporter.py``'s METRICS)."""

from __future__ import annotations

import re
from pathlib import Path

from leasectl.core.counts import COUNT_BUDGET, COUNT_FLOOR, BoundedCount, cap_for
from leasectl.runtime.exporter import METRICS

README = Path(__file__).resolve().parents[2] / "README.md"
ROW = re.compile(r"^\| `(leasectl_[a-z_]+)` \| (\w+) \| ([^|]*) \| [^|]+ \|$", re.MULTILINE)


def test_readme_lists_every_metric_with_its_type_and_labels() -> None:
    section = README.read_text().split("### Metrics\n", 1)[1].split("\n### ", 1)[0]
    rows = {
        name: (kind, tuple(re.findall(r"`(\w+)`", labels)))
        for name, kind, labels in ROW.findall(section)
    }
    assert rows == {name: (kind, labels) for name, (kind, labels, _) in METRICS.items()}


def test_names_follow_prometheus_conventions() -> None:
    for name, (kind, labels, doc) in METRICS.items():
        assert re.fullmatch(r"leasectl_[a-z]+(_[a-z]+)*", name), name
        assert not name.endswith("_total") or kind == "counter", name
        assert kind != "counter" or name.endswith("_total"), name
        assert "seconds" not in name or name.endswith("_seconds"), name
        assert doc.endswith(".") and len(set(labels)) == len(labels), name


def test_the_count_cap_shares_its_budget_and_keeps_a_floor() -> None:
    assert cap_for(3) == COUNT_BUDGET // 3
    assert cap_for(0) == cap_for(1) == COUNT_BUDGET
    assert cap_for(10_000) == COUNT_FLOOR
    assert BoundedCount.read(5, 5) == BoundedCount(5, False)
    assert BoundedCount.read(6, 5) == BoundedCount(5, True)
    assert str(BoundedCount(5, True)) == "5+" and str(BoundedCount(1234, False)) == "1,234"
