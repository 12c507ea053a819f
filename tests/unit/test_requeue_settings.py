"""Requeue's settings as typed (`--priority`, `--attempts`, the console's two fields): their
bounds, and a hostile value said in one escaped line."""

from __future__ import annotations

import pytest

from leasectl.core.actions import (
    ACTIONS,
    MAX_ATTEMPTS,
    NO_SETTINGS,
    PRIORITY_MAX,
    PRIORITY_MIN,
    JobSettings,
    OperatorAction,
    check_settings,
    parse_settings,
)
from leasectl.core.errors import UsageError
from tests.hostile import CORPUS, ESC


def test_in_bounds_values_are_taken() -> None:
    assert parse_settings(None, None) == NO_SETTINGS and not NO_SETTINGS.given()
    assert parse_settings(str(PRIORITY_MIN), "1") == JobSettings(PRIORITY_MIN, 1)
    assert parse_settings(f" {PRIORITY_MAX} ", str(MAX_ATTEMPTS)) == JobSettings(
        PRIORITY_MAX, MAX_ATTEMPTS
    )
    assert parse_settings(-10, 3) == JobSettings(-10, 3)


@pytest.mark.parametrize(
    ("priority", "attempts", "said"),
    [
        (str(PRIORITY_MIN - 1), None, "--priority"),
        (str(PRIORITY_MAX + 1), None, "--priority"),
        ("1.5", None, "--priority"),
        ("", None, "--priority"),
        (None, "0", "--attempts"),
        (None, str(MAX_ATTEMPTS + 1), "--attempts"),
        (None, "-1", "--attempts"),
        (None, "three", "--attempts"),
    ],
)
def test_out_of_bounds_values_are_refused_in_one_line(
    priority: str | None, attempts: str | None, said: str
) -> None:
    with pytest.raises(UsageError) as raised:
        parse_settings(priority, attempts)
    assert raised.value.exit_code == 2
    assert str(raised.value).startswith(said) and "\n" not in str(raised.value)


@pytest.mark.parametrize("text", CORPUS[:40])
def test_a_hostile_value_is_said_escaped_in_one_line(text: str) -> None:
    for args in ((text, None), (None, text)):
        try:
            parse_settings(*args)
        except UsageError as exc:
            message = str(exc)
            assert ESC not in message and "\n" not in message and "\r" not in message
        else:  # (a corpus string that happens to be an integer in bounds)
            assert text.strip().lstrip("+-").isdigit()


def test_only_the_actions_that_take_settings_accept_them() -> None:
    given = JobSettings(priority=1)
    assert [a for a, info in ACTIONS.items() if info.settings] == [OperatorAction.REQUEUE]
    for info in ACTIONS.values():
        check_settings(info, NO_SETTINGS)
        if not info.settings:
            with pytest.raises(UsageError, match="requeue only"):
                check_settings(info, given)
