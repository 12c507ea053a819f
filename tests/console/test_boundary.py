"""The core never imports Textual: only leasectl.console does."""

from __future__ import annotations

import subprocess
import sys

CORE = [
    "leasectl.core.backoff",
    "leasectl.core.config",
    "leasectl.core.errors",
    "leasectl.core.health",
    "leasectl.core.models",
    "leasectl.db.sql",
    "leasectl.db.connection",
    "leasectl.db.work",
    "leasectl.db.operations",
    "leasectl.db.console",
    "leasectl.db.grants",
    "leasectl.present.skips",
    "leasectl.runtime.watcher",
    "leasectl.runtime.worker",
    "leasectl.db.embedded",
]


def test_core_does_not_import_textual() -> None:
    code = (
        "import importlib, sys\n"
        f"for name in {CORE!r}:\n"
        "    importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m == 'textual' or m.startswith('textual.')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_console_sql_is_named_and_described() -> None:
    from leasectl.db import sql as queries

    names = [n for n in queries.all_queries() if n.startswith("console_")]
    assert {
        "console_snapshot_begin",
        "console_settings",
        "console_counts",
        "console_throughput",
        "console_pending",
        "console_processing",
        "console_stuck",
        "console_failed",
    } <= set(names)
    for name in names:
        assert queries.get(name).description
