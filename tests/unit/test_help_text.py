"""`--help` at 80 columns: a docstring's paragraphs after the first are wrapped as one text, not
line by line (cli/helpfix.py), for every command."""

from __future__ import annotations

import typer.main
from typer.testing import CliRunner

from leasectl.cli.root import app


def commands() -> list[list[str]]:
    found: list[list[str]] = []

    def walk(command: object, path: list[str]) -> None:
        for name, sub in getattr(command, "commands", {}).items():
            found.append([*path, name])
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return found


def lone_words(output: str) -> list[str]:
    """Lines of the prose above the option boxes that hold a single word between two lines of
    prose: the trace of a line broken in the docstring and wrapped again alone."""
    prose = output.split("╭", 1)[0].splitlines()
    return [
        line
        for before, line, after in zip(prose, prose[1:], prose[2:], strict=False)
        if len(line.split()) == 1 and before.strip() and after.strip()
    ]


def test_no_commands_help_leaves_a_word_on_a_line_of_its_own() -> None:
    runner = CliRunner()
    names = commands()
    assert ["demo"] in names and len(names) > 20
    for path in names:
        result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
        assert result.exit_code == 0, (path, result.output)
        assert not lone_words(result.output), (path, result.output)
