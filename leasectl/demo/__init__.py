"""`leasectl demo`: an embedded PostgreSQL (or a given DSN), a simulated fleet of real worker
processes with chaos, and the console on top; or, headless, a run that ends in a summary.

Modules: run.py (the entry point, where the demo runs, the summary), fleet.py (the worker
processes and the kill/stall schedule), traffic.py (the producer and the scripted operator),
handlers.py (the job handler, run by `leasectl worker` processes). Its queries and database
chores are the data layer's (leasectl/db/demo.py, leasectl/db/sql/demo/demo.sql).
"""

from __future__ import annotations

from leasectl.demo.fleet import FleetConfig
from leasectl.demo.run import DemoSummary, run_demo

__all__ = ["DemoSummary", "FleetConfig", "run_demo"]
