"""The real exporter (`leasectl metrics` as a subprocess) and scrapes of it, for the tests."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from tests.integration.test_cli import _env


@dataclass
class Scrape:
    """One scrape, parsed by prometheus_client: families by name, samples by (name, labels)."""

    families: dict[str, str]  # name -> type
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float]

    def value(self, name: str, **labels: str) -> float:
        return self.samples[(name, frozenset(labels.items()))]

    def get(self, name: str, **labels: str) -> float | None:
        return self.samples.get((name, frozenset(labels.items())))

    def series(self, name: str) -> dict[frozenset[tuple[str, str]], float]:
        return {labels: v for (n, labels), v in self.samples.items() if n == name}


def scrape(url: str, timeout: float = 30) -> Scrape:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        assert response.status == 200
        text = response.read().decode("utf-8")
    families: dict[str, str] = {}
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(text):
        families[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return Scrape(families, samples)


@contextlib.contextmanager
def exporter(
    dsn: str, *args: str, listen: str = "127.0.0.1:0", stopped_by_test: bool = False
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`leasectl metrics --listen LISTEN --json` running against ``dsn``: (process, URL).
    Stopped by SIGTERM afterwards (or by the test, ``stopped_by_test``), which must end it
    cleanly (exit 0)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "leasectl", "metrics", "--listen", listen, "--json", *args],
        env=_env(dsn),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # written once it serves
        assert line, (
            f"the exporter ended: {proc.wait(10)} {proc.stderr.read() if proc.stderr else ''}"
        )
        url = json.loads(line)["listen"]
        yield proc, url
        assert stopped_by_test or proc.poll() is None, "the exporter ended while serving"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        _, err = proc.communicate()
    assert code == 0, f"exit {code}: {err}"
