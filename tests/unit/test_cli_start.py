"""What a `leasectl` invocation imports: `--version` answers before Typer loads, and `--help`
or a TAB loads neither psycopg nor what only running a command needs (the data layer, the
presentation, the runtime, pydantic). A behaviour test in a fresh interpreter, not a timing:
bench/cli_start.py has the figures. (status, inspect, list on a database:
tests/integration/test_cli_start.py.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from importlib import metadata
from typing import Any

import pytest
import typer
import typer.core
import typer.main

# Runs cli.main (the `leasectl` script's and `python -m leasectl`'s) in a fresh interpreter and
# reports its exit code, its stdout and every module it imported.
_RUN = """
import contextlib, io, json, sys
from leasectl import cli
with contextlib.redirect_stdout(io.StringIO()) as out:
    code = cli.main(sys.argv[1:])
print(json.dumps({"code": code, "out": out.getvalue(), "modules": sorted(sys.modules)}))
"""

# Only running a command needs these; none of them is a command's definition.
RUN_ONLY = (
    "psycopg",
    "psycopg_pool",
    "pydantic",
    "prometheus_client",
    "textual",
    "leasectl.db",
    "leasectl.runtime",
    "leasectl.present",
    "leasectl.console",
    "leasectl.demo",
)
_KEEP_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "PYTHONPATH", "TMPDIR", "SYSTEMROOT")


def imports_of(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, set[str]]:
    """(exit code, stdout, imported modules) of ``cli.main(args)`` in a fresh interpreter."""
    base = {k: v for k, v in os.environ.items() if k in _KEEP_ENV}
    proc = subprocess.run(
        [sys.executable, "-c", _RUN, *args],
        env={**base, "COLUMNS": "100", **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=tempfile.gettempdir(),  # leasectl as installed (or on PYTHONPATH), not as in the cwd
    )
    report = json.loads(proc.stdout.splitlines()[-1])
    return report["code"], report["out"], set(report["modules"])


def loaded(modules: set[str], *packages: str) -> list[str]:
    """The modules of ``packages`` (a package or any module under it) among ``modules``."""
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


def test_version_is_answered_before_typer_loads() -> None:
    code, out, modules = imports_of("--version")
    assert (code, out) == (0, f"leasectl {metadata.version('leasectl')}\n")
    assert loaded(modules, "typer", "click", "rich", *RUN_ONLY) == []
    assert loaded(modules, "leasectl.cli") == ["leasectl.cli"]


def test_version_after_other_options_says_the_same_through_typer() -> None:
    code, out, modules = imports_of("--schema", "x", "--version")
    assert (code, out) == (0, f"leasectl {metadata.version('leasectl')}\n")
    assert "typer" in modules
    assert loaded(modules, *RUN_ONLY) == []


@pytest.mark.parametrize(
    "args",
    [("--help",), ("inspect", "--help"), ("requeue", "--help"), ("worker", "--help")],
)
def test_help_imports_no_database_presentation_or_runtime(args: tuple[str, ...]) -> None:
    code, out, modules = imports_of(*args)
    assert code == 0 and "Usage: leasectl" in out
    assert loaded(modules, *RUN_ONLY) == []


def test_a_command_loads_only_its_own_module() -> None:
    code, _, modules = imports_of("status", "--help")
    assert code == 0
    assert loaded(modules, "leasectl.cli.jobs") == ["leasectl.cli.jobs"]
    others = ("actions", "bulk", "worker", "metrics", "history", "queues", "admin", "console")
    assert loaded(modules, *(f"leasectl.cli.{name}" for name in others)) == []


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("leasectl sta", ["status", "stats"]),
        ("leasectl status --max-s", ["--max-stuck"]),
        ("leasectl list --state Fa", ["Failed"]),
        ("leasectl requeue --dry", ["--dry-run"]),
    ],
)
def test_a_tab_on_a_name_imports_no_database_or_presentation(
    line: str, expected: list[str]
) -> None:
    words = line.split(" ")
    tab = {"_LEASECTL_COMPLETE": "complete_bash", "COMP_WORDS": line}
    code, out, modules = imports_of(env={**tab, "COMP_CWORD": str(len(words) - 1)})
    assert code == 0 and out.split() == expected
    assert loaded(modules, *RUN_ONLY) == []


def _outcome(process: Any, param: Any, ctx: Any, value: Any) -> tuple[Any, ...]:
    try:
        return ("value", process(param, ctx, value))
    except Exception as exc:  # (a missing required value: the same error either way)
        return ("error", type(exc), str(exc))


def test_a_value_that_skips_typers_coercion_comes_out_as_typers_would() -> None:
    """cli/coercion.py: for every parameter of every command, the values it lets past Typer's
    pydantic coercion (missing, a string for a str, an int default in its bounds) come out as
    Typer's own coercion makes them."""
    from leasectl import cli
    from leasectl.cli import coercion

    group = typer.main.get_command(cli.app)
    assert isinstance(group, typer.core.TyperGroup)
    root = typer.Context(group)
    checked = 0
    for command in [group, *(group.commands[name] for name in group.list_commands(root))]:
        ctx = typer.Context(command, parent=None if command is group else root)
        for param in command.params:
            for value in (None, param.default, "text", "-1", 0, 10**12):
                if not coercion._needs_no_coercion(param, value):
                    continue
                param._runtime_param = None
                mended = _outcome(coercion._process_without_adapter, param, ctx, value)
                param._runtime_param = None
                assert coercion._process_value is not None
                typers = _outcome(coercion._process_value, param, ctx, value)
                assert mended == typers, (command.name, param.name, value)
                checked += 1
    assert checked > 100


def test_a_command_registered_on_the_app_joins_the_ones_loaded_when_used() -> None:
    from leasectl.cli.commands import COMMANDS, LazyGroup

    app = typer.Typer(cls=LazyGroup)

    @app.callback()
    def root() -> None:
        """The root."""

    @app.command("extra")
    def extra() -> None:
        """An extra command."""

    group = typer.main.get_command(app)
    assert isinstance(group, LazyGroup)
    ctx = typer.Context(group)
    assert group.list_commands(ctx) == [*COMMANDS, "extra"]
    found = group.get_command(ctx, "extra")
    assert found is not None and found.help == "An extra command."
    assert group.get_command(ctx, "no-such-command") is None
