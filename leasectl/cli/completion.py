"""Shell completion of option values (Typer's own: `leasectl --install-completion`).

Commands, options and choices complete from the command's definition; queue names come from
the database and job states from the model. A completion never fails and never writes to the
terminal: the shell runs it at every TAB, and whatever it prints lands in the command line. A
name is offered only if every shell takes it literally, as one word, without quoting.
"""

from __future__ import annotations

import typer

from leasectl.core import config
from leasectl.core.literal import visible
from leasectl.core.models import JobStatus

# Characters besides letters and digits that no shell reads as syntax, that bash's completion
# does not split words at (":" and "=" it does), and that do not make a word an option ("-") or
# a PowerShell splat ("@") when they start it.
_SAFE_PUNCTUATION = frozenset("_.-+%/@")
_NOT_FIRST = frozenset("-@")


def shell_literal(name: str) -> bool:
    """Whether ``name`` can be offered as a completion: one word that bash, zsh, fish and
    PowerShell all take as it is (a name that cannot is still accepted when typed, quoted)."""
    return (
        bool(name)
        and name[0] not in _NOT_FIRST
        and all(c.isalnum() or c in _SAFE_PUNCTUATION for c in name)
        and visible(name) == name
    )


def complete_queue(ctx: typer.Context, incomplete: str) -> list[str]:
    """Queue names from the database given by the command line so far (``--dsn``,
    ``--schema``) or the environment; nothing at all if it cannot be read at once."""
    root = ctx.find_root().params
    try:
        # Here, not above: a TAB on a command name or option needs no psycopg.
        from leasectl.db.completion import queue_names
        from leasectl.db.dsn import resolve_dsn

        dsn = resolve_dsn(root.get("dsn"))
        schema = config.resolve_schema(root.get("schema"))
        names = queue_names(dsn, schema, incomplete)
    except Exception:  # a TAB must never print an error into the command line
        return []
    return [name for name in names if shell_literal(name)]


def complete_state(incomplete: str) -> list[str]:
    """Job states, as a state option takes them (``autocompletion=complete_state``)."""
    return [s.value for s in JobStatus if s.value.startswith(incomplete)]
