"""The `leasectl` command line: parse, call the core, format.

One module per concern: ``root`` (the app, its options, what commands share), a module per
group of commands, ``stderr`` and ``redaction`` (every line on stderr, without secrets) and
``entry`` (``main()``, where every error becomes a line and an exit code).
"""

from __future__ import annotations

from leasectl.cli import actions, admin, console, history, jobs, metrics, queues, worker
from leasectl.cli.entry import main
from leasectl.cli.root import EXIT_CHECK_FAILED, EXIT_INTERRUPTED, app

# The commands, in the order `leasectl --help` lists them.
app.command()(jobs.init)
app.command()(jobs.enqueue)
app.command()(worker.worker)
app.command()(actions.watch)
app.command("requeue-stuck")(actions.requeue_stuck)
app.command()(actions.requeue)
app.command("mark-stuck")(actions.mark_stuck)
app.command()(actions.cancel)
app.command()(actions.delete)
app.command()(queues.pause)
app.command()(queues.resume)
app.command()(jobs.inspect)
app.command("list")(history.list_jobs)
app.command()(jobs.status)
app.command()(metrics.metrics)
app.command()(jobs.prune)
app.command()(admin.grant)
app.command()(console.demo)
app.command()(console.tui)

__all__ = ["EXIT_CHECK_FAILED", "EXIT_INTERRUPTED", "app", "main"]
