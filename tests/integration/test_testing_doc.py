"""docs/testing.md: its worked example runs as written (in a project of its own, the plugin
loaded by its entry point), and its table of a drain's results names every field of ``JobRun``
and every ``Outcome``."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from leasectl.testing import JobRun, Outcome
from tests.integration.test_testing_helpers import LIGHT

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"


def _section(title: str) -> str:
    return DOC.read_text(encoding="utf-8").split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


@pytest.mark.full
def test_the_worked_example_passes(pytester: pytest.Pytester, db_dsn: str) -> None:
    blocks = re.findall(r"```python\n(.*?)```", _section("A worked example"), re.DOTALL)
    assert len(blocks) == 1
    pytester.makepyfile(test_signup=blocks[0])
    result = pytester.runpytest_subprocess("--leasectl-dsn", db_dsn, *LIGHT)
    result.assert_outcomes(passed=1)


def test_the_result_table_names_every_field_and_outcome() -> None:
    table = _section("`drain`: the worker's path, in-process")
    rows = re.findall(r"^\| `([a-z_]+)` \|", table, re.MULTILINE)
    assert rows == [f.name for f in dataclasses.fields(JobRun)]
    for outcome in Outcome:
        assert f"`{outcome.value}`" in table, outcome
