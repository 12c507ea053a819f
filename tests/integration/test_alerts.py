"""contrib/prometheus/alerts.yml: every metric, label and label value its rules use is what a
real exporter (`leasectl metrics`) against a real database exports, and every rule says what to
run next."""

from __future__ import annotations

import re
import unicodedata
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from tests.exporter import Scrape, exporter, scrape
from tests.seed import seed_console
from tests.stores import Stores
from tests.util import wait_until

pytestmark = pytest.mark.full

RULES = Path(__file__).resolve().parents[2] / "contrib" / "prometheus" / "alerts.yml"
METRIC = re.compile(r"\bleasectl_[a-z_]+\b")
# A selector's matchers, {a="x", b="y"}, after a metric name.
SELECTOR = re.compile(r"\b(leasectl_[a-z_]+)\{([^}]*)\}")
MATCHER = re.compile(r'(\w+)\s*=\s*"([^"]*)"')
BY = re.compile(r"\bby \(([^)]*)\)\s*\(([^()]*(?:\([^()]*\))?[^()]*)\)")


def rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text())
    found = [rule for group in document["groups"] for rule in group["rules"]]
    assert found
    return found


def exported(db_dsn: str, store: Stores, sql_conn: psycopg.Connection) -> tuple[Scrape, Scrape]:
    """A scrape of a busy database (every gauge has series) and one of a failing scrape."""
    seed_console(store, sql_conn)
    store.ops.pause("emails", actor="test", reason="r")
    from leasectl.core.schedules import ScheduleSpec

    store.ops.put_schedule(ScheduleSpec("nightly", "@daily", "reports"), actor="t", reason=None)
    store.ops.run_schedule("nightly", actor="t", reason=None)  # (its last enqueue)
    sql_conn.execute("UPDATE leasectl.schedules SET next_slot = now() - interval '10 minutes'")
    with exporter(db_dsn) as (_, url):
        up = scrape(url)
        sql_conn.execute("DROP SCHEMA leasectl CASCADE")
        down = wait_until(lambda: (d := scrape(url)).value("leasectl_up") == 0 and d)
    assert up.value("leasectl_up") == 1 and down.value("leasectl_up") == 0
    return up, down


def test_every_metric_label_and_value_the_rules_use_is_exported(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    up, down = exported(db_dsn, store, sql_conn)
    families = set(up.families) | set(down.families)
    labels_of: dict[str, set[str]] = {}
    values_of: dict[tuple[str, str], set[str]] = {}
    for s in (up, down):
        for (name, labels), _ in s.samples.items():
            labels_of.setdefault(name, set()).update(k for k, _ in labels)
            for k, v in labels:
                values_of.setdefault((name, k), set()).add(v)
    for rule in rules():
        text = " ".join([rule["expr"], *rule["annotations"].values()])
        named = set(METRIC.findall(text))
        assert set(METRIC.findall(rule["expr"])), rule["alert"]
        assert named <= families, (rule["alert"], named - families)
        for name, matchers in SELECTOR.findall(rule["expr"]):
            for label, value in MATCHER.findall(matchers):
                assert label in labels_of[name], (rule["alert"], name, label)
                assert value in values_of[(name, label)], (rule["alert"], name, label, value)
        for grouping, inner in BY.findall(rule["expr"]):
            for name in METRIC.findall(inner):
                for label in (x.strip() for x in grouping.split(",")):
                    assert label in labels_of[name], (rule["alert"], name, label)


def test_every_rule_waits_and_says_what_to_run_next() -> None:
    names = set()
    for rule in rules():
        names.add(rule["alert"])
        assert rule.get("for"), rule["alert"]
        assert rule["labels"]["severity"] in {"page", "warn"}, rule["alert"]
        description = rule["annotations"]["description"]
        assert rule["annotations"]["summary"], rule["alert"]
        assert "`leasectl " in description, rule["alert"]
        if "$labels.queue" in rule["annotations"]["summary"]:
            assert "`leasectl tui` and filter (`/`) to the queue named above" in " ".join(
                description.split()
            ), rule["alert"]
    silent = next(r for r in rules() if r["alert"] == "LeasectlExpiredLeasesSilentOwner")
    assert "`leasectl requeue-stuck --dry-run`" in silent["annotations"]["description"]
    # The five: silent owner > 2 min, expired > 5 min, oldest due, Stuck, exporter down.
    assert {
        "LeasectlExpiredLeasesSilentOwner",
        "LeasectlExpiredLeases",
        "LeasectlOldestDueJobTooOld",
        "LeasectlStuckJobs",
        "LeasectlExporterDown",
    } <= names
    by_name = {r["alert"]: r for r in rules()}
    assert by_name["LeasectlExpiredLeasesSilentOwner"]["for"] == "2m"
    assert by_name["LeasectlExpiredLeases"]["for"] == "5m"


CODE = re.compile(r"`([^`]*)`")
# A queue name and an owner a producer and a worker may write: shell quoting broken out of,
# a terminal retitled and cleared, text reordered.
HOSTILE_QUEUE = "x'; touch /tmp/PWNED; echo '"
HOSTILE_OWNER = "w\x1b]0;owned\x07\x1b[2J\u202e$(reboot)"


def _render(text: str, labels: dict[str, str]) -> str:
    """An annotation as Prometheus renders it for these labels (the template forms used here)."""
    for name, value in labels.items():
        text = text.replace("{{ $labels." + name + " }}", value)
    return text


def test_no_rule_puts_a_label_value_inside_a_command() -> None:
    """The rules spliced label values into commands to paste
    (`leasectl requeue-stuck --owner '{{ $labels.owner }}'`): a producer's queue named
    ``x'; touch /tmp/PWNED; echo '`` fired a rule whose command ran `touch`."""
    for rule in rules():
        for key, text in rule["annotations"].items():
            for command in CODE.findall(text):
                assert "{{" not in command and "$labels" not in command, (rule["alert"], key)


def test_a_hostile_queue_and_owner_come_out_of_the_rules_as_data(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    """The label values a rule would be rendered with, from a real exporter: escaped (no byte a
    terminal acts on), and in no command of the rendered annotation."""
    for job in store.ops.enqueue([{}, {}], queue=HOSTILE_QUEUE):
        assert job
    store.work.claim(HOSTILE_QUEUE, HOSTILE_OWNER, timedelta(seconds=30))
    sql_conn.execute("UPDATE leasectl.jobs SET lease_until = now() - interval '1 hour'")
    sql_conn.execute(
        "UPDATE leasectl.jobs SET run_at = now() - interval '1 hour' WHERE status = 'Pending'"
    )
    with exporter(db_dsn) as (_, url):
        s = scrape(url)
    [expired] = s.series("leasectl_leases_expired")
    labels = dict(expired)
    assert labels["queue"] == HOSTILE_QUEUE  # printable: shown as it is, as prose
    assert labels["owner"] == "w\\x1b]0;owned\\x07\\x1b[2J\\u202e$(reboot)"
    assert s.value("leasectl_oldest_due_job_age_seconds", queue=HOSTILE_QUEUE) > 600
    for rule in rules():
        for text in rule["annotations"].values():
            rendered = _render(text, labels)
            assert not any(unicodedata.category(ch) in {"Cc", "Cf"} for ch in rendered.strip())
            for command in CODE.findall(rendered):
                assert HOSTILE_QUEUE not in command and "reboot" not in command, rule["alert"]
