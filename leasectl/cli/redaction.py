"""What is secret in the arguments and the environment, and how a message loses it.

A password is taken out where it stands as the password: a URI's userinfo, a ``password=``
key/value (quoted or not, in a conninfo or a URI's query), not wherever its text happens to be
(a password ``bench`` must not turn worker ``bench-r0-p0`` into ``***-r0-p0``). Two nets
besides: a password with punctuation in it also goes wherever it stands as a word of its own
(no queue, worker id or schema name is "Kq7v/Wm3x" by chance: such a text on stderr is the
password, quoted by a message we did not foresee), and what libpq may have read of an
ambiguous URI as a host, port or database goes wherever it is.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from urllib.parse import quote, unquote

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


def _longest_first(found: set[str]) -> tuple[str, ...]:
    return tuple(sorted((s for s in found if s), key=len, reverse=True))


@dataclass(frozen=True)
class Secrets:
    """``passwords``: taken out where they stand as the password (and, with punctuation in
    them, as a word of their own); ``anywhere``: what libpq may have read of an ambiguous URI
    as a host, port or database, taken out wherever it is. Each longest first, so that a
    password goes before the pieces of it."""

    passwords: tuple[str, ...] = ()
    anywhere: tuple[str, ...] = ()

    @property
    def all(self) -> tuple[str, ...]:
        return _longest_first({*self.passwords, *self.anywhere})

    def __iter__(self) -> Iterator[str]:
        return iter(self.all)

    def __contains__(self, item: object) -> bool:
        return item in self.passwords or item in self.anywhere


def secrets_in(args: Sequence[str]) -> Secrets:
    """Passwords in any DSN we may have been given, even one too broken to parse, and in
    $PGPASSWORD."""
    from leasectl.db.dsn import ambiguous_uri, dsn_params, is_uri

    passwords: set[str] = {os.environ.get("PGPASSWORD") or ""}
    anywhere: set[str] = set()
    for dsn in _dsn_candidates(args):
        with contextlib.suppress(Exception):
            passwords.add(str(dsn_params(dsn).get("password") or ""))
        (anywhere if ambiguous_uri(dsn) else passwords).update(_uri_password_pieces(dsn))
        for m in _KV_PASSWORD.finditer(dsn):
            value, raw = _kv_value(dsn, m.end())
            passwords.update({value, raw})
            if is_uri(dsn):  # ?password=... in a URI's query ends at "&"
                first = raw.split("&", 1)[0]
                passwords.update({first, unquote(first), unquote(raw)})
    return Secrets(_longest_first(passwords), _longest_first(anywhere))


# Where a password stands as the password: after a URI's "user:" (any scheme: a message may
# cut the DSN short) or a "password=" (a conninfo, a URI's query; spaces and a quote allowed).
_AS_PASSWORD = r"(?P<pre>://[^\s/@:'\"]*:|\bpassword\s*=\s*'?)"
# A password that no identifier could hold (punctuation other than "_", "-", "."), as a word.
_PLAIN = re.compile(r"[\w.-]+")
_WORD_EDGE_BEFORE = r"(?<![\w.-])"
_WORD_EDGE_AFTER = r"(?![\w.-])"
# Any other password in a DSN on stderr (one from no argument we know: a passfile's, say).
_ANY_URI_PASSWORD = re.compile(r"(?P<pre>postgres(?:ql)?://[^\s/@:'\"]*:)[^\s@/]+(?=@)", re.I)
_ANY_KV_PASSWORD = re.compile(r"\bpassword\s*=\s*", re.I)


def _forms(password: str) -> set[str]:
    """The password as it may be written: as given, percent-encoded, escaped for key=value."""
    escaped = password.replace("\\", "\\\\").replace("'", "\\'")
    return {password, quote(password, safe=""), escaped}


def _redact_kv_values(text: str) -> str:
    out: list[str] = []
    at = 0
    for m in _ANY_KV_PASSWORD.finditer(text):
        if m.start() < at:
            continue
        _, raw = _kv_value(text, m.end())
        quoted = text.startswith("'", m.end())
        end = m.end() + len(raw)
        if quoted:
            end += 1 + (text.startswith("'", end + 1))
        out += [text[at : m.end()], "'***'" if quoted else "***"]
        at = end
    out.append(text[at:])
    return "".join(out)


@functools.cache
def _patterns(secrets: Secrets) -> tuple[re.Pattern[str], ...]:
    """A password's forms where they stand as the password, and as a word when no identifier
    could hold them; longest first."""
    forms = _longest_first({f for p in secrets.passwords for f in _forms(p)})
    patterns = []
    for form in forms:
        patterns.append(re.compile(_AS_PASSWORD + re.escape(form), re.I))
        if _PLAIN.fullmatch(form) is None:
            patterns.append(re.compile(_WORD_EDGE_BEFORE + re.escape(form) + _WORD_EDGE_AFTER))
    return tuple(patterns)


def redact(text: str, secrets: Secrets) -> str:
    for pattern in _patterns(secrets):
        text = pattern.sub(lambda m: (m.groupdict().get("pre") or "") + "***", text)
    for secret in secrets.anywhere:
        text = text.replace(secret, "***")
    text = _ANY_URI_PASSWORD.sub(r"\g<pre>***", text)
    return _redact_kv_values(text)


def scrub(message: str, secrets: Secrets) -> str:
    message = redact(message, secrets)
    return " ".join(part.strip() for part in message.strip().splitlines() if part.strip())
