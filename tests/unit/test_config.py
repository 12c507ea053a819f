"""Input resolution and validation: durations, ids, payloads, DSNs (no database)."""

from __future__ import annotations

import os
import pwd
import re
import socket
from datetime import timedelta
from urllib.parse import quote

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from leasectl.core import config
from leasectl.core.errors import ConfigError, UsageError
from leasectl.db import dsn as dsnlib

UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}
TEN_YEARS_MS = 3650 * 86_400_000

# -- durations --------------------------------------------------------------------------------


@given(unit=st.sampled_from(sorted(UNIT_MS)), data=st.data())
def test_duration_round_trip(unit: str, data: st.DataObject) -> None:
    """A whole number of any unit parses to exactly that many milliseconds."""
    n = data.draw(st.integers(min_value=1, max_value=TEN_YEARS_MS // UNIT_MS[unit]))
    expected = timedelta(milliseconds=n * UNIT_MS[unit])
    assert config.parse_duration(f"{n}{unit}") == expected
    assert config.parse_duration(f" {n} {unit} ") == expected
    # Plain seconds are the same amount.
    assert config.parse_duration(str(expected.total_seconds())) == expected


@given(st.integers(min_value=1, max_value=TEN_YEARS_MS))
def test_duration_milliseconds_round_trip_through_seconds(ms: int) -> None:
    value = config.parse_duration(f"{ms}ms")
    assert config.parse_duration(f"{value.total_seconds()}s") == value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("250ms", timedelta(milliseconds=250)),
        ("30s", timedelta(seconds=30)),
        ("5m", timedelta(minutes=5)),
        ("1h", timedelta(hours=1)),
        ("2.5", timedelta(seconds=2.5)),
        ("1.5m", timedelta(seconds=90)),
    ],
)
def test_duration_examples(text: str, expected: timedelta) -> None:
    assert config.parse_duration(text) == expected


_VALID = re.compile(r"^\s*\d+(\.\d+)?\s*(ms|s|m|h|d)?\s*$")


@given(st.text(max_size=12))
def test_duration_rejects_garbage(text: str) -> None:
    assume(not _VALID.match(text))
    with pytest.raises(UsageError, match="invalid duration"):
        config.parse_duration(text)


@pytest.mark.parametrize("text", ["5x", "abc", "1 minute", "", "1e3", "0x10", "1s2", "--1"])
def test_duration_rejects_malformed(text: str) -> None:
    with pytest.raises(UsageError, match=r"invalid --delay .*250ms"):
        config.parse_duration(text, what="--delay")


@pytest.mark.parametrize("text", ["-1", "-5m", "0", "0ms"])
def test_duration_rejects_negative_and_zero_with_the_reason(text: str) -> None:
    with pytest.raises(UsageError, match=r"invalid --delay .*must be greater than zero"):
        config.parse_duration(text, what="--delay")


def test_duration_zero_only_when_allowed() -> None:
    with pytest.raises(UsageError, match="greater than zero"):
        config.parse_duration("0s")
    assert config.parse_duration("0", allow_zero=True) == timedelta(0)


def test_a_negative_duration_where_zero_is_allowed_says_zero_is_accepted() -> None:
    with pytest.raises(UsageError, match=r"invalid --grace '-1': must be zero or more$"):
        config.parse_duration("-1", allow_zero=True, what="--grace")


def test_duration_upper_bound() -> None:
    with pytest.raises(UsageError, match="ten years"):
        config.parse_duration("3651d")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (timedelta(milliseconds=850), "850ms"),
        (timedelta(seconds=42), "42s"),
        (timedelta(seconds=185), "3m05s"),
        (timedelta(hours=2, minutes=10), "2h10m"),
        (timedelta(seconds=-42), "-42s"),
        (None, "-"),
    ],
)
def test_format_duration(value: timedelta | None, text: str) -> None:
    assert config.format_duration(value) == text


# -- ids and payloads -------------------------------------------------------------------------


@given(st.integers(min_value=1, max_value=2**63 - 1))
def test_job_id_round_trip(n: int) -> None:
    assert config.parse_job_id(str(n)) == n


@pytest.mark.parametrize("text", ["abc", "0", "-3", "1.5", "", "12a", str(2**63)])
def test_job_id_rejects(text: str) -> None:
    with pytest.raises(UsageError, match="invalid job id"):
        config.parse_job_id(text)


@pytest.mark.parametrize(
    "text",
    [
        '{"a": [1, 2]}',
        "3",
        '{"amount": 12345678901234567.89, "rate": 0.10000000000000000001}',
        "1e400",
        "9" * 5000,  # more digits than Python's int() takes
        " [1] ",
    ],
)
def test_payload_is_the_users_text_once_validated(text: str) -> None:
    assert config.parse_payload(text) == text


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity", '{"a": NaN}'])
def test_payload_refuses_what_json_does_not_have(constant: str) -> None:
    with pytest.raises(UsageError, match=r"^invalid JSON payload: .*is not JSON$"):
        config.parse_payload(constant)


def test_payload_depth_limit() -> None:
    limit = config.MAX_PAYLOAD_DEPTH
    assert config.parse_payload("[" * limit + "]" * limit)
    assert config.parse_payload("[" + '{"a": ' * (limit - 1) + "1" + "}" * (limit - 1) + "]")
    for depth in (limit + 1, 2_000, 100_000):
        with pytest.raises(UsageError, match=rf"^payload nested too deep: at most {limit} levels"):
            config.parse_payload("[" * depth + "]" * depth)


def test_payload_size_limit() -> None:
    fits = '"' + "x" * (config.MAX_PAYLOAD_BYTES - 2) + '"'
    assert config.parse_payload(fits) is fits
    with pytest.raises(UsageError, match=r"^payload too large: 16,777,217 bytes"):
        config.parse_payload(fits + " ")


def test_one_enqueue_sends_at_most_64_mib_of_payloads() -> None:
    """--count N copies of a payload: N times its size in one statement, bounded in all."""
    config.check_enqueue_size(config.MAX_PAYLOAD_BYTES, 4)  # four of the largest: 64 MiB
    config.check_enqueue_size(2, 1_000_000)  # a million '{}'
    with pytest.raises(UsageError, match=r"^--count 5 copies of a 16,777,216-byte payload are "):
        config.check_enqueue_size(config.MAX_PAYLOAD_BYTES, 5)
    with pytest.raises(UsageError, match=r"at most 67,108,864 \(64 MiB\)"):
        config.check_enqueue_size(config.MAX_ENQUEUE_BYTES // 2 + 1, 2)


def test_payload_depth_counts_arrays_and_objects() -> None:
    assert config.payload_depth(1) == 0
    assert config.payload_depth([]) == 1
    assert config.payload_depth({"a": [1, {"b": []}], "c": {}}) == 4


@pytest.mark.parametrize(
    ("text", "where"),
    [("{bad", "line 1 column 2"), ('{"a": 1,}', "line 1 column 9"), ("", "line 1 column 1")],
)
def test_payload_errors_are_one_line(text: str, where: str) -> None:
    with pytest.raises(UsageError) as err:
        config.parse_payload(text)
    message = str(err.value)
    assert message.startswith("invalid JSON payload: ")
    assert where in message
    assert "\n" not in message


# -- DSN resolution ---------------------------------------------------------------------------


@pytest.fixture
def no_dsn_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("LEASECTL_DSN", "DATABASE_URL", "LEASECTL_SCHEMA"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_dsn_order(no_dsn_env: pytest.MonkeyPatch) -> None:
    no_dsn_env.setenv("DATABASE_URL", "dbname=from_database_url")
    assert dsnlib.resolve_dsn(None) == "dbname=from_database_url"
    no_dsn_env.setenv("LEASECTL_DSN", "dbname=from_leasectl_dsn")
    assert dsnlib.resolve_dsn(None) == "dbname=from_leasectl_dsn"
    assert dsnlib.resolve_dsn("dbname=from_option") == "dbname=from_option"


def test_dsn_blank_values_are_skipped(no_dsn_env: pytest.MonkeyPatch) -> None:
    no_dsn_env.setenv("LEASECTL_DSN", "  ")
    no_dsn_env.setenv("DATABASE_URL", "dbname=fallback")
    assert dsnlib.resolve_dsn("") == "dbname=fallback"


def test_no_dsn_points_at_demo(no_dsn_env: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError) as err:
        dsnlib.resolve_dsn(None)
    assert "leasectl demo" in str(err.value)
    assert "--dsn" in str(err.value) and "LEASECTL_DSN" in str(err.value)


def test_invalid_dsn_hides_password(no_dsn_env: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError) as err:
        dsnlib.resolve_dsn("host=db password='s3cr3t-value nosuchkey=1")
    assert "invalid DSN" in str(err.value)
    assert "s3cr3t" not in str(err.value)


def test_schema_resolution(no_dsn_env: pytest.MonkeyPatch) -> None:
    assert config.resolve_schema(None) == "leasectl"
    no_dsn_env.setenv("LEASECTL_SCHEMA", "jobs_a")
    assert config.resolve_schema(None) == "jobs_a"
    assert config.resolve_schema("jobs_b") == "jobs_b"
    with pytest.raises(UsageError, match="invalid schema name"):
        config.resolve_schema("x" * 64)


@pytest.mark.parametrize("name", ["pg_catalog", "information_schema", "pg_toast", "pg_temp_3"])
def test_system_schemas_are_refused(name: str) -> None:
    with pytest.raises(UsageError, match=rf"^invalid schema name '{name}': pg_\* and info"):
        config.resolve_schema(name)


def test_queue_names_have_a_maximum_length() -> None:
    name = "q" * config.MAX_QUEUE_CHARS
    assert config.check_queue(name) == name
    with pytest.raises(UsageError) as err:
        config.check_queue("é" * 8000, "-q")
    message = str(err.value)
    assert message.startswith("-q: a queue name has at most 200 characters, got 8,000: 'éé")
    assert len(message) < 300


_PASSWORDS = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zs")),
    min_size=6,
    max_size=30,
)


@given(_PASSWORDS)
def test_safe_dsn_never_shows_password_uri(password: str) -> None:
    dsn = f"postgresql://app:{quote(password, safe='')}@db.example:6432/orders"
    shown = dsnlib.safe_dsn(dsn)
    assert shown == "db.example:6432/orders"
    assert password not in shown


@given(_PASSWORDS)
def test_safe_dsn_never_shows_password_key_value(password: str) -> None:
    escaped = password.replace("\\", "\\\\").replace("'", "\\'")
    dsn = f"host=db.example port=6432 dbname=orders user=app password='{escaped}'"
    shown = dsnlib.safe_dsn(dsn)
    assert shown == "db.example:6432/orders"
    assert password not in shown


def test_safe_dsn_of_broken_dsn() -> None:
    assert dsnlib.safe_dsn("host=db password='open") == "<invalid DSN>"


def test_operator_actor_is_user_then_logname_then_the_os_account(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The audit's operator name: never "unknown" when $USER and $LOGNAME are unset (cron,
    systemd units), but the account the process runs as."""
    host = socket.gethostname()
    monkeypatch.setenv("USER", "alice")
    monkeypatch.setenv("LOGNAME", "bob")
    assert config.operator_actor() == f"operator:alice@{host}"
    monkeypatch.delenv("USER")
    assert config.operator_actor() == f"operator:bob@{host}"
    monkeypatch.delenv("LOGNAME")
    account = pwd.getpwuid(os.getuid()).pw_name
    assert config.operator_actor() == f"operator:{account}@{host}"
