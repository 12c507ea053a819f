"""What the per-minute history (migration 20) costs the worker: the drain, A/B, interleaved.

    python -m bench.history_cost DSN [--rounds 3] [--jobs 20000] [--single-jobs 5000]
    python -m bench.history_cost DSN --trips [--rounds 12] [--single 2000] [--batch-trips 200]

Each round drains in fresh databases, the two variants taking turns (the order alternating by
round): *after*, the schema as shipped; *before*, the same schema with the history's triggers
taken out (its enqueue trigger dropped and migration 11's ``counters_from_attempts`` put back, so
the counters are kept as before migration 20). The pickups are counted with the attempts'
outcomes since migration 31 (their trigger, which *before* replaces, counts none). The drain is
``bench/drain.py``'s: the ``leasectl worker`` command, no-op handler, its steady rate (the
middle 80 % of the finishes), at c=50 (2 processes x 25) and in single-job mode (1 process at
concurrency 1, ready before the jobs are seeded). Prints every run and the medians; on a shared
machine the spread is the figure to read.

``--trips``: the worker's round trip alone, as ``bench/pause_cost.py`` measures it (its
``Variant``: ``jobs_complete_and_claim`` prepared through ``db/hot.py``, each claim resumed at the
previous one's key), on a fresh database per variant (``--variants``, the first the base):
*nohist* without the history's writes (as *before* above), *nohist20* (nohist, its claim
writing no queue or due time into the attempt either, as before migration 31: the worker's
path with no history at all), *026* the worker's path at migration
26 (the completion's counts written twice, to counter_deltas and the history's deltas, and the
pickups by migration 20's statement trigger on attempts opened, which probes each job),
*trigger* (migrations 27-29: the counts written once, the pickups by that trigger), *030* (the
pickups appended by a CTE of each claim, migration 30), *shipped* (the pickups counted with the
attempt's outcome, migration 31), *nopickup* (shipped, counting no pickup: what they cost) and
*bounds21* (the run bounds a CHECK and the claim clearing progress, as before migration 32),
*limited* (shipped, queue ``q`` limited too high to bind: what flow control costs a trip) and
*limcheck* (limited, the shards' bounds migration 24's CHECK, as before migration 34),
*noset* (shipped, the completion's trigger function without its ``SET enable_seqscan`` and
``SET jit``) and two experiments, not shipped: *limswap* (limited, a single-job trip handing its
finished lease's place under its shard to the job it claims, the finished lease locked first,
instead of calling ``claim_budget``; no rate credit is modelled), *limswapnl* (limswap
without the lock: what the lock costs) and *limswapks* (limswap holding the shard row ``FOR KEY
SHARE`` too, so that no count of it runs until the swap commits); each
variant's server CPU per trip also paired by round with the base's (the median of the rounds'
differences, and its quartiles); also the trigger functions' time per trip (pg_stat_user_functions,
wall time inside them: inflated by a loaded machine as the wall per trip is); single-job
trips (complete 1, claim 1) and c=50 trips (complete 50, claim 50), the variants taking turns
round by round, the order rotating. The server backend's CPU time per trip (/proc/PID/schedstat
of a local server) is far less disturbed by a busy machine than a drain's wall-clock rate.

    python -m bench.history_cost DSN --trips --variants nohist,030,shipped,nopickup
"""

from __future__ import annotations

import argparse
import re
import statistics
import types
from collections.abc import Callable
from typing import Any

import psycopg

from bench.common import QUICK, Ctx, leasectl_init, log
from bench.drain import System, drain_once, leasectl_system
from bench.pause_cost import NAME
from leasectl.db import sql as queries

_COUNTERS_FN = re.compile(
    r"CREATE FUNCTION \{schema\}\.counters_from_attempts\(\).*?\n\$\$;", re.DOTALL
)


def strip_history(dsn: str) -> None:
    """The schema as before migration 20's writes: no history trigger, the counters' trigger
    function as migration 11 made it (no pickups counted)."""
    eleven = next(m for m in queries.migrations() if m.version == 11)
    found = _COUNTERS_FN.search(eleven.text)
    assert found, "migration 11's counters_from_attempts not found"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TRIGGER history_from_jobs ON leasectl.jobs")
        text = found.group(0).replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
        conn.execute(queries.Query("counters_from_attempts_11", "", text).render("leasectl"))


def variant(before: bool) -> System:
    system = leasectl_system()
    if not before:
        return system
    seed, init = system.seed, system.init
    assert seed is not None and init is not None

    def init_before(dsn: str) -> None:
        leasectl_init(dsn)
        strip_history(dsn)

    def prepare_before(dsn: str, jobs: int) -> None:
        init_before(dsn)
        seed(dsn, jobs)

    system.name = "leasectl_nohist"
    system.init = init_before
    system.prepare = prepare_before
    return system


def _function(version: int, name: str, edit: tuple[str, str] | None = None) -> str:
    """Migration ``version``'s CREATE (OR REPLACE) FUNCTION of ``name``, as a replacement;
    ``edit``: a pattern (found exactly once in it) and what replaces it."""
    text = next(m for m in queries.migrations() if m.version == version).text
    found = re.search(
        r"CREATE (?:OR REPLACE )?FUNCTION \{schema\}\." + name + r"\(.*?\n\$\$;", text, re.S
    )
    assert found, f"migration {version}'s {name} not found"
    body = re.sub(r"^CREATE (?:OR REPLACE )?FUNCTION", "CREATE OR REPLACE FUNCTION", found[0])
    if edit is not None:
        body, n = re.subn(edit[0], edit[1], body)
        assert n == 1, f"migration {version}'s {name}: {edit[0]!r} is not where it was"
    return queries.Query(f"{name}_{version}", "", body).render("leasectl")


# Migration 30's claim: the shipped claim with its attempts' INSERT as it was and the pickups
# appended to the history by a CTE of its own (migration 31 counts them when attempts end).
_INTO = (
    "    INSERT INTO {schema}.job_attempts (job_id, attempt, lease_owner, started_at, heartbeat_at"
)
_OPENED_31 = (
    _INTO
    + """,
                                       queue, due_at)
    SELECT id, attempts, lease_owner, now(), now(), queue, greatest(created_at, run_at)
    FROM changed WHERE NOT completing
"""
)
_OPENED_30 = (
    _INTO
    + """)
    SELECT id, attempts, lease_owner, now(), now() FROM changed WHERE NOT completing
"""
)
_PICKUPS_30 = """), picked_up AS (
    INSERT INTO {schema}.queue_history_deltas (queue, minute, counter, bucket, delta)
    SELECT queue, date_trunc('minute', now(), 'UTC'), 'pickup',
           {schema}.history_bucket(extract(epoch FROM now() - greatest(created_at, run_at))
                                   * 1000),
           count(*)
    FROM changed WHERE NOT completing
    GROUP BY 1, 2, 4
"""
_SETTLED = "), settled AS (\n"


def claim_30(pickups: bool) -> queries.Query:
    """The claim as migration 30 shipped it (``pickups``) or without its pickups (migration 20's
    trigger wrote them): its attempts without queue or due time."""
    shipped = queries.get(NAME)
    assert shipped.text.count(_OPENED_31) == 1 and shipped.text.count(_SETTLED) == 1
    text = shipped.text.replace(_OPENED_31, _OPENED_30)
    if pickups:
        text = text.replace(_SETTLED, _PICKUPS_30 + _SETTLED)
    return queries.Query(NAME + ("_30" if pickups else "_20"), shipped.description, text)


def as_030(dsn: str) -> None:
    """The completion's trigger as migration 27 made it (outcomes only; every job probed)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(_function(27, "counters_from_attempts"))


def no_pickups(dsn: str) -> None:
    """The shipped claim, the completion's trigger without the pickups it counts."""
    pickups = (
        r"FILTER \(WHERE c\.due_at IS NOT NULL\) AS pickups",
        "FILTER (WHERE false) AS pickups",
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(_function(31, "counters_from_attempts", pickups))


def no_sets(dsn: str) -> None:
    """The shipped completion's trigger without its SET enable_seqscan and jit: what the
    function's two planner settings cost each statement that fires it."""
    settings = (r"SET enable_seqscan = off\nSET jit = off\n", "")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(_function(31, "counters_from_attempts", settings))


def pickup_trigger(dsn: str) -> None:
    """The pickups as migration 20 wrote them: a statement trigger on attempts opened, each
    job probed by primary key (the claim runs without its own pickups; the completion's
    trigger as migration 27 made it)."""
    as_030(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(_function(20, "history_from_attempts_opened"))
        conn.execute(
            "CREATE TRIGGER history_from_attempts_opened AFTER INSERT ON leasectl.job_attempts "
            "REFERENCING NEW TABLE AS new_attempts FOR EACH STATEMENT "
            "EXECUTE FUNCTION leasectl.history_from_attempts_opened()"
        )


def as_026(dsn: str) -> None:
    """The worker's path as at migration 26: the completion's counts written twice (counter_deltas
    and the history's deltas, migration 20's trigger function), and migration 20's pickups."""
    pickup_trigger(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(_function(20, "counters_from_attempts"))


_SHARD = "        limit_shard = CASE WHEN t.attempt IS NULL THEN t.shard ELSE j.limit_shard END,\n"
_CLEARS = """        progress = CASE WHEN t.attempt IS NULL THEN NULL ELSE j.progress END,
        progress_message = CASE WHEN t.attempt IS NULL THEN NULL ELSE j.progress_message END,
"""


def claim_21() -> queries.Query:
    """The shipped claim clearing the previous attempt's progress, as before migration 32."""
    shipped = queries.get(NAME)
    assert shipped.text.count(_SHARD) == 1
    return queries.Query(
        NAME + "_21", shipped.description, shipped.text.replace(_SHARD, _CLEARS + _SHARD)
    )


def bounds_21(dsn: str) -> None:
    """The run bounds as migration 21 made them (a CHECK every statement writing jobs reads),
    instead of migration 32's trigger; run with ``claim_21``."""
    text = next(m for m in queries.migrations() if m.version == 21).text
    found = re.search(
        r"ALTER TABLE \{schema\}\.jobs ADD CONSTRAINT jobs_run_bounds .*?;", text, re.S
    )
    assert found, "migration 21's jobs_run_bounds not found"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TRIGGER jobs_run_bounds ON leasectl.jobs")
        conn.execute(queries.Query("bounds_21", "", found[0]).render("leasectl"))


def _function_times(conn: Any, trips: int) -> dict[str, tuple[float, float, float]]:
    """The PL/pgSQL functions' total and self time per trip (µs) and calls per trip, as
    pg_stat_user_functions has them since the reset (flushed first: the backend flushes its
    statistics when it goes idle, before it answers)."""
    conn.execute("SELECT pg_stat_force_next_flush()")
    rows = conn.execute(
        "SELECT funcname, total_time, self_time, calls FROM pg_stat_user_functions "
        "WHERE schemaname = 'leasectl' ORDER BY funcname"
    ).fetchall()
    return {r[0]: (r[1] * 1e3 / trips, r[2] * 1e3 / trips, r[3] / trips) for r in rows}


def limited(dsn: str) -> None:
    """Queue ``q`` limited high enough never to bind (as ``bench.limits_cost``)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT leasectl.queue_limit_set('q', 100000, 1000000, NULL, 'bench', "
            "'not binding', 'leasectl_bench')"
        )


def limited_check(dsn: str) -> None:
    """``limited``, the shards' bounds a CHECK every statement writing a shard reads (migration
    24's) instead of migration 34's trigger on INSERT: what the CHECK cost a claim."""
    text = next(m for m in queries.migrations() if m.version == 24).text
    found = re.search(r"CONSTRAINT queue_limit_shards_bounded CHECK \(.*?\n    \)", text, re.S)
    assert found, "migration 24's queue_limit_shards_bounded not found"
    limited(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TRIGGER queue_limit_shards_bounded ON leasectl.queue_limit_shards")
        conn.execute(
            queries.Query(
                "shards_bounded_24", "", "ALTER TABLE {schema}.queue_limit_shards ADD " + found[0]
            ).render("leasectl")
        )


_BUDGET = re.compile(r"WITH budget AS \(\n.*?\n\), picked AS \(\n", re.S)
_SWAP_BUDGET = """WITH swap AS (
    -- (Experiment: a single-job trip of a limited queue hands its finished lease's place under
    -- its shard to the job it claims, the finished lease locked first so that its completion
    -- cannot fail; no rate credit is modelled.)
    SELECT d.limit_shard
    FROM {schema}.jobs AS d
    WHERE d.id = (%(done_ids)s::bigint[])[1]
      AND cardinality(%(done_ids)s::bigint[]) = 1 AND %(limit)s = 1
      AND d.attempts = (%(done_attempts)s::integer[])[1] AND d.lease_owner = %(owner)s
      AND d.status = 'Processing' AND d.queue = %(queue)s
      AND d.lease_until >= now() + interval '5 seconds' AND d.limit_shard IS NOT NULL
      AND EXISTS (SELECT FROM {schema}.queue_limit_shards AS s
                  WHERE s.queue = %(queue)s AND s.shard = d.limit_shard
                    AND s.fast_from < d.updated_at AND s.live_hint <= s.share)
    FOR UPDATE OF d
), budget AS (
    SELECT 1 AS budget, false AS settle, ARRAY[w.limit_shard] AS shards, NULL::smallint AS held,
           NULL::double precision AS wait
    FROM swap AS w
    UNION ALL
    SELECT b.budget, b.settle, b.shards, b.held, b.wait
    FROM {schema}.queue_limits AS l
    CROSS JOIN LATERAL {schema}.claim_budget(
        l.queue, %(limit)s, %(done_ids)s::bigint[], %(owner)s, l.shards) AS b
    WHERE l.queue = %(queue)s AND NOT EXISTS (SELECT FROM swap)
    UNION ALL
    SELECT %(limit)s, false, NULL::smallint[], NULL::smallint, NULL::double precision
    WHERE NOT EXISTS (SELECT FROM {schema}.queue_limits AS l WHERE l.queue = %(queue)s)
), picked AS (
"""


_SHARD_PROBE = """      AND EXISTS (SELECT FROM {schema}.queue_limit_shards AS s
                  WHERE s.queue = %(queue)s AND s.shard = d.limit_shard
                    AND s.fast_from < d.updated_at AND s.live_hint <= s.share)
    FOR UPDATE OF d
"""
_SHARD_HELD = """      AND s.queue = %(queue)s AND s.shard = d.limit_shard
      AND s.fast_from < d.updated_at AND s.live_hint <= s.share
    FOR UPDATE OF d FOR KEY SHARE OF s
"""


def claim_swap(lock: str = "lease") -> queries.Query:
    """Experiment: the shipped claim whose single-job trip of a limited queue takes its finished
    lease's place under the shard (no claim_budget, no shard row written). ``lock``: "lease",
    the finished lease locked first; "none", nothing locked (what the lock costs); "shard", the
    shard row held ``FOR KEY SHARE`` too, so that no count of the shard runs until the swap
    commits (one swap at a time here: no MultiXact)."""
    shipped = queries.get(NAME)
    swap = {
        "lease": _SWAP_BUDGET,
        "none": _SWAP_BUDGET.replace("    FOR UPDATE OF d\n", ""),
        "shard": _SWAP_BUDGET.replace(_SHARD_PROBE, _SHARD_HELD).replace(
            "    FROM {schema}.jobs AS d\n",
            "    FROM {schema}.jobs AS d, {schema}.queue_limit_shards AS s\n",
            1,
        ),
    }[lock]
    assert lock != "shard" or "KEY SHARE" in swap
    text, n = _BUDGET.subn(lambda _: swap, shipped.text)
    assert n == 1, "the claim's budget CTE is not where it was"
    suffix = {"lease": "_swap", "none": "_swapnl", "shard": "_swapks"}[lock]
    return queries.Query(NAME + suffix, shipped.description, text)


# --trips' variants: each changes a fresh database made by the shipped migrations, and runs
# one of the claims: "31" (as shipped), "30" (migration 30's, with its pickups CTE), "20" (30's
# without the CTE), "21" (clearing progress, as before migration 32), "swap", "swapnl" and
# "swapks" (the experiment above).
TRIP_VARIANTS: dict[str, tuple[Callable[[str], None], str]] = {
    "limited": (limited, "31"),
    "limcheck": (limited_check, "31"),
    "limswap": (limited, "swap"),
    "limswapnl": (limited, "swapnl"),
    "limswapks": (limited, "swapks"),
    "nohist": (strip_history, "31"),
    "nohist20": (strip_history, "20"),
    "026": (as_026, "20"),
    "trigger": (pickup_trigger, "20"),
    "030": (as_030, "30"),
    "shipped": (lambda dsn: None, "31"),
    "nopickup": (no_pickups, "31"),
    "noset": (no_sets, "31"),
    "bounds21": (bounds_21, "21"),
}


def trip_cost(base: str, rounds: int, single: int, batch_trips: int, names: list[str]) -> None:
    from psycopg import sql

    from bench.pause_cost import Variant, fresh_database
    from leasectl.db import hot
    from leasectl.db.connection import Database

    claims = {
        "30": claim_30(True),
        "20": claim_30(False),
        "21": claim_21(),
        "swap": claim_swap(),
        "swapnl": claim_swap(lock="none"),
        "swapks": claim_swap(lock="shard"),
    }
    by_name = {q.name: q for q in claims.values()}
    real = queries
    hot.queries = types.SimpleNamespace(  # type: ignore[assignment]
        get=lambda name: by_name.get(name) or real.get(name), numbered=real.numbered
    )

    jobs = rounds * (single + 50 * batch_trips) + 10_000
    dbnames = {k: f"leasectl_history_cost_{k}" for k in names}
    dsns = {k: fresh_database(base, name, jobs) for k, name in dbnames.items()}
    for k, dsn in dsns.items():
        TRIP_VARIANTS[k][0](dsn)
    statement = {k: claims[c].name if (c := TRIP_VARIANTS[k][1]) in claims else NAME
                 for k in names}  # fmt: skip
    dbs = {k: Database.connect(dsn, "leasectl", max_size=2, generic_plans=True)
           for k, dsn in dsns.items()}  # fmt: skip
    base_name = names[0]
    try:
        for mode, trips, limit in (("single-job", single, 1), ("c=50", batch_trips, 50)):
            variants = {k: Variant(db, statement[k]) for k, db in dbs.items()}
            for v in variants.values():
                v.round(max(1, trips // 10), limit)  # prepare and warm up
                v.times.clear()
                v.cpu.clear()
                # The triggers' own time (a superuser's setting): pg_stat_user_functions.
                v.conn.execute("SET track_functions = 'pl'")
                v.conn.execute("SELECT pg_stat_reset()")
            order = list(variants.values())
            for r in range(rounds):  # the order rotates round by round
                for v in order[r % len(order) :] + order[: r % len(order)]:
                    v.round(trips, limit)
            cpu = {k: statistics.median(v.cpu) * 1e6 for k, v in variants.items()}
            wall = {k: statistics.median(v.times) * 1e6 for k, v in variants.items()}
            print(f"{mode} trips, medians of {rounds} rounds of {trips} trips:")
            for k in names:
                print(
                    f"  {k:9} server CPU per trip {cpu[k]:8.1f} µs "
                    f"({(cpu[k] - cpu[base_name]) / cpu[base_name]:+.1%} on {base_name}), "
                    f"wall {wall[k]:8.1f} µs "
                    f"({(wall[k] - wall[base_name]) / wall[base_name]:+.1%}); CPU every round: "
                    + ", ".join(f"{x * 1e6:.0f}" for x in variants[k].cpu)
                )
            # Paired by round (the variants of a round run back to back): the machine's drift,
            # which moves every variant's rounds together, falls out of each round's difference.
            for k in names[1:]:
                diffs = sorted(
                    (x - b) / b
                    for x, b in zip(variants[k].cpu, variants[base_name].cpu, strict=True)
                )
                q1, med, q3 = statistics.quantiles(diffs, n=4) if len(diffs) > 1 else diffs * 3
                print(
                    f"  {k:9} server CPU per trip, paired by round on {base_name}: median "
                    f"{med:+.1%} (quartiles {q1:+.1%} to {q3:+.1%}, {len(diffs)} rounds)"
                )
            for k in names:
                per_trip = _function_times(variants[k].conn, rounds * trips)
                print(f"  {k:9} trigger functions per trip (total / self µs, calls per trip): "
                      + "; ".join(f"{f} {t:.1f} / {st:.1f} ({c:.2f})"
                                  for f, (t, st, c) in per_trip.items()))  # fmt: skip
            for k, v in variants.items():
                v.conn.execute("RESET track_functions")
                dbs[k].give_back(v.conn)
    finally:
        for db in dbs.values():
            db.close()
        with psycopg.connect(base, autocommit=True) as conn:
            for name in dbnames.values():
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("dsn")
    p.add_argument("--trips", action="store_true", help="the round trip alone (above)")
    p.add_argument("--single", type=int, default=2000, help="--trips: single-job trips a round")
    p.add_argument("--batch-trips", type=int, default=200, help="--trips: c=50 trips a round")
    p.add_argument(
        "--variants",
        default="nohist,026,shipped",
        help="--trips: comma-separated, the first the base: " + ", ".join(TRIP_VARIANTS),
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--jobs", type=int, default=20_000, help="jobs per c=50 drain")
    p.add_argument("--single-jobs", type=int, default=5_000, help="jobs per single-job drain")
    a = p.parse_args()
    if a.trips:
        names = a.variants.split(",")
        if not names or any(n not in TRIP_VARIANTS for n in names):
            p.error(f"--variants: of {', '.join(TRIP_VARIANTS)}")
        trip_cost(a.dsn, a.rounds, a.single, a.batch_trips, names)
        return
    sizes = QUICK.__class__(**{**QUICK.__dict__, "drain_timeout": 120.0})
    ctx = Ctx(a.dsn, sizes, ())
    runs: dict[str, dict[str, list[float]]] = {
        mode: {"before": [], "after": []} for mode in ("c=50", "single")
    }
    cpu: dict[str, dict[str, list[float]]] = {
        mode: {"before": [], "after": []} for mode in ("c=50", "single")
    }
    for r in range(a.rounds):
        order = [("before", True), ("after", False)]
        for name, before in order if r % 2 == 0 else order[::-1]:
            system = variant(before)
            for mode in ("c=50", "single"):
                kwargs: dict[str, Any] = (
                    {} if mode == "c=50" else {"processes": 1, "ready_first": True}
                )
                jobs = a.jobs if mode == "c=50" else a.single_jobs
                res = drain_once(ctx, system, 50 if mode == "c=50" else 1, jobs, **kwargs)
                runs[mode][name].append(res["jobs_per_s"])
                per_job = (res["worker_cpu_s"] + (res["server_cpu_s"] or 0)) / res["finished"]
                cpu[mode][name].append(per_job * 1e6)
                log(
                    f"round {r + 1} {mode} {name}: {res['jobs_per_s']} jobs/s, "
                    f"{per_job * 1e6:.1f} µs CPU/job (worker+server), partial={res['partial']}"
                )
    for mode in runs:
        b, af = (statistics.median(runs[mode][k]) for k in ("before", "after"))
        cb, ca = (statistics.median(cpu[mode][k]) for k in ("before", "after"))
        print(
            f"{mode}: before {b:.0f} jobs/s, after {af:.0f} jobs/s ({(af - b) / b:+.1%}); "
            f"CPU per job {cb:.1f} -> {ca:.1f} µs ({(ca - cb) / cb:+.1%}); medians of "
            f"{a.rounds}; runs before {runs[mode]['before']}, after {runs[mode]['after']}"
        )


if __name__ == "__main__":
    main()
