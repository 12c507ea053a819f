"""`leasectl demo`: an embedded PostgreSQL (or a given DSN), a simulated fleet of real worker
processes with chaos, and the console on top; or, headless, a run that ends in a summary.

Modules: run.py (the entry point), target.py (where the demo runs: the embedded server or a
DSN, the lock, the owner file), session.py (one run: start, progress, drain, settle, count),
console.py (the console in the foreground), signals.py (signal handling and the console's hang
guard), summary.py (the summary and the progress lines), fleet.py (the worker processes and
the kill/stall schedule), traffic.py (the producer and the scripted operator), handlers.py (the
job handler, run by `leasectl worker` processes). Its queries and database chores are the data
layer's (leasectl/db/demo.py, leasectl/db/sql/demo/demo.sql).
"""

from __future__ import annotations

from leasectl.demo.fleet import FleetConfig
from leasectl.demo.run import run_demo
from leasectl.demo.summary import DemoSummary

__all__ = ["DemoSummary", "FleetConfig", "run_demo"]
