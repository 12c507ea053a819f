"""Reads from a hot standby, without a database: when the lag makes countdowns stale, the
words for it, the console's frozen clock, the read DSN's resolution and its secrets."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from leasectl.cli import redaction
from leasectl.console.view import ConsoleFilter, DbClock
from leasectl.console.widgets.bars import Status, banner_text
from leasectl.core.errors import ConfigError
from leasectl.core.models import Freshness
from leasectl.core.readlag import DEFAULT_LEASE_TTL, countdowns_stale, stale_after
from leasectl.db import dsn as dsnlib
from leasectl.present.times import read_lag_text
from tests.console.sample import NOW, W1, owner, s, sample_snapshot


def test_stale_after_the_shortest_lease_ttl_an_owner_declared() -> None:
    fast = replace(owner(W1, Freshness.FRESH, seen_ago=1, held=1), lease_ttl=s(5))
    slow = owner(W1, Freshness.FRESH, seen_ago=1, held=1)  # 30 s
    undeclared = replace(slow, lease_ttl=None)
    assert stale_after([slow, fast, undeclared]) == s(5)
    assert stale_after([undeclared]) == DEFAULT_LEASE_TTL
    assert stale_after([]) == DEFAULT_LEASE_TTL
    assert countdowns_stale(s(6), [fast]) and not countdowns_stale(s(5), [fast])
    assert not countdowns_stale(None, [fast])  # read from the primary


@pytest.mark.parametrize(
    ("lag", "stale", "words", "style"),
    [
        (None, False, None, None),
        (timedelta(0), False, "standby caught up", "dim"),
        (timedelta(seconds=2.7), False, "standby 2s behind", "yellow"),
        (timedelta(seconds=45), True, "⚠ countdowns stale: standby 45s behind", "bold red"),
    ],
)
def test_the_lag_in_words(
    lag: timedelta | None, stale: bool, words: str | None, style: str | None
) -> None:
    text = read_lag_text(lag, stale=stale)
    if words is None:
        assert text is None
    else:
        assert text is not None and text.plain == words and str(text.style) == style


def test_a_standby_clock_behind_its_primary_does_not_tick_between_refreshes() -> None:
    behind = replace(sample_snapshot(), read_lag=s(3))
    frozen = DbClock.of(behind, 100.0)
    assert frozen.frozen and frozen.at(190.0) == NOW
    for lag in (None, timedelta(0)):  # a primary, a caught-up standby: now() ticks
        live = DbClock.of(replace(sample_snapshot(), read_lag=lag), 100.0)
        assert not live.frozen and live.at(190.0) == NOW + s(90)


def status(**changes: object) -> Status:
    base = Status(
        where="db.example:5432/payments",
        server_version="15.4",
        db_now=NOW,
        since_refresh=3.0,
        took=0.01,
        connected=False,
        error="cannot connect to standby.example:5432/payments: connection refused",
        retry_in=2.0,
        attempt=1,
        read_only=None,
        filter=ConsoleFilter(),
        polling=False,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def test_the_banner_says_which_server_is_unreachable() -> None:
    split = banner_text(status(read_where="standby.example:5432/payments"))
    assert split is not None
    assert split.plain.startswith("✖ READ SERVER UNREACHABLE (actions still go to the primary) ")
    one = banner_text(status())
    assert one is not None and one.plain.startswith("✖ DATABASE UNREACHABLE ")


def test_the_read_dsn_from_the_option_else_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(dsnlib.READ_DSN_ENV, raising=False)
    assert dsnlib.resolve_read_dsn(None) is None
    monkeypatch.setenv(dsnlib.READ_DSN_ENV, "host=standby dbname=app")
    assert dsnlib.resolve_read_dsn(None) == "host=standby dbname=app"
    assert dsnlib.resolve_read_dsn("host=other") == "host=other"
    monkeypatch.setenv(dsnlib.READ_DSN_ENV, "postgresql://u:Pw9x@h/db?x=1&x=2&&=")
    with pytest.raises(ConfigError) as raised:
        dsnlib.resolve_read_dsn(None)
    assert str(raised.value).startswith("--read-dsn/LEASECTL_READ_DSN: ")
    assert "Pw9x" not in str(raised.value)


def test_the_read_dsns_password_is_a_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LEASECTL_DSN", "DATABASE_URL", dsnlib.READ_DSN_ENV):
        monkeypatch.delenv(name, raising=False)
    assert "Hq4v" in redaction.secrets_in(["tui", "--read-dsn", "postgresql://a:Hq4v@s/x"])
    assert "Jr5w" in redaction.secrets_in(["status", "--read-dsn=postgresql://a:Jr5w@s/x"])
    monkeypatch.setenv(dsnlib.READ_DSN_ENV, "host=s password=Kt6y")
    assert "Kt6y" in redaction.secrets_in(["status"])
