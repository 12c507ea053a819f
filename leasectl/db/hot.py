"""The worker's hot statements: prepared once per connection, sent through libpq directly.

A worker repeats one statement (complete what finished, claim the next) thousands of times a
second, and a psycopg cursor spends much of each run on general machinery for a statement whose
text, parameter types and columns never change. Here it is prepared once per connection; each
run encodes its parameters by the types the server inferred and makes one blocking
``PQexecPrepared`` call; psycopg's own loaders load the rows. The saving is in BENCHMARKS.md
("The worker's round trip through libpq").

Used by ``work.py`` only: the hot path of the worker.
"""

from __future__ import annotations

import functools
import struct
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq
from psycopg.adapt import AdaptersMap, Transformer

from leasectl.db import sql as queries

_NAME_PREFIX = b"leasectl_"

Encoder = Callable[[Any], bytes]


def _int(value: int) -> bytes:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected an integer, got {value!r}")
    return str(value).encode()


def _text(value: str, encoding: str) -> bytes:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value.encode(encoding)  # the connection's: a server need not speak UTF-8


def _int_array(value: str | Sequence[int]) -> bytes:
    """An array literal as given (work.py passes them ready made) or a sequence of ints."""
    if isinstance(value, str):
        return value.encode()
    return ("{" + ",".join(str(int(v)) for v in value) + "}").encode()


# Timestamps and intervals go in PostgreSQL's binary format (microseconds as integers, exact):
# their text input is the costliest to parse on the server (BENCHMARKS.md).
_INT8 = struct.Struct(">q")
_INTERVAL = struct.Struct(">qii")  # microseconds of the time part, days, months
_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_MINUS_INFINITY = _INT8.pack(-(2**63))  # DT_NOBEGIN


def _interval(value: timedelta) -> bytes:
    if not isinstance(value, timedelta):
        raise TypeError(f"expected a timedelta, got {value!r}")
    # Exact, sign included: timedelta keeps days signed and seconds, microseconds positive,
    # as an interval keeps its day and time parts apart.
    return _INTERVAL.pack(value.seconds * 1_000_000 + value.microseconds, value.days, 0)


def _timestamptz(value: datetime | str) -> bytes:
    """An aware datetime, exact to the microsecond, or the literal ``-infinity``."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        since = value - _PG_EPOCH
        return _INT8.pack((since.days * 86_400 + since.seconds) * 1_000_000 + since.microseconds)
    if value == "-infinity":
        return _MINUS_INFINITY
    raise TypeError(f"expected an aware datetime or '-infinity', got {value!r}")


# By the parameter type the server inferred (its oid), for a connection's encoding (a Python
# codec name): the types the hot statements take. (Numbers are ASCII in every encoding.)
ENCODERS: dict[int, Callable[[str], Encoder]] = {
    20: lambda _: _int,  # int8
    21: lambda _: _int,  # int2
    23: lambda _: _int,  # int4
    25: lambda encoding: functools.partial(_text, encoding=encoding),  # text
    1043: lambda encoding: functools.partial(_text, encoding=encoding),  # varchar
    1007: lambda _: _int_array,  # int4[]
    1016: lambda _: _int_array,  # int8[]
    1186: lambda _: _interval,  # interval
    1184: lambda _: _timestamptz,  # timestamptz
}
# The types whose encoder above writes the binary format (the others write text).
BINARY = frozenset({1184, 1186})


@dataclass
class Prepared:
    """One statement prepared on one connection."""

    key: bytes  # its server-side name
    params: tuple[str, ...]  # the named parameters, in $1..$n order
    encoders: tuple[Encoder, ...]
    formats: tuple[int, ...]  # each parameter's: 0 text, 1 binary
    columns: list[str] | None = None  # the result's, known from the first result

    def encode(self, values: dict[str, Any]) -> list[bytes]:
        """The parameters, each in its format (none of the hot statements takes a NULL)."""
        pairs = zip(self.params, self.encoders, strict=True)
        return [encode(values[name]) for name, encode in pairs]


# connection -> its prepared statements by name. Weak: a statement lives as long as the
# connection that holds it, and a connection the pool hands out again keeps its statements.
_PREPARED: weakref.WeakKeyDictionary[psycopg.Connection[Any], dict[str, Prepared]] = (
    weakref.WeakKeyDictionary()
)


@dataclass(frozen=True)
class _Loading:
    """What a Transformer loads with: these adapters, for this connection."""

    adapters: AdaptersMap
    connection: psycopg.Connection[Any]


class HotConnection:
    """A connection one thread keeps for its hot statements (with psycopg's loaders).

    Rows are loaded with ``fast`` (adapters: the fastest loaders, which fail on a value Python
    cannot hold) when given, else with the connection's own; when that fails (a DataError, a
    RecursionError) the same result is loaded again with the connection's own loaders, which
    tolerate such values, and ``tolerated`` says so until the next run.
    """

    def __init__(
        self, conn: psycopg.Connection[Any], schema: str, fast: AdaptersMap | None = None
    ) -> None:
        self.conn = conn
        self._schema = schema
        self._pgconn = conn.pgconn
        self._tx = Transformer(conn if fast is None else _Loading(fast, conn))
        self._tolerant: Any = None  # a Transformer, made on first need
        self.tolerated = False
        self._statements = _PREPARED.setdefault(conn, {})

    def run(self, name: str, params: dict[str, Any]) -> tuple[list[tuple[Any, ...]], list[str]]:
        """Run the named query ``name`` (prepared on first use): its rows as tuples and its
        column names."""
        statement = self._statements.get(name) or self._prepare(name)
        result = self._exec(statement, params)
        if result.status != pq.ExecStatus.TUPLES_OK:
            if result.error_field(pq.DiagnosticField.SQLSTATE) == b"26000":
                # The server no longer has it (DISCARD ALL, a pooler switching backends):
                # prepare it again, once.
                self._statements.pop(name, None)
                statement = self._prepare(name)
                result = self._exec(statement, params)
            if result.status != pq.ExecStatus.TUPLES_OK:
                raise self._error(result)
        columns = statement.columns
        if columns is None:
            encoding = self.conn.info.encoding
            columns = statement.columns = [
                (result.fname(i) or b"").decode(encoding) for i in range(result.nfields)
            ]
        tx = self._tx
        tx.set_pgresult(result)
        try:
            rows = tx.load_rows(0, result.ntuples, tuple)
            self.tolerated = False
        except (psycopg.DataError, RecursionError):
            # A value the fast loaders cannot hold (an infinite timestamp, a payload nested
            # too deep): the same result again, with the connection's tolerant loaders.
            if self._tolerant is None:
                self._tolerant = Transformer(self.conn)
            self._tolerant.set_pgresult(result)
            rows = self._tolerant.load_rows(0, result.ntuples, tuple)
            self.tolerated = True
        return rows, columns

    def _exec(self, statement: Prepared, params: dict[str, Any]) -> pq.abc.PGresult:
        return self._pgconn.exec_prepared(
            statement.key, statement.encode(params), statement.formats
        )

    def _prepare(self, name: str) -> Prepared:
        """Prepare the named query here and learn its parameters' types from the server.

        (Not with PQdescribePrepared: psycopg holds the GIL through that call, and a blocking
        call that holds it stops every other thread of the worker, heartbeats included, for as
        long as the server takes to answer.)
        """
        encoding = self.conn.info.encoding
        query = queries.get(name).render(self._schema).as_string(self.conn)
        text, params = queries.numbered(query)
        key = _NAME_PREFIX + name.encode()
        result = self._pgconn.prepare(key, text.encode(encoding))
        if result.status != pq.ExecStatus.COMMAND_OK:
            if result.error_field(pq.DiagnosticField.SQLSTATE) != b"42P05":  # already there
                raise self._error(result)
        row = self.conn.execute(
            queries.get("prepared_parameter_types").render(self._schema),
            {"name": key.decode()},
        ).fetchone()
        oids: list[int] = row[0] if row else []
        encoders = []
        for param, oid in zip(params, oids, strict=True):
            if oid not in ENCODERS:
                raise TypeError(f"{name}: no encoder for parameter {param!r} (type oid {oid})")
            encoders.append(ENCODERS[oid](encoding))
        formats = tuple(1 if oid in BINARY else 0 for oid in oids)
        statement = Prepared(key, params, tuple(encoders), formats)
        self._statements[name] = statement
        return statement

    def _error(self, result: pq.abc.PGresult) -> psycopg.Error:
        """The exception psycopg would raise for this result (a connection lost mid-statement
        is an OperationalError, whatever the result says)."""
        if self._pgconn.status == pq.ConnStatus.BAD:
            message = result.error_message or self._pgconn.error_message
            return psycopg.OperationalError(message.decode(errors="replace").strip())
        return pg_errors.error_from_result(result, encoding=self.conn.info.encoding)
