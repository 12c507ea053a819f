"""Run one leasectl Worker in this process: ``python -m tests.worker_proc DSN QUEUE HANDLER ...``.

Used by the process tests (SIGKILL, SIGSTOP, SIGTERM); prints ``ready <worker_id>`` once started.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
from datetime import timedelta

from leasectl.worker import Worker, WorkerConfig, load_handler


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("dsn")
    p.add_argument("queue")
    p.add_argument("handler")
    p.add_argument("--worker-id", required=True)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--ttl", type=float, default=30.0)
    p.add_argument("--heartbeat", type=float, default=None)
    p.add_argument("--grace", type=float, default=30.0)
    p.add_argument("--poll", type=float, default=0.05)
    a = p.parse_args()
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s"
    )
    config = WorkerConfig(
        queues=(a.queue,),
        concurrency=a.concurrency,
        lease_ttl=timedelta(seconds=a.ttl),
        heartbeat_every=timedelta(seconds=a.heartbeat) if a.heartbeat else None,
        grace=timedelta(seconds=a.grace),
        poll_interval=timedelta(seconds=a.poll),
        worker_id=a.worker_id,
    )
    worker = Worker(a.dsn, "leasectl", config, load_handler(a.handler))

    def announce() -> None:
        worker.started.wait()
        print(f"ready {worker.worker_id}", flush=True)

    threading.Thread(target=announce, daemon=True).start()
    stats = worker.run()
    print(f"stopped {stats}", flush=True)


if __name__ == "__main__":
    main()
