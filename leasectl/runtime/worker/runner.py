"""``Worker``: one worker process's runtime, put together from its parts (the package docstring
names them) and run: start-up, signals, threads, the dispatcher, shutdown."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import threading
import time
from datetime import timedelta
from types import FrameType

from leasectl.core.backoff import reconnect_delay
from leasectl.core.errors import ConnectionFailed
from leasectl.db.work import WorkerStore
from leasectl.runtime.worker.asyncio_executor import AsyncioExecutor
from leasectl.runtime.worker.config import WorkerConfig, new_event_loop, worker_store
from leasectl.runtime.worker.context import AsyncHandler, Handler, LeaseContext, is_async_handler
from leasectl.runtime.worker.dispatch import Dispatcher
from leasectl.runtime.worker.executors import Executor, InlineExecutor, ThreadExecutor
from leasectl.runtime.worker.keepers import Keepers, Signals
from leasectl.runtime.worker.ledger import Ledger, WorkerStats
from leasectl.runtime.worker.outcomes import Outcomes
from leasectl.runtime.worker.shutdown import shut_down

log = logging.getLogger("leasectl.worker")


class Worker:
    """One worker process's runtime (see the package docstring for its threads).

    The caller's thread is the dispatcher: each round trip completes the jobs that finished
    since the last one and claims as many as there are free slots, in one statement. With
    ``concurrency`` 1 it also runs the handler itself, so a job costs one round trip and no
    thread hand-off; otherwise ``concurrency`` handler threads take jobs from a queue.
    """

    def __init__(
        self,
        dsn: str,
        schema: str,
        config: WorkerConfig,
        handler: Handler | AsyncHandler,
        *,
        store: WorkerStore | None = None,
    ) -> None:
        self.dsn = dsn
        self.schema = schema
        self.config = config
        self.handler = handler
        # An async def handler: its jobs run as tasks on one event loop thread (made in run()).
        self.is_async = is_async_handler(handler)
        self._store = store
        self._owns_store = store is None
        self.ledger = Ledger(config.worker_id)
        self.stats: WorkerStats = self.ledger.stats
        self.signals = Signals(
            stopping=threading.Event(),
            closed=threading.Event(),
            listening=threading.Event(),
            announced=threading.Event(),
        )
        self.stopping = self.signals.stopping  # no more claims
        self.closed = self.signals.closed  # shut down: nothing held any more
        self.listening = self.signals.listening  # LISTEN took effect once: enqueues wake us
        self.started = threading.Event()
        self.outcomes = Outcomes(config, self.ledger, self._get_store, self.stop, self.closed)
        self.keepers = Keepers(config, self.ledger, self._get_store, self.signals)

    @property
    def worker_id(self) -> str:
        return self.config.worker_id

    @property
    def store(self) -> WorkerStore:
        if self._store is None:
            self._store = worker_store(self.dsn, self.schema, self.config)
        return self._store

    def _get_store(self) -> WorkerStore:
        return self.store

    def stop(self) -> None:
        self.stopping.set()
        self.ledger.wake.set()

    def held(self) -> list[LeaseContext]:
        return self.ledger.held_now()

    def beat(self) -> None:
        """Renew every held lease in one statement; leases not renewed are lost."""
        self.keepers.beat()

    def _executor(self, loop: asyncio.AbstractEventLoop | None) -> Executor:
        args = (self.handler, self.ledger, self.outcomes, self._get_store)
        if loop is not None:
            return AsyncioExecutor(
                self.handler, loop, self.config, self.ledger, self.outcomes, self._get_store
            )
        if self.config.concurrency == 1:
            return InlineExecutor(*args)
        return ThreadExecutor(*args, self.config.concurrency)

    def run(
        self, *, install_signals: bool = True, start_retry: timedelta = timedelta(0)
    ) -> WorkerStats:
        """Run until stop() or SIGTERM/SIGINT; raises only for start-up errors.

        ``start_retry``: how long to keep trying while the database cannot be reached at
        start-up (a worker started with, or during a restart of, its server).
        """
        loop, loop_name = None, ""
        if self.is_async:  # (a usage error, before anything is started)
            loop, loop_name = new_event_loop(self.config.event_loop)
        try:
            store = self._start(start_retry)
        except BaseException:
            if loop is not None:
                loop.close()
            raise
        if install_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, self._on_signal)
        executor = self._executor(loop)
        threads = self.keepers.threads()
        heartbeat = threads[0]
        threads += executor.threads()
        for thread in threads:
            thread.start()
        log.info(
            "worker %s started on %s%s",
            self.worker_id,
            ",".join(self.config.queues),
            f" (async handler, {loop_name} event loop)" if loop_name else "",
        )
        dispatcher = Dispatcher(self.config, self.ledger, self._get_store, self.signals, executor)
        dispatcher.look_for_pauses()
        self.started.set()
        unwritten: list[LeaseContext] = []
        try:
            unwritten = dispatcher.run()
        finally:
            # Heartbeats go on while running handlers finish.
            shut_down(self.config, self.ledger, store, self.closed, unwritten)
            executor.close()
            self.closed.set()
            heartbeat.join(timeout=5)
            if self._owns_store:
                store.close()
        return self.stats

    def _start(self, start_retry: timedelta) -> WorkerStore:
        """Connect, check the schema and register (in that order, before anything else)."""
        give_up = time.monotonic() + start_retry.total_seconds()
        failures = 0
        while True:
            try:
                store = self.store
                store.worker_register(
                    self.worker_id,
                    hostname=socket.gethostname(),
                    pid=os.getpid(),
                    queues=self.config.queues,
                    lease_ttl=self.config.lease_ttl,
                    heartbeat_every=self.config.heartbeat,
                )
                return store
            except ConnectionFailed as exc:
                left = give_up - time.monotonic()
                if left <= 0 or self.stopping.is_set():
                    raise
                failures += 1
                log.warning("worker %s: cannot start yet: %s", self.worker_id, exc)
                self.stopping.wait(min(left, reconnect_delay(failures, base=0.1, cap=2.0)))

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        log.info("worker %s: signal %d, stopping", self.worker_id, signum)
        self.stop()
