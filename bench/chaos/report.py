"""The soak's report, printed."""

from __future__ import annotations

from bench.chaos.model import Report
from bench.failover import ASYNC_MAY_BREAK


def render(report: Report, where: str) -> str:
    s = report.settings
    t = report.tally
    c = report.counts
    restarts = t["restarts"]
    out = [
        f"leasectl chaos soak: {s['workers']} workers x {s['concurrency']}, {s['jobs']} jobs, "
        f"{s['duration']:g}s of chaos, lease ttl {s['lease_ttl']:g}s, heartbeat "
        f"{s['heartbeat']:g}s, watcher every {s['watch_interval']:g}s, seed {s['seed']}",
        f"server: {where}",
        f"elapsed: {report.elapsed_s:.0f}s",
        "",
        "chaos:",
        f"  SIGKILL workers            {t['kills']}",
        f"  SIGTERM workers            {t['terms']}",
        f"  SIGSTOP/SIGCONT            {t['stops']} (longest stop {t['longest_stop_s']:.1f}s)",
        f"  worker (re)starts          {t['worker_starts']}",
        f"  operator calls             {t['operator_calls']} ({t['operator_changed']} jobs "
        f"changed, {t['operator_unknown']} calls lost with the connection)",
    ]
    if "failover" not in c:
        out.insert(
            -1,
            f"  server restarts            {sum(restarts.values())} "
            f"(fast {restarts.get('fast', 0)}, immediate {restarts.get('immediate', 0)}, "
            f"postmaster SIGKILL {restarts.get('crash', 0)}; longest outage "
            f"{t['longest_outage_s']:.1f}s)",
        )
    else:
        f = c["failover"]
        out += [
            f"  {'failovers (' + f['mode'] + ')':<27}{f['failovers']} (each: WAL sending held back "
            f"{s['lag']:g}s, the primary SIGKILLed, the standby promoted)",
            f"  {'  longest outage':<27}{f['longest_outage_s']:.1f}s (kill to promoted); new "
            f"standby seeded in {f['longest_reseed_s']:.1f}s at most",
            f"  {'  WAL unreplayed at kill':<27}{f['lag_bytes_at_kill']} bytes",
        ]
    out += [
        "",
        "counts:",
        f"  jobs                       {c['jobs']}",
        f"  executions                 {c['executions']} {c['executions_by_outcome']}",
        f"  duplicate executions       {c['duplicate_executions']} in "
        f"{c['jobs_executed_again_after_losing_a_lease']} jobs (lease expired, taken over, "
        "requeued or released)",
        f"  ran beside a zombie        {c['executions_overlapping_a_zombie']} pairs (in wall "
        "time, never both with a valid lease)",
        f"  attempts by outcome        {c['attempts_by_outcome']}",
        f"  takeovers by claim         {c['takeovers_by_claim']}",
        f"  requeues by the watcher    {c['watcher_moves']}",
        f"  operator events            {c['operator_events']}",
        f"  results refused by fence   {c['results_refused_by_the_fence']}",
        f"  in ctx.transaction()       {c['transaction_jobs']} jobs, {c['business_rows']} "
        f"business rows, {c['transactions_refused_by_the_fence']} completions refused (rolled "
        "back)",
        f"  heartbeats rejected        {c['heartbeats_rejected']} (worker warnings; most are "
        "jobs the worker had just finished itself, see RELIABILITY.md)",
        f"  leases given up offline    {c['leases_presumed_lost_offline']}",
        f"  late but valid completions {c['completed_after_lapse_without_takeover']} "
        "(lease lapsed, nobody took over)",
        f"  most attempts of one job   {c['max_attempts_of_a_job']}",
    ]
    if "ledger_executions" in c:
        out += [
            f"  handlers' own ledger       {c['ledger_executions']} acknowledged execution "
            f"records ({c['ledger_executions_lost']} lost by a failover), "
            f"{c['ledger_transactions']} acknowledged ctx.transaction() commits "
            f"({c['ledger_transactions_lost']} lost: their job ran again)",
            f"  leases a failover forgot   {c['ledger_leases_forgotten']} executions "
            f"({c['ledger_tokens_reused']} with their (job, attempt) token given to another "
            f"worker; {c['ledger_tokens_executed_twice']} tokens executed by two workers)",
        ]
    out += [
        "",
        "invariants:",
    ]
    broken = {c.name for c in report.broken_by_async}
    for check in report.checks:
        mark = "ok" if check.ok else "BROKEN" if check.name in broken else "FAIL"
        out.append(f"  [{mark}] {check.name}: {check.detail}")
        for row in check.sample:
            out.append(f"         e.g. {row}")
    n = len(report.violations)
    out += ["", f"RESULT: {'PASS' if n == 0 else 'FAIL'} ({n} violated invariants)"]
    if report.settings.get("failover") == "async":
        out[-1] += (
            f"; asynchronous failover broke {len(broken)} of the {len(ASYNC_MAY_BREAK)} it may "
            "break (BROKEN above)"
        )
    return "\n".join(out)
