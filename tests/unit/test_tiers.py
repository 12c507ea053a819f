"""The two tiers (tests/conftest.py): without --full, a test marked full or slow is deselected,
never skipped; with --full every test runs."""

from __future__ import annotations

import pytest

CONFTEST = """
from tests.conftest import (
    pytest_addoption,
    pytest_collection_modifyitems,
    pytest_terminal_summary,
)
"""

TESTS = """
import pytest

def test_fast():
    pass

@pytest.mark.full
def test_full():
    pass

@pytest.mark.slow
def test_slow():
    pass

@pytest.mark.full
@pytest.mark.serial
def test_full_and_serial():
    pass
"""

MARKERS = """
[pytest]
addopts = --strict-markers
markers =
    full: x
    slow: x
    serial: x
"""


@pytest.fixture
def made_up(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makeini(MARKERS)
    pytester.makepyfile(test_made_up=TESTS)
    return pytester


# The plugins that keep state of their own for the session around this one stay out of it.
PLUGINS_OFF = ("-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:textual-snapshot")


def test_the_fast_tier_deselects_the_full_tier(made_up: pytest.Pytester) -> None:
    result = made_up.runpytest_inprocess(*PLUGINS_OFF)
    result.assert_outcomes(passed=1, deselected=3)
    result.stdout.fnmatch_lines(["*fast tier: 3 tests of the full tier deselected (--full*"])


def test_full_runs_every_test(made_up: pytest.Pytester) -> None:
    result = made_up.runpytest_inprocess("--full", *PLUGINS_OFF)
    result.assert_outcomes(passed=4)
    assert "deselected" not in result.stdout.str()


def test_serial_selects_the_tests_that_run_alone(made_up: pytest.Pytester) -> None:
    result = made_up.runpytest_inprocess("--full", "-m", "serial", *PLUGINS_OFF)
    result.assert_outcomes(passed=1, deselected=3)
