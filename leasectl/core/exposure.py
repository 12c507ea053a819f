"""Schemas where roles other than their owner may create objects: leasectl's own, and ``public``.

A role that may create in a schema on some session's search_path can plant a look-alike operator
or function there that runs with the rights of whoever calls it. leasectl's sessions
pin their search_path, but an application's connections, psql sessions and other tools may not:
``init`` and ``status`` say so.
"""

from __future__ import annotations

from dataclasses import dataclass

from leasectl.core.literal import echo


@dataclass(frozen=True)
class WritableSchema:
    """A schema and the roles, other than its owner, that hold CREATE on it ("PUBLIC": all)."""

    schema: str
    roles: tuple[str, ...]

    def warning(self) -> str:
        """The one-line warning (its names quoted by ``echo``)."""
        who = ", ".join("every role (PUBLIC)" if r == "PUBLIC" else echo(r) for r in self.roles)
        return (
            f"warning: schema {echo(self.schema)} is writable (CREATE) by {who}, not only its "
            "owner: look-alike functions or operators planted there run in sessions whose "
            f"search_path has it; consider REVOKE CREATE ON SCHEMA {self.schema} FROM ..."
        )

    def as_json(self) -> dict[str, object]:
        return {"schema": self.schema, "roles": list(self.roles)}
