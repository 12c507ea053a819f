"""What tracing (docs/tracing.md) costs: its hooks alone, then an enqueue and a drained job, with
OpenTelemetry not imported (off) and with the SDK recording every span (on).

    python -m bench.tracing [--dsn ADMIN_DSN] [--jobs 2000] [--repeats 5] [--calls 200000]

1. The hooks, in a child process each way (the API cannot be un-imported): per call, the best
   of ``--repeats`` timings of ``--calls`` calls of what the worker runs per job (a handler's
   span: enter, outcome, exit), per claim (``clock`` and ``claimed`` with one lease) and per
   enqueue (``sending``: enter, ``sent``, exit). "on": an SDK ``TracerProvider`` whose one
   processor drops every span (the cost of making spans, not of exporting them), the job's
   stored context a valid W3C one.
2. On a database (``--dsn``'s server, else a temporary embedded one): ``--jobs`` jobs enqueued
   one call each (autocommit), then drained in-process (``leasectl.testing.drain``, the
   worker's own claim, executor and completion path, one job per trip), off and on in turns
   (``--repeats`` rounds, a fresh database each run); per job, the median.

A figure, not a test: the load average is printed with it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import Any

CHILD = "--child"


def _hooks(calls: int, repeats: int) -> dict[str, float]:
    from datetime import UTC, datetime

    from leasectl.core import tracing
    from leasectl.core.models import Job, JobStatus, Lease

    now = datetime.now(UTC)
    job = Job(1, "q", None, JobStatus.PROCESSING, 0, now, 1, 5, "w", now, now, None, now, now, None)
    carrier = '{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'
    lease = Lease(job, "w", 1, now, trace_context=carrier)
    leases = [lease]

    def process() -> None:
        with tracing.processing(lease) as span:
            if span.on:
                span.ended("completed", None)

    def claim() -> None:
        started = tracing.clock()
        if started is not None:
            tracing.claimed("q", "w", started, leases)

    def queues() -> list[str]:
        return ["q"]

    def send() -> None:
        with tracing.sending(queues, 1) as span:
            span.sent(())

    out = {}
    for name, call in (("process", process), ("claim", claim), ("send", send)):
        best = float("inf")
        for _ in range(repeats):
            started = time.perf_counter()
            for _ in range(calls):
                call()
            best = min(best, (time.perf_counter() - started) / calls)
        out[name] = round(best * 1e6, 3)  # µs per call
    return out


def _db(dsn: str, jobs: int) -> dict[str, float]:
    import psycopg

    import leasectl
    from leasectl.testing import drain

    with psycopg.connect(dsn, autocommit=True) as conn:
        started = time.perf_counter()
        for n in range(jobs):
            leasectl.enqueue(conn, queue="bench", payload=n)
        enqueue_s = time.perf_counter() - started
    started = time.perf_counter()
    runs = drain(dsn, "bench", lambda ctx: None, max_jobs=jobs)
    drain_s = time.perf_counter() - started
    assert len(runs) == jobs, len(runs)
    return {
        "enqueue_us": round(enqueue_s / jobs * 1e6, 1),
        "drain_us": round(drain_s / jobs * 1e6, 1),
    }


def _tracing_on() -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider

    class Drop(SpanProcessor):
        def on_end(self, span: ReadableSpan) -> None:
            pass

    provider = TracerProvider()
    provider.add_span_processor(Drop())
    trace.set_tracer_provider(provider)


def child(argv: list[str]) -> int:
    mode, what = argv[0], argv[1]
    if mode == "on":
        _tracing_on()
    else:
        assert "opentelemetry.trace" not in sys.modules
    if what == "hooks":
        result: dict[str, Any] = _hooks(int(argv[2]), int(argv[3]))
    else:
        from opentelemetry import trace

        tracer = trace.get_tracer("bench")
        with tracer.start_as_current_span("request") if mode == "on" else _nothing():
            result = _db(argv[2], int(argv[3]))
    print(json.dumps(result))
    return 0


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _run_child(*args: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.tracing", CHILD, *args],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == CHILD:
        return child(argv[1:])
    p = argparse.ArgumentParser(prog="python -m bench.tracing", description=__doc__.split("\n")[0])
    p.add_argument("--dsn", help="server to benchmark (default: a temporary embedded server)")
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--calls", type=int, default=200_000)
    args = p.parse_args(argv)

    from bench.common import Ctx, Sizes, leasectl_init, loadavg, log, server_dsn

    log(f"load average {loadavg()}")
    hooks = {
        mode: _run_child(mode, "hooks", str(args.calls), str(args.repeats))
        for mode in ("off", "on")
    }
    print(f"\n### tracing: the hooks, µs per call (best of {args.repeats})\n")
    print("| hook | off | on |\n|---|---|---|")
    for name in ("process", "claim", "send"):
        print(f"| {name} | {hooks['off'][name]} | {hooks['on'][name]} |")
    runs: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    with server_dsn(args.dsn) as admin:
        ctx = Ctx(dsn=admin, sizes=Sizes(), peers=())
        for round_ in range(args.repeats):
            for mode in ("off", "on") if round_ % 2 == 0 else ("on", "off"):
                dsn = ctx.fresh_db(f"tracing_{mode}")
                leasectl_init(dsn)
                runs[mode].append(_run_child(mode, "db", dsn, str(args.jobs)))
                log(f"round {round_ + 1} {mode}: {runs[mode][-1]}")
    print(f"\n### tracing: {args.jobs} jobs, µs per job (median of {args.repeats})\n")
    print("| | off | on |\n|---|---|---|")
    for key in ("enqueue_us", "drain_us"):
        off = statistics.median(r[key] for r in runs["off"])
        on = statistics.median(r[key] for r in runs["on"])
        print(f"| {key[:-3]} | {off:.1f} | {on:.1f} |")
    log(f"load average {loadavg()}")
    print(json.dumps({"hooks": hooks, "runs": runs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
