"""Running PostgreSQL's programs (initdb, pg_ctl) and reading what they and the server logged."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import tempfile
from pathlib import Path

from leasectl.core.errors import EmbeddedServerError
from leasectl.db.embedded.common import START_TIMEOUT, one_line
from leasectl.db.embedded.user import ServerUser

logger = logging.getLogger(__name__)


class ServerLog:
    """The server's log file (server.log), which also receives the output of every program run,
    and the mark where the current attempt's output starts."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._mark = 0

    def run(
        self,
        args: list[str],
        user: ServerUser | None,
        *,
        stdin: str | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a PostgreSQL program (as the server user when root); output goes to the log too.

        Output goes through a file, not a pipe: the postmaster pg_ctl spawns could otherwise keep
        the pipe open and hang us. ``stdin`` and ``env`` carry secrets, never the arguments
        (any local user reads /proc/PID/cmdline)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")} | (env or {})
        given = {"input": stdin.encode()} if stdin is not None else {"stdin": subprocess.DEVNULL}
        logger.debug("running %s as %s", args, user.name if user else "self")
        with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as out:
            try:
                proc = subprocess.run(
                    args,
                    **given,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd="/",
                    start_new_session=True,
                    user=user.uid if user else None,
                    group=user.gid if user else None,
                    extra_groups=[] if user else None,
                    check=False,
                    timeout=START_TIMEOUT + 30,
                )
            except (OSError, subprocess.SubprocessError) as exc:
                raise self.error(f"could not run {Path(args[0]).name}", str(exc)) from exc
            out.seek(0)
            output = out.read()
        if output.strip():
            with contextlib.suppress(OSError), open(self.path, "a", encoding="utf-8") as log:
                log.write(f"--- {Path(args[0]).name} {' '.join(args[1:2])}\n{output}")
        return subprocess.CompletedProcess(args, proc.returncode, output, "")

    def mark(self) -> None:
        """Remember where this attempt's output starts, so old runs' lines don't mislead us."""
        try:
            self._mark = self.path.stat().st_size
        except OSError:
            self._mark = 0

    def since_mark(self, tail: int = 16384) -> str:
        try:
            with open(self.path, "rb") as f:
                end = f.seek(0, os.SEEK_END)
                f.seek(max(self._mark, end - tail))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def mentions(self, needle: str) -> bool:
        return needle in self.since_mark()

    def fatal(self) -> str | None:
        """The server's own last FATAL/PANIC line says more than pg_ctl's "examine the log"."""
        text = self.since_mark()
        fatal = [ln for ln in text.splitlines() if "FATAL:" in ln or "PANIC:" in ln]
        return fatal[-1].strip() if fatal else None

    def error(self, what: str, output: str) -> EmbeddedServerError:
        lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
        last = self.fatal() or (lines[-1] if lines else "")
        detail = f" ({last})" if last else ""
        return EmbeddedServerError(one_line(f"{what}{detail}; see {self.path}"))
