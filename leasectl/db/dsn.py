"""DSN parsing as libpq does it: the parameters a DSN names, validated without quoting any of
it, and the password-free ``host:port/dbname`` that messages show."""

from __future__ import annotations

import os
import re
from typing import Any

from psycopg import conninfo

from leasectl.core.errors import ConfigError

_URI_SCHEME = re.compile(r"^\s*postgres(?:ql)?://", re.IGNORECASE)
# libpq's own quoted words in its parse errors, in the phrases it writes them in: a bare "="
# can be the start of a quoted password (`invalid percent-encoded token: "="Kq7v%"`).
_LIBPQ_TOKENS = {'missing "=" after': "\0eq\0", 'matching "]" in': "\0br\0"}

PERCENT_ENCODE_HINT = "percent-encode / and @ in the password (%2F, %40)"
AMBIGUOUS_URI_MESSAGE = (
    'invalid DSN: a raw "@" or "/" makes the URI\'s user name, password, server and database '
    f"ambiguous: {PERCENT_ENCODE_HINT}"
)


NO_DSN_MESSAGE = (
    "no database given: pass --dsn, or set LEASECTL_DSN or DATABASE_URL "
    "(to try leasectl without a database, run `leasectl demo`)"
)


def resolve_dsn(cli_value: str | None) -> str:
    """--dsn, else LEASECTL_DSN, else DATABASE_URL; validated for syntax, never echoed."""
    for value in (cli_value, os.environ.get("LEASECTL_DSN"), os.environ.get("DATABASE_URL")):
        if value is not None and value.strip():
            validate_dsn(value)
            return value
    raise ConfigError(NO_DSN_MESSAGE)


# The read server's DSN (`tui`/`status --read-dsn`): a hot standby the reads go to.
READ_DSN_ENV = "LEASECTL_READ_DSN"


def resolve_read_dsn(cli_value: str | None) -> str | None:
    """--read-dsn, else LEASECTL_READ_DSN, else None (reads go to the primary); validated."""
    for value in (cli_value, os.environ.get(READ_DSN_ENV)):
        if value is not None and value.strip():
            try:
                validate_dsn(value)
            except ConfigError as exc:
                raise ConfigError(f"--read-dsn/{READ_DSN_ENV}: {exc}") from None
            return value
    return None


def validate_dsn(dsn: str) -> dict[str, Any]:
    """The connection parameters libpq reads from ``dsn``, or a ConfigError that quotes none of
    it: libpq's own message can hold fragments of the DSN, so any quoted part is dropped."""
    if ambiguous_uri(dsn):
        raise ConfigError(AMBIGUOUS_URI_MESSAGE)
    try:
        params = conninfo.conninfo_to_dict(dsn)
    except Exception as exc:  # psycopg raises ProgrammingError with libpq's text
        detail = _unquoted(str(exc))
        if is_uri(dsn) and detail.startswith("invalid percent-encoded token"):
            detail += " (write a % in the password as %25)"
        raise ConfigError(f"invalid DSN: {detail}".rstrip(": ")) from None
    if not all(p.strip().isdigit() for p in str(params.get("port") or "").split(",") if p.strip()):
        hint = f"; {PERCENT_ENCODE_HINT}" if is_uri(dsn) else ""
        raise ConfigError(f"invalid DSN: the port is not a number{hint}")
    hosts = len(_hosts(params))
    ports = len(str(params.get("port") or "").split(","))
    if ports not in (1, hosts):
        raise ConfigError(
            f"invalid DSN: {ports} ports for {hosts} hosts (give one port for all, or one per host)"
        )
    attrs = params.get("target_session_attrs")
    if attrs is not None and attrs not in SESSION_ATTRS:
        raise ConfigError(
            "invalid DSN: target_session_attrs must be one of " + ", ".join(SESSION_ATTRS)
        )
    return params


# libpq's values of target_session_attrs; read-write is the one that follows a failover.
SESSION_ATTRS = ("any", "read-write", "read-only", "primary", "standby", "prefer-standby")


def _hosts(params: dict[str, Any]) -> list[str]:
    """The servers libpq tries, in order (a multi-host DSN names several, comma-separated;
    hostaddr, when given, counts them instead of host)."""
    given = params.get("host") or params.get("hostaddr") or os.environ.get("PGHOST") or ""
    return str(given).split(",")


def is_uri(dsn: str) -> bool:
    return _URI_SCHEME.match(dsn) is not None


def ambiguous_uri(dsn: str) -> bool:
    """A URI whose user name and password libpq may have cut short: two "@", or a "/" before
    the "@".

    libpq reads the userinfo up to the first "@" (a "/" before it means there is none), so
    ``postgresql://u:pa/ss@h/db`` connects to host "u", port "pa", database "ss@h/db", and
    ``postgresql://u:pa@ss@h/db`` to host "ss@h". Any "@" other than the one that ends the
    userinfo must be percent-encoded (%40), wherever it is; so must a "/" in the password.
    """
    match = _URI_SCHEME.match(dsn)
    if match is None:
        return False
    rest = dsn[match.end() :]
    first_at, first_slash = rest.find("@"), rest.find("/")
    if first_at < 0:
        return False
    if 0 <= first_slash < first_at:
        return True
    return "@" in rest[first_at + 1 :]


def _unquoted(message: str) -> str:
    """The first line of a libpq parse error without the parts it quotes from the DSN.

    Everything from the first quote to the last goes (a quoted fragment may itself hold a
    quote), except libpq's own quoted tokens such as the "=" of `missing "=" after`."""
    line = message.strip().splitlines()[0] if message.strip() else ""
    for token, mark in _LIBPQ_TOKENS.items():
        line = line.replace(token, mark)
    first, last = line.find('"'), line.rfind('"')
    if first >= 0:
        line = line[:first] + "…" + (line[last + 1 :] if last > first else "")
    for token, mark in _LIBPQ_TOKENS.items():
        line = line.replace(mark, token)
    return line.strip()


def safe_dsn(dsn: str) -> str:
    """host:port/dbname for messages, from the parameters libpq reads; never the password. A
    multi-host DSN shows each server: ``a:5432,b:5433/dbname``.

    A DSN that validate_dsn refuses shows as "<invalid DSN>": the host, port or database libpq
    reads from an ambiguous URI may be pieces of the password."""
    try:
        params = validate_dsn(dsn)
    except ConfigError:
        return "<invalid DSN>"
    hosts = _hosts(params)
    ports = str(params.get("port") or os.environ.get("PGPORT") or "").split(",")
    if len(ports) == 1:
        ports *= len(hosts)
    if len(ports) == len(hosts):
        where = ",".join(
            _place(h or "localhost", p or "5432") for h, p in zip(hosts, ports, strict=True)
        )
    else:  # PGHOST and PGPORT that libpq cannot pair either
        where = f"{','.join(hosts)}:{','.join(ports)}"
    dbname = str(params.get("dbname") or params.get("user") or os.environ.get("PGDATABASE") or "")
    return f"{where}/{dbname}" if dbname else where


def _place(host: str, port: str) -> str:
    return f"{host}:{port}" if not host.startswith("/") else f"{host} (socket, port {port})"


def dsn_params(dsn: str) -> dict[str, Any]:
    """The parameters libpq reads from ``dsn`` (its error, which may quote the DSN, as is: for
    callers that only look for secrets and suppress it)."""
    return conninfo.conninfo_to_dict(dsn)
