"""When the next poll runs: one poll at a time, armed only when the previous one has finished.

After a success the next poll waits the refresh interval; after a failure it backs off
exponentially (1 s, 2 s, 4 s ...) up to a cap, so a lost server is retried promptly at first and
then without hammering it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PollSchedule:
    interval: float
    backoff_base: float = 1.0
    backoff_cap: float = 30.0
    failures: int = 0

    def succeeded(self) -> float:
        """The delay before the next poll after a successful one."""
        self.failures = 0
        return self.interval

    def failed(self) -> float:
        """The delay before the next poll after a failed one (capped exponential backoff)."""
        self.failures += 1
        base = min(self.backoff_base, self.interval)
        return float(min(self.backoff_cap, base * 2 ** min(self.failures - 1, 20)))
