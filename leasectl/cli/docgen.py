"""The command reference, ``docs/cli.md``, written from the Typer app itself.

Typer vendors its own click (0.29), so its objects are read by their attributes, not types.

``python -m leasectl.cli.docgen`` rewrites it (``--check``: exit 1 when it is not current); a
test fails when the file and the app disagree, so the reference never drifts from the code.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from leasectl.cli import app
from leasectl.cli.root import PROG

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"

HEADER = f"""# `{PROG}` command reference

Generated from the command line by `python -m leasectl.cli.docgen`: do not edit by hand (a
test fails when this file is not current). What each command guarantees is the contract in
[`design.md`](design.md#command-line); `{PROG} COMMAND --help` shows the same text.
Durations accept `250ms`, `30s`, `5m`, `1h`, `2d` or plain seconds.
"""


def _cell(text: str) -> str:
    """A table cell: one line, its pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


# Typer's click objects (parameters, commands, contexts), read by their attributes.
Click = Any


def _options(command: Click, ctx: Click) -> list[str]:
    """What `--help` says of each parameter (its names, value, help, default and range)."""
    rows = []
    for param in command.params:
        record = param.get_help_record(ctx)
        if getattr(param, "hidden", False) or record is None:
            continue
        names, what = record
        rows.append(f"| `{_cell(names)}` | {_cell(what)} |")
    if not rows:
        return []
    return ["| option | what it does |", "|---|---|", *rows]


def _section(title: str, command: Click, ctx: Click) -> list[str]:
    usage = str(command.get_usage(ctx)).removeprefix("Usage: ")
    lines = [f"## {title}", "", "```", usage, "```", ""]
    if command.help:
        lines += [command.help.strip().replace("\b\n", ""), ""]
    options = _options(command, ctx)
    if options:
        lines += [*options, ""]
    return lines


def render() -> str:
    """docs/cli.md's text: the global options, then each command in `--help`'s order."""
    group: Click = typer.main.get_command(app)
    root = group.context_class(group, info_name=PROG)
    lines = [HEADER, "Commands: " + ", ".join(f"[`{n}`](#{n})" for n in group.commands), ""]
    lines += _section("Global options", group, root)
    for name, command in group.commands.items():
        ctx = command.context_class(command, info_name=name, parent=root)
        lines += _section(name, command, ctx)
        for sub, subcommand in getattr(command, "commands", {}).items():  # a group's own
            subctx = subcommand.context_class(subcommand, info_name=sub, parent=ctx)
            lines += _section(f"{name} {sub}", subcommand, subctx)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    text = render()
    if args == ["--check"]:
        current = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
        if current != text:
            print(f"{DOC} is not current: run python -m leasectl.cli.docgen", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
