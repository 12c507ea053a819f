"""The SQL of leasectl: named blocks in *.sql files, loaded once, rendered per schema.

A block starts with ``-- name: entity_verb`` followed by a one-line ``--`` description.
``{schema}`` stands for the schema name, which is always rendered through
``psycopg.sql.Identifier``; values are always bound parameters. ``{now}`` stands for the read
clock (``NOW_SQL``): the reference time ``read_clock`` set for its transaction, else now().
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from psycopg import sql

_NAME = re.compile(r"^-- name: ([a-z_]+)\s*$", re.MULTILINE)
_SCHEMA_TOKEN = "{schema}"
_NOW_TOKEN = "{now}"
# The read clock: what "now" is for a read. ``read_clock`` sets leasectl.clock for its
# transaction (on a hot standby, the time of the last transaction it replayed), in seconds since
# the epoch (whatever the session's DateStyle); without it (or after it: the setting then reads
# as ''), the transaction's now(). A scalar subquery: evaluated once per statement (an
# InitPlan), not once per row a filter compares.
NOW_SQL = (
    "(SELECT coalesce(to_timestamp(nullif(current_setting('leasectl.clock', true), '')::float8),"
    " now()))"
)


@dataclass(frozen=True)
class Query:
    name: str
    description: str
    text: str

    def render(self, schema: str) -> sql.Composed:
        """The statement with the schema name spliced in as a quoted identifier."""
        return _render(self.text, schema)


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    text: str

    def render(self, schema: str) -> sql.Composed:
        return _render(self.text, schema)

    def enum_values_for(self, schema: str) -> tuple[sql.Composed, ...]:
        """Its ``ALTER TYPE {schema}.T ADD VALUE IF NOT EXISTS 'v';`` lines, each alone:
        ``Database.migrate`` commits them before the migration runs on an existing schema, since
        a transaction cannot use an enum value it added itself (migration 10)."""
        return tuple(_render(line, schema) for line in _ENUM_VALUE.findall(self.text))


_ENUM_VALUE = re.compile(
    r"^ALTER TYPE \{schema\}\.[a-z_]+ ADD VALUE IF NOT EXISTS '[A-Za-z_]+';$", re.MULTILINE
)


@cache
def _render(text: str, schema: str) -> sql.Composed:
    parts = text.replace(_NOW_TOKEN, NOW_SQL).split(_SCHEMA_TOKEN)
    ident = sql.Identifier(schema)
    pieces: list[sql.Composable] = []
    for i, part in enumerate(parts):
        if i:
            pieces.append(ident)
        pieces.append(sql.SQL(part))
    return sql.Composed(pieces)


def parse(source: str) -> dict[str, Query]:
    """Split one .sql file into its named queries."""
    matches = list(_NAME.finditer(source))
    queries: dict[str, Query] = {}
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(source)
        body = source[match.end() : end].strip("\n")
        lines = body.splitlines()
        description = lines[0].removeprefix("--").strip() if lines else ""
        if not lines or not lines[0].startswith("--") or not description:
            raise ValueError(f"query {match.group(1)} has no one-line description")
        text = "\n".join(lines[1:]).strip()
        if not text:
            raise ValueError(f"query {match.group(1)} is empty")
        name = match.group(1)
        if name in queries:
            raise ValueError(f"query {name} is defined twice")
        queries[name] = Query(name, description, text.rstrip(";").strip() + "\n")
    return queries


@cache
def all_queries() -> dict[str, Query]:
    found: dict[str, Query] = {}
    root = resources.files(__package__)
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            for name, query in parse(entry.read_text(encoding="utf-8")).items():
                if name in found:
                    raise ValueError(f"query {name} is defined in two files")
                found[name] = query
    return found


def get(name: str) -> Query:
    return all_queries()[name]


@cache
def migrations() -> tuple[Migration, ...]:
    """Numbered migrations, ``NNN_name.sql``, in version order."""
    folder = resources.files(__package__).joinpath("migrations")
    found = []
    for entry in folder.iterdir():
        m = re.fullmatch(r"(\d{3})_([a-z0-9_]+)\.sql", entry.name)
        if m:
            found.append(Migration(int(m.group(1)), m.group(2), entry.read_text(encoding="utf-8")))
    found.sort(key=lambda mig: mig.version)
    versions = [mig.version for mig in found]
    if versions != list(range(1, len(found) + 1)):
        raise ValueError(f"migrations must be numbered 1..n without gaps, found {versions}")
    return tuple(found)


_PLACEHOLDER = re.compile(r"%\((\w+)\)s")


def numbered(text: str) -> tuple[str, tuple[str, ...]]:
    """``%(name)s`` placeholders -> ``$n`` (one number per name, in order of first use), for
    statements prepared on the server; and the names in that order."""
    names = list(dict.fromkeys(_PLACEHOLDER.findall(text)))
    return _PLACEHOLDER.sub(lambda m: f"${names.index(m.group(1)) + 1}", text), tuple(names)


# The worker's sessions: one generic plan per statement, index paths only, no JIT. A plan made
# while a table was small or analysed empty lives as long as the connection, and a scan chosen
# then would cost every later call the whole table (tests/integration/test_plans.py); JIT never
# pays for statements of a few rows.
WORKER_SETTINGS = {
    "plan_cache_mode": "force_generic_plan",
    "enable_seqscan": "off",
    "enable_bitmapscan": "off",
    "jit": "off",
}


# The console's sessions: the refresh repeats the same statements, each planned once (planning
# some afresh cost more than running them) and with index paths only, for the worker's reason
# (tests/console/test_snapshot_query.py). Set per refresh transaction by console_settings.
# No parallel workers: on a table of millions of rows the generic plan of console_pending's
# sorted branch is a Gather Merge, and starting its workers cost ~10 ms of every refresh even
# when the branch's one-time filter runs none of it (BENCHMARKS.md, "backlog").
CONSOLE_SETTINGS = {
    "plan_cache_mode": "force_generic_plan",
    "enable_seqscan": "off",
    "enable_bitmapscan": "off",
    "enable_hashjoin": "off",
    "enable_mergejoin": "off",
    "jit": "off",
    "max_parallel_workers_per_gather": "0",
}
