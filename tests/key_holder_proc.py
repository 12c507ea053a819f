"""A worker that claims one job of a queue with a short lease, prints its id, and then never
heartbeats nor finishes it (the test SIGKILLs it)."""

from __future__ import annotations

import sys
import threading
from datetime import timedelta

from tests.stores import Stores


def main() -> None:
    dsn, queue, owner = sys.argv[1], sys.argv[2], sys.argv[3]
    with Stores.connect(dsn, "leasectl", max_size=2) as store:
        (lease,) = store.work.claim(queue, owner, timedelta(milliseconds=300), 10)
        print(lease.job_id, flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
