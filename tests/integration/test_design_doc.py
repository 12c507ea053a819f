"""docs/design.md stays true: what it lists is what the schema, the models and the CLI have.

And the repository stays self-contained: nothing tracked points at a document outside it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import psycopg
import pytest
import typer

from leasectl import cli
from leasectl.core import errors
from leasectl.core.models import JobStatus

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"
SCHEMA = "leasectl"


def _sections(text: str) -> dict[str, str]:
    """Heading text (without the #s) -> the body up to the next heading of any level."""
    parts = re.split(r"^#{2,4} +(.+)$", text, flags=re.MULTILINE)
    return {title.strip(): body for title, body in zip(parts[1::2], parts[2::2], strict=True)}


def _first_cells(body: str) -> list[str]:
    """The first cell of each row of the section's table, header and ruler left out."""
    cells = []
    for line in body.splitlines():
        if not line.startswith("|"):
            continue
        first = line.split("|")[1].strip()
        if not first or set(first) <= set("-: "):
            continue
        cells.append(first)
    return cells[1:]  # the header


def _names(body: str) -> list[str]:
    """The backticked name that starts each row's first cell (`enqueue --queue Q` -> enqueue)."""
    names = []
    for cell in _first_cells(body):
        match = re.match(r"`([^` ]+)", cell)
        assert match, f"row without a `name` in its first cell: {cell!r}"
        names.append(match.group(1))
    return names


def _doc() -> dict[str, str]:
    return _sections(DESIGN.read_text(encoding="utf-8"))


def _documented_tables(doc: dict[str, str]) -> dict[str, list[str]]:
    tables = {}
    for title, body in doc.items():
        match = re.fullmatch(r"Table `(\w+)`", title)
        if match:
            tables[match.group(1)] = _names(body)
    return tables


def _query(dsn: str, statement: str) -> list[tuple[str, ...]]:
    with psycopg.connect(dsn) as conn:
        return [tuple(row) for row in conn.execute(statement, {"schema": SCHEMA}).fetchall()]


def test_tables_and_columns_match_the_migrated_schema(db_dsn: str) -> None:
    rows = _query(
        db_dsn,
        "SELECT table_name, column_name FROM information_schema.columns"
        " WHERE table_schema = %(schema)s ORDER BY table_name, ordinal_position",
    )
    actual: dict[str, list[str]] = {}
    for table, column in rows:
        actual.setdefault(table, []).append(column)
    assert _documented_tables(_doc()) == actual


def test_constraints_match_the_migrated_schema(db_dsn: str) -> None:
    rows = _query(
        db_dsn,
        "SELECT c.conname FROM pg_catalog.pg_constraint AS c"
        " JOIN pg_catalog.pg_namespace AS n ON n.oid = c.connamespace"
        " WHERE n.nspname = %(schema)s AND c.contype IN ('p', 'c', 'u', 'f', 'x')",
    )
    assert sorted(_names(_doc()["Constraints"])) == sorted(name for (name,) in rows)


def test_indexes_match_the_migrated_schema(db_dsn: str) -> None:
    rows = _query(
        db_dsn, "SELECT indexname FROM pg_catalog.pg_indexes WHERE schemaname = %(schema)s"
    )
    assert sorted(_names(_doc()["Indexes"])) == sorted(name for (name,) in rows)


def _enum(dsn: str, name: str) -> list[str]:
    rows = _query(
        dsn,
        "SELECT e.enumlabel FROM pg_catalog.pg_enum AS e"
        " JOIN pg_catalog.pg_type AS t ON t.oid = e.enumtypid"
        " JOIN pg_catalog.pg_namespace AS n ON n.oid = t.typnamespace"
        f" WHERE n.nspname = %(schema)s AND t.typname = '{name}' ORDER BY e.enumsortorder",
    )
    return [label for (label,) in rows]


def test_statuses_match_the_enum_and_the_model(db_dsn: str) -> None:
    documented = _names(_doc()["Statuses"])
    assert documented == _enum(db_dsn, "job_status")
    assert documented == [status.value for status in JobStatus]


def test_every_status_is_in_the_state_diagram() -> None:
    body = _doc()["Statuses"]
    diagram = body.split("```mermaid", 1)[1].split("```", 1)[0]
    for status in JobStatus:
        assert re.search(rf"\b{status.value}\b", diagram), status


def test_attempt_outcomes_match_the_enum(db_dsn: str) -> None:
    assert _names(_doc()["Attempt outcomes"]) == _enum(db_dsn, "attempt_outcome")


def test_commands_match_the_command_line() -> None:
    command = typer.main.get_command(cli.app)
    assert isinstance(command, typer.core.TyperGroup)
    assert sorted(_names(_doc()["Command line"])) == sorted(command.commands)


def _exit_codes() -> set[int]:
    codes = {0}
    codes |= {value for name, value in vars(cli).items() if name.startswith("EXIT_")}
    for value in vars(errors).values():
        if isinstance(value, type) and issubclass(value, errors.LeasectlError):
            codes.add(value.exit_code)
    # Click's usage errors keep their own code: 2 (UsageError) or 1 (other ClickExceptions).
    codes |= {typer.BadParameter("x").exit_code}
    return codes


def test_exit_codes_match_the_code() -> None:
    documented = {int(cell) for cell in _first_cells(_doc()["Exit codes"])}
    assert documented == _exit_codes()


# Pointers to what a clone of the repository does not have: the team's shared folder, its
# design contract by name or section, and issue numbers of this project.
OUTSIDE = re.compile(
    r"\.\./shared|shared/DESIGN|(?-i:\bDESIGN\.md\b)|\u00a7|\bissues? #?\d+|\bgh-\d+\b",
    re.IGNORECASE,
)
# Binary and generated files; the history, which names what each release changed; this file,
# whose probes are such references.
SKIPPED = re.compile(
    r"\.(svg|png|json|lock)$|^CHANGELOG\.md$|^tests/integration/test_design_doc\.py$"
)


def _tracked_text_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    return [name for name in listed.split("\0") if name and not SKIPPED.search(name)]


def references_outside(root: Path, names: list[str]) -> list[str]:
    """``file:line: text`` of every line under ``root`` that points outside the repository."""
    hits = []
    for name in names:
        try:
            text = (root / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                hits.append(f"{name}:{number}: {line.strip()}")
    return hits


def test_the_repository_refers_to_nothing_outside_it() -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    assert references_outside(ROOT, _tracked_text_files()) == []


@pytest.mark.parametrize(
    "line",
    [
        "see [`DESIGN.md`](../shared/DESIGN.md)",
        "the exit code of DESIGN.md \u00a74",
        "the invariants of issue 6",
        "fixed in issue #12",
        "the contract in ../shared",
    ],
)
def test_the_scan_finds_a_reference_outside(tmp_path: Path, line: str) -> None:
    (tmp_path / "clean.md").write_text("job #1042: moved, see docs/design.md\n", encoding="utf-8")
    (tmp_path / "probe.md").write_text(f"fine\n{line}\n", encoding="utf-8")
    assert references_outside(tmp_path, ["clean.md"]) == []
    assert references_outside(tmp_path, ["probe.md"]) == [f"probe.md:2: {line}"]
