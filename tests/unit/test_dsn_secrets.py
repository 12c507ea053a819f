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
    found = list(redaction.secrets_in(["status", "--dsn", dsn]))
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


# A short common password is taken out where it stands as the password, not wherever its text
# is: worker ids and queue names that hold it are shown as they are.
BYSTANDERS = "worker bench-r0-p0 on queue leasectl_longhorizon_bench (bench), a queue of postgres"


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://app:{p}@db.example:6432/orders",
        "host=db.example user=app password={p}",
        "host=db.example user=app password='{p}'",
        "postgresql://app@db.example/orders?sslmode=disable&password={p}",
    ],
)
@pytest.mark.parametrize("password", ["bench", "a", "postgres"])
def test_short_password_only_where_it_is_the_password(
    no_dsn_env: pytest.MonkeyPatch, dsn: str, password: str
) -> None:
    given = dsn.format(p=password)
    secrets = redaction.secrets_in(["--dsn", given])
    assert password in secrets
    assert redaction.redact(BYSTANDERS, secrets) == BYSTANDERS
    said = redaction.redact(f"cannot use {given} for {BYSTANDERS}", secrets)
    assert said.endswith(f" for {BYSTANDERS}")
    quoted = {
        "postgresql://app:{p}@": "postgresql://app:***@",
        "password={p}": "password=***",
        "password='{p}'": "password='***'",
    }
    form = next(k for k in quoted if k in dsn)
    assert quoted[form] in said and form.format(p=password) not in said


@pytest.mark.parametrize("password", ["bench", "a", "postgres"])
def test_short_password_in_messages_that_quote_the_dsn(
    no_dsn_env: pytest.MonkeyPatch, password: str
) -> None:
    """What a driver's message quotes of a DSN (its conninfo, escaped and quoted; a URI)."""
    no_dsn_env.setenv("PGPASSWORD", password)
    secrets = redaction.secrets_in(["status"])
    for message, shown in [
        (
            f"invalid dsn: host=h password = '{password}' x",
            "invalid dsn: host=h password = '***' x",
        ),
        (
            f"POSTGRESQL://{password}:{password}@{password}/d",
            f"POSTGRESQL://{password}:***@{password}/d",
        ),
        (f"bench-r0-{password} password={password}", f"bench-r0-{password} password=***"),
    ]:
        assert redaction.redact(message, secrets) == shown


@pytest.mark.parametrize("password", ["Kq7v/Wm3x", "Kq7v Wm3x", "Kq7v'Wm3x", "Kq7v%Wm3x"])
def test_a_password_no_name_could_hold_goes_as_a_word_too(
    no_dsn_env: pytest.MonkeyPatch, password: str
) -> None:
    """The second net: a password with punctuation in it, quoted bare by some message."""
    no_dsn_env.setenv("PGPASSWORD", password)
    secrets = redaction.secrets_in(["status"])
    said = redaction.redact(f"cannot use {password} nor '{quote(password, safe='')}'", secrets)
    assert said == "cannot use *** nor '***'"
    # As part of a longer name it stays: that name is not the password.
    assert redaction.redact(f"queue x{password}", secrets) == f"queue x{password}"


def test_a_password_from_no_argument_in_a_dsn_on_stderr(no_dsn_env: pytest.MonkeyPatch) -> None:
    """A DSN on stderr whose password leasectl was never told (a passfile's, say) loses it too."""
    secrets = redaction.secrets_in(["status"])
    message = "postgresql://app:Tj5n@h/x and host=h password='Tj5n \\' x' user=app"
    assert (
        redaction.redact(message, secrets)
        == "postgresql://app:***@h/x and host=h password='***' user=app"
    )
