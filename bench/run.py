"""Run the benchmark suite against one PostgreSQL server; print a table per benchmark and write
bench/results.json.

    python -m bench.run [--dsn DSN | --durable] [--quick] [--only NAME...]

Without --dsn a throwaway embedded server is started (and removed afterwards), so the suite
needs no server; it runs with fsync, synchronous_commit and full_page_writes off (what the
server can do when commits cost no disk flush) unless --durable turns them on (what a
production server's commits cost). results.json records which: machine.durable, and the
server's settings. Each benchmark creates (and drops) its own databases on the server; the DSN's
role must be allowed to CREATE DATABASE.
Smoke test: ``python -m bench.run --quick --only limit drain`` (under two minutes); --quick
writes bench/results/quick.json instead, so that it never overwrites the recorded figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from bench.common import BENCH, QUICK, ROOT, Ctx, Sizes, loadavg, log, server_dsn

BENCHMARKS = ("limit", "drain", "single", "steady", "console", "backlog", "watcher", "held_xact")
PEERS = ("pgqueuer", "procrastinate", "chancy")
RESULTS = BENCH / "results.json"
QUICK_RESULTS = BENCH / "results" / "quick.json"


def git_sha() -> str:
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", "leasectl"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return sha + ("+dirty(leasectl/)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def uncommitted() -> list[str]:
    """Files of the package changed since that commit: the run measured the working tree."""
    try:
        out = subprocess.run(
            ["git", "status", "--porcelain", "--", "leasectl"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    return [line[3:] for line in out.splitlines()]


def memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def server_info(dsn: str) -> dict[str, Any]:
    names = (
        "server_version",
        "fsync",
        "synchronous_commit",
        "full_page_writes",
        "shared_buffers",
        "max_connections",
        "autovacuum",
        "autovacuum_naptime",
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT name, current_setting(name) FROM pg_settings WHERE name = ANY(%s)",
            (list(names),),
        ).fetchall()
        version = conn.execute("SELECT version()").fetchone()
    return {"version": version[0] if version else "?", "settings": dict(rows)}


def durable(settings: dict[str, Any]) -> bool:
    """Whether a server's commits are durable: each waits for its WAL flush to disk."""
    return all(settings.get(k) == "on" for k in ("fsync", "synchronous_commit", "full_page_writes"))


def machine(dsn: str, embedded: bool) -> dict[str, Any]:
    postgresql = server_info(dsn)
    kind = "--dsn"
    if embedded:
        kind = "embedded temporary server (leasectl.embedded)"
        if durable(postgresql["settings"]):
            kind += ", durable"
    return {
        "cores": os.cpu_count(),
        "memory_gib": memory_gib(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "postgresql": postgresql,
        "server": kind,
        "durable": durable(postgresql["settings"]),
        "leasectl_git_sha": git_sha(),
        "leasectl_uncommitted": uncommitted(),
        "timestamp": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "loadavg_at_start": loadavg(),
    }


def sizes_from(args: argparse.Namespace) -> Sizes:
    sizes = QUICK if args.quick else Sizes()
    overrides: dict[str, Any] = {}
    for name in (
        "limit_seconds",
        "drain_jobs",
        "repeats",
        "drain_timeout",
        "steady_seconds",
        "console_runs",
        "watcher_jobs",
        "held_jobs",
        "held_concurrency",
        "held_bloat_seconds",
        "held_bloat_rate",
        "held_bloat_recover",
        "held_bloat_history",
    ):
        value = getattr(args, name)
        if value is not None:
            overrides[name] = value
    for name in ("drain_concurrency", "console_sizes", "backlog_sizes", "limit_clients"):
        value = getattr(args, name)
        if value:
            overrides[name] = tuple(value)
    return dataclasses.replace(sizes, **overrides)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    p.add_argument("--dsn", help="server to benchmark (default: a temporary embedded server)")
    p.add_argument(
        "--durable",
        action="store_true",
        help="the embedded server with fsync, synchronous_commit and full_page_writes on",
    )
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    p.add_argument("--only", nargs="+", choices=BENCHMARKS, metavar="NAME")
    p.add_argument("--peers", nargs="*", choices=PEERS, default=None, help="default: all")
    p.add_argument(
        "--output",
        type=Path,
        help="default: bench/results.json (bench/results/quick.json with --quick, so that a "
        "smoke test never overwrites the recorded figures)",
    )
    g = p.add_argument_group("size overrides (default: the issue's, or --quick's)")
    g.add_argument("--limit-seconds", type=int)
    g.add_argument("--limit-clients", type=int, nargs="+")
    g.add_argument("--drain-jobs", type=int)
    g.add_argument("--drain-concurrency", type=int, nargs="+")
    g.add_argument("--repeats", type=int)
    g.add_argument("--drain-timeout", type=float)
    g.add_argument("--steady-seconds", type=int)
    g.add_argument("--console-sizes", type=int, nargs="+")
    g.add_argument("--console-runs", type=int)
    g.add_argument("--backlog-sizes", type=int, nargs="+")
    g.add_argument("--watcher-jobs", type=int)
    g.add_argument("--held-jobs", type=int)
    g.add_argument("--held-concurrency", type=int)
    g.add_argument("--held-bloat-seconds", type=int)
    g.add_argument("--held-bloat-rate", type=int)
    g.add_argument("--held-bloat-recover", type=int)
    g.add_argument("--held-bloat-history", type=int)
    args = p.parse_args(argv)
    if args.durable and args.dsn:
        p.error("--durable is for the embedded server; a --dsn server runs as it is configured")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.output is None:
        args.output = QUICK_RESULTS if args.quick else RESULTS
    args.output.parent.mkdir(parents=True, exist_ok=True)
    sizes = sizes_from(args)
    peers = PEERS if args.peers is None else tuple(args.peers)
    chosen = [b for b in BENCHMARKS if not args.only or b in args.only]
    with server_dsn(args.dsn, args.durable) as dsn:
        ctx = Ctx(dsn=dsn, sizes=sizes, peers=peers)
        results: dict[str, Any] = {
            "machine": machine(dsn, args.dsn is None),
            "mode": "quick" if args.quick else "full",
            "sizes": dataclasses.asdict(sizes),
            "command": " ".join(["python -m bench.run", *(argv or sys.argv[1:])]),
            "benchmarks": {},
        }
        ctx.results = results["benchmarks"]
        log(f"server: {results['machine']['postgresql']['version']}")
        for name in chosen:
            module = importlib.import_module(f"bench.{name}")
            log(f"== {name} (load average {loadavg()})")
            load = loadavg()
            started = time.perf_counter()
            try:
                fig = module.run(ctx)
            except Exception as exc:
                log(f"{name} failed: {type(exc).__name__}: {exc}")
                fig = {"error": f"{type(exc).__name__}: {exc}"}
            fig["loadavg_at_start"] = load
            fig["seconds"] = round(time.perf_counter() - started, 1)
            ctx.results[name] = fig
            try:
                print(module.render(fig), flush=True)
            except Exception:
                print(f"\n### {name}\n\nfailed: {fig.get('error', '?')}\n", flush=True)
            args.output.write_text(json.dumps(results, indent=2, default=str) + "\n")
        log(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
