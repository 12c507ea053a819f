"""Chaos soak: real worker processes, SIGKILL, SIGSTOP past the lease, server restarts.

Usage::

    python -m bench.chaos [--workers 6] [--jobs 20000] [--duration 10m] [--dsn DSN] [--seed N]
    python -m bench.chaos --failover sync|async [--failovers 2] [--duration 60s] ...

Without ``--dsn`` it runs a durable embedded PostgreSQL in a temporary directory it owns (and
removes, unless ``--keep`` or a violation), and restarts it (fast, immediate, and SIGKILL of the
postmaster) while everything runs. With ``--dsn`` it works in a fresh schema of that database
and cannot restart the server. With ``--failover`` it runs a primary and a standby instead,
everyone on one multi-host DSN, and fails over ``--failovers`` times (bench/failover.py): with
``sync`` every invariant must hold; with ``async`` the report says which ones a failover broke
(only those that ``ASYNC_MAY_BREAK`` lists may break).

Every execution of the handler is recorded (job, attempt, worker, start and end on the database
clock) in an append-only table, committed before the handler returns. After the chaos the queue
is drained and the invariants (``invariants.py``, listed in RELIABILITY.md) are checked against
``jobs``, ``job_attempts``, ``job_events`` and the executions; the exit code is 1 on any
violation.
"""

from bench.chaos.cli import main, run
from bench.chaos.model import Check, Report, Settings

__all__ = ["Check", "Report", "Settings", "main", "run"]
