"""The connection: a small pool (private to the data layer), the one mapping of database
failures to typed user errors, named-query helpers, and the schema's version check and
migrations (connecting checks the schema)."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any, Literal

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout
from psycopg_pool.base import AttemptWithBackoff

from leasectl.core.errors import (
    ConnectionFailed,
    LeasectlError,
    LockBusy,
    PermissionDenied,
    QueryTimeout,
    SchemaMissing,
    SchemaNewer,
    UsageError,
)
from leasectl.core.literal import echo
from leasectl.db import loaders
from leasectl.db import sql as queries
from leasectl.db.dsn import safe_dsn, validate_dsn
from leasectl.db.session import session_kwargs
from leasectl.db.watchdog import WATCHDOG

# How long an operator's action waits for a row or table lock another session holds (a worker's
# transaction, a handler's `ctx.transaction()`, a session left open) before it gives up on it.
LOCK_TIMEOUT_MS = 250

# At most one live job per queue and unique key (migration 12).
UNIQUE_KEY_INDEX = "jobs_unique_key_idx"

_SCHEMA_MISSING = (pg_errors.UndefinedTable, pg_errors.InvalidSchemaName, pg_errors.UndefinedObject)


def first_line(exc: BaseException) -> str:
    """An exception's first line, without libpq's "connection failed: " prefix."""
    text = str(exc).strip() or type(exc).__name__
    line = text.splitlines()[0].strip()
    return line.removeprefix("connection failed: ").strip()


def read_only(exc: BaseException) -> bool:
    """A write the server refused as read-only (SQLSTATE 25006): it is a standby, the old
    primary after a failover. The connection is of no use to us: it is dropped, not reused, and
    the next one (a multi-host DSN's target_session_attrs=read-write) finds the primary."""
    return isinstance(exc, pg_errors.ReadOnlySqlTransaction)


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def schema_missing_message(schema: str, where: str) -> str:
    return f"leasectl schema {echo(schema)} is not initialised in {where}; run `leasectl init`"


def schema_newer_message(schema: str, where: str, unknown: list[int], latest: int) -> str:
    """A schema with migrations (``unknown``) newer than this leasectl's ``latest``."""
    return (
        f"leasectl schema {echo(schema)} in {where} is at version {max(unknown)}, newer than "
        f"this leasectl knows (version {latest}): upgrade leasectl to the version that migrated it"
    )


# What a schema newer than this leasectl makes of a connection: None refuses it (SchemaNewer),
# else this is called with the warning and the connection is used (read-only commands).
OnNewer = Callable[[str], None] | None

# The words of a permission error, from its primary message and the error.
Denied = Callable[[str | None, BaseException], str]


def _permission_denied(primary: str | None, exc: BaseException) -> str:
    detail = primary or first_line(exc)
    return detail if detail.startswith("permission denied") else f"permission denied: {detail}"


def channel_for(schema: str) -> str:
    """The LISTEN/NOTIFY channel of a schema's enqueues."""
    name = f"leasectl_{schema}"
    if len(name.encode()) > 63:  # channel names are identifiers: at most 63 bytes
        name = "leasectl_" + hashlib.sha1(schema.encode()).hexdigest()[:20]
    return name


class ErrorMapping:
    """Database failures become typed, one-line, password-free errors: the one mapping, as a
    context manager (stateless: one instance serves every call).

    ``schema``: the leasectl schema the statements use; a missing table or schema then means
    it is not initialised. ``denied``: the words of a permission error, from its primary
    message. ``other``: the prefix of any other database error's line; without it, invalid
    values become UsageErrors and any other error passes as it is. ``timeout``: the words for a
    statement cancelled by its ``statement_timeout`` (a ``QueryTimeout``); without it, such a
    cancel passes as it is.
    """

    def __init__(
        self,
        where: str,
        *,
        schema: str | None = None,
        denied: Denied = _permission_denied,
        other: str | None = None,
        timeout: str | None = None,
    ) -> None:
        self.where = where
        self.schema = schema
        self.denied = denied
        self.other = other
        self.timeout = timeout

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        if exc is None or isinstance(exc, LeasectlError):
            return False
        if isinstance(exc, PoolTimeout):
            raise ConnectionFailed(f"cannot reach the database at {self.where}") from None
        if not isinstance(exc, psycopg.Error):
            return False
        mapped: LeasectlError | None = None
        if read_only(exc):
            # A standby answered: as good as no server, and retried as an outage is.
            mapped = ConnectionFailed(
                f"the database at {self.where} is read-only (a standby?): {first_line(exc)}"
            )
        elif self.schema is not None and isinstance(exc, _SCHEMA_MISSING):
            mapped = SchemaMissing(schema_missing_message(self.schema, self.where))
        elif isinstance(exc, pg_errors.InsufficientPrivilege):
            mapped = PermissionDenied(self.denied(exc.diag.message_primary, exc))
        elif isinstance(exc, pg_errors.LockNotAvailable):
            # (Before OperationalError, of which LockNotAvailable is a kind.)
            mapped = LockBusy(
                "refused, nothing changed: another session holds a lock on what this would "
                f"change (waited {LOCK_TIMEOUT_MS} ms); try again"
            )
        elif self.timeout is not None and isinstance(exc, pg_errors.QueryCanceled):
            # (Before OperationalError, of which QueryCanceled is a kind.)
            mapped = QueryTimeout(self.timeout)
        elif (
            isinstance(exc, pg_errors.UniqueViolation)
            and exc.diag.constraint_name == UNIQUE_KEY_INDEX
        ):
            # An operator's requeue of a finished job whose unique key a newer job holds live.
            mapped = LeasectlError(
                "refused, nothing changed: a live job already has the unique key of a job this "
                f"would make live again ({echo(exc.diag.message_detail or '')}); finish or "
                "cancel that job first"
            )
        elif isinstance(exc, psycopg.OperationalError):
            mapped = ConnectionFailed(f"lost the database at {self.where}: {first_line(exc)}")
        elif self.other is not None:
            mapped = LeasectlError(f"{self.other}: {first_line(exc)}")
        elif isinstance(exc, psycopg.DataError | pg_errors.CheckViolation):
            # (A CheckViolation: a value beyond the schema's bounds, README.)
            mapped = UsageError(f"invalid value: {first_line(exc)}")
        if mapped is None:
            return False
        raise mapped from None


class _Reconnect(AttemptWithBackoff):
    """The pool's backoff between attempts to replace a lost connection, capped: psycopg_pool
    doubles it without bound (until reconnect_timeout, a year here), so after an outage of T
    seconds the pool went on waiting up to about T more before trying the server that came back
    or was promoted (RELIABILITY.md, "Failover")."""

    MAX_DELAY = 2.0

    def update_delay(self, now: float) -> None:
        super().update_delay(now)
        self.delay = min(self.delay, self.MAX_DELAY)


class _Pool(ConnectionPool):
    """A ConnectionPool whose reconnection backoff is ``_Reconnect``'s."""

    def _add_connection(self, attempt: AttemptWithBackoff | None, growing: bool = False) -> None:
        super()._add_connection(attempt or _Reconnect(timeout=self.reconnect_timeout), growing)


def _configure(
    schema: str, *, generic_plans: bool, read_only: bool
) -> Callable[[psycopg.Connection[Any]], None]:
    """A new pooled connection's set-up: its loaders, and a read-only session if asked."""
    loads = loaders.generic_plans if generic_plans else loaders.configure
    if not read_only:
        return loads

    def configure(conn: psycopg.Connection[Any]) -> None:
        loads(conn)
        conn.execute(queries.get("session_read_only").render(schema))

    return configure


class Database:
    """Named queries over a small connection pool (autocommit: each call is one transaction)."""

    def __init__(
        self, pool: ConnectionPool, schema: str, dsn: str, call_bound: float | None = None
    ) -> None:
        self._pool = pool
        # Seconds a call may take before its connection is cut (watchdog.py); None: unbounded.
        self.call_bound = call_bound
        self.schema = schema
        self.dsn = dsn
        self.where = safe_dsn(dsn)
        self._errors = ErrorMapping(self.where, schema=schema)
        self._on_close: list[Callable[[], None]] = []

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
        read_only: bool = False,
        call_bound: float | None = None,
        on_newer: OnNewer = None,
    ) -> Database:
        """Connect once directly (for a precise error), then open the pool.

        ``generic_plans``: statements run often (psycopg prepares them after a few runs) are
        planned once per connection instead of on every execution, on index paths only; for
        the worker, whose statements are written so that such plans hold for any parameters
        and any table size. ``read_only``: every transaction of every connection is read-only
        (``session_read_only``): reads sent to a hot standby. ``call_bound``: seconds after
        which a call still waiting for the server fails as a lost connection (``watchdog.py``).
        ``on_newer``: what a schema with migrations this leasectl does not know makes of the
        connection (``OnNewer``; refused by default: a writer could break a newer rule).
        """
        validate_dsn(dsn)  # an ambiguous URI would connect where its password says
        kwargs = session_kwargs(dsn, application_name=application_name)
        try:
            probe = psycopg.connect(dsn, **kwargs)
        except psycopg.Error as exc:
            raise ConnectionFailed(
                f"cannot connect to {safe_dsn(dsn)}: {first_line(exc)}"
            ) from None
        probe.close()
        pool = _Pool(
            dsn,
            min_size=1,
            max_size=max(1, max_size),
            kwargs=kwargs,
            timeout=pool_timeout,
            reconnect_timeout=365 * 86400,
            configure=_configure(schema, generic_plans=generic_plans, read_only=read_only),
            open=False,
            name=application_name,
        )
        pool.open(wait=False)
        db = cls(pool, schema, dsn, call_bound)
        if check_schema:
            try:
                db.check_schema(on_newer)
            except BaseException:
                db.close()
                raise
        return db

    def abort(self) -> None:
        """End every call of this database under way now (their connections cut): a console
        that quits never waits for a server that does not answer."""
        WATCHDOG.abort(self)

    def on_close(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` when this closes, before the pool (to hand back kept connections)."""
        self._on_close.append(hook)

    def close(self, timeout: float = 5.0) -> None:
        """Close the pool, waiting at most ``timeout`` seconds for its background threads."""
        for hook in self._on_close:
            hook()
        self._pool.close(timeout=timeout)

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ---------------------------------------------------------------------------

    def errors(
        self,
        *,
        schema: bool = True,
        denied: Denied | None = None,
        other: str | None = None,
        timeout: str | None = None,
    ) -> ErrorMapping:
        """The error mapping for this database (``schema``: a missing table means this schema
        is not initialised; ``denied``, ``other``, ``timeout``: as ``ErrorMapping``'s)."""
        if schema and denied is None and other is None and timeout is None:
            return self._errors
        return ErrorMapping(
            self.where,
            schema=self.schema if schema else None,
            denied=denied or _permission_denied,
            other=other,
            timeout=timeout,
        )

    @contextlib.contextmanager
    def connection(self, **mapping: Any) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection for several statements; failures mapped (``errors(**mapping)``)."""
        with self.errors(**mapping), self._pooled() as conn:
            yield conn

    @contextlib.contextmanager
    def _pooled(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection that goes back to the pool, or is closed (and so replaced) when
        its server refused a write as read-only."""
        with self._pool.connection() as conn:
            try:
                with WATCHDOG.bound(conn, self.call_bound, self):
                    yield conn
            except psycopg.Error as exc:
                if read_only(exc):
                    conn.close()
                raise

    def borrow(self) -> psycopg.Connection[Any]:
        """A connection out of the pool until ``give_back``: the worker's hot path keeps one
        per thread."""
        return self._pool.getconn()

    def give_back(self, conn: psycopg.Connection[Any], error: BaseException | None = None) -> None:
        """Return a borrowed connection (the pool checks it, and replaces it if broken or
        closed); ``error``, the failure it was given back after: a read-only refusal closes it."""
        if error is not None and read_only(error):
            conn.close()
        self._pool.putconn(conn)

    def run(
        self, query: queries.Query, params: dict[str, Any] | None = None, **mapping: Any
    ) -> list[dict[str, Any]]:
        """Run a named query in this schema: its rows as dicts."""
        statement = query.render(self.schema)
        with self.errors(**mapping), self._pooled() as conn:
            cur = conn.cursor(row_factory=dict_row)
            cur.execute(statement, params)
            return cur.fetchall() if cur.description is not None else []

    def rows_waiting_at_most(
        self, name: str, params: dict[str, Any], lock_timeout_ms: int = LOCK_TIMEOUT_MS
    ) -> list[dict[str, Any]]:
        """``rows``, in a transaction whose lock waits end after ``lock_timeout_ms`` (a
        ``LockBusy``, nothing changed); the setting and the statement in one round trip."""
        setting = queries.get("session_lock_timeout").render(self.schema)
        statement = queries.get(name).render(self.schema)
        with self.errors(), self._pooled() as conn:
            with conn.pipeline(), conn.transaction():
                conn.execute(setting, {"lock_timeout": f"{lock_timeout_ms}ms"})
                cur = conn.cursor(row_factory=dict_row)
                cur.execute(statement, params)
            return cur.fetchall() if cur.description is not None else []

    def rows(self, name: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        return self.run(queries.get(name), params)

    def one(self, name: str, params: dict[str, Any] | None = None) -> dict[str, Any] | None:
        rows = self.rows(name, params)
        return rows[0] if rows else None

    def tuples(
        self, name: str, params: dict[str, Any] | None = None
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        """A query's column names and its rows as tuples (for many rows: no dict per row)."""
        query = queries.get(name).render(self.schema)
        with self._errors, self._pooled() as conn:
            cur = conn.execute(query, params)
            if cur.description is None:
                return [], []
            return [c.name for c in cur.description], cur.fetchall()

    @property
    def channel(self) -> str:
        """The LISTEN/NOTIFY channel of this schema's enqueues."""
        return channel_for(self.schema)

    def _table(self, table: str) -> str:
        return f"{quote_ident(self.schema)}.{quote_ident(table)}"

    # -- schema -----------------------------------------------------------------------------

    def check_schema(self, on_newer: OnNewer = None) -> None:
        """Refuse a schema that is missing or older than this leasectl; one newer than it
        (``OnNewer``) is refused too unless ``on_newer`` is given: it is then told why."""
        row = self.one(
            "schema_exists",
            {
                "jobs_table": self._table("jobs"),
                "migrations_table": self._table("schema_migrations"),
            },
        )
        if not row or not row["jobs"] or not row["migrations"]:
            raise SchemaMissing(schema_missing_message(self.schema, self.where))
        applied = [r["version"] for r in self.rows("migrations_applied")]
        latest = queries.migrations()[-1].version
        unknown = self._unknown(applied)
        if unknown:
            message = schema_newer_message(self.schema, self.where, unknown, latest)
            if on_newer is None:
                raise SchemaNewer(message)
            on_newer(f"warning: {message}; what this shows may miss what it added")
        elif not applied or max(applied) < latest:
            raise SchemaMissing(
                f"leasectl schema {echo(self.schema)} in {self.where} is at version "
                f"{max(applied, default=0)}, this leasectl needs {latest}; run `leasectl init`"
            )

    @staticmethod
    def _unknown(applied: Iterable[int]) -> list[int]:
        """The applied migrations this leasectl does not have (a newer one applied them)."""
        known = {m.version for m in queries.migrations()}
        return sorted(v for v in applied if v not in known)

    def migrate(self) -> list[int]:
        """Apply missing migrations in one transaction under an advisory lock; idempotent.

        Except where a migration adds enum values: a transaction cannot use a value it added
        to an enum (PostgreSQL refuses it, even for a type it made), so the migrations before
        that one and the new values commit first, and a second transaction runs the rest."""
        # One connection, and the schema's lock held across its transactions (migrations 10 and
        # 18 add enum values): a concurrent `init` waits for all of them, then finds nothing
        # to do, instead of applying the migrations after the values in between.
        with self.connection() as conn:
            held = {"schema": self.schema}
            conn.execute(queries.get("schema_lock_session").render(self.schema), held)
            try:
                return self._migrate_on(conn)
            finally:
                conn.execute(queries.get("schema_unlock_session").render(self.schema), held)

    def _migrate_on(self, conn: psycopg.Connection[Any]) -> list[int]:
        applied_now: list[int] = []
        values_committed: set[int] = set()
        while True:
            with conn.transaction():
                lock = queries.get("schema_lock").render(self.schema)
                conn.execute(lock, {"schema": self.schema})
                conn.execute(queries.get("migrations_table_create").render(self.schema))
                cur = conn.execute(queries.get("migrations_applied").render(self.schema))
                done = {row[0] for row in cur.fetchall()}
                unknown = self._unknown(done)
                if unknown:  # nothing is applied under a newer leasectl's migrations
                    latest = queries.migrations()[-1].version
                    raise SchemaNewer(
                        schema_newer_message(self.schema, self.where, unknown, latest)
                    )
                again = False
                for migration in queries.migrations():
                    if migration.version in done:
                        continue
                    values = migration.enum_values_for(self.schema)
                    if values and migration.version not in values_committed:
                        for statement in values:
                            conn.execute(statement)
                        values_committed.add(migration.version)
                        again = True
                        break
                    conn.execute(migration.render(self.schema))
                    conn.execute(
                        queries.get("migration_record").render(self.schema),
                        {"version": migration.version, "name": migration.name},
                    )
                    applied_now.append(migration.version)
            if not again:
                return applied_now

    def server_info(self) -> dict[str, Any]:
        row = self.one("server_info")
        assert row is not None
        return row
