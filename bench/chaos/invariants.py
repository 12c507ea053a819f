"""The soak's invariants (listed in RELIABILITY.md), a function each: each reads ``jobs``,
``job_attempts``, ``job_events`` and the handlers' ``chaos_executions`` and ``chaos_business``
through ``q`` (a query whose ``{s}`` is the schema) and returns a ``Check``. The soak runs them
after its drain; the tests run them on states made to break one."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from bench.chaos.model import OPERATOR, WATCHER, Check, Tally

Query = Callable[..., list[tuple[Any, ...]]]


def check(name: str, bad: list[Any], detail: str) -> Check:
    """A check that holds when nothing is ``bad`` (a few of the bad rows kept as a sample)."""
    return Check(name, not bad, detail, [list(map(str, b)) for b in bad[:5]])


def create_tables(q: Query) -> None:
    """The handlers' records: every execution, and the business rows of ``ctx.transaction()``."""
    q(
        "CREATE TABLE {s}.chaos_executions ("
        " key uuid PRIMARY KEY, job_id bigint NOT NULL, attempt integer NOT NULL,"
        " worker text NOT NULL, started_at timestamptz NOT NULL,"
        " ended_at timestamptz NOT NULL, outcome text NOT NULL)"
    )
    # The business rows written in ctx.transaction(): no key, so a double write would show.
    q(
        "CREATE TABLE {s}.chaos_business ("
        " job_id bigint NOT NULL, attempt integer NOT NULL, worker text NOT NULL)"
    )
    # Append-only: a trigger refuses every UPDATE and DELETE.
    q(
        "CREATE FUNCTION {s}.chaos_append_only() RETURNS trigger LANGUAGE plpgsql AS "
        "$$BEGIN RAISE EXCEPTION 'chaos_executions is append-only'; END$$"
    )
    q(
        "CREATE TRIGGER chaos_append_only BEFORE UPDATE OR DELETE ON {s}.chaos_executions "
        "FOR EACH STATEMENT EXECUTE FUNCTION {s}.chaos_append_only()"
    )


def all_completed(q: Query, jobs: int) -> Check:
    statuses: dict[str, int] = dict(q("SELECT status::text, count(*) FROM {s}.jobs GROUP BY 1"))
    return check(
        "every job Completed (none lost, none stuck in Processing)",
        [] if statuses == {"Completed": jobs} else [(f"{statuses}",)],
        f"{statuses.get('Completed', 0)} of {jobs} Completed; all statuses {statuses}",
    )


def attempts_numbered(q: Query) -> Check:
    bad = q(
        "SELECT j.id, j.attempts, count(a.attempt), min(a.attempt), max(a.attempt) "
        "FROM {s}.jobs AS j LEFT JOIN {s}.job_attempts AS a ON a.job_id = j.id "
        "GROUP BY j.id HAVING j.attempts <> count(a.attempt) OR min(a.attempt) <> 1 "
        "OR max(a.attempt) <> j.attempts ORDER BY j.id"
    )
    return check(
        "attempts = count(job_attempts), numbered 1..attempts",
        bad,
        f"{len(bad)} jobs whose attempts disagree with job_attempts",
    )


def attempts_ended(q: Query) -> Check:
    bad = q(
        "SELECT job_id, attempt, outcome::text FROM {s}.job_attempts "
        "WHERE outcome = 'running' OR ended_at IS NULL ORDER BY 1, 2"
    )
    return check("every attempt has an outcome", bad, f"{len(bad)} attempts still 'running'")


def completed_once_by_last_lease(q: Query) -> Check:
    bad = q(
        "SELECT j.id, j.attempts, j.lease_owner, "
        "       count(*) FILTER (WHERE a.outcome = 'completed'), "
        "       max(a.attempt) FILTER (WHERE a.outcome = 'completed'), "
        "       max(a.lease_owner) FILTER (WHERE a.outcome = 'completed') "
        "FROM {s}.jobs AS j JOIN {s}.job_attempts AS a ON a.job_id = j.id "
        "WHERE j.status = 'Completed' GROUP BY j.id "
        "HAVING count(*) FILTER (WHERE a.outcome = 'completed') <> 1 "
        "    OR max(a.attempt) FILTER (WHERE a.outcome = 'completed') <> j.attempts "
        "    OR max(a.lease_owner) FILTER (WHERE a.outcome = 'completed') "
        "       IS DISTINCT FROM j.lease_owner ORDER BY j.id"
    )
    return check(
        "fencing: each job completed once, by its last lease (never after a takeover)",
        bad,
        f"{len(bad)} jobs completed more than once, or by an attempt that was not the last",
    )


def completions_executed(q: Query) -> Check:
    bad = q(
        "SELECT a.job_id, a.attempt, a.lease_owner FROM {s}.job_attempts AS a "
        "WHERE a.outcome = 'completed' AND NOT EXISTS ("
        "  SELECT 1 FROM {s}.chaos_executions AS e WHERE e.job_id = a.job_id "
        "  AND e.attempt = a.attempt AND e.worker = a.lease_owner AND e.outcome = 'ok' "
        "  AND e.ended_at <= a.ended_at) ORDER BY 1, 2"
    )
    return check(
        "fencing: every completion comes from a finished execution of that lease's holder",
        bad,
        f"{len(bad)} completions without a matching execution",
    )


def executions_leased(q: Query) -> Check:
    bad = q(
        "SELECT e.job_id, e.attempt, e.worker, a.lease_owner FROM {s}.chaos_executions AS e "
        "LEFT JOIN {s}.job_attempts AS a ON a.job_id = e.job_id AND a.attempt = e.attempt "
        "WHERE a.lease_owner IS DISTINCT FROM e.worker OR e.started_at < a.started_at "
        "UNION ALL "
        "SELECT job_id, attempt, min(worker), count(*)::text FROM {s}.chaos_executions "
        "GROUP BY 1, 2 HAVING count(*) > 1"
    )
    return check(
        "every execution ran under a lease its worker was given (one per attempt)",
        bad,
        f"{len(bad)} executions without their own lease",
    )


WINDOWS = (
    "WITH w AS ("
    "  SELECT a.job_id, a.attempt, a.outcome, a.started_at, a.ended_at,"
    # An expired lease was valid until its last heartbeat + ttl (its ended_at is when
    # someone noticed); any other lease ended at the explicit action, or lapsed first.
    "         CASE WHEN a.outcome = 'expired'"
    "              THEN a.heartbeat_at + coalesce(k.lease_ttl, %(ttl)s)"
    "              ELSE least(a.ended_at, a.heartbeat_at + coalesce(k.lease_ttl, %(ttl)s))"
    "         END AS valid"
    "  FROM {s}.job_attempts AS a"
    "  LEFT JOIN {s}.workers AS k ON k.worker_id = a.lease_owner) "
)
OVERLAP = (
    WINDOWS + ", v AS ("
    "  SELECT e.job_id, e.attempt, e.started_at AS s, e.ended_at AS u,"
    "         least(e.ended_at, w.valid) AS vu"
    "  FROM {s}.chaos_executions AS e JOIN w USING (job_id, attempt)) "
    "SELECT x.job_id, x.attempt, y.attempt FROM v AS x "
    "JOIN v AS y ON y.job_id = x.job_id AND x.attempt < y.attempt WHERE "
)


def lease_windows_apart(q: Query, ttl: timedelta) -> Check:
    bad = q(
        WINDOWS + "SELECT x.job_id, x.attempt, x.valid, y.started_at FROM w AS x "
        "JOIN w AS y ON y.job_id = x.job_id AND y.attempt = x.attempt + 1 "
        "WHERE y.started_at < x.valid ORDER BY 1, 2",
        {"ttl": ttl},
    )
    return check(
        "lease windows of one job never overlap",
        bad,
        f"{len(bad)} leases granted while the previous one was still valid",
    )


def executions_apart(q: Query, ttl: timedelta) -> Check:
    bad = q(
        OVERLAP + "x.s < x.vu AND y.s < y.vu AND x.s < y.vu AND y.s < x.vu ORDER BY 1, 2",
        {"ttl": ttl},
    )
    return check(
        "no two executions of one job overlap while both held a valid lease",
        bad,
        f"{len(bad)} overlapping pairs within valid leases",
    )


def zombie_overlaps(q: Query, ttl: timedelta) -> int:
    """Pairs of executions of one job that overlapped in wall time (a count, no invariant)."""
    overlaps: int = q(
        "SELECT count(*) FROM (" + OVERLAP + "x.s < y.u AND y.s < x.u) AS o", {"ttl": ttl}
    )[0][0]
    return overlaps


def expired_closed(q: Query) -> Check:
    bad = q(
        "SELECT a.job_id, a.attempt, a.error FROM {s}.job_attempts AS a "
        "LEFT JOIN {s}.job_attempts AS n ON n.job_id = a.job_id AND n.attempt = a.attempt + 1 "
        "WHERE a.outcome = 'expired' AND NOT ("
        "  starts_with(a.error, 'lease expired; ' || %(watcher)s || ' moved the job to ')"
        "  OR a.error = 'lease expired; taken over by ' || n.lease_owner) ORDER BY 1, 2",
        {"watcher": WATCHER},
    )
    return check(
        "every expired attempt was closed by a takeover or by the watcher",
        bad,
        f"{len(bad)} expired attempts without a takeover or a watcher move",
    )


EVENT_MATCH = (
    "WITH a AS (SELECT job_id, attempt FROM {s}.job_attempts WHERE %(cond)s), "
    "e AS (SELECT job_id, (before->>'attempts')::integer AS attempt FROM {s}.job_events"
    "      WHERE actor = %(actor)s AND %(econd)s) "
    "SELECT (SELECT count(*) FROM a), (SELECT count(*) FROM e), "
    " (SELECT count(*) FROM a WHERE NOT EXISTS (SELECT 1 FROM e "
    "   WHERE e.job_id = a.job_id AND e.attempt = a.attempt)), "
    " (SELECT count(*) FROM e WHERE NOT EXISTS (SELECT 1 FROM a "
    "   WHERE e.job_id = a.job_id AND e.attempt = a.attempt)), "
    " (SELECT count(*) - count(DISTINCT (job_id, attempt)) FROM e)"
)


def watcher_events(q: Query) -> tuple[Check, int]:
    """The check, and how many events the watcher wrote."""
    w_attempts, w_events, w_no_event, w_no_attempt, w_dupes = q(
        EVENT_MATCH.replace(
            "%(cond)s",
            "outcome = 'expired' AND starts_with(error, 'lease expired; ' || %(actor)s)",
        ).replace("%(econd)s", "true"),
        {"actor": WATCHER},
    )[0]
    return check(
        "every watcher change has its job_events row (and every row its change)",
        [("attempts without event", w_no_event), ("events without attempt", w_no_attempt)]
        if w_no_event or w_no_attempt or w_dupes
        else [],
        f"{w_attempts} attempts closed by the watcher, {w_events} watcher events, "
        f"{w_no_event} without event, {w_no_attempt} without attempt, {w_dupes} duplicated",
    ), w_events


def watcher_count(w_events: int, watcher_moved: int, failed_passes: int) -> Check:
    gap = w_events - watcher_moved
    ok = 0 <= gap and (gap == 0 or failed_passes > 0)
    return check(
        "the watcher's own count matches its events",
        [] if ok else [(watcher_moved, w_events)],
        f"watcher reported {watcher_moved} moves, {w_events} events "
        f"({failed_passes} passes with an unknown outcome)",
    )


def operator_events(q: Query, tally: Tally) -> tuple[Check, int]:
    """The check, and how many events the operator's calls wrote."""
    o_attempts, _o_events, o_no_event, o_no_attempt, o_dupes = q(
        EVENT_MATCH.replace(
            "%(cond)s",
            "(outcome = 'requeued' AND error = 'requeued by ' || %(actor)s) OR "
            "(outcome = 'marked_stuck' AND error = 'marked stuck by ' || %(actor)s)",
        ).replace("%(econd)s", "before->>'status' = 'Processing'"),
        {"actor": OPERATOR},
    )[0]
    total: int = q("SELECT count(*) FROM {s}.job_events WHERE actor = %s", (OPERATOR,))[0][0]
    gap = total - tally.operator_changed
    ok = 0 <= gap <= tally.operator_unknown * tally.operator_max_ids
    return check(
        "every operator change has its job_events row",
        []
        if not (o_no_event or o_no_attempt or o_dupes) and ok
        else [(o_no_event, o_no_attempt, o_dupes, gap)],
        f"{tally.operator_changed} changes reported, {total} operator events "
        f"({tally.operator_unknown} calls with an unknown outcome); "
        f"{o_attempts} leases ended by an operator, {o_no_event} without event, "
        f"{o_no_attempt} events without attempt",
    ), total


def event_actions_match(q: Query) -> Check:
    bad = q(
        "SELECT id, action, after->>'status' FROM {s}.job_events WHERE NOT ("
        " (action IN ('requeue', 'requeue_forced') AND after->>'status' = 'Pending') OR"
        " (action IN ('mark_stuck', 'mark_stuck_forced') AND after->>'status' = 'Stuck') OR"
        " (action = 'fail' AND after->>'status' = 'Failed'))"
    )
    return check(
        "every event's action matches its new state", bad, f"{len(bad)} inconsistent events"
    )


def business_rows(q: Query) -> tuple[Check, int, int]:
    """The check, the business rows, and the jobs meant to complete in their transaction."""
    bad = q(
        "SELECT j.id, j.status::text, j.payload->>'tx', count(b.job_id), "
        "       max(b.attempt), j.attempts, max(b.worker), j.lease_owner "
        "FROM {s}.jobs AS j LEFT JOIN {s}.chaos_business AS b ON b.job_id = j.id "
        "GROUP BY j.id "
        "HAVING count(b.job_id) <> CASE WHEN j.status = 'Completed' "
        "                               AND (j.payload->>'tx')::boolean THEN 1 ELSE 0 END "
        "    OR max(b.attempt) <> j.attempts OR max(b.worker) <> j.lease_owner "
        "UNION ALL "
        "SELECT b.job_id, 'no such job', NULL, count(*), NULL, NULL, NULL, NULL "
        "FROM {s}.chaos_business AS b WHERE NOT EXISTS "
        "  (SELECT 1 FROM {s}.jobs AS j WHERE j.id = b.job_id) GROUP BY b.job_id"
    )
    business: int = q("SELECT count(*) FROM {s}.chaos_business")[0][0]
    tx_jobs: int = q("SELECT count(*) FROM {s}.jobs WHERE (payload->>'tx')::boolean")[0][0]
    return (
        check(
            "every Completed job of ctx.transaction() has exactly one business row, written by "
            "its completing lease, and no other job has one",
            bad,
            f"{business} business rows for {tx_jobs} transaction jobs; {len(bad)} jobs wrong",
        ),
        business,
        tx_jobs,
    )


def no_process_problems(problems: list[str], seen_while_running: int) -> Check:
    return check(
        "no worker crashed, died on its own or failed to stop",
        [(p,) for p in problems],
        f"{seen_while_running} process problems",
    )


def database_checks(
    q: Query, jobs: int, ttl: timedelta, tally: Tally, watcher_moved: int
) -> tuple[list[Check], dict[str, Any]]:
    """Every invariant read from the database, in the report's order, and the counts they
    found on the way (``watcher_moves``, ``operator_events``, ``transaction_jobs``,
    ``business_rows``, ``executions_overlapping_a_zombie``)."""
    checks = [
        all_completed(q, jobs),
        attempts_numbered(q),
        attempts_ended(q),
        completed_once_by_last_lease(q),
        completions_executed(q),
        executions_leased(q),
        lease_windows_apart(q, ttl),
        executions_apart(q, ttl),
    ]
    zombies = zombie_overlaps(q, ttl)
    checks.append(expired_closed(q))
    watched, w_events = watcher_events(q)
    checks += [watched, watcher_count(w_events, watcher_moved, tally.watcher_failed_passes)]
    operated, op_events = operator_events(q, tally)
    checks += [operated, event_actions_match(q)]
    business, rows, tx_jobs = business_rows(q)
    checks.append(business)
    return checks, {
        "watcher_moves": w_events,
        "operator_events": op_events,
        "transaction_jobs": tx_jobs,
        "business_rows": rows,
        "executions_overlapping_a_zombie": zombies,
    }


def counts(q: Query) -> dict[str, Any]:
    """What the report counts besides the invariants: executions, attempts, takeovers."""
    total = sum(dict(q("SELECT status::text, count(*) FROM {s}.jobs GROUP BY 1")).values())
    executions: dict[str, int] = dict(
        q("SELECT outcome, count(*) FROM {s}.chaos_executions GROUP BY 1")
    )
    dup = q(
        "SELECT count(*), count(DISTINCT e.job_id) FROM {s}.chaos_executions AS e "
        "JOIN {s}.job_attempts AS a USING (job_id, attempt) "
        "WHERE a.outcome <> 'completed' AND e.outcome <> 'error'"
    )[0]
    outcomes: dict[str, int] = dict(
        q("SELECT outcome::text, count(*) FROM {s}.job_attempts GROUP BY 1 ORDER BY 1")
    )
    takeovers = q(
        "SELECT count(*) FROM {s}.job_attempts WHERE outcome = 'expired' "
        "AND starts_with(error, 'lease expired; taken over by ')"
    )[0][0]
    late = q(
        "SELECT count(*) FROM {s}.job_attempts AS a "
        "JOIN {s}.workers AS k ON k.worker_id = a.lease_owner "
        "WHERE a.outcome = 'completed' AND a.ended_at > a.heartbeat_at + k.lease_ttl"
    )[0][0]
    max_attempts = q("SELECT max(attempts) FROM {s}.jobs")[0][0]
    return {
        "jobs": total,
        "executions": sum(executions.values()),
        "executions_by_outcome": executions,
        "duplicate_executions": dup[0],
        "jobs_executed_again_after_losing_a_lease": dup[1],
        "attempts_by_outcome": outcomes,
        "takeovers_by_claim": takeovers,
        "completed_after_lapse_without_takeover": late,
        "max_attempts_of_a_job": max_attempts,
    }
