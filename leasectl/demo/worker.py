"""One worker of the demo fleet in its own process: ``python -m leasectl.demo.worker``.

It runs the same runtime as `leasectl worker` (leasectl.worker.Worker). Two guards make sure it
never outlives the demo that started it, even when the demo is SIGKILLed: PR_SET_PDEATHSIG
(Linux; SIGKILL, which also ends a SIGSTOPped worker) and a watchdog thread that stops the worker
when its parent pid changes (elsewhere). The DSN comes in $LEASECTL_DSN, never in argv, which
`ps` shows to every user.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from datetime import timedelta

from leasectl.demo.fleet import worker_id
from leasectl.demo.handlers import handle
from leasectl.errors import LeasectlError
from leasectl.worker import Worker, WorkerConfig

log = logging.getLogger("leasectl.demo.worker")

PR_SET_PDEATHSIG = 1
DSN_ENV = "LEASECTL_DSN"


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to SIGKILL us when the demo's spawning thread dies; then close the race
    where the demo died before the request took effect."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), 0, 0, 0) != 0:
                log.warning("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
        except (OSError, AttributeError) as exc:
            log.warning("prctl(PR_SET_PDEATHSIG) unavailable: %s", exc)
    if os.getppid() != parent_pid:
        os._exit(0)


def _watchdog(worker: Worker, parent_pid: int, grace: float) -> None:
    while not worker.stopping.wait(0.5):
        if os.getppid() != parent_pid:
            log.warning("the demo (pid %d) is gone: stopping", parent_pid)
            worker.stop()
            time.sleep(grace + 5)
            os._exit(1)  # the graceful stop hung


def _seconds(text: str) -> timedelta:
    return timedelta(seconds=float(text))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m leasectl.demo.worker")
    p.add_argument("--name", required=True)
    p.add_argument("--schema", required=True)
    p.add_argument("--queue", action="append", required=True)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--lease-ttl", type=_seconds, required=True)
    p.add_argument("--heartbeat-every", type=_seconds, required=True)
    p.add_argument("--poll-interval", type=_seconds, default=timedelta(seconds=0.25))
    p.add_argument("--grace", type=_seconds, default=timedelta(seconds=1))
    p.add_argument("--retry-base", type=_seconds, default=timedelta(seconds=0.5))
    p.add_argument("--retry-cap", type=_seconds, default=timedelta(seconds=4))
    p.add_argument("--parent-pid", type=int, required=True)
    p.add_argument("--run-id", required=True, help="marks the process as one of this run")
    args = p.parse_args(argv)
    die_with_parent(args.parent_pid)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format=f"%(asctime)s {args.name} pid {os.getpid()} %(levelname)s %(message)s",
    )
    dsn = os.environ.get(DSN_ENV)
    if not dsn:
        print(f"{args.name}: ${DSN_ENV} is not set", file=sys.stderr)
        return 2
    try:
        config = WorkerConfig(
            queues=tuple(args.queue),
            concurrency=args.concurrency,
            lease_ttl=args.lease_ttl,
            heartbeat_every=args.heartbeat_every,
            poll_interval=args.poll_interval,
            grace=args.grace,
            worker_id=worker_id(args.name, os.getpid()),
            retry_base=args.retry_base,
            retry_cap=args.retry_cap,
        )
        worker = Worker(dsn, args.schema, config, handle)
        threading.Thread(
            target=_watchdog,
            args=(worker, args.parent_pid, config.grace.total_seconds()),
            name="leasectl-demo-watchdog",
            daemon=True,
        ).start()
        stats = worker.run()
    except LeasectlError as exc:
        print(f"{args.name}: {exc}", file=sys.stderr)
        return 1
    log.info("exiting: %s", stats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
