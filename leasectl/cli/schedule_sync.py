"""`leasectl schedule sync FILE.toml`: the file's schedules made the database's, each change
through the audited functions (add, update; remove with --prune); --dry-run changes nothing."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.text import Text

from leasectl.cli.root import _emit_json, _operations, _show
from leasectl.core import config
from leasectl.core.schedule_file import parse_file, plan_sync
from leasectl.present.text import lit

_VERBS = {"add": "add", "update": "update", "same": "same", "remove": "remove"}


def run_sync(
    ctx: typer.Context,
    file: Path,
    *,
    dry_run: bool,
    prune: bool,
    reason: str | None,
    as_json: bool,
) -> None:
    specs = parse_file(file)
    actor = config.operator_actor()
    why = reason or f"schedule sync {file.name}"[: config.MAX_REASON_CHARS]
    with _operations(ctx) as ops:
        steps = plan_sync(specs, ops.schedules(), prune=prune)
        done = []
        for step in steps:
            change: str = step.change
            if not dry_run and change in ("add", "update"):
                assert step.spec is not None
                _, change = ops.put_schedule(step.spec, actor=actor, reason=why)
            elif not dry_run and change == "remove":
                if ops.remove_schedule(step.name, actor=actor, reason=why) is None:
                    change = "same"
            done.append((step.name, change))
    if as_json:
        _emit_json({"dry_run": dry_run,
                    "changes": [{"name": n, "change": c} for n, c in done]})  # fmt: skip
        return
    lines = []
    for name, change in done:
        line = Text(("would " if dry_run and change != "same" else "") + _VERBS[change] + " ")
        line.append_text(lit(name, "bold"))
        lines.append(line)
    counts = {c: sum(1 for _, x in done if x == c) for c in ("add", "update", "remove", "same")}
    summary = ", ".join(f"{n} {c}" for c, n in counts.items() if n) or "no schedule declared"
    lines.append(Text(("dry run: " if dry_run else "") + summary, "dim"))
    _show(lines)
