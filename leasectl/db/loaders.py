"""How values come out of PostgreSQL: every connection's tolerant loaders (what is stored is
shown, never fatal), the worker's fast ones, and rows of jobs made into Jobs without a dict."""

from __future__ import annotations

import functools
import json
import re
import struct
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg import pq
from psycopg.abc import AdaptContext
from psycopg.adapt import AdaptersMap, Buffer, Loader

from leasectl.core.models import JOB_FIELDS, STATUS_BY_VALUE, Job, Undecodable
from leasectl.core.timestamps import TIMESTAMP_MAX, TIMESTAMP_MIN, infinity_label
from leasectl.db.sql import WORKER_SETTINGS


@functools.lru_cache(maxsize=32)
def job_maker(names: tuple[str, ...]) -> Callable[[Sequence[Any]], Job]:
    """Rows of a ``jobs.*`` select (columns ``names``) -> Job, without building a dict per row;
    its progress only if reported by its current attempt (``rows.current_progress``)."""
    positions = [names.index(name) for name in JOB_FIELDS]
    status_at = JOB_FIELDS.index("status")
    reported = names.index("progress_attempt") if "progress_attempt" in names else None
    attempts_at = names.index("attempts")
    progress_at = (JOB_FIELDS.index("progress"), JOB_FIELDS.index("progress_message"))

    def make(row: Sequence[Any]) -> Job:
        values = [row[i] for i in positions]
        values[status_at] = STATUS_BY_VALUE[values[status_at]]
        if reported is not None and row[reported] != row[attempts_at]:
            values[progress_at[0]] = values[progress_at[1]] = None
        return Job(*values)

    return make


_decode_json = json.JSONDecoder().decode


class _JsonbLoader(Loader):
    """jsonb (text format) -> Python, as psycopg's own loader but without json.loads' checks
    and encoding detection on every value: the text comes in the connection's encoding (UTF-8
    unless the database is in another one). A claim loads one payload per job; this is a few
    microseconds less each."""

    def __init__(self, oid: int, context: AdaptContext | None = None) -> None:
        super().__init__(oid, context)
        self._encoding = self.connection.info.encoding if self.connection else "utf-8"

    def load(self, data: Buffer) -> Any:
        return _decode_json(bytes(data).decode(self._encoding))


# Why a payload cannot reach a handler (the worker writes it as the job's last error).
TOO_DEEP = "payload cannot be decoded: nested deeper than Python's JSON decoder allows"


class _TolerantJsonbLoader(_JsonbLoader):
    """jsonb -> Python, or Undecodable when Python's decoder cannot (PostgreSQL stores JSON
    nested thousands deep; the decoder recurses once per level): one such value must not make
    every read of its row fail."""

    def load(self, data: Buffer) -> Any:
        try:
            return _decode_json(bytes(data).decode(self._encoding))
        except RecursionError:
            return Undecodable(f"{TOO_DEEP} (RecursionError)")


# psycopg's own timestamptz loaders (its C ones when installed; they cannot be subclassed).
_TIMESTAMPTZ_TEXT = psycopg.adapters.get_loader(1184, pq.Format.TEXT)
_TIMESTAMPTZ_BINARY = psycopg.adapters.get_loader(1184, pq.Format.BINARY)
_YEAR = re.compile(rb"\d{4,}")
_INT8 = struct.Struct(">q")


class _TolerantTimestamptzLoader(Loader):
    """timestamptz (text) -> datetime, and the sentinels TIMESTAMP_MAX / TIMESTAMP_MIN for what
    a datetime cannot hold ('infinity', '-infinity', years outside 1..9999), instead of a
    DataError that would make every read of the row fail."""

    def __init__(self, oid: int, context: AdaptContext | None = None) -> None:
        super().__init__(oid, context)
        assert _TIMESTAMPTZ_TEXT is not None
        self._load = _TIMESTAMPTZ_TEXT(oid, context).load

    def load(self, data: Buffer) -> Any:
        try:
            return self._load(data)
        except psycopg.DataError:
            raw = bytes(data)
            if raw.startswith(b"-") or b"BC" in raw:
                return TIMESTAMP_MIN
            year = _YEAR.search(raw)
            return TIMESTAMP_MIN if year and int(year.group()) < 5000 else TIMESTAMP_MAX


class _TolerantTimestamptzBinaryLoader(Loader):
    """The binary format's counterpart (microseconds since 2000-01-01: the sign says which)."""

    format = pq.Format.BINARY

    def __init__(self, oid: int, context: AdaptContext | None = None) -> None:
        super().__init__(oid, context)
        assert _TIMESTAMPTZ_BINARY is not None
        self._load = _TIMESTAMPTZ_BINARY(oid, context).load

    def load(self, data: Buffer) -> Any:
        try:
            return self._load(data)
        except psycopg.DataError:
            return TIMESTAMP_MIN if _INT8.unpack(bytes(data))[0] < 0 else TIMESTAMP_MAX


def configure(conn: psycopg.Connection[Any]) -> None:
    """Every connection's loaders: what is stored is shown, never fatal (HotConnection keeps
    the fast ones for the worker's round trip and falls back to these)."""
    conn.adapters.register_loader("jsonb", _TolerantJsonbLoader)
    conn.adapters.register_loader("timestamptz", _TolerantTimestamptzLoader)
    conn.adapters.register_loader("timestamptz", _TolerantTimestamptzBinaryLoader)


def fast_adapters(conn: psycopg.Connection[Any]) -> AdaptersMap:
    """The worker's round trip's loaders: the fastest, which raise on a value Python cannot
    hold; HotConnection then loads that result again with the connection's tolerant ones."""
    fast = AdaptersMap(conn.adapters)
    fast.register_loader("jsonb", _JsonbLoader)
    for loader in (_TIMESTAMPTZ_TEXT, _TIMESTAMPTZ_BINARY):
        assert loader is not None
        fast.register_loader("timestamptz", loader)
    return fast


def unusable(job: Job) -> str | None:
    """Why ``job`` cannot be handed to a handler, or None: what the tolerant loaders could not
    load (an undecodable payload, a run_at outside what Python holds)."""
    if isinstance(job.payload, Undecodable):
        return job.payload.reason
    # (The other timestamps a handler may ignore; run_at orders the claim: such a job would
    # come first in its queue forever.)
    if (label := infinity_label(job.run_at)) is not None:
        beyond = "before the year 1" if label.startswith("-") else "after the year 9999"
        return f"job cannot be loaded: run_at is {label} (or {beyond})"
    return None


def generic_plans(conn: psycopg.Connection[Any]) -> None:
    """The worker's session settings (WORKER_SETTINGS: plans made once, index paths)."""
    configure(conn)
    for name, value in WORKER_SETTINGS.items():
        conn.execute("SELECT set_config(%s, %s, false)", (name, value))
