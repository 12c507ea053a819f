"""One leasectl worker process for the benchmarks: the real `Worker` runtime, a no-op handler.

    python -m bench.leasectl_worker --dsn DSN --concurrency 25 [--queue default]

Runs until SIGTERM (the runtime's own graceful shutdown), then prints its stats as one JSON line
on stderr. Leases, heartbeats, fencing and attempt history are all on, as in production.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from datetime import timedelta
from typing import Any

from leasectl.worker import JobContext, Worker, WorkerConfig


def noop(ctx: JobContext) -> None:
    """The job does nothing: the benchmark measures the queue, not the work."""


def config(args: argparse.Namespace) -> WorkerConfig:
    """Only the fields this leasectl's WorkerConfig has (the runtime is changing under us)."""
    known = {f.name for f in dataclasses.fields(WorkerConfig)}
    wanted: dict[str, Any] = {
        "queues": tuple(args.queue),
        "concurrency": args.concurrency,
        "lease_ttl": timedelta(seconds=args.lease_ttl),
        "grace": timedelta(seconds=5),
    }
    if args.poll_interval is not None:
        wanted["poll_interval"] = timedelta(seconds=args.poll_interval)
    return WorkerConfig(**{k: v for k, v in wanted.items() if k in known})


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dsn", required=True)
    p.add_argument("--schema", default="leasectl")
    p.add_argument("--queue", action="append", default=None)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--lease-ttl", type=float, default=30.0)
    p.add_argument("--poll-interval", type=float, default=None, help="default: the runtime's")
    args = p.parse_args()
    args.queue = args.queue or ["default"]
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    worker = Worker(args.dsn, args.schema, config(args), noop)
    stats = worker.run()
    print(json.dumps({"stats": dataclasses.asdict(stats)}), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
