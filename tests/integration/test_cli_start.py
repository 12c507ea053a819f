"""`leasectl status`, `inspect` and `list` import what they use, not the other commands: no
worker runtime, no metrics exporter, no console, no pydantic (tests/unit/test_cli_start.py has
`--version`, `--help` and TAB; bench/cli_start.py the figures)."""

from __future__ import annotations

import json

import pytest

from tests.integration.test_cli import cli
from tests.unit.test_cli_start import imports_of, loaded

# What none of the three reads uses.
NOT_USED = (
    "pydantic",
    "prometheus_client",
    "textual",
    "leasectl.runtime",
    "leasectl.console",
    "leasectl.demo",
    "leasectl.db.work",
    "leasectl.db.embedded",
    "leasectl.cli.worker",
    "leasectl.cli.metrics",
    "leasectl.cli.actions",
    "leasectl.cli.bulk",
    "leasectl.cli.console",
)


@pytest.mark.parametrize(
    ("args", "shows"),
    [(("status",), "default"), (("inspect", "{id}"), "Pending"), (("list",), "default")],
)
def test_a_read_imports_only_what_it_uses(db_dsn: str, args: tuple[str, ...], shows: str) -> None:
    made = cli("enqueue", "--queue", "default", "--json", dsn=db_dsn)
    assert made.returncode == 0, made.stderr
    job_id = json.loads(made.stdout)["ids"][0]
    argv = [arg.format(id=job_id) for arg in args]
    code, out, modules = imports_of(*argv, env={"LEASECTL_DSN": db_dsn})
    assert code == 0 and shows in out
    assert "psycopg" in modules  # (it did read the database)
    assert loaded(modules, *NOT_USED) == []
