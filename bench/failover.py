"""The chaos soak's failovers (``python -m bench.chaos --failover sync|async``).

A primary and its standby (embedded servers, ``leasectl.db.embedded.replication``); everyone
(workers, watcher, operator, the controller) connects through one multi-host DSN with
target_session_attrs=read-write. A failover SIGKILLs every process of the primary, promotes the
standby a moment later, and seeds a new standby from the promoted primary on the dead one's port,
so the DSN never changes and the roles alternate between the two ports.

The database's own ledgers live on the servers that fail over, so the handlers also keep a
ledger of their own, outside the database: each worker process appends a line to its file
(``LEDGER_ENV``) after the database acknowledged one of its writes:

- ``exec``: its execution was recorded in ``chaos_executions`` (with the row's key);
- ``tx``: its ``ctx.transaction()`` committed (its business row and its job's completion).

After the run, ``ledger_checks`` compares the files with what the promoted primary kept.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from bench.chaos_handlers import LEDGER_ENV
from leasectl.db.embedded import EmbeddedServer
from leasectl.db.embedded.auth import read_password, write_passfile
from leasectl.db.embedded.replication import (
    kill_primary,
    make_standby,
    multi_host_dsn,
    promote,
    sender_pid,
    wait_caught_up,
)

__all__ = ["ASYNC_MAY_BREAK", "LEDGER_ENV", "Replicas", "ledger_checks"]

# What an asynchronous failover can break: every check whose evidence is an acknowledged write
# (the handlers' ledger, a count a caller kept) or that joins the database's rows with writes
# made after the failover by a worker that still held a lease the new primary never heard of.
# The other checks read the promoted primary alone, a consistent prefix of the old one's history.
ASYNC_MAY_BREAK = frozenset(
    {
        "every acknowledged write of a handler survived the failovers",
        "every execution ran under a lease the database kept, its own worker's",
        "no fencing token was executed by two workers",
        "every acknowledged ctx.transaction() commit survived: its job completed by it",
        "fencing: every completion comes from a finished execution of that lease's holder",
        "every execution ran under a lease its worker was given (one per attempt)",
        "no two executions of one job overlap while both held a valid lease",
        "the watcher's own count matches its events",
        "every operator change has its job_events row",
    }
)


@dataclass
class FailoverTally:
    failovers: int = 0
    longest_outage_s: float = 0.0  # from the kill to the promoted primary taking writes
    longest_reseed_s: float = 0.0
    lag_bytes_at_kill: list[int] = field(default_factory=list)


class Replicas:
    """The pair, its multi-host DSN, and failovers."""

    def __init__(
        self, base_dir: Path, primary: EmbeddedServer, standby: EmbeddedServer, *, sync: bool
    ) -> None:
        self.base_dir = base_dir
        self.primary = primary
        self.standby = standby
        self.sync = sync
        # The pair's own copy of the password: the first primary's directory (and its passfile)
        # is removed at the first failover, and the DSN must still log in after it.
        passfile = base_dir / "pair.passfile"
        write_passfile(passfile, read_password(primary.passfile))
        self.dsn = multi_host_dsn(primary, standby, passfile=passfile)
        self.tally = FailoverTally()
        self._nodes = 0
        self._killed_at = 0.0

    def kill(self, say: Callable[[str], None], lag: float) -> None:
        """The standby falls behind for ``lag`` seconds (the primary's WAL sender to it stopped,
        as a slow network would hold it up), then the primary is gone (every process
        SIGKILLed). Under synchronous replication the primary's commits wait meanwhile."""
        pid = sender_pid(self.primary, self.standby) if lag > 0 else None
        if pid is not None:
            os.kill(pid, signal.SIGSTOP)
            say(f"failover: the primary's WAL sender stopped for {lag:.1f}s")
            time.sleep(lag)  # the outage being simulated, not a synchronisation
        try:
            behind = self._lag_bytes()
            kill_primary(self.primary)
        finally:
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
        self._killed_at = time.monotonic()
        self.tally.lag_bytes_at_kill.append(behind)
        say(f"failover: primary {self.primary.port} killed ({behind} bytes of WAL not replayed)")

    def promote_and_reseed(self, say: Callable[[str], None]) -> None:
        """Promote the standby, then seed a new one from it on the dead primary's port."""
        promote(self.standby)
        outage = time.monotonic() - self._killed_at
        self.tally.longest_outage_s = max(self.tally.longest_outage_s, outage)
        self.tally.failovers += 1
        say(f"failover: {self.standby.port} promoted, {outage:.1f}s after the kill")
        dead, self.primary = self.primary, self.standby
        port = dead.port
        dead.stop(remove=True, mode="immediate")
        started = time.monotonic()
        self._nodes += 1
        self.standby = make_standby(
            self.primary, self.base_dir / f"node{self._nodes}", synchronous=self.sync, port=port
        )
        wait_caught_up(self.primary, self.standby, timeout=60)
        reseed = time.monotonic() - started
        self.tally.longest_reseed_s = max(self.tally.longest_reseed_s, reseed)
        mode = "synchronous" if self.sync else "asynchronous"
        say(f"failover: new {mode} standby on {port}, seeded and caught up in {reseed:.1f}s")

    def _lag_bytes(self) -> int:
        """WAL the standby has not replayed yet, a moment before the kill (a rough look)."""
        try:
            with (
                psycopg.connect(self.primary.dsn(), autocommit=True, connect_timeout=2) as p,
                psycopg.connect(self.standby.dsn(), autocommit=True, connect_timeout=2) as s,
            ):
                replayed = s.execute("SELECT pg_last_wal_replay_lsn()::text").fetchone()
                row = p.execute(
                    "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s::pg_lsn)::bigint",
                    (replayed[0] if replayed else None,),
                ).fetchone()
                return int(row[0]) if row and row[0] is not None else -1
        except psycopg.Error:
            return -1


def read_ledger(directory: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """(exec lines as (key, job, attempt, worker, outcome), tx lines as (job, attempt, worker))."""
    execs: list[tuple[Any, ...]] = []
    txs: list[tuple[Any, ...]] = []
    for path in sorted(directory.glob("ledger-*.jsonl")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by SIGKILL mid-write
            if entry.get("k") == "exec":
                execs.append(
                    (entry["key"], entry["job"], entry["attempt"], entry["worker"], entry["out"])
                )
            elif entry.get("k") == "tx":
                txs.append((entry["job"], entry["attempt"], entry["worker"]))
    return execs, txs


def ledger_checks(
    q: Callable[..., list[tuple[Any, ...]]],
    directory: Path,
    add: Callable[[str, list[Any], str], None],
) -> dict[str, Any]:
    """Load the handlers' ledgers into temporary tables of the controller's session and check
    them against what the promoted primary kept; returns the counts for the report."""
    execs, txs = read_ledger(directory)
    q("DROP TABLE IF EXISTS {s}.chaos_ledger_exec, {s}.chaos_ledger_tx")
    q(
        "CREATE TABLE {s}.chaos_ledger_exec (key uuid, job_id bigint, attempt integer,"
        " worker text, outcome text)"
    )
    q("CREATE TABLE {s}.chaos_ledger_tx (job_id bigint, attempt integer, worker text)")
    for chunk in range(0, len(execs), 5000):
        rows = execs[chunk : chunk + 5000]
        q(
            "INSERT INTO {s}.chaos_ledger_exec SELECT * FROM unnest("
            "%s::uuid[], %s::bigint[], %s::integer[], %s::text[], %s::text[])",
            [list(col) for col in zip(*rows, strict=True)],
        )
    for chunk in range(0, len(txs), 5000):
        rows = txs[chunk : chunk + 5000]
        q(
            "INSERT INTO {s}.chaos_ledger_tx SELECT * FROM unnest("
            "%s::bigint[], %s::integer[], %s::text[])",
            [list(col) for col in zip(*rows, strict=True)],
        )
    lost = q(
        "SELECT l.job_id, l.attempt, l.worker FROM {s}.chaos_ledger_exec AS l "
        "WHERE NOT EXISTS (SELECT 1 FROM {s}.chaos_executions AS e WHERE e.key = l.key) "
        "ORDER BY 1, 2"
    )
    add(
        "every acknowledged write of a handler survived the failovers",
        lost,
        f"{len(execs)} acknowledged execution records, {len(lost)} of them lost",
    )
    no_lease = q(
        "SELECT l.job_id, l.attempt, l.worker, a.lease_owner FROM {s}.chaos_ledger_exec AS l "
        "LEFT JOIN {s}.job_attempts AS a ON a.job_id = l.job_id AND a.attempt = l.attempt "
        "WHERE a.lease_owner IS DISTINCT FROM l.worker ORDER BY 1, 2"
    )
    reused = [r for r in no_lease if r[3] is not None]
    add(
        "every execution ran under a lease the database kept, its own worker's",
        no_lease,
        f"{len(no_lease)} executions whose lease the database forgot ({len(reused)} of them "
        "with its fencing token (job, attempt) given to another worker)",
    )
    twice = q(
        "SELECT job_id, attempt, count(DISTINCT worker) FROM {s}.chaos_ledger_exec "
        "GROUP BY 1, 2 HAVING count(DISTINCT worker) > 1 ORDER BY 1, 2"
    )
    add(
        "no fencing token was executed by two workers",
        twice,
        f"{len(twice)} (job, attempt) tokens executed by two workers",
    )
    undone = q(
        "SELECT t.job_id, t.attempt, t.worker, j.status::text, j.attempts, j.lease_owner "
        "FROM {s}.chaos_ledger_tx AS t JOIN {s}.jobs AS j ON j.id = t.job_id "
        "WHERE j.status <> 'Completed' OR j.attempts <> t.attempt "
        "   OR j.lease_owner IS DISTINCT FROM t.worker OR NOT EXISTS ("
        "     SELECT 1 FROM {s}.chaos_business AS b WHERE b.job_id = t.job_id "
        "     AND b.attempt = t.attempt AND b.worker = t.worker) ORDER BY 1"
    )
    add(
        "every acknowledged ctx.transaction() commit survived: its job completed by it",
        undone,
        f"{len(txs)} acknowledged commits, {len(undone)} lost (their job ran again)",
    )
    return {
        "ledger_executions": len(execs),
        "ledger_executions_lost": len(lost),
        "ledger_leases_forgotten": len(no_lease),
        "ledger_tokens_reused": len(reused),
        "ledger_tokens_executed_twice": len(twice),
        "ledger_transactions": len(txs),
        "ledger_transactions_lost": len(undone),
    }
