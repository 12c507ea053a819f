"""What is secret in the arguments and the environment, and how a message loses it."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Sequence
from urllib.parse import unquote

# Up to the LAST "@": a raw "/" or "@" in the password makes libpq stop earlier, so this takes
# more than libpq does; the generous reading is the right one for scrubbing.
_URI_USERINFO = re.compile(r"^\s*postgres(?:ql)?://(?P<userinfo>.*)@", re.IGNORECASE | re.DOTALL)
_KV_PASSWORD = re.compile(r"\bpassword\s*=\s*")
_URI_SEPARATORS = re.compile(r"[/@:?#&,]+")
MIN_PIECE = 3  # shorter pieces of a password are not scrubbed: they would garble every message


def _dsn_candidates(args: Sequence[str]) -> list[str]:
    from leasectl.db.dsn import READ_DSN_ENV  # (psycopg: only once there is a line to scrub)

    found = [os.environ.get(name) for name in ("LEASECTL_DSN", "DATABASE_URL", READ_DSN_ENV)]
    for i, arg in enumerate(args):
        for option in ("--dsn", "--read-dsn"):
            if arg == option and i + 1 < len(args):
                found.append(args[i + 1])
            elif arg.startswith(option + "="):
                found.append(arg.removeprefix(option + "="))
    return [c for c in found if c]


def _kv_value(text: str, start: int) -> tuple[str, str]:
    """The value libpq reads at ``start`` of a key=value DSN (quoted or not, backslash escapes
    undone; an unterminated quote runs to the end) and its raw text."""
    quoted = text.startswith("'", start)
    i = start + 1 if quoted else start
    value: list[str] = []
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            value.append(text[i + 1])
            i += 2
            continue
        if (quoted and char == "'") or (not quoted and char.isspace()):
            break
        value.append(char)
        i += 1
    return "".join(value), text[start + 1 if quoted else start : i]


def _uri_password_pieces(dsn: str) -> set[str]:
    """Everything between the user's ":" and the last "@", raw and decoded, and each piece of it
    libpq may have read as a host, port or database name; for an ambiguous URI, also the host,
    port and database libpq did read."""
    from leasectl.db.dsn import ambiguous_uri, dsn_params

    found: set[str] = set()
    match = _URI_USERINFO.match(dsn)
    if match is None:
        return found
    user, colon, password = match.group("userinfo").partition(":")
    if colon and password:
        for form in (password, unquote(password)):
            found.add(form)
            found.update(p for p in _URI_SEPARATORS.split(form) if len(p) >= MIN_PIECE)
    if ambiguous_uri(dsn):
        with contextlib.suppress(Exception):
            params = dsn_params(dsn)
            for key in ("host", "port", "dbname"):
                value = str(params.get(key) or "")
                found.update(
                    p for p in {value, *value.split(",")} if len(p) >= MIN_PIECE and p != user
                )
    return found


def secrets_in(args: Sequence[str]) -> list[str]:
    """Passwords in any DSN we may have been given, even one too broken to parse, and in
    $PGPASSWORD; longest first, so that a password goes before the pieces of it."""
    from leasectl.db.dsn import dsn_params, is_uri

    secrets: set[str] = {os.environ.get("PGPASSWORD") or ""}
    for dsn in _dsn_candidates(args):
        with contextlib.suppress(Exception):
            secrets.add(str(dsn_params(dsn).get("password") or ""))
        secrets.update(_uri_password_pieces(dsn))
        for m in _KV_PASSWORD.finditer(dsn):
            value, raw = _kv_value(dsn, m.end())
            secrets.update({value, raw})
            if is_uri(dsn):  # ?password=... in a URI's query ends at "&"
                first = raw.split("&", 1)[0]
                secrets.update({first, unquote(first), unquote(raw)})
    return sorted((s for s in secrets if s), key=len, reverse=True)


def redact(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def scrub(message: str, secrets: Sequence[str]) -> str:
    message = redact(message, secrets)
    return " ".join(part.strip() for part in message.strip().splitlines() if part.strip())
