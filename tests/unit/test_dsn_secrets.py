"""DSN passwords: which URIs are refused, what a refusal says, what the scrub looks for.

The command-line matrix (every form, channel and failure path) is
tests/integration/test_secrets.py; these are the rules underneath it, without a database.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from psycopg import conninfo

from leasectl.cli import redaction
from leasectl.core.errors import ConfigError
from leasectl.db import dsn as dsnlib

SECRET_TOKENS = ("Kq7v", "Wm3x", "Zr9p")


@pytest.fixture
def no_dsn_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("LEASECTL_DSN", "DATABASE_URL", "PGPASSWORD"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize(
    ("dsn", "ambiguous"),
    [
        ("postgresql://app:Kq7v@db/orders", False),
        ("postgresql://app:Kq7v%2FWm3x%40Zr9p@db/orders", False),
        ("postgresql://app:Kq7v:Wm3x?Zr9p#x@db/orders", False),  # libpq reads these as meant
        ("postgresql://app@db/orders", False),
        ("postgresql://db:5432/orders", False),
        ("postgresql:///orders?host=/tmp", False),
        ("host=db password=Kq7v/Wm3x@Zr9p", False),  # key=value: not a URI
        ("postgresql://app:Kq7v/Wm3x@db/orders", True),  # host "app", port "Kq7v"
        ("postgresql://app:Kq7v@Wm3x@db/orders", True),  # host "Wm3x@db"
        ("POSTGRES://app:Kq7v@Wm3x@db/orders", True),
        ("postgresql://db/orders@x", True),  # an @ in the database name: %40 too
    ],
)
def test_ambiguous_uri(dsn: str, ambiguous: bool) -> None:
    assert dsnlib.ambiguous_uri(dsn) is ambiguous


@pytest.mark.parametrize(
    ("dsn", "fragment"),
    [
        ("postgresql://app:Kq7v/Wm3x@db:5432/orders", "%2F, %40"),
        ("postgresql://app:Kq7v@Wm3x@db:5432/orders", "%2F, %40"),
        ("postgresql://app:Kq7v%Wm3x@db/orders", "write a % in the password as %25"),
        ('postgresql://app:Kq7v" Wm3x@db/orders', "use percent-encoded spaces"),
        ('postgresql://app:Kq7v"Zr9p"Wm3x@[::1/x', 'matching "]"'),
        ("host=db password=Kq7v Wm3x", 'missing "=" after'),
        ("host=db password='Kq7v\"Wm3x Zr9p", "unterminated quoted string"),
        ('host=db password=Kq7v Zr9p"Wm3x=1', "invalid connection option"),
        ("host=db port=Kq7v password=Zr9p", "the port is not a number"),
        ("postgresql://app:Zr9p@db:Kq7v/x", "the port is not a number; percent-encode"),
        ("postgresql://app:Zr9p@db/x?port=Kq7v", "the port is not a number"),
        ("host=a,b,c port=5432,5433 password=Kq7v", "2 ports for 3 hosts"),
        ("postgresql://app:Kq7v@a:5432,b/x?port=1,2,3", "3 ports for 2 hosts"),
        ("host=a,b target_session_attrs=Kq7v password=Zr9p", "target_session_attrs must be"),
    ],
)
def test_refusals_quote_nothing_of_the_dsn(dsn: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        dsnlib.validate_dsn(dsn)
    message = str(err.value)
    assert message.startswith("invalid DSN: ") and fragment in message
    assert "\n" not in message
    assert not [t for t in SECRET_TOKENS if t in message], message
    assert dsnlib.safe_dsn(dsn) == "<invalid DSN>"


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        ("postgresql://app:Kq7v%2FWm3x@db:6432/orders", "db:6432/orders"),
        ("postgresql://app:Kq7v@h1:5432,h2:5433/orders", "h1:5432,h2:5433/orders"),
        ("postgresql://h1,h2:5433/orders", "h1:5432,h2:5433/orders"),
        ("host=h1,h2 port=5433 dbname=orders password=Kq7v", "h1:5433,h2:5433/orders"),
        (
            "host=h1,h2 port=5432,5433 target_session_attrs=read-write user=app password=Kq7v",
            "h1:5432,h2:5433/app",
        ),
        ("host=db port=' 6432 ' dbname=orders password='Kq7v Wm3x'", "db: 6432 /orders"),
    ],
)
def test_safe_dsn_of_accepted_dsns(dsn: str, shown: str) -> None:
    dsnlib.validate_dsn(dsn)
    assert dsnlib.safe_dsn(dsn) == shown


def test_safe_dsn_of_hosts_and_ports_from_the_environment(
    no_dsn_env: pytest.MonkeyPatch,
) -> None:
    no_dsn_env.setenv("PGPORT", "5432,5433")
    assert dsnlib.safe_dsn("host=a,b dbname=orders") == "a:5432,b:5433/orders"
    # Three hosts for two ports: libpq refuses to connect; the message still shows them.
    assert dsnlib.safe_dsn("host=a,b,c dbname=orders") == "a,b,c:5432,5433/orders"


# Tokens between the characters that matter, so that a message showing any of them is caught.
_PASSWORDS = st.lists(
    st.sampled_from([*SECRET_TOKENS, *"/@:%?#&=,[] '\"\\é"]), min_size=1, max_size=10
).map("".join)


@example('="Kq7v%')  # libpq quotes it as "="Kq7v%": its "=" is not libpq's own "="
@given(_PASSWORDS)
def test_an_accepted_raw_uri_is_read_as_meant(password: str) -> None:
    """Whatever the password, a raw URI is refused or libpq reads the server, port and
    database we wrote (so nothing of the password can be shown as one of them)."""
    dsn = f"postgresql://app:{password}@db.example:6432/orders"
    try:
        params = dsnlib.validate_dsn(dsn)
    except ConfigError as exc:
        assert not [t for t in SECRET_TOKENS if t in str(exc)], str(exc)
        return
    assert (params["host"], params["port"], params["dbname"]) == ("db.example", "6432", "orders")
    assert dsnlib.safe_dsn(dsn) == "db.example:6432/orders"


@given(_PASSWORDS)
def test_the_scrub_finds_every_password(password: str) -> None:
    """Raw URI, encoded URI, quoted key=value: the password is among the secrets."""
    escaped = password.replace("\\", "\\\\").replace("'", "\\'")
    for dsn in (
        f"postgresql://app:{password}@db.example:6432/orders",
        f"postgresql://app:{quote(password, safe='')}@db.example:6432/orders",
        f"host=db.example dbname=orders password='{escaped}' user=app",
        f"host=db.example password='{escaped}",  # unterminated: libpq cannot parse it
    ):
        assert password in redaction.secrets_in(["--dsn", dsn]), dsn


@pytest.mark.parametrize(
    ("dsn", "pieces"),
    [
        # libpq: host "app", port "Kq7v", database "Wm3x@127.0.0.1:1/x"
        ("postgresql://app:Kq7v/Wm3x@127.0.0.1:1/x", ["Kq7v/Wm3x", "Kq7v", "Wm3x@127.0.0.1:1/x"]),
        # libpq: password "Kq7v", host "Wm3x@127.0.0.1"
        ("postgresql://app:Kq7v@Wm3x@127.0.0.1:1/x", ["Kq7v@Wm3x", "Wm3x", "Wm3x@127.0.0.1"]),
        ("postgresql://app:Kq7v%2FWm3x@127.0.0.1:1/x", ["Kq7v%2FWm3x", "Kq7v/Wm3x"]),
        (
            "postgresql://app@db/x?password=Kq7v%20Wm3x&sslmode=disable",
            ["Kq7v%20Wm3x", "Kq7v Wm3x"],
        ),
        ("host=db password='Kq7v \\'Wm3x\\\\' user=app", ["Kq7v 'Wm3x\\", "Kq7v \\'Wm3x\\\\"]),
        ("host=db password=Kq7v\\ Wm3x user=app", ["Kq7v Wm3x"]),
        ("host=db password = 'Kq7v Wm3x", ["Kq7v Wm3x"]),
    ],
)
def test_secret_candidates(no_dsn_env: pytest.MonkeyPatch, dsn: str, pieces: list[str]) -> None:
    found = redaction.secrets_in(["status", "--dsn", dsn])
    assert set(pieces) <= set(found), found
    assert found == sorted(found, key=len, reverse=True)  # a password before its pieces
    assert "app" not in found and "x" not in found  # short pieces would garble messages


def test_secret_channels(no_dsn_env: pytest.MonkeyPatch) -> None:
    no_dsn_env.setenv("LEASECTL_DSN", "host=db password=Kq7v")
    no_dsn_env.setenv("DATABASE_URL", "postgresql://app:Wm3x@db/x")
    no_dsn_env.setenv("PGPASSWORD", "Zr9p")
    found = redaction.secrets_in(["--dsn=postgresql://app:Tj5n@db/x", "status"])
    assert {"Kq7v", "Wm3x", "Zr9p", "Tj5n"} <= set(found)


def test_scrub_replaces_longest_first() -> None:
    message = "cannot connect to Wm3x@127.0.0.1: failed to resolve host 'Wm3x@127.0.0.1'"
    secrets = redaction.secrets_in(["--dsn", "postgresql://app:Kq7v@Wm3x@127.0.0.1:1/x"])
    assert (
        redaction.scrub(message, secrets) == "cannot connect to ***: failed to resolve host '***'"
    )


def test_key_value_values_as_libpq_reads_them() -> None:
    text = "password='a\\'b c\\\\' x"
    assert redaction._kv_value(text, len("password=")) == ("a'b c\\", "a\\'b c\\\\")
    assert conninfo.conninfo_to_dict(text.removesuffix(" x"))["password"] == "a'b c\\"
