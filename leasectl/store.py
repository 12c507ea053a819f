"""The one place that talks to PostgreSQL: a method per named query, returning models."""

from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import json
import logging
import re
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq, sql
from psycopg.abc import AdaptContext
from psycopg.adapt import AdaptersMap, Buffer, Loader
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool, PoolTimeout

from leasectl import health, queries
from leasectl.config import check_queue_length, safe_dsn, validate_dsn
from leasectl.errors import (
    ConnectionFailed,
    JobNotFound,
    LeasectlError,
    PermissionDenied,
    SchemaMissing,
    UsageError,
)
from leasectl.hot import HotConnection
from leasectl.literal import echo
from leasectl.models import (
    JOB_FIELDS,
    STATUS_BY_VALUE,
    TIMESTAMP_MAX,
    TIMESTAMP_MIN,
    ActionResult,
    Attempt,
    ClaimKey,
    ConsoleCounts,
    Event,
    ExpiredJob,
    Job,
    JobDetail,
    JobStatus,
    Lease,
    MovedBatch,
    OwnerHealth,
    PanelJob,
    PayloadText,
    QueueCounts,
    SeenState,
    Skipped,
    Snapshot,
    StatusReport,
    Undecodable,
    finished_estimates,
    infinity_label,
)
from leasectl.throughput import GRACE, ThroughputCounts

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5
# Enqueue notifications carry the first characters of the queue name (NOTIFY payloads are small).
NOTIFY_QUEUE_CHARS = 128


_NO_TTL = timedelta(0)  # the TTL of a call that claims nothing
CLAIM_MAX = 1000  # jobs one claim may lease (the claim statement's inner LIMIT)
# The claim statement's start key when it reads a queue from its head: before every job's
# (priority is an integer, run_at may be any timestamp, ids are bigints).
CLAIM_FROM_HEAD: dict[str, Any] = {
    "from_priority": -(2**31),
    "from_run_at": "-infinity",
    "from_id": -(2**63),
}


def claim_from(key: ClaimKey | None) -> dict[str, Any]:
    """The claim statement's start-key parameters: at ``key``, or the head (None)."""
    if key is None:
        return CLAIM_FROM_HEAD
    return {"from_priority": key[0], "from_run_at": key[1], "from_id": key[2]}


@functools.lru_cache(maxsize=32)
def _job_maker(names: tuple[str, ...]) -> Callable[[Sequence[Any]], Job]:
    """Rows of a ``jobs.*`` select (columns ``names``) -> Job, without building a dict per row."""
    positions = [names.index(name) for name in JOB_FIELDS]
    status_at = JOB_FIELDS.index("status")

    def make(row: Sequence[Any]) -> Job:
        values = [row[i] for i in positions]
        values[status_at] = STATUS_BY_VALUE[values[status_at]]
        return Job(*values)

    return make


_decode_json = json.JSONDecoder().decode


def _as_is(text: str) -> str:
    """The "dumps" of a payload already written as JSON text: the text itself."""
    return text


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


def _configure(conn: psycopg.Connection[Any]) -> None:
    """Every connection's loaders: what is stored is shown, never fatal (HotConnection keeps
    the fast ones for the worker's round trip and falls back to these)."""
    conn.adapters.register_loader("jsonb", _TolerantJsonbLoader)
    conn.adapters.register_loader("timestamptz", _TolerantTimestamptzLoader)
    conn.adapters.register_loader("timestamptz", _TolerantTimestamptzBinaryLoader)


def _fast_adapters(conn: psycopg.Connection[Any]) -> AdaptersMap:
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


def _generic_plans(conn: psycopg.Connection[Any]) -> None:
    """The worker's session settings (queries.WORKER_SETTINGS: plans made once, index paths)."""
    _configure(conn)
    for name, value in queries.WORKER_SETTINGS.items():
        conn.execute("SELECT set_config(%s, %s, false)", (name, value))


def _int_array(values: Sequence[int]) -> str:
    """An integer array as its text literal: cheaper to pass than a list, which psycopg
    inspects element by element on every call to choose a type (and whose changing element
    type, int2/int4/int8 by magnitude, would prepare the statement again)."""
    return "{" + ",".join(map(str, values)) + "}"


def _leases(rows: Sequence[Sequence[Any]], names: Sequence[str], tolerated: bool) -> list[Lease]:
    """Rows of a claim (``jobs.*`` columns) -> the leases they grant. ``tolerated``: the rows
    hold values only the tolerant loaders could load; each lease then says whether its job is
    unusable."""
    if not rows:
        return []
    make = _job_maker(tuple(names))
    if tolerated:
        return [_lease_of(make(row), checked=True) for row in rows]
    return [_lease_of(make(row)) for row in rows]


def _claim_order(lease: Lease) -> ClaimKey:
    return lease.job.claim_order


def _lease_of(job: Job, *, checked: bool = False) -> Lease:
    """The lease a claim just granted on ``job`` (its owner, attempt and lease end); with
    ``checked``, and why the job cannot be handled (``unusable``), if it cannot."""
    assert job.lease_owner is not None and job.lease_until is not None
    return Lease(
        job=job,
        owner=job.lease_owner,
        attempt=job.attempts,
        until=job.lease_until,
        unusable=unusable(job) if checked else None,
    )


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    line = text.splitlines()[0].strip()
    return line.removeprefix("connection failed: ").strip()


class Store:
    """Named queries over a small connection pool (autocommit: each call is one transaction)."""

    def __init__(self, pool: ConnectionPool, schema: str, dsn: str) -> None:
        self.pool = pool
        self.schema = schema
        self.dsn = dsn
        self.where = safe_dsn(dsn)
        self._kept: dict[int, HotConnection] = {}  # thread id -> its hot path connection
        self._throughput = ThroughputCounts()  # the console's settled minutes, counted once

    # -- life cycle -------------------------------------------------------------------------

    @classmethod
    def connect(
        cls,
        dsn: str,
        schema: str,
        *,
        max_size: int = 2,
        check_schema: bool = True,
        application_name: str = "leasectl",
        pool_timeout: float = 10.0,
        generic_plans: bool = False,
    ) -> Store:
        """Connect once directly (for a precise error), then open the pool.

        ``generic_plans``: statements run often (psycopg prepares them after a few runs) are
        planned once per connection instead of on every execution, on index paths only; for
        the worker, whose statements are written so that such plans hold for any parameters
        and any table size.
        """
        validate_dsn(dsn)  # an ambiguous URI would connect where its password says
        kwargs: dict[str, Any] = {
            "autocommit": True,
            "connect_timeout": CONNECT_TIMEOUT_S,
            "application_name": application_name,
        }
        try:
            probe = psycopg.connect(dsn, **kwargs)
        except psycopg.Error as exc:
            raise ConnectionFailed(
                f"cannot connect to {safe_dsn(dsn)}: {_first_line(exc)}"
            ) from None
        probe.close()
        pool = ConnectionPool(
            dsn,
            min_size=1,
            max_size=max(1, max_size),
            kwargs=kwargs,
            timeout=pool_timeout,
            reconnect_timeout=365 * 86400,
            configure=_generic_plans if generic_plans else _configure,
            open=False,
            name=application_name,
        )
        pool.open(wait=False)
        store = cls(pool, schema, dsn)
        if check_schema:
            try:
                store.check_schema()
            except BaseException:
                store.close()
                raise
        return store

    def close(self) -> None:
        while self._kept:
            _, kept = self._kept.popitem()
            self.pool.putconn(kept.conn)
        self.pool.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        """Database failures become typed, one-line, password-free errors."""
        try:
            yield
        except LeasectlError:
            raise
        except (pg_errors.UndefinedTable, pg_errors.InvalidSchemaName, pg_errors.UndefinedObject):
            raise SchemaMissing(self._schema_missing_message()) from None
        except pg_errors.InsufficientPrivilege as exc:
            detail = exc.diag.message_primary or _first_line(exc)
            if not detail.startswith("permission denied"):
                detail = f"permission denied: {detail}"
            raise PermissionDenied(detail) from None
        except PoolTimeout:
            raise ConnectionFailed(f"cannot reach the database at {self.where}") from None
        except psycopg.OperationalError as exc:
            raise ConnectionFailed(
                f"lost the database at {self.where}: {_first_line(exc)}"
            ) from None
        except psycopg.DataError as exc:
            raise UsageError(f"invalid value: {_first_line(exc)}") from None
        except pg_errors.CheckViolation as exc:  # a value beyond the schema's bounds (README)
            raise UsageError(f"invalid value: {_first_line(exc)}") from None

    def _schema_missing_message(self) -> str:
        return (
            f"leasectl schema {echo(self.schema)} is not initialised in {self.where}; "
            "run `leasectl init`"
        )

    def _rows(self, name: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        query = queries.get(name).render(self.schema)
        with self._errors(), self.pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            cur.execute(query, params)
            return cur.fetchall() if cur.description is not None else []

    def _tuples(
        self, name: str, params: dict[str, Any] | None = None
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        """A query's column names and its rows as tuples (for many rows: no dict per row)."""
        query = queries.get(name).render(self.schema)
        with self._errors(), self.pool.connection() as conn:
            cur = conn.execute(query, params)
            if cur.description is None:
                return [], []
            return [c.name for c in cur.description], cur.fetchall()

    def _one(self, name: str, params: dict[str, Any] | None = None) -> dict[str, Any] | None:
        rows = self._rows(name, params)
        return rows[0] if rows else None

    @property
    def channel(self) -> str:
        """The LISTEN/NOTIFY channel of this schema's enqueues."""
        name = f"leasectl_{self.schema}"
        if len(name.encode()) > 63:  # channel names are identifiers: at most 63 bytes
            name = "leasectl_" + hashlib.sha1(self.schema.encode()).hexdigest()[:20]
        return name

    @contextlib.contextmanager
    def listen(self) -> Iterator[Callable[[Callable[[], bool]], Iterator[str]]]:
        """A dedicated connection LISTENing on the enqueue channel (never a pooled one).

        Yields a function that iterates notification payloads until its stop() returns true.
        """
        with self._errors():
            conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
        try:
            with self._errors():
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))

            def payloads(stop: Callable[[], bool]) -> Iterator[str]:
                # Each notification is handed on as it arrives; the timeout only bounds how
                # long a stop() request waits to be seen.
                while not stop():
                    batch = conn.notifies(timeout=1.0)
                    while True:
                        with self._errors():
                            note = next(batch, None)
                        if note is None:
                            break
                        yield note.payload

            yield payloads
        finally:
            conn.close()

    def _table(self, table: str) -> str:
        return f"{quote_ident(self.schema)}.{quote_ident(table)}"

    # -- schema -----------------------------------------------------------------------------

    def check_schema(self) -> None:
        row = self._one(
            "schema_exists",
            {
                "jobs_table": self._table("jobs"),
                "migrations_table": self._table("schema_migrations"),
            },
        )
        if not row or not row["jobs"] or not row["migrations"]:
            raise SchemaMissing(self._schema_missing_message())
        applied = [r["version"] for r in self._rows("migrations_applied")]
        latest = queries.migrations()[-1].version
        if not applied or max(applied) < latest:
            raise SchemaMissing(
                f"leasectl schema {echo(self.schema)} in {self.where} is at version "
                f"{max(applied, default=0)}, this leasectl needs {latest}; run `leasectl init`"
            )

    def migrate(self) -> list[int]:
        """Apply missing migrations in one transaction under an advisory lock; idempotent."""
        applied_now: list[int] = []
        with self._errors(), self.pool.connection() as conn, conn.transaction():
            conn.execute(queries.get("schema_lock").render(self.schema), {"schema": self.schema})
            conn.execute(queries.get("migrations_table_create").render(self.schema))
            cur = conn.execute(queries.get("migrations_applied").render(self.schema))
            done = {row[0] for row in cur.fetchall()}
            for migration in queries.migrations():
                if migration.version in done:
                    continue
                conn.execute(migration.render(self.schema))
                conn.execute(
                    queries.get("migration_record").render(self.schema),
                    {"version": migration.version, "name": migration.name},
                )
                applied_now.append(migration.version)
        return applied_now

    def server_info(self) -> dict[str, Any]:
        row = self._one("server_info")
        assert row is not None
        return row

    def can_update_jobs(self) -> bool:
        """Whether this role may run the operator's actions: EXECUTE on their functions."""
        row = self._one("jobs_update_privilege", {"schema": self.schema})
        return bool(row and row["can_update"])

    # -- producer ---------------------------------------------------------------------------

    def enqueue(
        self,
        payloads: Sequence[Any],
        *,
        queue: str = "default",
        priority: int = 0,
        delay: timedelta = timedelta(0),
        max_attempts: int = 5,
    ) -> list[int]:
        """Enqueue one job per payload (Python values, sent as json.dumps writes them)."""
        return self.enqueue_json(
            [json.dumps(p) for p in payloads],
            queue=queue,
            priority=priority,
            delay=delay,
            max_attempts=max_attempts,
        )

    def enqueue_json(
        self,
        texts: Sequence[str],
        *,
        queue: str = "default",
        priority: int = 0,
        delay: timedelta = timedelta(0),
        max_attempts: int = 5,
    ) -> list[int]:
        """Enqueue one job per payload given as JSON text, which the server turns into jsonb
        as written: numbers stay exact (config.parse_payload checks a user's text first)."""
        check_queue_length(queue)
        rows = self._rows(
            "jobs_enqueue",
            {
                "queue": queue,
                "payloads": [Jsonb(t, dumps=_as_is) for t in texts],
                "priority": priority,
                "delay": delay,
                "max_attempts": max_attempts,
                "channel": self.channel,
            },
        )
        return [r["id"] for r in rows]

    # -- lease holder -----------------------------------------------------------------------

    def claim(self, queue: str, owner: str, ttl: timedelta, limit: int = 1) -> list[Lease]:
        """Lease up to ``limit`` (at most CLAIM_MAX) claimable jobs of ``queue``: due Pending
        ones first, then lapsed leases (taken over) when Pending ones do not fill the batch."""
        return self.complete_and_claim((), queue, owner, ttl, limit)[0]

    def complete_and_claim(
        self,
        done: Sequence[Lease],
        queue: str,
        owner: str,
        ttl: timedelta,
        limit: int,
        *,
        take_expired: bool = True,
        from_key: ClaimKey | None = None,
    ) -> tuple[list[Lease], set[int]]:
        """Complete the finished leases ``done`` (fenced) and lease up to ``limit`` (at most
        CLAIM_MAX) due Pending jobs of ``queue`` in one statement: a worker's round trip.

        ``from_key``: lease only jobs at or after this claim key (a job's ``claim_order``), not
        from the queue's head; the worker's resume point while a backlog drains.

        With ``take_expired``, when Pending jobs do not fill the batch a second statement
        takes over lapsed leases of the queue for the rest. Returns the new leases and the ids
        of ``done`` whose completion was refused (their lease was lost).
        """
        fence = self._fence(done, owner)
        limit = max(0, min(limit, CLAIM_MAX))
        rows, names, tolerated = self._hot(
            "jobs_complete_and_claim",
            {
                "done_ids": fence["ids"],
                "done_attempts": fence["attempts"],
                "owner": owner,
                "queue": queue,
                "ttl": ttl,
                "limit": limit,
                **claim_from(from_key),
            },
        )
        accepted = set(rows[0][names.index("completed_ids")] or ()) if rows else set()
        leases = _leases(rows, names, tolerated) if rows and rows[0][0] is not None else []
        if take_expired and len(leases) < limit:
            params = {"queue": queue, "owner": owner, "ttl": ttl, "limit": limit - len(leases)}
            try:
                taken_over = _leases(*self._hot("jobs_claim_expired", params))
            except ConnectionFailed as exc:
                # The completions above are committed: report them, not a failed round trip
                # (the caller would retry them and take the refusal for lost leases).
                log.warning("taking over lapsed leases failed: %s", exc)
                taken_over = []
            leases += taken_over
        if len(leases) > 1:  # one batch, in claim order
            leases.sort(key=_claim_order)
        return leases, {lease.job_id for lease in done} - accepted

    def _hot(
        self, name: str, params: dict[str, Any]
    ) -> tuple[list[tuple[Any, ...]], list[str], bool]:
        """Run a statement of the worker's hot path: tuple rows, their column names, and
        whether only the tolerant loaders could load them (HotConnection.tolerated)."""
        with self._errors(), self._kept_connection() as kept:
            rows, names = kept.run(name, params)
            return rows, names, kept.tolerated

    @contextlib.contextmanager
    def _kept_connection(self) -> Iterator[HotConnection]:
        """The calling thread's own connection for the hot path, kept out of the pool between
        calls: a worker's dispatcher sends every round trip to the same backend (its caches
        and prepared plans warm) without a pool hand-off. Worth a quarter of the drain rate
        at concurrency 50 on two cores against taking turns between pooled connections."""
        key = threading.get_ident()
        kept = self._kept.pop(key, None)
        if kept is None or kept.conn.broken or kept.conn.closed:
            if kept is not None:
                self.pool.putconn(kept.conn)  # the pool discards it and opens a replacement
            conn = self.pool.getconn()
            kept = HotConnection(conn, self.schema, _fast_adapters(conn))
        try:
            yield kept
        except BaseException:
            self.pool.putconn(kept.conn)  # after any failure the pool checks it
            raise
        self._kept[key] = kept

    def claim_by_id(self, job_id: int, owner: str, ttl: timedelta) -> Lease | None:
        row = self._one("job_claim_by_id", {"id": job_id, "owner": owner, "ttl": ttl})
        return _lease_of(Job.from_row(row), checked=True) if row else None

    @staticmethod
    def _fence(leases: Sequence[Lease], owner: str | None = None) -> dict[str, Any]:
        """The fencing parameters of leases of one owner (``owner``, when given, must be it):
        ids and attempts as array literals, and the owner."""
        owners = {lease.owner for lease in leases} | ({owner} if owner is not None else set())
        if len(owners) != 1:
            raise ValueError("one call fences the leases of one owner")
        return {
            "ids": _int_array([lease.job_id for lease in leases]),
            "attempts": _int_array([lease.attempt for lease in leases]),
            "owner": owners.pop(),
        }

    def heartbeat(self, leases: Sequence[Lease], ttl: timedelta) -> dict[int, Any]:
        """Extend the leases still held; returns {job_id: new lease_until}. Missing ids are lost."""
        if not leases:
            return {}
        rows = self._rows("jobs_heartbeat", {**self._fence(leases), "ttl": ttl})
        return {r["id"]: r["lease_until"] for r in rows}

    def complete(self, leases: Sequence[Lease]) -> set[int]:
        """Complete fenced leases; returns the ids accepted (the others were lost)."""
        if not leases:
            return set()
        owner = leases[0].owner  # (complete_and_claim checks that all leases are its)
        _, refused = self.complete_and_claim(leases, "", owner, _NO_TTL, 0, take_expired=False)
        return {lease.job_id for lease in leases} - refused

    def fail(
        self, lease: Lease, error: str, *, retry_delay: timedelta, retry: bool = True
    ) -> JobStatus | None:
        """Record a failure; returns the new status, or None when the lease was lost."""
        row = self._one(
            "job_fail",
            {
                "id": lease.job_id,
                "attempt": lease.attempt,
                "owner": lease.owner,
                "error": error,
                "delay": retry_delay,
                "retry": retry,
            },
        )
        return JobStatus(row["status"]) if row else None

    def release(self, leases: Sequence[Lease]) -> set[int]:
        if not leases:
            return set()
        return {r["id"] for r in self._rows("jobs_release", self._fence(leases))}

    # -- watcher ----------------------------------------------------------------------------

    def requeue_expired(
        self,
        *,
        limit: int,
        queue: str | None,
        mark: bool,
        actor: str,
        reason: str,
        detail: bool = True,
    ) -> MovedBatch:
        """One watcher batch. ``detail``: return the moved jobs, not only how many went where."""
        names, rows = self._tuples(
            "jobs_requeue_expired",
            {
                "limit": limit,
                "queue": queue,
                "mark": mark,
                "actor": actor,
                "reason": reason,
                "detail": detail,
            },
        )
        # A row per moved job (n = 1) when listed, else a row per new status with its count.
        status, count = (names.index("status"), names.index("n")) if names else (0, 0)
        counts: collections.Counter[str] = collections.Counter()
        for row in rows:
            counts[row[status]] += row[count]
        return MovedBatch(
            counts={STATUS_BY_VALUE[value]: n for value, n in counts.items()},
            jobs=ExpiredJob.from_rows(names, rows) if detail else (),
        )

    def list_expired(self, *, limit: int, queue: str | None) -> list[ExpiredJob]:
        names, rows = self._tuples("jobs_expired_list", {"limit": limit, "queue": queue})
        return list(ExpiredJob.from_rows(names, rows))

    # -- operator ---------------------------------------------------------------------------

    def get_jobs(self, ids: Sequence[int]) -> dict[int, Job]:
        rows = self._rows("jobs_get_many", {"ids": list(ids)})
        return {r["id"]: Job.from_row(r) for r in rows}

    def operator_requeue(
        self, seen: Sequence[SeenState], *, actor: str, reason: str | None, force: bool = False
    ) -> ActionResult:
        return self._guarded("jobs_operator_requeue", "requeue", seen, actor, reason, force)

    def operator_mark_stuck(
        self, seen: Sequence[SeenState], *, actor: str, reason: str | None, force: bool = False
    ) -> ActionResult:
        return self._guarded("jobs_operator_mark_stuck", "mark-stuck", seen, actor, reason, force)

    def _guarded(
        self,
        query: str,
        action: str,
        seen: Sequence[SeenState],
        actor: str,
        reason: str | None,
        force: bool,
    ) -> ActionResult:
        unique = list({s.id: s for s in seen}.values())
        rows = self._rows(
            query,
            {
                "ids": [s.id for s in unique],
                "statuses": [str(s.status) for s in unique],
                "attempts": [s.attempts for s in unique],
                "owners": [s.lease_owner for s in unique],
                "force": force,
                "actor": actor,
                "reason": reason,
            },
        )
        changed = tuple(r["id"] for r in rows)
        missed = [s for s in unique if s.id not in set(changed)]
        current = self.get_jobs([s.id for s in missed]) if missed else {}
        db_now = self.server_info()["db_now"] if missed else None
        skipped = tuple(
            Skipped(s.id, explain_skip(action, s, current.get(s.id), force, db_now)) for s in missed
        )
        return ActionResult(action=action, changed=changed, skipped=skipped)

    def seen_now(self, ids: Sequence[int]) -> list[SeenState]:
        """The current state of ids, for actions whose operator saw nothing (the CLI).

        Unknown ids get a state no job can match, so they come back as skipped ("no such job").
        """
        jobs = self.get_jobs(ids)
        return [
            jobs[i].seen() if i in jobs else SeenState(i, JobStatus.PENDING, -1, None) for i in ids
        ]

    # -- reading ----------------------------------------------------------------------------

    def get_job(self, job_id: int) -> Job:
        row = self._one("job_get", {"id": job_id})
        if row is None:
            raise JobNotFound(
                f"job {job_id} not found in {self.where} (schema {echo(self.schema)})"
            )
        return Job.from_row(row)

    def inspect(self, job_id: int, *, payload_chars: int | None = None) -> JobDetail:
        """A job with its attempts and events; its payload as PayloadText (exact text, never
        decoded): whole, or only its first ``payload_chars`` characters."""
        row = self._one("job_inspect", {"id": job_id, "payload_chars": payload_chars})
        if row is None:
            raise JobNotFound(
                f"job {job_id} not found in {self.where} (schema {echo(self.schema)})"
            )
        row["payload"] = PayloadText(row["payload_text"], row["payload_length"])
        job = Job.from_row(row)
        attempts = tuple(
            Attempt.from_row(r) for r in self._rows("job_attempts_list", {"id": job_id})
        )
        events = tuple(Event.from_row(r) for r in self._rows("job_events_list", {"id": job_id}))
        return JobDetail(job, attempts, events, self.server_info()["db_now"])

    def status(
        self,
        queue: str | None = None,
        *,
        recent_window: timedelta = timedelta(hours=1),
        owner_window: timedelta = timedelta(hours=1),
        owner_limit: int = 200,
    ) -> StatusReport:
        db_now = self.server_info()["db_now"]
        counts: dict[str, dict[str, Any]] = {}
        for r in self._rows("status_live_counts", {"queue": queue}):
            q = counts.setdefault(r["queue"], {"queue": r["queue"]})
            status = r["status"]
            if status == "Pending":
                q.update(pending=r["jobs"], due=r["due"], oldest_due_at=r["oldest_due_at"])
            elif status == "Processing":
                q.update(processing=r["jobs"], expired=r["expired"])
            else:
                q.update(stuck=r["jobs"])
        for r in self._rows("status_finished_recent", {"queue": queue, "window": recent_window}):
            q = counts.setdefault(r["queue"], {"queue": r["queue"]})
            key = "completed_recent" if r["status"] == "Completed" else "failed_recent"
            q[key] = r["jobs"]
        estimate = {
            r["status"]: int(r["jobs"])
            for r in self._rows("status_finished_estimate", {"schema": self.schema})
        }
        return StatusReport(
            db_now=db_now,
            queues=tuple(QueueCounts(**counts[name]) for name in sorted(counts)),
            owners=tuple(self.owners(window=owner_window, limit=owner_limit, db_now=db_now)),
            finished_estimate=estimate,
            recent_window=recent_window,
        )

    def owners(
        self, *, window: timedelta = timedelta(hours=1), limit: int = 200, db_now: Any = None
    ) -> list[OwnerHealth]:
        if db_now is None:
            db_now = self.server_info()["db_now"]
        rows = self._rows("status_owners", {"window": window, "limit": limit})
        return self._owner_health(rows, db_now)

    @staticmethod
    def _owner_health(rows: list[dict[str, Any]], db_now: Any) -> list[OwnerHealth]:
        """OwnerHealth from status_owners rows, judged at the database time ``db_now``."""
        result = []
        for r in rows:
            last = max(
                (t for t in (r.get("last_seen_at"), r["last_job_heartbeat_at"]) if t is not None),
                default=None,
            )
            result.append(
                OwnerHealth(
                    owner=r["owner"],
                    hostname=r.get("hostname"),
                    pid=r.get("pid"),
                    queues=tuple(r.get("queues") or ()),
                    lease_ttl=r.get("lease_ttl"),
                    heartbeat_every=r.get("heartbeat_every"),
                    started_at=r.get("started_at"),
                    last_seen_at=r.get("last_seen_at"),
                    stopped_at=r.get("stopped_at"),
                    held=r["held"],
                    expired=r["expired"],
                    last_job_heartbeat_at=r["last_job_heartbeat_at"],
                    next_expiry_at=r["next_expiry_at"],
                    freshness=health.classify(
                        db_now,
                        last,
                        r.get("heartbeat_every"),
                        r.get("lease_ttl"),
                        r.get("stopped_at") if not r["held"] else None,
                        r["next_expiry_at"],
                    ),
                )
            )
        return result

    # -- retention --------------------------------------------------------------------------

    def prune_batch(
        self, older_than: timedelta, batch: int, queue: str | None, keep_events: bool
    ) -> tuple[int, int]:
        row = self._one(
            "jobs_prune",
            {"older_than": older_than, "batch": batch, "queue": queue, "keep_events": keep_events},
        )
        return (int(row["jobs"]), int(row["events"])) if row else (0, 0)

    def prune_count(self, older_than: timedelta, queue: str | None) -> int:
        row = self._one("jobs_prune_count", {"older_than": older_than, "queue": queue})
        return int(row["jobs"]) if row else 0

    # -- workers ----------------------------------------------------------------------------

    def worker_register(
        self,
        worker_id: str,
        *,
        hostname: str,
        pid: int,
        queues: Sequence[str],
        lease_ttl: timedelta,
        heartbeat_every: timedelta,
    ) -> None:
        self._rows(
            "worker_register",
            {
                "worker_id": worker_id,
                "hostname": hostname,
                "pid": pid,
                "queues": list(queues),
                "lease_ttl": lease_ttl,
                "heartbeat_every": heartbeat_every,
            },
        )

    def worker_seen(self, worker_id: str) -> None:
        self._rows("worker_seen", {"worker_id": worker_id})

    def worker_stopped(self, worker_id: str) -> None:
        self._rows("worker_stopped", {"worker_id": worker_id})

    # -- console ----------------------------------------------------------------------------

    def console_snapshot(
        self,
        queue: str | None,
        limit: int,
        *,
        owner: str | None = None,
        job_id: int | None = None,
        risk_window: timedelta = timedelta(seconds=10),
        minutes: int = 30,
        timeout: timedelta = timedelta(seconds=5),
        owner_window: timedelta = timedelta(hours=1),
        owner_limit: int = 200,
    ) -> Snapshot:
        """What the console shows, read in one read-only REPEATABLE READ transaction so that
        every count, every panel row, the owners and the database clock describe the same instant.

        Panels hold at most ``limit`` rows each; finished history is only ever estimated.
        """
        params: dict[str, Any] = {
            "queue": queue,
            "owner": owner or None,
            "job_id": job_id,
            "limit": max(1, limit),
            "risk_window": risk_window,
            "minutes": minutes,
            "since": self._throughput.since(queue),
            "grace": GRACE,
            "setting_names": [*queries.CONSOLE_SETTINGS, "statement_timeout"],
            "setting_values": [
                *queries.CONSOLE_SETTINGS.values(),
                str(max(1, int(timeout.total_seconds() * 1000))),
            ],
            "schema": self.schema,
        }
        owner_params = {"window": owner_window, "limit": owner_limit}
        panels = ("console_pending", "console_processing", "console_stuck")
        with self._errors(), self.pool.connection() as conn:
            # BEGIN, every statement and COMMIT go out together: one round trip.
            with conn.pipeline(), conn.transaction():
                results: dict[str, psycopg.Cursor[dict[str, Any]]] = {}
                for name, args in (
                    ("console_snapshot_begin", params),
                    ("console_settings", params),
                    ("console_counts", params),
                    ("console_throughput", params),
                    ("status_finished_estimate", params),
                    ("status_owners", owner_params),
                ):
                    results[name] = conn.cursor(row_factory=dict_row)
                    results[name].execute(queries.get(name).render(self.schema), args, binary=True)
                # The panels' rows come as tuples, for PanelJob.from_rows.
                panel_cursors = [conn.cursor() for _ in panels]
                for name, cur in zip(panels, panel_cursors, strict=True):
                    cur.execute(queries.get(name).render(self.schema), params, binary=True)
            counts, per_minute, estimated, owner_rows = (
                results[name].fetchall()
                for name in (
                    "console_counts",
                    "console_throughput",
                    "status_finished_estimate",
                    "status_owners",
                )
            )
            pending, processing, stuck_only = (
                PanelJob.from_rows([c.name for c in cur.description or ()], cur.fetchall())
                for cur in panel_cursors
            )
        counts_row = counts[0]
        db_now = counts_row["db_now"]
        # The Stuck panel: Stuck jobs and expired leases, longest lapsed first. The Processing
        # rows, soonest expiry first, begin with every expired lease (or the first ``limit``),
        # so the expired leases need no second pass over the Processing set: they are the same
        # rows (an expired lease's risk window no longer matters).
        expired = [j for j in processing if j.lease_until is not None and j.lease_until < db_now]
        stuck = tuple(sorted((*expired, *stuck_only), key=self._lapsed_order)[: params["limit"]])
        throughput = self._throughput.merge(queue, params["since"], per_minute, db_now, minutes)
        completed_estimate, failed_estimate = finished_estimates(
            {r["status"]: int(r["jobs"]) for r in estimated}
        )
        owner_health = self._owner_health(owner_rows, db_now)
        holds = {j.lease_owner for j in (*processing, *stuck)}
        owners = [
            o for o in owner_health if self._console_owner_matches(o, queue, owner, job_id, holds)
        ]
        return Snapshot(
            db_now=db_now,
            server_version=str(counts_row["server_version"]),
            database=str(counts_row["database"]),
            counts=ConsoleCounts(
                pending=counts_row["pending"],
                due=counts_row["due"],
                oldest_due_at=counts_row["oldest_due_at"],
                processing=counts_row["processing"],
                at_risk=counts_row["at_risk"],
                expired=counts_row["expired"],
                stuck=counts_row["stuck"],
                completed_estimate=completed_estimate,
                failed_estimate=failed_estimate,
            ),
            throughput=throughput.completed,
            failed_recent=throughput.failed,
            pending=pending,
            processing=processing,
            stuck=stuck,
            owners=tuple(owners),
            queue=queue,
            owner=owner or None,
            job_id=job_id,
            limit=params["limit"],
            risk_window=risk_window,
        )

    @staticmethod
    def _lapsed_order(job: PanelJob) -> tuple[datetime, int]:
        """The Stuck panel's order, longest lapsed first (each of its rows has a lapse time)."""
        assert job.lapsed_at is not None
        return (job.lapsed_at, job.id)

    @staticmethod
    def _console_owner_matches(
        o: OwnerHealth,
        queue: str | None,
        owner: str | None,
        job_id: int | None,
        holds: set[str | None],
    ) -> bool:
        """Whether an owner belongs in the console's Owners panel under the current filter;
        ``holds``: the owners of the jobs the panels list."""
        if owner and not o.owner.startswith(owner):
            return False
        if job_id is not None:
            return o.owner in holds
        return queue is None or queue in o.queues or o.owner in holds


def explain_skip(
    action: str, seen: SeenState, now: Job | None, force: bool, db_now: Any = None
) -> str:
    """Why a guarded action left a job alone, in words an on-call engineer can act on."""
    if now is None:
        return "no such job"
    if now.status != seen.status:
        if now.status == JobStatus.PROCESSING:
            return (
                f"moved since you looked: {seen.status} -> Processing "
                f"(leased by {now.lease_owner}, attempt {now.attempts})"
            )
        return f"moved since you looked: {seen.status} -> {now.status}"
    if now.attempts != seen.attempts or now.lease_owner != seen.lease_owner:
        return (
            f"lease renewed by {now.lease_owner} after you looked "
            f"(attempt {seen.attempts} -> {now.attempts})"
        )
    eligible = {
        "requeue": {JobStatus.PROCESSING, JobStatus.STUCK, JobStatus.FAILED},
        "mark-stuck": {JobStatus.PROCESSING, JobStatus.PENDING},
    }[action]
    if now.status not in eligible:
        return (
            f"a {now.status} job cannot be {'requeued' if action == 'requeue' else 'marked stuck'}"
        )
    if now.status == JobStatus.PROCESSING and not force:
        lease = now.lease_until.isoformat() if now.lease_until else "?"
        if db_now is not None and now.heartbeat_at is not None:
            return (
                f"lease live: held by {now.lease_owner} until {lease}, last heartbeat "
                f"{(db_now - now.heartbeat_at).total_seconds():.0f}s ago; use --force to override"
            )
        return f"lease live: held by {now.lease_owner} until {lease}; use --force to override"
    return "changed while the action ran"
