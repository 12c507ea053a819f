"""A raw claimer for the concurrency test: claims and completes until the queue is empty.

Prints "ready", waits for a line on stdin (the start gate), then prints one JSON line:
the (job id, attempt) pairs it completed.
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta

from tests.stores import Stores


def main() -> None:
    dsn, queue, owner, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    done: list[tuple[int, int]] = []
    with Stores.connect(dsn, "leasectl") as store:
        print("ready", flush=True)
        sys.stdin.readline()  # the start gate: every claimer begins at once
        while True:
            leases = store.work.claim(queue, owner, timedelta(minutes=5), batch)
            if not leases:
                break
            accepted = store.work.complete(leases)
            done.extend(
                (lease.job_id, lease.attempt) for lease in leases if lease.job_id in accepted
            )
    print(json.dumps(done))


if __name__ == "__main__":
    main()
