"""What a demo run reports: the summary counted at the end, and the progress lines on the way."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO


@dataclass(frozen=True)
class DemoSummary:
    """What a demo run did, counted in the database over the jobs this run enqueued.

    ``lost`` must be 0: jobs enqueued but gone, jobs completed twice, and (when the run could
    settle: every worker stopped, every lease lapsed, a last watcher pass) jobs still
    Processing. ``unfinished`` is the honest remainder that is not lost: jobs still Pending
    (waiting out a retry backoff when the drain ended), and, after an interrupted run, jobs
    whose lease a killed worker still held (the next watcher pass requeues them).
    """

    run_id: str
    target: str
    schema: str
    server: str  # started, reused, adopted (left running by a crashed demo) or external
    seconds: float
    drain_seconds: float
    drained: bool
    interrupted: bool
    enqueued: int
    completed: int
    failed: int
    stuck: int
    pending: int
    processing: int
    retried: int  # failed attempts: each one went back to Pending with backoff, or ended Failed
    requeued_by_watcher: int
    taken_over: int  # lapsed leases claimed directly by another worker
    leases_expired: int
    quarantined: int
    worker_kills: int
    worker_stalls: int
    worker_restarts: int
    worker_crashes: int
    workers_started: int
    workers_stopped: int
    workers_left: int
    unfinished: int
    lost: int
    log_dir: str | None = None

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.workers_left == 0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}

    def render(self) -> str:
        """The summary as a few lines of text for people."""
        if self.interrupted:
            ending = "interrupted"
        elif self.drained:
            ending = f"drained in {self.drain_seconds:.0f}s"
        elif self.drain_seconds:
            ending = f"not drained after {self.drain_seconds:.0f}s"
        else:
            ending = "stopped"
        lines = [
            f"leasectl demo {self.run_id} on {self.target} (schema {self.schema}, "
            f"server {self.server}): ran {self.seconds:.0f}s, {ending}",
            f"  jobs      {self.enqueued} enqueued: {self.completed} completed, "
            f"{self.failed} failed, {self.stuck} stuck, {self.pending} pending, "
            f"{self.processing} processing",
            f"  recovery  {self.retried} failed attempts retried with backoff; "
            f"{self.leases_expired} leases lapsed: {self.requeued_by_watcher} requeued by the "
            f"watcher, {self.taken_over} taken over by a worker; "
            f"{self.quarantined} quarantined by the operator",
            f"  fleet     {self.workers_started} worker processes started, "
            f"{self.workers_stopped} stopped, {self.workers_left} left; {self.worker_kills} "
            f"SIGKILLed, {self.worker_stalls} stalled past their lease, "
            f"{self.worker_restarts} restarts, {self.worker_crashes} unexpected exits",
            f"  result    lost {self.lost}, unfinished {self.unfinished}"
            + ("" if self.ok else "  <-- NOT OK"),
        ]
        if self.log_dir:
            lines.append(f"  logs      {self.log_dir}")
        return "\n".join(lines)


class Reporter:
    """Progress lines with the time since the start, to a stream and to demo.log."""

    def __init__(self, stream: TextIO | None, path: Path) -> None:
        self.stream = stream
        self.file = path.open("a", encoding="utf-8")
        self.started = time.monotonic()
        self.lock = threading.Lock()

    def say(self, message: str) -> None:
        line = f"[{time.monotonic() - self.started:6.1f}s] {message}"
        with self.lock:
            for out in (self.stream, self.file):
                if out is not None:
                    with contextlib.suppress(OSError, ValueError):
                        print(line, file=out, flush=True)

    @contextlib.contextmanager
    def muted(self, mute: bool = True) -> Iterator[None]:
        """Lines only to demo.log meanwhile (while the console owns the terminal)."""
        stream = self.stream
        if mute:
            with self.lock:
                self.stream = None
        try:
            yield
        finally:
            with self.lock:
                self.stream = stream

    def close(self) -> None:
        self.file.close()
