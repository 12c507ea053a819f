"""One worker position of the soak: a real `leasectl worker` process, restarted as a new one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from bench.chaos.model import QUEUE, ROOT
from bench.failover import LEDGER_ENV

if TYPE_CHECKING:
    from bench.chaos.controller import Chaos


class Slot:
    """One worker position; each (re)start is a new process with a new worker id."""

    def __init__(self, index: int, chaos: Chaos) -> None:
        self.index = index
        self.chaos = chaos
        self.generation = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None
        self.ready_path: Path | None = None
        self.stopped_at: float | None = None  # SIGSTOP time while stopped
        self.expect_exit: str | None = None  # "kill" or "term" when we ended it
        self.logs: list[Path] = []

    @property
    def worker_id(self) -> str:
        return f"chaos-w{self.index}-g{self.generation}"

    def start(self) -> None:
        self.generation += 1
        self.log_path = self.chaos.workdir / f"{self.worker_id}.log"
        self.logs.append(self.log_path)
        s = self.chaos.settings
        self.ready_path = self.log_path.with_suffix(".ready")
        env = {**os.environ, "LEASECTL_DSN": self.chaos.dsn, "LEASECTL_SCHEMA": self.chaos.schema}
        if self.chaos.replicas is not None:
            env[LEDGER_ENV] = str(self.chaos.workdir)
        handler = "handle_async" if s.async_handlers else "handle"
        with self.log_path.open("wb") as out:
            # The command users run; the server may be restarting while it starts (--start-retry).
            self.proc = subprocess.Popen(
                [
                    sys.executable, "-m", "leasectl", "worker",
                    "--queue", QUEUE, "--handler", f"bench.chaos_handlers:{handler}",
                    "--worker-id", self.worker_id, "--concurrency", str(s.concurrency),
                    "--lease-ttl", f"{s.lease_ttl}s", "--heartbeat-every", f"{s.heartbeat}s",
                    "--grace", "1s", "--poll-interval", "100ms",
                    "--start-retry", "1h", "--ready-file", str(self.ready_path),
                ],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip
        self.expect_exit = None
        self.stopped_at = None
        self.chaos.tally.worker_starts += 1

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def ready(self) -> bool:
        if not self.alive or self.log_path is None:
            return False
        return self.ready_path is not None and self.ready_path.exists()

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
