"""Shared by the peer drivers, which run under bench/peers/.venv (never the project's venv).

Every driver is a script with two commands:

    prepare --dsn DSN --jobs N     install the peer's schema in DSN (a fresh, empty database),
                                   enqueue N no-op jobs, and print one JSON line: the peer's
                                   version, the SQL that counts unfinished jobs, the SQL that
                                   gives the finish time (column t) of each job finished by
                                   %(cut)s, its configuration
    work --dsn DSN --concurrency K run one worker process with K concurrent jobs until SIGTERM
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from importlib import metadata
from typing import Any


def cli(
    name: str,
    prepare: Callable[[str, int], dict[str, Any]],
    work: Callable[[str, int], None],
) -> None:
    p = argparse.ArgumentParser(prog=name)
    sub = p.add_subparsers(dest="command", required=True)
    pp = sub.add_parser("prepare")
    pp.add_argument("--dsn", required=True)
    pp.add_argument("--jobs", type=int, required=True)
    pw = sub.add_parser("work")
    pw.add_argument("--dsn", required=True)
    pw.add_argument("--concurrency", type=int, required=True)
    a = p.parse_args()
    if a.command == "prepare":
        info = prepare(a.dsn, a.jobs)
        info.setdefault("version", metadata.version(name))
        print(json.dumps(info), flush=True)
    else:
        work(a.dsn, a.concurrency)
    sys.exit(0)


def url(dsn: str) -> str:
    """A postgresql:// URL for drivers (asyncpg) that take no key=value connection strings."""
    if dsn.startswith(("postgresql://", "postgres://")):
        return dsn
    from urllib.parse import quote

    from psycopg.conninfo import conninfo_to_dict

    d = {k: str(v) for k, v in conninfo_to_dict(dsn).items()}
    auth = quote(d.get("user", "postgres"), safe="")
    if "password" in d:
        auth += ":" + quote(d["password"], safe="")
    host = d.get("host", "127.0.0.1")
    return (
        f"postgresql://{auth}@{host}:{d.get('port', '5432')}/{quote(d.get('dbname', ''), safe='')}"
    )


def chunks(n: int, size: int) -> list[int]:
    return [min(size, n - i) for i in range(0, n, size)]
