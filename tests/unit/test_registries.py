"""The status and operator action registries are exhaustive and agree with what they describe:
a status or an action added without its entries fails here (docs/architecture.md, "Adding a
status or an operator action")."""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime, timedelta

import pytest
from textual.binding import Binding

from leasectl.console import view
from leasectl.console.screens.find import RESULT_KEYS, FindScreen
from leasectl.core import actions, statuses
from leasectl.core.filters import FINISHED as FILTER_FINISHED
from leasectl.core.models import Job, JobStatus, QueueCounts, SeenState, SkipCode, StatusReport
from leasectl.db import sql as queries
from leasectl.db.history import STATE_PARAMS
from leasectl.db.operations import Operations
from leasectl.db.skips import skip_of
from leasectl.present.status import finished_estimate
from leasectl.present.styles import STATUS_KEY_STYLE, STATUS_STYLE
from leasectl.runtime import bulk

QUEUE_COUNTS = {f.name for f in dataclasses.fields(QueueCounts)}
NOW = datetime(2026, 1, 1, tzinfo=UTC)


# -- statuses ---------------------------------------------------------------------------------


def test_every_status_has_its_entry() -> None:
    assert set(statuses.STATUSES) == set(JobStatus)
    for status, entry in statuses.STATUSES.items():
        assert entry.status is status
        assert entry.live != entry.finished, status  # every job is one or the other
        assert entry.terminal <= entry.finished, status  # nothing moves a live one for good
        assert entry.estimated <= entry.finished, status
        assert (entry.live_field is not None) == entry.live, status
        assert (entry.recent_field is not None) == entry.finished, status
        assert {entry.live_field, entry.recent_field} - {None} <= QUEUE_COUNTS, status
        assert entry.style in STATUS_KEY_STYLE, status


def test_every_status_looks_like_something_and_lists_by_its_parameter() -> None:
    assert set(STATUS_STYLE) == set(JobStatus)
    assert set(STATE_PARAMS) == set(JobStatus)


def test_the_sets_of_statuses_derive_from_the_registry() -> None:
    assert statuses.FINISHED == {JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED}
    assert FILTER_FINISHED == statuses.FINISHED
    assert statuses.LIVE == set(JobStatus) - statuses.FINISHED
    assert statuses.CLAIMABLE == {JobStatus.PENDING}
    assert set(statuses.ESTIMATED) == statuses.FINISHED


def test_the_finished_estimate_counts_cancelled_jobs() -> None:
    """README: the estimate is of Completed, Failed and Cancelled jobs. `status` showed only
    Completed and Failed (models.finished_estimates returned two values)."""
    report = StatusReport(
        db_now=NOW,
        queues=(),
        owners=(),
        finished_estimate={"Completed": 40, "Cancelled": 7},
    )
    assert finished_estimate(report) == {"completed": 40, "failed": 0, "cancelled": 7}
    unknown = dataclasses.replace(report, finished_estimate={})
    assert finished_estimate(unknown) == {"completed": None, "failed": None, "cancelled": None}


def test_the_finished_estimate_is_never_below_what_finished_in_the_recent_window() -> None:
    """Statistics gathered before a burst are behind it: `status` said "all-time completed 841"
    under a "done 1h" of 848. Each status's estimate is at least its queues' recent count, as
    the console's summary is (bars.history_text); no statistics stays unknown."""
    report = StatusReport(
        db_now=NOW,
        queues=(
            QueueCounts("a", completed_recent=500, failed_recent=3, cancelled_recent=1),
            QueueCounts("b", completed_recent=348, failed_recent=9),
        ),
        owners=(),
        finished_estimate={"Completed": 841, "Failed": 20},
    )
    assert finished_estimate(report) == {"completed": 848, "failed": 20, "cancelled": 1}
    unknown = dataclasses.replace(report, finished_estimate={})
    assert finished_estimate(unknown) == {"completed": None, "failed": None, "cancelled": None}


# -- operator actions -------------------------------------------------------------------------


def test_every_operator_action_has_its_entry() -> None:
    assert set(actions.ACTIONS) == set(actions.OperatorAction)
    for action, entry in actions.ACTIONS.items():
        assert entry.action is action
        assert entry.name == action.value
        assert entry.applies_to and len(set(entry.applies_to)) == len(entry.applies_to)
        assert not (entry.forceable and entry.revokes_lease), action
        assert (entry.audit_forced is not None) == entry.forceable, action
        queries.get(entry.query)  # its guarded statement exists
        assert callable(getattr(Operations, entry.method)), action
        assert entry.verb and entry.past and entry.summary and entry.effect


def test_each_action_has_keys_of_its_own() -> None:
    keys = [a.key for a in actions.ACTIONS.values()]
    keys += [a.bulk_key for a in actions.ACTIONS.values() if a.bulk_key is not None]
    assert len(keys) == len(set(keys))
    bound = {b.key: b.action for b in FindScreen.BINDINGS if isinstance(b, Binding)}
    for a in actions.ACTIONS.values():
        assert RESULT_KEYS[a.key] == bound[a.key] == f"act('{a.name}')"
        if a.bulk_key is not None:
            assert RESULT_KEYS[a.bulk_key] == bound[a.bulk_key] == f"bulk('{a.name}')"


def test_every_action_is_a_command_and_a_bulk_action() -> None:
    import importlib

    from leasectl.cli.commands import COMMANDS

    for a in actions.ACTIONS.values():
        module, function = COMMANDS[a.name]  # (a KeyError: an action without its command)
        assert callable(getattr(importlib.import_module(f"leasectl.cli.{module}"), function))
        assert bulk.action(a.name).info is a
    assert set(bulk.ACTIONS) == {a.name for a in actions.ACTIONS.values()}


def test_every_console_action_runs_an_operator_action() -> None:
    for action in view.Action:
        assert action.operator in actions.ACTIONS  # (a KeyError: a member without one)
    assert view.Action.REQUEUE_EXPIRED.operator is actions.OperatorAction.REQUEUE


def test_the_counters_trigger_counts_every_audit_action() -> None:
    """Migration 11's trigger names the operator actions' audit events in SQL: the registry's
    must be the same (the last migration that (re)defines it)."""
    found = None
    for migration in queries.migrations():
        for m in re.finditer(r"WHEN e\.action IN \(([^)]*)\)\s*THEN 'operator'", migration.text):
            found = m.group(1)
    assert found is not None
    assert re.findall(r"'([a-z_]+)'", found) == list(actions.AUDIT_ACTIONS)


def test_an_unknown_action_is_an_error_never_requeue() -> None:
    with pytest.raises(ValueError):
        actions.action_info("requeue-all")
    with pytest.raises(ValueError):
        bulk.action("frobnicate")
    # The guard's reasons: the rules of the action named, never requeue's.
    seen = SeenState(1, JobStatus.PENDING, 0, None)
    with pytest.raises(ValueError):
        skip_of("frobnicate", seen, _job(JobStatus.PENDING), False, NOW)
    assert skip_of("frobnicate", seen, None, False, NOW).code is SkipCode.NOT_FOUND


def test_the_console_condition_names_the_states_of_the_registry() -> None:
    for action in view.Action:
        text = view.condition_text(action)
        for status in action.info.applies_to:
            assert status.value in text, (action, status)
        assert action.info.effect in text


def _job(status: JobStatus) -> Job:
    return Job(
        id=1,
        queue="q",
        payload={},
        status=status,
        priority=0,
        run_at=NOW,
        attempts=0,
        max_attempts=3,
        lease_owner=None,
        lease_until=None,
        heartbeat_at=None,
        last_error=None,
        created_at=NOW - timedelta(minutes=1),
        updated_at=NOW,
        finished_at=None,
    )
