"""SQL mutation testing of the lease fences: ``python -m tests.mutation``.

Each mutant below deletes one predicate of a fenced or guarded statement (or, in a disjunction,
turns one alternative off or on), keeping the SQL valid. For each mutant the tool copies the
package and the tests to a scratch directory, applies the mutation there, and runs the tests
that can see that statement in a subprocess with the copy first on PYTHONPATH, so that
``leasectl`` subprocesses run the mutated SQL too and the test template database is migrated
from the mutated migrations. A mutant is killed when a selected test fails.

The run fails (exit 1) when a mutant that is not listed as equivalent survives, when a listed
equivalent mutant is killed (its review is wrong), when a mutant's text is not found exactly
once in its statement (the list is stale: the SQL changed under it), or when the unmutated
copy does not pass the selected tests.

A mutant names its file under leasectl/db/sql (migrations included) and its statement: the
text must occur exactly once in that ``-- name:`` block, or, in a migration, in the definition of
the function of that name (the operator actions are SECURITY DEFINER functions of migration 6;
the watcher batch is one too, last defined by migration 9: a mutant names the migration whose
definition the schema ends with, since an earlier one is dropped and replaced).

Database: LEASECTL_TEST_DSN when set, else one embedded server started for the whole run and
passed to every subprocess as LEASECTL_TEST_DSN.

    python -m tests.mutation                 # every mutant, its own tests
    python -m tests.mutation -k takeover     # mutants whose name contains "takeover"
    python -m tests.mutation --tests tests/integration/test_model.py  # other tests for all
    python -m tests.mutation --list          # check the list against the SQL; run nothing
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUERIES = Path("leasectl") / "db" / "sql"
FENCES = "tests/integration/test_fences.py"
_BLOCK = re.compile(r"^-- name: ([a-z_]+)\s*$", re.MULTILINE)
_FUNCTION = re.compile(r"^CREATE (?:OR REPLACE )?FUNCTION \{schema\}\.([a-z_]+)\(", re.MULTILINE)
_BODY_END = "\n$$;"
_INVALID_SQL = (
    "errors.SyntaxError",
    "errors.UndefinedColumn",
    "errors.UndefinedFunction",
    "errors.DatatypeMismatch",
    "errors.AmbiguousColumn",
    "errors.UndefinedTable",
)


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str  # under leasectl/db/sql
    statement: str
    edits: tuple[tuple[str, str], ...]  # (exact text, replacement), applied in order
    tests: tuple[str, ...]  # pytest node ids, run from the repository root
    equivalent: str = ""  # why no test can tell it from the original (reviewed by hand)


def fence(*names: str) -> tuple[str, ...]:
    return tuple(f"{FENCES}::{name}" for name in names)


def mutant(
    name: str,
    file: str,
    statement: str,
    text: str,
    replacement: str,
    tests: tuple[str, ...],
    *,
    also: tuple[tuple[str, str], ...] = (),
    equivalent: str = "",
) -> Mutant:
    return Mutant(name, file, statement, ((text, replacement), *also), tests, equivalent)


# The operator actions: SECURITY DEFINER functions of this migration.
AUDITED = "migrations/006_audited_operations.sql"
# The watcher batch: migration 6's function, replaced by this migration's (an owner filter).
BATCH = "migrations/009_requeue_expired_by_owner.sql"

SAME_OWNER = "test_same_owner_stale_attempt_{}_is_refused"
OTHER_OWNER = "test_a_lease_token_of_another_owner_is_refused[{}]"
QUARANTINED = "test_a_lease_the_watcher_quarantined_is_not_touched_by_its_late_handler[{}]"
ONLY_OWN_JOB = "test_a_fenced_call_changes_only_its_own_job[{}]"
OWNER_ONLY = "test_watcher_with_an_owner_moves_only_that_owners_expired_leases[{}]"

# The expiry and status re-checks in the UPDATE of a takeover and of a watcher batch: the rows
# the UPDATE joins are exactly the ones its locking read (FOR UPDATE SKIP LOCKED) returned, and
# that read returned them only after locking them and only if they passed its own checks as
# they were once locked (a row locked by anyone else is skipped, never waited for). From the
# lock to the UPDATE, in the same statement, no other transaction can change the row, and
# now() is the transaction's start time, the same in both places. So the UPDATE's copy of a
# check can never be false where the read's copy was true: deleting it alone changes nothing.
# (It stays as a guard in depth for anyone who drops SKIP LOCKED or the lock.) Deleting the
# read's copy instead is not equivalent: the read has a LIMIT, so rows the UPDATE then rejects
# use up the batch, which the tests below catch; and deleting both copies is caught too.
RECHECK = (
    "re-check of what the locking read (FOR UPDATE SKIP LOCKED, same statement, same now()) "
    "already checked on the locked row: the UPDATE only ever sees rows that passed it"
)

# fmt: off
MUTANTS: tuple[Mutant, ...] = (
    # -- claim: due Pending jobs of the queue, from the claim key ---------------------------
    mutant("claim-status", "jobs.sql", "jobs_complete_and_claim",
           "WHERE status = 'Pending' AND queue", "WHERE queue",
           fence("test_claim_leaves_finished_and_stuck_jobs_alone")),
    mutant("claim-queue", "jobs.sql", "jobs_complete_and_claim",
           " AND queue = %(queue)s AND run_at", " AND run_at",
           fence("test_claim_takes_only_its_queue")),
    mutant("claim-due", "jobs.sql", "jobs_complete_and_claim",
           " AND run_at <= now()", "",
           fence("test_claim_leaves_jobs_that_are_not_due")),
    mutant("claim-from-key", "jobs.sql", "jobs_complete_and_claim",
           "AND (priority, run_at, id) >= (%(from_priority)s, %(from_run_at)s, %(from_id)s)",
           "AND TRUE",
           fence("test_claim_from_a_key_starts_there")),
    mutant("claim-paused", "jobs.sql", "jobs_complete_and_claim",
           "AND NOT EXISTS (SELECT FROM {schema}.queue_state AS s WHERE s.queue = %(queue)s)",
           "AND TRUE",
           fence("test_claim_takes_nothing_from_a_paused_queue")),
    mutant("claim-paused-queue", "jobs.sql", "jobs_complete_and_claim",
           "WHERE s.queue = %(queue)s)", "WHERE TRUE)",
           fence("test_a_pause_of_another_queue_stops_no_claim_of_this_one[claim]")),
    # -- complete (the completion half of the worker's round trip) ---------------------------
    mutant("complete-id", "jobs.sql", "jobs_complete_and_claim",
           "WHERE j.id = ANY (ARRAY[t.id])", "WHERE TRUE",
           fence(ONLY_OWN_JOB.format("complete"))),
    mutant("complete-attempt", "jobs.sql", "jobs_complete_and_claim",
           "(j.attempts = t.attempt AND j.lease_owner", "(j.lease_owner",
           fence(SAME_OWNER.format("complete"))),
    mutant("complete-owner", "jobs.sql", "jobs_complete_and_claim",
           " AND j.lease_owner IS NOT DISTINCT FROM %(owner)s", "",
           fence(OTHER_OWNER.format("complete"))),
    mutant("complete-status", "jobs.sql", "jobs_complete_and_claim",
           "AND j.status::text = 'Processing'))", "AND TRUE))",
           fence(QUARANTINED.format("complete"))),
    # -- complete inside a handler's transaction (ctx.transaction()) -------------------------
    mutant("xact-complete-id", "jobs.sql", "job_complete_in_transaction",
           "WHERE j.id = %(id)s AND", "WHERE TRUE AND",
           fence(ONLY_OWN_JOB.format("transaction"))),
    mutant("xact-complete-attempt", "jobs.sql", "job_complete_in_transaction",
           " AND j.attempts = %(attempt)s", "",
           fence(SAME_OWNER.format("transaction"))),
    mutant("xact-complete-owner", "jobs.sql", "job_complete_in_transaction",
           " AND j.lease_owner = %(owner)s", "",
           fence(OTHER_OWNER.format("transaction"))),
    mutant("xact-complete-status", "jobs.sql", "job_complete_in_transaction",
           "AND j.status OPERATOR(pg_catalog.=) 'Processing'::{schema}.job_status", "AND TRUE",
           fence(QUARANTINED.format("transaction"))),
    # -- takeover of lapsed leases -------------------------------------------------------------
    mutant("takeover-status-read", "jobs.sql", "jobs_claim_expired",
           "WHERE status = 'Processing' AND queue", "WHERE queue",
           fence("test_takeover_is_not_hidden_by_a_stuck_job_ahead_of_it")),
    mutant("takeover-status-update", "jobs.sql", "jobs_claim_expired",
           " AND j.status::text = 'Processing'", "",
           fence("test_takeover_never_takes_a_stuck_job",
                 "test_takeover_is_not_hidden_by_a_stuck_job_ahead_of_it"),
           equivalent=RECHECK),
    mutant("takeover-status-both", "jobs.sql", "jobs_claim_expired",
           "WHERE status = 'Processing' AND queue", "WHERE queue",
           fence("test_takeover_never_takes_a_stuck_job"),
           also=((" AND j.status::text = 'Processing'", ""),)),
    mutant("takeover-queue", "jobs.sql", "jobs_claim_expired",
           "queue = %(queue)s AND lease_until", "lease_until",
           fence("test_takeover_takes_only_its_queue")),
    mutant("takeover-expiry-read", "jobs.sql", "jobs_claim_expired",
           " AND lease_until < now()", "",
           fence("test_takeover_is_not_hidden_by_a_live_lease_ahead_of_it")),
    mutant("takeover-expiry-update", "jobs.sql", "jobs_claim_expired",
           " AND j.lease_until < now()", "",
           fence("test_takeover_never_takes_a_live_lease",
                 "test_takeover_is_not_hidden_by_a_live_lease_ahead_of_it"),
           equivalent=RECHECK),
    mutant("takeover-expiry-both", "jobs.sql", "jobs_claim_expired",
           " AND lease_until < now()", "",
           fence("test_takeover_never_takes_a_live_lease"),
           also=((" AND j.lease_until < now()", ""),)),
    mutant("takeover-attempts-left", "jobs.sql", "jobs_claim_expired",
           "AND attempts < max_attempts", "AND TRUE",
           fence("test_takeover_leaves_a_lapsed_lease_without_attempts_left_to_the_watcher")),
    mutant("takeover-paused", "jobs.sql", "jobs_claim_expired",
           "AND NOT EXISTS (SELECT FROM {schema}.queue_state AS s WHERE s.queue = %(queue)s)",
           "AND TRUE",
           fence("test_takeover_takes_nothing_from_a_paused_queue")),
    mutant("takeover-paused-queue", "jobs.sql", "jobs_claim_expired",
           "WHERE s.queue = %(queue)s)", "WHERE TRUE)",
           fence("test_a_pause_of_another_queue_stops_no_claim_of_this_one[takeover]")),
    mutant("takeover-id", "jobs.sql", "jobs_claim_expired",
           "WHERE j.id = ANY (ARRAY[p.id])", "WHERE TRUE",
           fence("test_takeover_takes_only_the_leases_it_picked")),
    # -- claim by id ---------------------------------------------------------------------------
    mutant("claim-by-id-paused", "jobs.sql", "job_claim_by_id",
           "AND NOT EXISTS (SELECT FROM {schema}.queue_state AS s WHERE s.queue = j.queue)",
           "AND TRUE",
           fence("test_claim_by_id_refuses_a_job_of_a_paused_queue")),
    mutant("claim-by-id-paused-queue", "jobs.sql", "job_claim_by_id",
           "WHERE s.queue = j.queue)", "WHERE TRUE)",
           fence("test_a_pause_of_another_queue_stops_no_claim_of_this_one[claim by id]")),
    mutant("claim-by-id-id", "jobs.sql", "job_claim_by_id",
           "WHERE j.id = %(id)s", "WHERE TRUE",
           fence("test_claim_by_id_takes_a_pending_job_and_only_that_one")),
    mutant("claim-by-id-pending-off", "jobs.sql", "job_claim_by_id",
           "(j.status = 'Pending' OR", "(FALSE OR",
           fence("test_claim_by_id_takes_a_pending_job_and_only_that_one")),
    mutant("claim-by-id-any-status", "jobs.sql", "job_claim_by_id",
           "(j.status = 'Pending' OR", "(TRUE OR",
           fence("test_claim_by_id_refuses_finished_jobs")),
    mutant("claim-by-id-processing", "jobs.sql", "job_claim_by_id",
           "(j.status = 'Processing' AND j.lease_until", "(j.lease_until",
           fence("test_claim_by_id_refuses_a_stuck_job_with_a_lapsed_lease")),
    mutant("claim-by-id-expiry", "jobs.sql", "job_claim_by_id",
           " AND j.lease_until < now()))", "))",
           fence("test_claim_by_id_refuses_a_live_lease_and_takes_a_lapsed_one")),
    # -- heartbeat -----------------------------------------------------------------------------
    mutant("heartbeat-id", "jobs.sql", "jobs_heartbeat",
           "WHERE j.id = ANY (ARRAY[f.id]) AND", "WHERE TRUE AND",
           fence(ONLY_OWN_JOB.format("heartbeat"),
                 "test_heartbeat_reports_only_the_leases_it_renewed")),
    mutant("heartbeat-attempt", "jobs.sql", "jobs_heartbeat",
           " AND j.attempts = f.attempt", "",
           fence(SAME_OWNER.format("heartbeat"))),
    mutant("heartbeat-owner", "jobs.sql", "jobs_heartbeat",
           "j.lease_owner IS NOT DISTINCT FROM %(owner)s AND ", "",
           fence(OTHER_OWNER.format("heartbeat"))),
    mutant("heartbeat-status", "jobs.sql", "jobs_heartbeat",
           " AND j.status::text = 'Processing'", "",
           fence(QUARANTINED.format("heartbeat"))),
    # -- fail ----------------------------------------------------------------------------------
    mutant("fail-id", "jobs.sql", "job_fail",
           "WHERE j.id = %(id)s AND", "WHERE TRUE AND",
           fence(ONLY_OWN_JOB.format("fail"))),
    mutant("fail-attempt", "jobs.sql", "job_fail",
           " AND j.attempts = %(attempt)s", "",
           fence(SAME_OWNER.format("fail"))),
    mutant("fail-owner", "jobs.sql", "job_fail",
           " AND j.lease_owner = %(owner)s", "",
           fence(OTHER_OWNER.format("fail"))),
    mutant("fail-status", "jobs.sql", "job_fail",
           "AND j.status = 'Processing'", "AND TRUE",
           fence(QUARANTINED.format("fail"))),
    # -- snooze (migration 21) -------------------------------------------------------------------
    mutant("snooze-id", "jobs.sql", "job_snooze",
           "WHERE j.id = %(id)s AND", "WHERE TRUE AND",
           fence(ONLY_OWN_JOB.format("snooze"))),
    mutant("snooze-attempt", "jobs.sql", "job_snooze",
           " AND j.attempts = %(attempt)s", "",
           fence(SAME_OWNER.format("snooze"))),
    mutant("snooze-owner", "jobs.sql", "job_snooze",
           "AND j.lease_owner IS NOT DISTINCT FROM %(owner)s", "",
           fence(OTHER_OWNER.format("snooze"))),
    mutant("snooze-status", "jobs.sql", "job_snooze",
           "AND j.status::text = 'Processing'", "AND TRUE",
           fence(QUARANTINED.format("snooze"))),
    mutant("snooze-bound", "jobs.sql", "job_snooze",
           " AND j.snoozes < %(max_snoozes)s", "",
           fence("test_a_snooze_past_the_bound_is_refused")),
    # -- release -------------------------------------------------------------------------------
    mutant("release-id", "jobs.sql", "jobs_release",
           "WHERE j.id = ANY (ARRAY[f.id]) AND", "WHERE TRUE AND",
           fence(ONLY_OWN_JOB.format("release"))),
    mutant("release-attempt", "jobs.sql", "jobs_release",
           " AND j.attempts = f.attempt", "",
           fence(SAME_OWNER.format("release"))),
    mutant("release-owner", "jobs.sql", "jobs_release",
           "j.lease_owner IS NOT DISTINCT FROM %(owner)s AND ", "",
           fence(OTHER_OWNER.format("release"))),
    mutant("release-status", "jobs.sql", "jobs_release",
           " AND j.status::text = 'Processing'", "",
           fence(QUARANTINED.format("release"))),
    # -- watcher batch -------------------------------------------------------------------------
    mutant("watcher-status-read", BATCH, "jobs_requeue_expired",
           "WHERE status = 'Processing'\n", "WHERE TRUE\n",
           fence("test_watcher_never_moves_a_stuck_job_again")),
    mutant("watcher-status-update", BATCH, "jobs_requeue_expired",
           "AND j.status = 'Processing'\n", "AND TRUE\n",
           fence("test_watcher_never_moves_a_stuck_job_again"),
           equivalent=RECHECK),
    mutant("watcher-status-both", BATCH, "jobs_requeue_expired",
           "WHERE status = 'Processing'\n", "WHERE TRUE\n",
           fence("test_watcher_never_moves_a_stuck_job_again"),
           also=(("AND j.status = 'Processing'\n", "AND TRUE\n"),)),
    mutant("watcher-expiry-read", BATCH, "jobs_requeue_expired",
           "AND lease_until < now()\n", "AND TRUE\n",
           fence("test_watcher_is_not_stopped_by_live_leases_in_its_batch")),
    mutant("watcher-expiry-update", BATCH, "jobs_requeue_expired",
           "AND j.lease_until < now()\n", "AND TRUE\n",
           fence("test_watcher_never_moves_a_live_lease",
                 "test_watcher_is_not_stopped_by_live_leases_in_its_batch"),
           equivalent=RECHECK),
    mutant("watcher-expiry-both", BATCH, "jobs_requeue_expired",
           "AND lease_until < now()\n", "AND TRUE\n",
           fence("test_watcher_never_moves_a_live_lease"),
           also=(("AND j.lease_until < now()\n", "AND TRUE\n"),)),
    mutant("watcher-queue", BATCH, "jobs_requeue_expired",
           "(only_queue IS NULL OR queue = only_queue)", "TRUE",
           fence("test_watcher_with_a_queue_moves_only_that_queue")),
    mutant("watcher-id", BATCH, "jobs_requeue_expired",
           "WHERE j.id = e.id\n", "WHERE TRUE\n",
           fence("test_watcher_with_a_queue_moves_only_that_queue")),
    mutant("watcher-owner-read", BATCH, "jobs_requeue_expired",
           "(only_owner IS NULL OR lease_owner = only_owner)", "TRUE",
           fence(OWNER_ONLY.format("requeue"), OWNER_ONLY.format("mark"))),
    mutant("watcher-owner-update", BATCH, "jobs_requeue_expired",
           "(only_owner IS NULL OR j.lease_owner = only_owner)", "TRUE",
           fence(OWNER_ONLY.format("requeue"),
                 "test_watcher_with_an_owner_leaves_leases_renewed_or_taken_over_since_its_dry_run"),
           equivalent=RECHECK),
    mutant("watcher-owner-both", BATCH, "jobs_requeue_expired",
           "(only_owner IS NULL OR lease_owner = only_owner)", "TRUE",
           fence(OWNER_ONLY.format("requeue"),
                 "test_watcher_with_an_owner_leaves_leases_renewed_or_taken_over_since_its_dry_run"),
           also=(("(only_owner IS NULL OR j.lease_owner = only_owner)", "TRUE"),)),
    mutant("watcher-owner-on", BATCH, "jobs_requeue_expired",
           "(only_owner IS NULL OR lease_owner = only_owner)", "(lease_owner = only_owner)",
           fence("test_watcher_with_a_queue_moves_only_that_queue")),
    mutant("expired-list-owner", "watcher.sql", "jobs_expired_list",
           "(%(owner)s::text IS NULL OR lease_owner = %(owner)s::text)", "TRUE",
           fence("test_dry_run_with_an_owner_lists_only_that_owners_expired_leases")),
    # -- retention -----------------------------------------------------------------------------
    mutant("prune-queue", "retention.sql", "jobs_prune",
           "(%(queue)s::text IS NULL OR queue = %(queue)s::text)", "TRUE",
           fence("test_prune_with_a_queue_leaves_other_queues_alone")),
    mutant("prune-count-queue", "retention.sql", "jobs_prune_count",
           "(%(queue)s::text IS NULL OR queue = %(queue)s::text)", "TRUE",
           fence("test_prune_with_a_queue_leaves_other_queues_alone")),
)
# fmt: on


def _operator(action: str, statement: str, statuses: str, only_statuses: str) -> list[Mutant]:
    """The guards shared by the two operator actions, with each action's own tests."""
    p = f"[{action}]"
    file = REQUEUE if action == "requeue" else AUDITED
    return [
        mutant(f"{action}-seen-status", file, statement,
               "WHERE j.status::text = s.status\n", "WHERE TRUE\n",
               fence("test_requeue_after_the_watcher_quarantined_the_job_is_skipped"
                     if action == "requeue" else
                     "test_mark_stuck_after_the_watcher_requeued_the_job_is_skipped")),
        mutant(f"{action}-seen-attempts", file, statement,
               "AND j.attempts = s.attempts\n", "AND TRUE\n",
               fence("test_an_action_on_a_later_attempt_than_the_operator_saw_is_skipped" + p)),
        mutant(f"{action}-seen-owner", file, statement,
               "AND j.lease_owner IS NOT DISTINCT FROM s.lease_owner", "AND TRUE",
               fence("test_an_action_on_another_owner_than_the_operator_saw_is_skipped" + p)),
        mutant(f"{action}-statuses", file, statement,
               f"AND j.status IN ({statuses})", "AND TRUE",
               fence(only_statuses)),
        mutant(f"{action}-force-guard", file, statement,
               "(force OR j.status <> 'Processing' OR j.lease_until < now())", "TRUE",
               fence("test_an_action_on_a_live_lease_needs_force" + p)),
        mutant(f"{action}-force-ignored", file, statement,
               "(force OR j.status", "(FALSE OR j.status",
               fence("test_an_action_on_a_live_lease_needs_force" + p)),
        mutant(f"{action}-force-unless-leased-off", file, statement,
               "OR j.status <> 'Processing' OR", "OR FALSE OR",
               fence("test_requeue_of_stuck_and_failed_jobs_needs_no_force"
                     if action == "requeue" else only_statuses)),
        mutant(f"{action}-force-unless-expired-off", file, statement,
               "OR j.lease_until < now())", "OR FALSE)",
               fence("test_an_action_on_an_expired_lease_needs_no_force" + p)),
        mutant(f"{action}-seen-id", file, statement,
               "JOIN seen AS s ON s.id = j.id", "JOIN seen AS s ON TRUE",
               fence("test_an_action_changes_only_the_job_the_operator_named" + p)),
        mutant(f"{action}-update-id", file, statement,
               "WHERE j.id = t.id", "WHERE TRUE",
               fence("test_an_action_changes_only_the_job_the_operator_named" + p)),
    ]  # fmt: skip


# Requeue as migration 26 replaced it (a new priority, N more attempts): migration 6's copy no
# longer runs, so its mutants would survive. Its new SET expressions and audit fields, each
# against the test that fails without it.
REQUEUE = "migrations/026_requeue_priority_attempts.sql"
SETTINGS = "tests/integration/test_requeue_settings.py"


def _settings(name: str, text: str, replacement: str, test: str) -> Mutant:
    return mutant(f"requeue-{name}", REQUEUE, "jobs_operator_requeue", text, replacement,
                  (f"{SETTINGS}::{test}",))  # fmt: skip


MUTANTS += (
    *_operator("requeue", "jobs_operator_requeue", "'Processing', 'Stuck', 'Failed'",
               "test_requeue_applies_only_to_processing_stuck_and_failed_jobs"),
    *_operator("mark-stuck", "jobs_operator_mark_stuck", "'Processing', 'Pending'",
               "test_mark_stuck_applies_only_to_pending_and_processing_jobs"),
    _settings("priority-ignored", "priority = COALESCE(new_priority, j.priority)",
              "priority = j.priority", "test_requeue_with_a_priority_sets_it"),
    _settings("priority-reset", "priority = COALESCE(new_priority, j.priority)",
              "priority = COALESCE(new_priority, 0)", "test_requeue_without_a_priority_keeps_it"),
    _settings("attempts-ignored", "WHEN more_attempts IS NULL", "WHEN TRUE",
              "test_requeue_with_attempts_gives_that_many_more_from_now"),
    _settings("attempts-always", "WHEN more_attempts IS NULL", "WHEN FALSE",
              "test_requeue_without_attempts_keeps_a_budget_not_spent"),
    _settings("attempts-from-budget",
              "ELSE LEAST(j.attempts + LEAST(", "ELSE LEAST(j.max_attempts + LEAST(",
              "test_requeue_with_attempts_counts_from_the_attempts_made_not_the_old_budget"),
    _settings("attempts-unbounded",
              "ELSE LEAST(j.attempts + LEAST(GREATEST(more_attempts, 1), 1000), 1000)",
              "ELSE j.attempts + LEAST(GREATEST(more_attempts, 1), 1000)",
              "test_requeue_with_attempts_stays_within_the_largest_budget"),
    _settings("attempts-floor", "GREATEST(more_attempts, 1)", "more_attempts",
              "test_the_function_gives_at_least_one_more_attempt_whatever_its_caller_passes"),
    _settings("audit-before-priority", "'priority', t.priority,", "",
              "test_the_event_records_priority_and_budget_before_and_after"),
    _settings("audit-after-priority", "'priority', m.priority,", "",
              "test_the_event_records_priority_and_budget_before_and_after"),
)  # fmt: skip


# Cancel and delete (migration 10): the guards on what the operator saw, and the statuses each
# applies to. Neither has a live-lease guard (cancel revokes the lease it is asked to; delete
# never touches a Processing job, whatever its lease).
CANCEL_DELETE = "migrations/010_cancel_and_delete.sql"
# Cancel's function as migration 18 replaced it (Waiting among its statuses): migration 10's copy
# no longer runs, so its mutants would survive.
CANCEL = "migrations/018_concurrency_keys.sql"


def _cancel_delete(
    action: str, statement: str, statuses: str, tests: dict[str, str]
) -> list[Mutant]:
    file = CANCEL if action == "cancel" else CANCEL_DELETE
    return [
        mutant(f"{action}-seen-status", file, statement,
               "WHERE j.status::text = s.status\n", "WHERE TRUE\n", fence(tests["status"])),
        mutant(f"{action}-seen-attempts", file, statement,
               "AND j.attempts = s.attempts\n", "AND TRUE\n", fence(tests["attempts"])),
        mutant(f"{action}-seen-owner", file, statement,
               "AND j.lease_owner IS NOT DISTINCT FROM s.lease_owner", "AND TRUE",
               fence(tests["owner"])),
        mutant(f"{action}-statuses", file, statement,
               f"AND j.status IN ({statuses})", "AND TRUE", fence(tests["statuses"])),
        mutant(f"{action}-seen-id", file, statement,
               "JOIN seen AS s ON s.id = j.id", "JOIN seen AS s ON TRUE", fence(tests["id"])),
        mutant(f"{action}-{'update' if action == 'cancel' else 'delete'}-id", file,
               statement, "WHERE j.id = t.id", "WHERE TRUE", fence(tests["id"])),
    ]  # fmt: skip


MUTANTS += (
    *_cancel_delete("cancel", "jobs_operator_cancel",
                    "'Pending', 'Processing', 'Stuck', 'Waiting'", {
        "status": "test_cancel_after_the_watcher_quarantined_the_job_is_skipped",
        "attempts": "test_an_action_on_a_later_attempt_than_the_operator_saw_is_skipped[cancel]",
        "owner": "test_an_action_on_another_owner_than_the_operator_saw_is_skipped[cancel]",
        "statuses": "test_cancel_applies_only_to_pending_processing_and_stuck_jobs",
        "id": "test_an_action_changes_only_the_job_the_operator_named[cancel]",
    }),
    *_cancel_delete("delete", "jobs_operator_delete",
                    "'Completed', 'Failed', 'Cancelled', 'Stuck'", {
        "status": "test_delete_after_an_operator_cancelled_the_stuck_job_is_skipped",
        "attempts": "test_delete_of_a_later_attempt_than_the_operator_saw_is_skipped",
        "owner": "test_delete_of_another_owner_than_the_operator_saw_is_skipped",
        "statuses": "test_delete_never_removes_a_pending_or_processing_job",
        "id": "test_delete_removes_only_the_job_the_operator_named",
    }),
)  # fmt: skip


# `leasectl list`: each part of the filter, and the page's order and start, against the model of
# the rows in test_list.py (each part alone and combined).
LIST = "tests/integration/test_list.py::"
LIST_ALONE = LIST + "test_each_filter_alone_lists_what_the_model_says"
LIST_TIMES = LIST + "test_since_and_until_time_the_finish_of_finished_states_else_the_creation"
LIST_PAGES = LIST + "test_paging_lists_every_row_once_while_jobs_are_inserted"
LIST_PLANS = LIST + "test_filters_an_index_serves_never_scan_the_history"


def _list(name: str, text: str, replacement: str, *tests: str) -> Mutant:
    return mutant(f"list-{name}", "history.sql", "jobs_list", text, replacement,
                  tests or (LIST_ALONE,))  # fmt: skip


MUTANTS += (
    _list("after", "(%(after)s::bigint IS NULL OR j.id < %(after)s::bigint)", "TRUE",
          LIST_PAGES),
    _list("order", "ELSE j.id END DESC", "ELSE j.id END", LIST_ALONE, LIST_PAGES),
    _list("window-first", "CASE WHEN %(window_first)s::boolean THEN j.id + 0 ELSE j.id END",
          "j.id", LIST_PLANS),
    _list("any-state", "%(any_state)s::boolean\n", "FALSE\n", LIST_TIMES),
    *(
        _list(f"state-{s.lower()}", f"(%({s.lower()})s::boolean AND j.status = '{s}')",
              f"%({s.lower()})s::boolean")
        for s in ("Pending", "Processing", "Stuck", "Completed", "Failed", "Cancelled")
    ),
    *(
        _list(f"state-{s.lower()}-off", f"(%({s.lower()})s::boolean AND j.status = '{s}')",
              "FALSE")
        for s in ("Pending", "Processing", "Stuck", "Completed", "Failed", "Cancelled")
    ),
    _list("queue", "(%(queue)s::text IS NULL OR j.queue = %(queue)s::text)", "TRUE"),
    _list("owner", "(%(owner)s::text IS NULL OR j.lease_owner = %(owner)s::text)", "TRUE"),
    _list("error", "(%(error)s::text IS NULL OR j.last_error ILIKE %(error)s::text)", "TRUE"),
    _list("error-case", "j.last_error ILIKE %(error)s::text", "j.last_error LIKE %(error)s::text"),
    _list("payload", "(%(payload)s::jsonb IS NULL OR j.payload @> %(payload)s::jsonb)", "TRUE"),
    _list("created-since",
          "(%(created_since)s::interval IS NULL OR j.created_at >= now() - "
          "%(created_since)s::interval)", "TRUE", LIST_ALONE, LIST_TIMES),
    _list("created-until",
          "(%(created_until)s::interval IS NULL OR j.created_at < now() - "
          "%(created_until)s::interval)", "TRUE"),
    _list("finished-since",
          "(%(finished_since)s::interval IS NULL\n           OR j.finished_at >= now() - "
          "%(finished_since)s::interval)", "TRUE", LIST_TIMES),
    _list("finished-until",
          "(%(finished_until)s::interval IS NULL\n           OR j.finished_at < now() - "
          "%(finished_until)s::interval)", "TRUE", LIST_TIMES),
    # The id window a bulk action reads a page in (runtime/bulk.py).
    _list("floor", "(%(floor)s::bigint IS NULL OR j.id >= %(floor)s::bigint)", "TRUE",
          "tests/integration/test_bulk.py::"
          "test_pages_are_read_in_windows_of_ids_and_after_bounds_the_run"),
)  # fmt: skip

# A worker fails alone the due jobs whose attempts cannot count one more (migration 15): only
# those, not the others on the claim's walk.
MUTANTS += (
    mutant("unclaimable-attempts", "jobs.sql", "jobs_fail_unclaimable",
           "j.attempts >= 2147483647", "TRUE",
           ("tests/integration/test_role_bounds.py::"
            "test_a_worker_fails_alone_a_job_whose_attempts_it_cannot_count",)),
)  # fmt: skip

# The count of a bulk action's dry run and confirmation repeats jobs_list's predicates: each
# one deleted is caught by the test that keeps the two the same (and the count's own tests).
COUNT_SAME = "tests/unit/test_bulk.py::test_the_count_filters_exactly_as_the_listing"
COUNT_TESTS = (
    COUNT_SAME,
    "tests/integration/test_bulk.py::test_count_is_exact_or_says_it_was_capped",
)


def _count(name: str, text: str, replacement: str) -> Mutant:
    return mutant(f"count-{name}", "history.sql", "jobs_count", text, replacement, COUNT_TESTS)


MUTANTS += (
    _count("after", "(%(after)s::bigint IS NULL OR j.id < %(after)s::bigint)", "TRUE"),
    _count("floor", "(%(floor)s::bigint IS NULL OR j.id >= %(floor)s::bigint)", "TRUE"),
    _count("any-state", "%(any_state)s::boolean\n", "FALSE\n"),
    *(
        _count(f"state-{s.lower()}", f"(%({s.lower()})s::boolean AND j.status = '{s}')",
               f"%({s.lower()})s::boolean")
        for s in ("Pending", "Processing", "Stuck", "Completed", "Failed", "Cancelled")
    ),
    _count("queue", "(%(queue)s::text IS NULL OR j.queue = %(queue)s::text)", "TRUE"),
    _count("owner", "(%(owner)s::text IS NULL OR j.lease_owner = %(owner)s::text)", "TRUE"),
    _count("error", "(%(error)s::text IS NULL OR j.last_error ILIKE %(error)s::text)", "TRUE"),
    _count("payload", "(%(payload)s::jsonb IS NULL OR j.payload @> %(payload)s::jsonb)", "TRUE"),
    _count("created-since",
           "(%(created_since)s::interval IS NULL OR j.created_at >= now() - "
           "%(created_since)s::interval)", "TRUE"),
    _count("created-until",
           "(%(created_until)s::interval IS NULL OR j.created_at < now() - "
           "%(created_until)s::interval)", "TRUE"),
    _count("finished-since",
           "(%(finished_since)s::interval IS NULL\n           OR j.finished_at >= now() - "
           "%(finished_since)s::interval)", "TRUE"),
    _count("finished-until",
           "(%(finished_until)s::interval IS NULL\n           OR j.finished_at < now() - "
           "%(finished_until)s::interval)", "TRUE"),
    _count("cap", "LIMIT %(cap)s::bigint", "LIMIT NULL"),
)  # fmt: skip


# `leasectl metrics`: the scrape's reads, against the known state of test_metrics.py and the
# bounded plans of test_metrics_plans.py.
METRICS = "tests/integration/test_metrics.py::"
METRICS_STATE = METRICS + "test_a_scrape_reports_the_known_state"
METRICS_PLANS = "tests/integration/test_metrics_plans.py::"
WAITING_METRICS = (
    "tests/integration/test_concurrency_keys.py::"
    "test_the_exporter_counts_waiting_jobs_per_queue_bounded_like_stuck"
)


def _metrics(name: str, statement: str, text: str, replacement: str, *tests: str) -> Mutant:
    return mutant(f"metrics-{name}", "metrics.sql", statement, text, replacement,
                  tests or (METRICS_STATE,))  # fmt: skip


MUTANTS += (
    _metrics("oldest-due", "metrics_pending", "CASE WHEN q.oldest <= now()", "CASE WHEN TRUE",
             METRICS + "test_oldest_due_ignores_jobs_not_yet_due_in_every_priority"),
    _metrics("pending-status", "metrics_pending", "WHERE status = 'Pending' AND queue = q.queue",
             "WHERE queue = q.queue"),
    _metrics("pending-cap", "metrics_pending", "LIMIT b.cap + 1) AS x", ") AS x",
             METRICS_PLANS + "test_scrape_queries_walk_live_indexes_a_bounded_number_of_rows"
             "[metrics_pending]"),
    _metrics("stuck-status", "metrics_stuck", "WHERE status = 'Stuck' AND queue = q.queue",
             "WHERE queue = q.queue"),
    _metrics("stuck-cap", "metrics_stuck", "LIMIT b.cap + 1) AS x", ") AS x",
             METRICS_PLANS + "test_scrape_queries_walk_live_indexes_a_bounded_number_of_rows"
             "[metrics_stuck]"),
    _metrics("waiting-status", "metrics_waiting", "WHERE status = 'Waiting' AND queue = q.queue",
             "WHERE queue = q.queue", WAITING_METRICS),
    _metrics("waiting-cap", "metrics_waiting", "LIMIT b.cap + 1) AS x", ") AS x",
             METRICS_PLANS + "test_scrape_queries_walk_live_indexes_a_bounded_number_of_rows"
             "[metrics_waiting]"),
    _metrics("expired", "metrics_leases", "FILTER (WHERE j.lease_until < now()) AS expired",
             "FILTER (WHERE TRUE) AS expired"),
    _metrics("at-risk-unexpired", "metrics_leases", "WHERE j.lease_until >= now()\n",
             "WHERE TRUE\n"),
    _metrics("at-risk-owner-window", "metrics_leases",
             "AND j.lease_until < now() + coalesce(", "AND now() < now() + coalesce(",
             METRICS + "test_at_risk_is_judged_by_each_owners_own_interval"),
    _metrics("processing-status", "metrics_leases", "WHERE j.status = 'Processing'\nGROUP BY",
             "WHERE TRUE\nGROUP BY"),
)  # fmt: skip


# The counters' triggers and fold (migration 11), against the known state of test_counters.py.
COUNTERS_SQL = "migrations/011_counters.sql"
COUNTERS = "tests/integration/test_counters.py::"
COUNTED = COUNTERS + "test_a_scrape_counts_every_path_exactly"
NOT_COUNTED = COUNTERS + "test_an_attempt_updated_after_it_ended_and_other_audit_rows_count_nothing"
NEITHER = COUNTERS + "test_a_takeover_and_a_release_count_as_neither_completion_nor_failure"
FOLDS = COUNTERS + "test_concurrent_folds_count_each_delta_once"
FOLD_LIMIT = COUNTERS + "test_two_collectors_agree_and_folding_changes_no_value"
FOLD_SQL = "migrations/016_counters_fold_skips_locks.sql"
FOLD_HELD = (
    "tests/integration/test_metrics_abuse.py::"
    "test_a_fold_left_open_freezes_no_fold_no_scrape_and_no_watcher_pass"
)


def _counted(name: str, statement: str, text: str, replacement: str, *tests: str) -> Mutant:
    return mutant(f"counters-{name}", COUNTERS_SQL, statement, text, replacement,
                  tests or (COUNTED,))  # fmt: skip


HISTORY = "tests/integration/test_history.py::"
PICKUP = HISTORY + "test_pickup_latency_is_the_start_minus_when_the_job_became_due"
RUNNING_PICKUPS = (
    HISTORY + "test_a_pickup_counts_in_the_minute_its_attempt_started_and_reads_as_it_runs"
)
EVERY_END = HISTORY + "test_every_way_an_attempt_ends_counts_its_pickup_once"
V30_PICKUPS = (
    "tests/integration/test_privileges.py::"
    "test_workers_granted_at_version_30_lose_the_deltas_and_count_no_pickup_twice"
)


# counters_from_attempts as migration 31 replaced it (one delta, the history's, for both
# counts; the pickups of the attempts that end).
ATTEMPTS_SQL = "migrations/031_pickups_when_attempts_end.sql"
ATTEMPTS_FILTER = (
    "WHERE outcome IN ('completed', 'failed')\n"
    "               OR (ended_at IS NOT NULL AND due_at IS NOT NULL)"
)


def _attempts(name: str, text: str, replacement: str, *tests: str) -> Mutant:
    return mutant(f"counters-{name}", ATTEMPTS_SQL, "counters_from_attempts", text, replacement,
                  tests or (COUNTED,))  # fmt: skip


MUTANTS += (
    _attempts("old-rows",
              "            UNION ALL\n            SELECT job_id, outcome, queue, started_at, "
              "due_at, -1\n            FROM old_attempts\n            "
              + ATTEMPTS_FILTER + "\n", "", NOT_COUNTED),
    # (A sum of 0, an attempt read as it was and as it is, would break the deltas' CHECK.)
    _attempts("net-increase", "WHERE k.n > 0;", "WHERE k.n IS NOT NULL;", NOT_COUNTED),
    _attempts("attempt-job", "WHERE id = c.job_id AND (c.outcome", "WHERE (c.outcome"),
    _attempts("failure-reads-job", "(c.outcome = 'failed' OR c.queue IS NULL)",
              "c.queue IS NULL"),
    _attempts("queue-of-the-attempt", "coalesce(c.queue, j.queue)", "c.queue",
              COUNTERS + "test_the_attempts_trigger_reads_each_job_by_its_key_on_a_large_history"),
    _attempts("completed", "FILTER (WHERE c.outcome = 'completed')", "FILTER (WHERE TRUE)"),
    _attempts("failed", "FILTER (WHERE c.outcome = 'failed')", "FILTER (WHERE TRUE)"),
    _attempts("retried-pending", "c.outcome = 'failed' AND j.status = 'Pending'",
              "c.outcome = 'failed'"),
    # A retry is a failed attempt whose job is Pending: the rows are already only completed and
    # failed attempts (and a completed attempt's job is never Pending), so the outcome is
    # dropped from both places at once, and the job read for every attempt; a release
    # (Pending, `released`) then counts.
    mutant("counters-retried-failed", ATTEMPTS_SQL, "counters_from_attempts",
           "c.outcome = 'failed' AND j.status = 'Pending'", "j.status = 'Pending'", (NEITHER,),
           also=(("FROM new_attempts\n            " + ATTEMPTS_FILTER, "FROM new_attempts"),
                 ("(c.outcome = 'failed' OR c.queue IS NULL)", "true"))),
    # The pickups (migration 31): counted once an attempt ends, from its start and due time.
    _attempts("pickup-wait", "history_wait_bucket(c.started_at, c.due_at)",
              "history_wait_bucket(c.started_at, c.started_at)", PICKUP),
    _attempts("pickup-start-minute", "least(g.started, s.minute)", "s.minute", RUNNING_PICKUPS),
    _attempts("pickup-not-after-the-end", "least(g.started, s.minute)", "g.started",
              RUNNING_PICKUPS),
    _attempts("pickup-claimed-before", "FILTER (WHERE c.due_at IS NOT NULL)",
              "FILTER (WHERE TRUE)", V30_PICKUPS),
    _attempts("pickup-ends", "OR (ended_at IS NOT NULL AND due_at IS NOT NULL)\n            UNION",
              "OR (due_at IS NOT NULL)\n            UNION", EVERY_END),
)  # fmt: skip

MUTANTS += (
    _counted("watcher-lease-until", "counters_from_job_events", "AND e.after ? 'lease_until' ", ""),
    _counted("watcher-run-at", "counters_from_job_events", "AND e.after ? 'run_at' THEN",
             "THEN"),
    _counted("operator-actions", "counters_from_job_events",
             "WHEN e.action IN ('requeue', 'requeue_forced', 'mark_stuck', 'mark_stuck_forced',\n"
             "                              'cancel', 'delete') THEN 'operator'",
             "WHEN TRUE THEN 'operator'", NOT_COUNTED),
    _counted("deleted-queue", "counters_from_job_events",
             "coalesce(e.before ->> 'queue', j.queue, '')", "coalesce(j.queue, '')"),
    _counted("event-job", "counters_from_job_events", "FROM jobs WHERE id = e.job_id OFFSET 0",
             "FROM jobs OFFSET 0"),
    # The fold as migration 16 redefined it (it never waits for another transaction's locks).
    mutant("counters-fold-adds", FOLD_SQL, "counters_fold", "SET value = t.value + s.delta",
           "SET value = s.delta", (FOLDS,)),
    mutant("counters-fold-limit", FOLD_SQL, "counters_fold",
           "            LIMIT max_rows\n            FOR UPDATE OF d SKIP LOCKED", 
           "            FOR UPDATE OF d SKIP LOCKED", (FOLDS,)),
    mutant("counters-fold-skips-held-totals", FOLD_SQL, "counters_fold",
           "ORDER BY t.counter, t.action, t.queue\n        FOR UPDATE SKIP LOCKED",
           "ORDER BY t.counter, t.action, t.queue\n        FOR UPDATE", (FOLD_HELD,)),
)  # fmt: skip


# The per-minute history (migration 20): its triggers, fold, backlog sample and prune, against
# tests/integration/test_history.py.

REAL_WORKER = HISTORY + "test_buckets_add_up_to_what_a_real_worker_did"
ONE_QUEUE_ERRORS = (
    "tests/integration/test_incident.py::"
    "test_one_queues_errors_are_read_however_many_another_queue_has"
)
TAKEOVER_PICKUP = HISTORY + "test_a_takeover_counts_its_pickup_from_when_the_job_first_became_due"
BACKLOG = HISTORY + "test_the_backlog_is_sampled_once_a_minute_capped_by_its_budget"
HISTORY_HELD = HISTORY + "test_a_fold_left_open_holds_up_no_other_fold_and_changes_no_value"
PRUNED = HISTORY + "test_prune_deletes_minutes_past_the_keep_in_batches"


HISTORY_SQL = "migrations/020_queue_history.sql"
# history_fold as migration 27 replaced it (it adds the outcomes to the counters' totals too).
HISTORY_FOLD_SQL = "migrations/027_one_delta_per_outcome.sql"
OUTCOMES = "tests/integration/test_outcome_deltas.py::"
OUTCOMES_RACE = COUNTERS + "test_concurrent_history_folds_count_each_outcome_once"
OUTCOME_HELD = OUTCOMES + "test_a_fold_skips_an_outcome_whose_total_another_fold_holds"


def _history(name: str, statement: str, text: str, replacement: str, *tests: str) -> Mutant:
    file = HISTORY_FOLD_SQL if statement == "history_fold" else HISTORY_SQL
    return mutant(f"history-{name}", file, statement, text, replacement, tests)


MUTANTS += (
    # The due time each claim writes into its attempt, for its pickup (migration 31).
    mutant("history-due-is-the-later", "jobs.sql", "jobs_complete_and_claim",
           "greatest(created_at, run_at)", "created_at", (PICKUP,)),
    mutant("history-pickups-are-claims", "jobs.sql", "jobs_complete_and_claim",
           "queue, greatest(created_at, run_at)", "queue, NULL", (REAL_WORKER,)),
    mutant("history-takeover-due-is-the-later", "jobs.sql", "jobs_claim_expired",
           "greatest(created_at, run_at)", "created_at", (TAKEOVER_PICKUP,)),
    mutant("history-takeover-pickups", "jobs.sql", "jobs_claim_expired",
           "queue, greatest(created_at, run_at)", "queue, NULL", (TAKEOVER_PICKUP,)),
    mutant("history-claim-by-id-pickups", "jobs.sql", "job_claim_by_id",
           "queue, greatest(created_at, run_at)", "queue, NULL",
           (HISTORY + "test_a_job_claimed_by_id_before_it_is_due_counts_in_the_first_bucket",)),
    # The running attempts' pickups the readers add (migration 31).
    mutant("history-running-pickups-of-the-queue", ATTEMPTS_SQL, "history_running_pickups",
           "(only_queue IS NULL OR j.queue OPERATOR(pg_catalog.=) only_queue)", "true",
           (RUNNING_PICKUPS,)),
    mutant("history-running-pickups-since", ATTEMPTS_SQL, "history_running_pickups",
           "\n      AND j.updated_at OPERATOR(pg_catalog.>=) since", "", (RUNNING_PICKUPS,)),
    mutant("history-running-pickups-claimed-before", ATTEMPTS_SQL, "history_running_pickups",
           "j.updated_at OPERATOR(pg_catalog.>) (", "true OR j.updated_at OPERATOR(pg_catalog.>) (",
           (V30_PICKUPS,)),
    mutant("history-running-pickups-started", ATTEMPTS_SQL, "history_running_pickups",
           "pg_catalog.date_bin('1 minute', j.updated_at,",
           "pg_catalog.date_bin('1 minute', j.created_at,", (RUNNING_PICKUPS,)),
    mutant("history-running-pickups-read", "stats.sql", "stats_counts",
           "    SELECT r.minute, 0, 1, 0, 0, 0\n", "    SELECT r.minute, 0, 0, 0, 0, 0\n",
           (RUNNING_PICKUPS,)),
    mutant("history-running-pickups-recent", "stats.sql", "history_pickup_recent",
           "r.queue, r.bucket::integer, 1\n", "r.queue, r.bucket::integer, 0\n",
           (EVERY_END,)),
    mutant("history-running-pickups-buckets", "stats.sql", "stats_pickup",
           "r.minute, r.bucket::integer, 1\n", "r.minute, r.bucket::integer, 0\n",
           (EVERY_END,)),
    mutant("history-wait-bucket-bounds", ATTEMPTS_SQL, "history_wait_bucket",
           "1415 us", "1414 us",
           (HISTORY + "test_a_wait_has_the_bucket_of_its_milliseconds_at_every_bound",)),
    _history("bucket-scale", "history_bucket", "1 + floor(2 * ln(ms) / ln(2))",
             "floor(2 * ln(ms) / ln(2))",
             HISTORY + "test_the_sql_buckets_are_the_ones_python_reads"),
    _history("fold-adds", "history_fold", "enqueued = h.enqueued + s.enqueued",
             "enqueued = s.enqueued", HISTORY_HELD),
    _history("fold-skips-held", "history_fold",
             "ORDER BY h.queue, h.minute\n        FOR UPDATE SKIP LOCKED",
             "ORDER BY h.queue, h.minute\n        FOR UPDATE", HISTORY_HELD),
    _history("fold-adds-pickup", "history_fold", "pickup = history_add(h.pickup, p.pickup)",
             "pickup = p.pickup", HISTORY_HELD),
    _history("backlog-due", "history_fold",
             "count(*) FILTER (WHERE x.run_at <= statement_timestamp()) AS due",
             "count(*) AS due", BACKLOG),
    _history("backlog-capped", "history_fold", "c.seen > cap.cap", "false", BACKLOG),
    _history("backlog-once-a-minute", "history_fold", "    IF sampled > 0 THEN",
             "    IF true THEN", BACKLOG),
    mutant("history-backlog-estimated", "migrations/030_pickups_from_the_claim.sql",
           "history_backlog_estimate", "IF estimate > NEW.pending THEN", "IF false THEN",
           (BACKLOG,)),
    # `errors --queue` reads its queue's failures only, from their own index (migration 30).
    mutant("errors-one-queue", "incident.sql", "errors_failures",
           "           AND a.queue = %(queue)s::text\n", "", (ONE_QUEUE_ERRORS,)),
    mutant("errors-every-queue-gated", "incident.sql", "errors_failures",
           "           AND %(queue)s::text IS NULL\n", "", (ONE_QUEUE_ERRORS,)),
    _history("fold-adds-outcomes", "history_fold", "SET value = t.value + o.delta",
             "SET value = o.delta", OUTCOMES_RACE),
    _history("fold-skips-held-totals", "history_fold",
             "ORDER BY t.counter, t.action, t.queue\n        FOR UPDATE SKIP LOCKED",
             "ORDER BY t.counter, t.action, t.queue\n        FOR UPDATE", OUTCOME_HELD),
    _history("fold-takes-outcomes-with-their-total", "history_fold",
             "OR (d.counter, d.queue) IN (SELECT counter, queue FROM totals))",
             "OR TRUE)", OUTCOME_HELD),
    _history("prune-cutoff", "history_prune",
             "SELECT ctid FROM queue_history WHERE minute < cutoff",
             "SELECT ctid FROM queue_history WHERE true", PRUNED),
    _history("prune-backlog-cutoff", "history_prune",
             "SELECT ctid FROM queue_backlog WHERE minute < cutoff",
             "SELECT ctid FROM queue_backlog WHERE true", PRUNED),
)  # fmt: skip


# Unique jobs (jobs_enqueue): the live job a duplicate key gets is a live one. (Its other
# predicates are not mutants: the lookup's `j.unique_key IS NOT NULL` repeats what its join's
# equality implies, there for the partial index; the ON CONFLICT's predicate must imply the
# index's, or the statement is refused for every key.)
UNIQUE = "tests/integration/test_unique_jobs.py::"

MUTANTS += (
    mutant("enqueue-duplicate-live", "jobs.sql", "jobs_enqueue",
           "unique_key IS NOT NULL\n      AND j.status OPERATOR(pg_catalog.=) ANY (\n"
           "          ARRAY['Pending', 'Processing', 'Stuck', 'Waiting']::{schema}.job_status[])",
           "unique_key IS NOT NULL",
           (UNIQUE + "test_a_finished_job_with_the_key_is_never_the_duplicate",)),
)  # fmt: skip

# Bounded live counts: the console's refresh (console_counts) and `leasectl status`
# (status_live_counts), against the backlog tests and the plans that stop at their caps.
BACKLOG = "tests/integration/test_backlog_counts.py::"
BACKLOG_PLANS = "tests/integration/test_backlog_plans.py::"
BACKLOG_CONSOLE = (
    "tests/console/test_backlog.py::test_a_backlog_shows_as_an_estimate_and_a_small_queue_exactly"
)
STATUS_BOUNDED = BACKLOG + "test_status_shows_a_big_queue_as_an_estimate_and_a_small_one_exactly"
COUNTS_PLAN = BACKLOG_PLANS + "test_counts_stop_at_their_caps_on_a_backlog[console_counts]"
STATUS_PLAN = BACKLOG_PLANS + "test_counts_stop_at_their_caps_on_a_backlog[status_live_counts]"
CONSOLE_WAITING = (
    "tests/console/test_waiting_counts.py::"
    "test_the_refresh_counts_the_waiting_jobs_of_the_filtered_queue"
)
TRUNCATED = (
    BACKLOG_PLANS
    + "test_past_the_group_limit_the_due_count_and_the_oldest_come_from_the_whole_index"
)

MUTANTS += (
    mutant("console-counts-due-range", "console.sql", "console_counts",
           "AND run_at <= {now}\n          ) AS d", "AND TRUE\n          ) AS d",
           (BACKLOG_CONSOLE,)),
    mutant("console-counts-due-cap", "console.sql", "console_counts",
           "WHERE g.n <= %(group_limit)s\n          LIMIT %(budget)s::bigint + 1) AS x",
           "WHERE g.n <= %(group_limit)s\n          ) AS x", (COUNTS_PLAN,)),
    mutant("console-counts-pending-cap", "console.sql", "console_counts",
           "LIMIT %(budget)s::bigint + 1) AS x) AS pending", ") AS x) AS pending",
           (COUNTS_PLAN,)),
    mutant("console-counts-stuck-cap", "console.sql", "console_counts",
           "queue = %(queue)s::text)\n          LIMIT %(budget)s::bigint + 1) AS x\n) AS s",
           "queue = %(queue)s::text)\n          ) AS x\n) AS s", (COUNTS_PLAN,)),
    mutant("console-counts-waiting-status", "console.sql", "console_counts",
           "WHERE status = 'Waiting' AND (%(queue)s", "WHERE (%(queue)s", (CONSOLE_WAITING,)),
    mutant("console-counts-truncated", "console.sql", "console_counts",
           "coalesce((SELECT max(n) FROM grp) > %(group_limit)s, false) AS truncated",
           "false AS truncated", (TRUNCATED,)),
    mutant("status-counts-due-range", "status.sql", "status_live_counts",
           "AND run_at <= {now}\n              ) AS r", "AND TRUE\n              ) AS r",
           (STATUS_BOUNDED,)),
    mutant("status-counts-due-queue", "status.sql", "status_live_counts",
           "WHERE g.queue = q.queue AND g.n", "WHERE g.n", (STATUS_BOUNDED,)),
    mutant("status-counts-due-cap", "status.sql", "status_live_counts",
           "AND g.n <= %(group_limit)s\n              LIMIT b.cap + 1) AS x",
           "AND g.n <= %(group_limit)s\n              ) AS x", (STATUS_PLAN,)),
    mutant("status-counts-pending-cap", "status.sql", "status_live_counts",
           "queue = q.queue\n              LIMIT b.cap + 1) AS x",
           "queue = q.queue\n              ) AS x",
           (STATUS_PLAN,)),
    mutant("status-counts-stuck-cap", "status.sql", "status_live_counts",
           "queue = s.queue\n          LIMIT b.cap + 1) AS x", "queue = s.queue\n          ) AS x",
           (STATUS_PLAN,)),
    mutant("status-counts-stuck-floor", "status.sql", "status_live_counts",
           "greatest(%(stuck_floor)s::bigint", "greatest(%(floor)s::bigint",
           (BACKLOG + "test_max_stuck_is_decided_by_a_count_taken_past_it",)),
    mutant("status-counts-oldest-due", "status.sql", "status_live_counts",
           "CASE WHEN q.oldest <= {now}", "CASE WHEN TRUE",
           (BACKLOG + "test_a_queue_with_nothing_due_has_no_oldest_due",)),
    mutant("status-counts-truncated", "status.sql", "status_live_counts",
           "(SELECT max(n) FROM grp) > %(group_limit)s AS truncated", "false AS truncated",
           (BACKLOG + "test_more_groups_than_status_reads_is_said",)),
)  # fmt: skip

# Estimated counts (migration 22): the planner's estimate past the cap, and the recount of the
# queues it estimates below RECOUNT_CAP, within RECOUNT_BUDGET.
ESTIMATES = "migrations/022_incident_reads.sql"
ESTIMATE_PARTS = BACKLOG + "test_the_estimate_is_of_the_queue_the_status_and_the_due_ones_asked_for"
RECOUNT_BUDGET = BACKLOG + "test_past_the_recount_budget_a_pending_count_is_the_estimate"

MUTANTS += (
    mutant("estimate-queue", ESTIMATES, "estimate_jobs",
           "IF p_queue IS NOT NULL THEN", "IF false THEN", (ESTIMATE_PARTS,)),
    mutant("estimate-due", ESTIMATES, "estimate_jobs",
           "IF p_due_at IS NOT NULL THEN", "IF false THEN", (ESTIMATE_PARTS,)),
    mutant("estimate-no-statistics", ESTIMATES, "estimate_jobs",
           "IF NOT EXISTS (", "IF false AND EXISTS (", (ESTIMATE_PARTS,)),
    mutant("status-recount-budget", "status.sql", "status_live_counts",
           "SELECT CASE WHEN p.recount_spent <= %(recount_budget)s",
           "SELECT CASE WHEN true", (RECOUNT_BUDGET,)),
    mutant("status-recount-shown", "status.sql", "status_live_counts",
           "CASE WHEN r.jobs <= %(recount_cap)s THEN r.jobs ELSE p.jobs END AS jobs",
           "p.jobs AS jobs", (STATUS_BOUNDED,)),
    mutant("status-recount-due", "status.sql", "status_live_counts",
           "CASE WHEN r.jobs <= %(recount_cap)s THEN rd.due ELSE p.due END AS due",
           "p.due AS due", (STATUS_BOUNDED,)),
    mutant("status-recount-estimated-only", "status.sql", "status_live_counts",
           "CASE WHEN e.estimate <= %(recount_cap)s\n                THEN sum",
           "CASE WHEN true\n                THEN sum", (RECOUNT_BUDGET,),
           equivalent="cost only: a queue estimated past RECOUNT_CAP, recounted up to it, is "
           "still shown as its estimate (raised to RECOUNT_CAP + 1); the larger estimates sort "
           "last, so it takes no budget from a smaller queue's recount"),
)  # fmt: skip


# The read clock (read_clock): a standby that is behind is read as of its replay time. Its two
# predicates of "behind" (replay paused; WAL received and not replayed) have no mutant each: while
# replay is paused, any WAL the primary writes (a read that sets hint bits is enough) makes the
# second true as well, so no test tells them apart reliably. The mutant turns "behind" off.
STANDBY = "tests/integration/test_standby_reads.py::"

MUTANTS += (
    mutant("read-clock-behind", "status.sql", "read_clock",
           "CASE WHEN behind AND replayed_at", "CASE WHEN false AND replayed_at",
           (STANDBY + "test_countdowns_use_the_standbys_replay_time_not_the_clock",)),
)  # fmt: skip


# Concurrency keys (migration 18): the promotion, the arrival, the healing pass and the cancel
# of a Waiting job. The key's uniqueness itself is jobs_key_head_idx, no predicate of these.
KEYS = "migrations/018_concurrency_keys.sql"
KEYED = "tests/integration/test_concurrency_keys.py::"
RACES = "tests/integration/test_concurrency_key_races.py::"

MUTANTS += (
    mutant("keys-promote-head", KEYS, "jobs_key_promote",
           "IF EXISTS (SELECT FROM jobs WHERE queue = q",
           "IF false AND EXISTS (SELECT FROM jobs WHERE queue = q",
           (KEYED + "test_a_keys_first_job_is_pending_and_the_others_wait",)),
    mutant("keys-promote-queue", KEYS, "jobs_key_promote",
           "WHERE queue = q AND concurrency_key = k AND status = 'Waiting'",
           "WHERE concurrency_key = k AND status = 'Waiting'",
           (KEYED + "test_a_key_is_per_queue",)),
    mutant("keys-promote-key", KEYS, "jobs_key_promote",
           "WHERE queue = q AND concurrency_key = k AND status = 'Waiting'",
           "WHERE queue = q AND status = 'Waiting'",
           (KEYED + "test_a_key_promotes_only_its_own_jobs",)),
    mutant("keys-promote-order", KEYS, "jobs_key_promote",
           "ORDER BY priority, run_at, id LIMIT 1;", "ORDER BY id LIMIT 1;",
           (KEYED + "test_the_head_leaving_promotes_the_next_in_queue_order",)),
    mutant("keys-promote-still-waiting", KEYS, "jobs_key_promote",
           "WHERE id = next_id AND status = 'Waiting';", "WHERE id = next_id;",
           (KEYED + "test_a_job_cancelled_while_its_promotion_waits_for_it_stays_cancelled_and_"
            "the_next_goes",)),
    mutant("keys-arrive-head", KEYS, "jobs_key_arrive",
           "    IF EXISTS (SELECT FROM jobs WHERE queue = NEW.queue",
           "    IF false AND EXISTS (SELECT FROM jobs WHERE queue = NEW.queue",
           (KEYED + "test_a_keys_first_job_is_pending_and_the_others_wait",)),
    mutant("keys-arrive-queue", KEYS, "jobs_key_arrive",
           "WHERE queue = NEW.queue\n               AND concurrency_key",
           "WHERE true\n               AND concurrency_key",
           (KEYED + "test_in_its_transaction_a_job_whose_key_is_free_is_pending_at_once",)),
    mutant("keys-arrive-key", KEYS, "jobs_key_arrive",
           "               AND concurrency_key = NEW.concurrency_key\n",
           "               AND true\n",
           (KEYED + "test_in_its_transaction_a_job_whose_key_is_free_is_pending_at_once",)),
    mutant("keys-arrive-orphans", KEYS, "jobs_key_arrive",
           "    ELSIF EXISTS (SELECT FROM jobs", "    ELSIF false AND EXISTS (SELECT FROM jobs",
           (KEYED + "test_a_new_job_of_a_key_left_without_a_head_queues_behind_the_key_s_"
            "waiting_jobs",)),
    mutant("keys-heal-after", KEYS, "jobs_keys_heal",
           "AND (j.queue, j.concurrency_key) > (q, k)", "AND true",
           (KEYED + "test_the_healing_pass_walks_past_keys_that_have_a_head",)),
    mutant("keys-heal-head", KEYS, "jobs_keys_heal",
           "        IF NOT EXISTS (SELECT FROM jobs AS j",
           "        IF true OR NOT EXISTS (SELECT FROM jobs AS j",
           (KEYED + "test_the_healing_pass_promotes_a_waiting_job_left_without_a_head",),
           equivalent="jobs_key_promote checks for a head itself; this check only spares the "
           "pass a lock on a key that has one"),
    mutant("keys-cancel-waiting", KEYS, "jobs_operator_cancel",
           "AND j.status IN ('Pending', 'Processing', 'Stuck', 'Waiting')",
           "AND j.status IN ('Pending', 'Processing', 'Stuck')",
           (KEYED + "test_cancelling_a_waiting_job_keeps_the_rest_in_line_and_cancelling_the_"
            "head_promotes",)),
    mutant("keys-settle", KEYS, "jobs_key_settle",
           "    PERFORM jobs_key_promote(NEW.queue, NEW.concurrency_key);\n    RETURN NULL;",
           "    RETURN NULL;",
           (KEYED + "test_a_head_that_left_without_seeing_a_producers_job_is_settled_at_the_"
            "producers_commit",)),
    mutant("keys-exit-waits", KEYS, "jobs_key_exit",
           "        EXIT WHEN left_ms <= 0;", "        EXIT;",
           (KEYED + "test_a_head_leaving_while_a_producer_holds_the_key_waits_for_its_commit_"
            "and_promotes",
            RACES + "test_producers_racing_the_heads_exits_leave_no_job_waiting_without_the_"
            "watcher")),
)  # fmt: skip


# Flow control (migrations 17, 24, 33): the budget a claim may take (claim_budget, made again by
# migration 24 over the limit's shards: each shard's live-lease count, its bucket's refill; kept
# by migration 33 as claim_budget_counted, behind a claim_budget that decides from the shard's
# row while the limit has room), what it gives back and counts (claim_settle) and the claims'
# use of it.
LIMITS_SQL = "migrations/017_queue_limits.sql"
SHARDS_SQL = "migrations/024_sharded_limits.sql"
ROOM_SQL = "migrations/033_limit_room_in_one_statement.sql"
LIMITS = "tests/integration/test_limits.py::"
ROOM = "tests/integration/test_limits_room.py::"
ROOM_FIRST = ROOM + "test_a_first_claim_counts_its_shard_and_later_ones_add_to_the_hint"
ROOM_REFILL = ROOM + "test_a_hint_that_fills_the_share_is_counted_again"
ROOM_SHARE = ROOM + "test_no_shard_holds_more_leases_than_its_share"
ROOM_RAMP = ROOM + "test_during_a_ramp_claims_take_the_ramps_limit"
ROOM_RAMP_RATE = ROOM + "test_during_a_ramp_a_rate_takes_the_ramps_bucket"
ROOM_NEXT = ROOM + "test_a_claim_whose_shards_other_claims_hold_takes_the_next_by_its_hint"
ROOM_BURST = ROOM + "test_a_claim_by_the_hint_refills_the_bucket_to_at_most_its_burst"
# (A mutant that makes the one-statement path decline more than it should is equivalent by
# construction when the budget is all that shows: claim_budget_counted then decides, the same
# budget. The tests below also read the stored hint, so that most such mutants are seen.)
CAP_CUT = LIMITS + "test_cap_cuts_a_claim_and_frees_with_completions"
RATE_SPENT = LIMITS + "test_rate_spends_tokens_and_says_when_the_next_is_due"
SHARED = LIMITS + "test_the_bucket_is_shared_in_whole_tokens"
NOT_RENEWED = LIMITS + "test_a_lapsed_lease_of_a_capped_queue_is_not_renewed"

MUTANTS += (
    mutant("limits-cap", SHARDS_SQL, "claim_budget",
           "IF v_share - v_live < got THEN", "IF false THEN", (CAP_CUT,)),
    mutant("limits-live-status", SHARDS_SQL, "claim_budget",
           "WHERE j.status = 'Processing' AND j.queue", "WHERE j.queue",
           (LIMITS + "test_a_lease_marked_stuck_frees_its_slot",)),
    mutant("limits-live-queue", SHARDS_SQL, "claim_budget",
           " AND j.queue = queue_name AND j.lease_until", " AND j.lease_until",
           (LIMITS + "test_the_cap_counts_only_its_queue",)),
    mutant("limits-live-lease", SHARDS_SQL, "claim_budget",
           " AND j.lease_until >= now()", "",
           (LIMITS + "test_lapsed_lease_frees_its_slot_and_a_live_one_does_not",)),
    mutant("limits-live-completing", SHARDS_SQL, "claim_budget",
           "\n              AND NOT (j.id = ANY (coalesce(done_ids, '{}'))",
           "\n              AND NOT (false",
           (LIMITS + "test_completions_in_the_claim_statement_free_their_slots",)),
    mutant("limits-live-completing-owner", SHARDS_SQL, "claim_budget",
           " AND j.lease_owner = owner_name)", ")",
           (LIMITS + "test_a_lost_lease_being_completed_still_counts_for_its_new_owner",)),
    mutant("limits-live-own-shard", SHARDS_SQL, "claim_budget",
           "\n                   + l.shards) % l.shards = i",
           "\n                   + l.shards) >= 0",
           (LIMITS + "test_each_shard_counts_only_its_own_leases",)),
    mutant("limits-live-unsharded", SHARDS_SQL, "claim_budget",
           "coalesce(j.limit_shard::integer, (j.id % 8)::integer)", "j.limit_shard::integer",
           (LIMITS + "test_leases_claimed_before_the_limit_count",)),
    mutant("limits-live-folded", SHARDS_SQL, "claim_budget",
           "AND ((coalesce(j.limit_shard::integer, (j.id % 8)::integer) % l.shards)\n"
           "                   + l.shards) % l.shards = i",
           "AND coalesce(j.limit_shard::integer, (j.id % 8)::integer) = i",
           (LIMITS + "test_a_limit_changed_to_fewer_shards_counts_every_lease",)),
    mutant("limits-cap-share-remainder", SHARDS_SQL, "claim_budget",
           "v_share := v_cap / l.shards + CASE WHEN i < v_cap % l.shards THEN 1 ELSE 0 END;",
           "v_share := v_cap / l.shards;",
           (LIMITS + "test_a_claim_takes_its_budget_from_several_shards",)),
    mutant("limits-next-shard", SHARDS_SQL, "claim_budget",
           "        EXIT WHEN budget >= want;", "        EXIT WHEN budget > 0 OR k > 0;",
           (LIMITS + "test_a_claim_takes_its_budget_from_several_shards",)),
    mutant("limits-skip-locked", SHARDS_SQL, "claim_budget",
           "WHERE q.queue = queue_name AND q.shard = i FOR UPDATE SKIP LOCKED;",
           "WHERE q.queue = queue_name AND q.shard = i FOR UPDATE;",
           (ROOM + "test_the_counted_path_skips_the_shards_other_claims_hold",)),
    mutant("limits-wait-when-all-held", SHARDS_SQL, "claim_budget",
           "            EXIT WHEN v_read;", "            EXIT;",
           (LIMITS + "test_a_claim_waits_for_a_shard_only_when_every_shard_is_held",)),
    mutant("limits-pause-wins", SHARDS_SQL, "claim_budget",
           "IF EXISTS (SELECT FROM queue_state AS p WHERE p.queue = queue_name) THEN",
           "IF false THEN", (LIMITS + "test_pause_wins_over_limits",)),
    mutant("limits-refill", SHARDS_SQL, "claim_budget",
           "s.tokens + v_rate * v_part * greatest(", "s.tokens + 0 * greatest(",
           (LIMITS + "test_the_bucket_refills_at_the_rate",)),
    mutant("limits-burst", SHARDS_SQL, "claim_budget",
           "v_tokens := least(v_burst * v_part, s.tokens",
           "v_tokens := greatest(v_burst * v_part, s.tokens",
           (LIMITS + "test_the_bucket_holds_at_most_its_burst",)),
    mutant("limits-whole-tokens", SHARDS_SQL, "claim_budget",
           "IF floor(v_tokens) < got THEN\n                    got := floor(v_tokens)::integer;",
           "IF ceil(v_tokens) < got THEN\n                    got := ceil(v_tokens)::integer;",
           (RATE_SPENT,)),
    mutant("limits-spend", SHARDS_SQL, "claim_budget",
           "SET tokens = v_tokens - got, tokens_at = t", "SET tokens = v_tokens, tokens_at = t",
           (RATE_SPENT,)),
    mutant("limits-next-token", SHARDS_SQL, "claim_budget",
           "wait := CASE WHEN next_token IS NOT NULL AND NOT cap_cut THEN next_token ELSE 0 END;",
           "wait := 0;", (RATE_SPENT,)),
    mutant("limits-bucket-share", SHARDS_SQL, "claim_budget",
           "CASE WHEN i < v_whole % v_active THEN 1 ELSE 0 END", "0", (SHARED,)),
    mutant("limits-ramp-cap-claim", SHARDS_SQL, "claim_budget",
           "ceil(l.concurrency * f)", "ceil(l.concurrency * 1.0)",
           (LIMITS + "test_ramp_starts_at_the_floor_and_resumes",)),
    mutant("limits-give-back", ROOM_SQL, "claim_settle",
           "SET tokens = CASE WHEN q.fill IS NOT NULL THEN q.tokens + r.n ELSE q.tokens END",
           "SET tokens = q.tokens",
           (LIMITS + "test_tokens_a_claim_did_not_use_go_back",)),
    mutant("limits-throttled-count", ROOM_SQL, "claim_settle",
           "SET throttled = q.throttled + 1", "SET throttled = q.throttled", (CAP_CUT,)),
    mutant("limits-cut-only-when-used-up", ROOM_SQL, "claim_settle",
           "cut boolean := used >= budget AND budget < wanted;",
           "cut boolean := budget < wanted;",
           (LIMITS + "test_a_claim_short_of_jobs_is_not_throttled",)),
    mutant("limits-ramp-cap", LIMITS_SQL, "queue_limit_now",
           "ceil(l.concurrency * f)", "ceil(l.concurrency * 1.0)",
           (LIMITS + "test_ramp_starts_at_the_floor_and_resumes",)),
    mutant("limits-claim-budget", "jobs.sql", "jobs_complete_and_claim",
           "LIMIT (SELECT budget FROM budget)", "LIMIT %(limit)s", (CAP_CUT,)),
    mutant("limits-claim-shard", "jobs.sql", "jobs_complete_and_claim",
           "THEN t.shard ELSE j.limit_shard END", "THEN NULL ELSE j.limit_shard END",
           (LIMITS + "test_a_claim_skips_the_shards_other_claims_hold",)),
    mutant("limits-settle-when-short", "jobs.sql", "jobs_complete_and_claim",
           "WHERE b.settle AND (u.used < b.budget OR b.budget < %(limit)s)",
           "WHERE b.settle AND (b.budget < %(limit)s)",
           (LIMITS + "test_tokens_a_claim_did_not_use_go_back",)),
    mutant("limits-takeover-budget", "jobs.sql", "jobs_claim_expired",
           "LIMIT (SELECT budget FROM budget)", "LIMIT %(limit)s",
           (LIMITS + "test_claim_expired_is_capped_too",)),
    mutant("limits-takeover-shard", "jobs.sql", "jobs_claim_expired",
           "limit_shard = p.shard,", "limit_shard = NULL,",
           (LIMITS + "test_claim_expired_is_capped_too",)),
    mutant("limits-heartbeat-lapsed", "jobs.sql", "jobs_heartbeat",
           "  AND (j.lease_until >= clock_timestamp()\n", "  AND (true\n", (NOT_RENEWED,)),
    mutant("limits-heartbeat-live", "jobs.sql", "jobs_heartbeat",
           "  AND (j.lease_until >= clock_timestamp()\n", "  AND (false\n", (NOT_RENEWED,)),
    mutant("limits-heartbeat-uncapped", "jobs.sql", "jobs_heartbeat",
           "       OR NOT EXISTS (SELECT FROM {schema}.queue_limits AS l\n",
           "       OR false AND NOT EXISTS (SELECT FROM {schema}.queue_limits AS l\n",
           (NOT_RENEWED,)),
    mutant("limits-heartbeat-queue", "jobs.sql", "jobs_heartbeat",
           "WHERE l.queue = j.queue AND l.concurrency", "WHERE l.concurrency", (NOT_RENEWED,)),
    mutant("limits-heartbeat-cap", "jobs.sql", "jobs_heartbeat",
           " AND l.concurrency IS NOT NULL))", "))", (NOT_RENEWED,)),
    mutant("limits-claim-by-id-budget", "jobs.sql", "job_claim_by_id",
           "\n      AND (SELECT budget FROM budget) > 0", "",
           (LIMITS + "test_claim_by_id_honours_the_cap",)),
    mutant("room-hint", ROOM_SQL, "claim_budget",
           "AND (s.share IS NULL OR s.live_hint + wanted <= s.share)",
           "AND (s.share IS NULL OR true)", (CAP_CUT, ROOM_SHARE)),
    mutant("room-hint-adds", ROOM_SQL, "claim_budget",
           "            live_hint = s.live_hint + wanted\n",
           "            live_hint = s.live_hint\n", (ROOM_FIRST, ROOM_SHARE)),
    mutant("room-tokens", ROOM_SQL, "claim_budget",
           "          AND (s.fill IS NULL\n               OR least(",
           "          AND (true\n               OR least(",
           (LIMITS + "test_the_bucket_refills_at_the_rate",)),
    mutant("room-spend", ROOM_SQL, "claim_budget",
           "                               - wanted\n", "                               - 0\n",
           (ROOM + "test_a_claim_by_the_hint_spends_its_shards_bucket",)),
    mutant("room-burst", ROOM_SQL, "claim_budget",
           "ELSE least(s.room, s.tokens", "ELSE greatest(s.room, s.tokens",
           (ROOM_BURST,)),
    mutant("room-refill", ROOM_SQL, "claim_budget",
           "OR least(s.room, s.tokens + s.fill * greatest(",
           "OR least(s.room, s.tokens + 0 * greatest(", (RATE_SPENT,),
           equivalent="a bucket the one-statement path finds short without its refill is "
           "refilled and spent by claim_budget_counted: the same budget, the same tokens"),
    mutant("room-refill-spent", ROOM_SQL, "claim_budget",
           "ELSE least(s.room, s.tokens + s.fill * greatest(",
           "ELSE least(s.room, s.tokens + 0 * greatest(", (ROOM_BURST,)),
    mutant("room-ramp", ROOM_SQL, "claim_budget",
           "\n          AND s.fast_from <= clock_timestamp()", "", (ROOM_RAMP_RATE,)),
    mutant("room-skip-locked", ROOM_SQL, "claim_budget",
           "FOR UPDATE SKIP LOCKED)\n          AND s.fast_from",
           "FOR UPDATE)\n          AND s.fast_from",
           (LIMITS + "test_a_claim_skips_the_shards_other_claims_hold",)),
    mutant("room-next-skip-locked", ROOM_SQL, "claim_budget",
           "            LIMIT 1\n            FOR UPDATE SKIP LOCKED;",
           "            LIMIT 1\n            FOR UPDATE;",
           (LIMITS + "test_a_claim_skips_the_shards_other_claims_hold",)),
    mutant("room-next-by-hint", ROOM_SQL, "claim_budget",
           "            CONTINUE WHEN k <> i;\n", "", (ROOM_NEXT,)),
    mutant("room-next-shard", ROOM_SQL, "claim_budget",
           "AND q.shard >= coalesce(k, CASE", "AND q.shard >= coalesce(NULL, CASE", (ROOM_NEXT,)),
    mutant("room-count-live", ROOM_SQL, "claim_budget",
           "SELECT count(*)::integer AS live", "SELECT 0 AS live", (ROOM_SHARE,)),
    mutant("room-count-own-shard", ROOM_SQL, "claim_budget",
           "\n                        + l.shards) % l.shards = k",
           "\n                        + l.shards) >= 0", (ROOM_FIRST,)),
    mutant("room-count-lease", ROOM_SQL, "claim_budget",
           "\n                   AND j.lease_until >= now()", "", (ROOM_FIRST,)),
    mutant("room-count-completing", ROOM_SQL, "claim_budget",
           "\n                   AND NOT (j.id = ANY (coalesce(done_ids, '{}'))",
           "\n                   AND NOT (false", (ROOM_REFILL,)),
    mutant("room-count-room", ROOM_SQL, "claim_budget",
           "\n          AND n.live + wanted <= s.share;", ";", (ROOM_SHARE,),
           equivalent="a count without room for the budget writes the hint it counted (a "
           "bound no looser than the one it replaces) and claim_budget_counted decides"),
    mutant("room-count-ramp", ROOM_SQL, "claim_budget",
           "AND l.queue = queue_name AND s.fast_from <= clock_timestamp()",
           "AND l.queue = queue_name", (ROOM_RAMP,)),
    mutant("room-counted-adds", ROOM_SQL, "claim_budget",
           "UPDATE queue_limit_shards AS s SET live_hint = s.live_hint + r.n",
           "UPDATE queue_limit_shards AS s SET live_hint = s.live_hint",
           (ROOM + "test_what_the_counted_path_takes_counts_in_the_hint",)),
    mutant("room-give-back", ROOM_SQL, "claim_settle",
           "live_hint = q.live_hint - r.n", "live_hint = q.live_hint",
           (ROOM + "test_leases_a_claim_did_not_take_leave_the_hint",)),
    mutant("room-reshard-hint", ROOM_SQL, "queue_limit_reshard",
           "tokens_at = excluded.tokens_at, live_hint = NULL,", "tokens_at = excluded.tokens_at,",
           (ROOM + "test_a_limit_laid_out_anew_writes_each_shards_terms_and_forgets_the_hints",)),
    mutant("room-reshard-share", ROOM_SQL, "queue_limit_reshard",
           "\n        share = excluded.share,", "\n       ",
           (ROOM + "test_a_limit_laid_out_anew_writes_each_shards_terms_and_forgets_the_hints",)),
    mutant("room-terms-unused-shard", ROOM_SQL, "queue_limit_shard_terms",
           "CASE WHEN shard < shards THEN coalesce(ramp_until, '-infinity') ELSE 'infinity' END",
           "coalesce(ramp_until, '-infinity')",
           (ROOM + "test_a_shard_the_limit_does_not_use_decides_nothing_alone",)),
)  # fmt: skip


# Schedules (migration 19): each slot enqueued once (schedule_enqueue's guard), and the
# watcher's due query.
SCHEDULES_SQL = "migrations/019_schedules.sql"
SCHEDULES = "tests/integration/test_schedules.py::"

MUTANTS += (
    mutant("schedule-slot-key", SCHEDULES_SQL, "schedule_enqueue",
           "CONTINUE WHEN NOT FOUND;", "",
           (SCHEDULES + "test_a_slot_with_a_row_is_never_enqueued_again",)),
    mutant("schedule-next-slot", SCHEDULES_SQL, "schedule_enqueue",
           "CONTINUE WHEN v_slot < s.next_slot;", "",
           (SCHEDULES + "test_a_slot_before_the_next_slot_is_not_enqueued",)),
    mutant("schedule-next-slot-forward", SCHEDULES_SQL, "schedule_enqueue",
           "next_slot = greatest(q.next_slot, new_next)", "next_slot = new_next",
           (SCHEDULES + "test_a_slot_before_the_next_slot_is_not_enqueued",)),
    mutant("schedule-version", SCHEDULES_SQL, "schedule_enqueue",
           " OR s.updated_at <> version", "",
           (SCHEDULES + "test_a_schedule_changed_since_its_pass_read_it_enqueues_nothing",)),
    mutant("schedule-paused", SCHEDULES_SQL, "schedule_enqueue",
           " OR s.paused_at IS NOT NULL", "",
           (SCHEDULES + "test_a_schedule_paused_since_its_pass_read_it_enqueues_nothing",)),
    mutant("schedule-due-paused", "schedules.sql", "schedules_due",
           "WHERE s.paused_at IS NULL AND ", "WHERE ",
           (SCHEDULES + "test_a_paused_schedule_is_not_due_and_resumes_from_now",)),
    mutant("schedule-due-now", "schedules.sql", "schedules_due",
           " AND s.next_slot <= now()", "",
           (SCHEDULES + "test_a_schedule_not_yet_due_is_not_read",)),
)  # fmt: skip


# Pruning the schedules' slots (migration 25): a row goes only behind its schedule's next_slot
# (the fence that keeps a pruned slot from being enqueued again) and past the retention.
SLOTS_PRUNE_SQL = "migrations/025_schedule_slots_prune.sql"
SLOTS_PRUNE = "tests/integration/test_schedule_slots_prune.py::"
FENCE_BACK = "test_schedule_put_refuses_a_first_slot_that_would_move_the_fence_back"

MUTANTS += (
    mutant("slots-prune-fence", SLOTS_PRUNE_SQL, "schedule_slots_prune",
           " AND t.slot < s.next_slot", "",
           (SLOTS_PRUNE + "test_a_slot_at_or_after_next_slot_is_kept_however_old",)),
    mutant("slots-prune-keep", SLOTS_PRUNE_SQL, "schedule_slots_prune",
           "WHERE t.slot < cutoff AND ", "WHERE ",
           (SLOTS_PRUNE + "test_old_slots_behind_next_slot_are_pruned_and_recent_ones_kept",)),
    mutant("slots-prune-min-keep", SLOTS_PRUNE_SQL, "schedule_slots_prune",
           "keep < interval '1 day'", "keep < interval '0'",
           (SLOTS_PRUNE + "test_the_database_refuses_less_than_a_day_of_slots",)),
    mutant("slots-prune-skip-locked", SLOTS_PRUNE_SQL, "schedule_slots_prune",
           "FOR UPDATE OF t SKIP LOCKED", "FOR UPDATE OF t",
           (SLOTS_PRUNE + "test_a_locked_slot_row_is_skipped_not_waited_for",)),
    mutant("slots-put-first-slot", SLOTS_PRUNE_SQL, "schedule_put",
           "first_slot IS NULL OR first_slot < statement_timestamp() - interval '1 day'",
           "first_slot IS NULL",
           (SLOTS_PRUNE + FENCE_BACK,)),
)  # fmt: skip


class StaleMutant(Exception):
    """The mutant's text is not where the list says it is: the SQL changed under the list."""


def scope(source: str, statement: str) -> tuple[int, int]:
    """The span of ``statement`` in ``source``: its named block; in a migration, the definition
    of the function of that name, to the end of its body; else the whole file."""
    blocks = list(_BLOCK.finditer(source))
    for i, block in enumerate(blocks):
        if block.group(1) == statement:
            end = blocks[i + 1].start() if i + 1 < len(blocks) else len(source)
            return block.start(), end
    if blocks:
        raise StaleMutant(f"no block named {statement}")
    for function in _FUNCTION.finditer(source):
        if function.group(1) == statement:
            end = source.find(_BODY_END, function.end())
            if end < 0:
                raise StaleMutant(f"function {statement} has no end of body ({_BODY_END!r})")
            return function.start(), end
    return 0, len(source)


def apply(m: Mutant, source: str) -> str:
    """The file's text with the mutant's edits made, each found exactly once in its scope."""
    for text, replacement in m.edits:
        try:
            start, end = scope(source, m.statement)
        except StaleMutant as exc:
            raise StaleMutant(f"{m.name}: {m.file}: {exc}") from None
        found = source.count(text, start, end)
        if found != 1:
            where = "its block" if (start, end) != (0, len(source)) else "the file"
            raise StaleMutant(f"{m.name}: {text!r} found {found} times in {where}, not once")
        at = source.index(text, start, end)
        source = source[:at] + replacement + source[at + len(text) :]
    return source


def source_of(m: Mutant) -> str:
    path = ROOT / QUERIES / m.file
    if not path.is_file():
        raise StaleMutant(f"{m.name}: no file {path.relative_to(ROOT)}")
    return path.read_text()


@dataclass
class Outcome:
    mutant: Mutant
    result: str  # killed / survived / equivalent / stale / error
    seconds: float = 0.0
    detail: str = ""
    ok: bool = field(default=False)


def _sandbox(base: Path) -> Path:
    """A copy of the package, the tests and bench/ (the plan tests use its EXPLAIN helpers), and
    pyproject.toml (the pytest configuration)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis")
    for name in ("leasectl", "tests", "bench"):
        shutil.copytree(ROOT / name, base / name, ignore=ignore)
    shutil.copy2(ROOT / "pyproject.toml", base / "pyproject.toml")
    return base


def _env(sandbox: Path, dsn: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(sandbox), *filter(None, [env.get("PYTHONPATH")])])
    env["LEASECTL_TEST_DSN"] = dsn
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _check_import(sandbox: Path, dsn: str) -> None:
    """Subprocesses must import the sandbox's leasectl, not the installed one."""
    out = subprocess.run(
        [sys.executable, "-c", "import leasectl; print(leasectl.__file__)"],
        env=_env(sandbox, dsn),
        cwd=tempfile.gettempdir(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not Path(out).resolve().is_relative_to(sandbox.resolve()):
        raise SystemExit(f"mutation: the sandbox's leasectl is not imported first ({out})")


# Plugins the selected tests do not need, and that cost each run seconds of imports (the
# hypothesis plugin only reports; the model test imports hypothesis itself).
_PLUGINS_OFF = (
    *("-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:textual-snapshot"),
    *("-p", "no:xdist"),
)


# --full: a mutant's tests run whatever their tier (tests/conftest.py).
_PYTEST = (sys.executable, "-m", "pytest", "-x", "-q", "--no-header", "--full")

_running: set[subprocess.Popen[str]] = set()  # stopped when the run is interrupted
_stopping = threading.Event()


def _pytest(sandbox: Path, dsn: str, tests: Sequence[str]) -> tuple[int, str, float]:
    started = time.monotonic()
    if _stopping.is_set():
        return 130, "interrupted", 0.0
    proc = subprocess.Popen(
        [*_PYTEST, *_PLUGINS_OFF, *tests],
        cwd=sandbox,
        env=_env(sandbox, dsn),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    _running.add(proc)
    try:
        output, _ = proc.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
        output += "\ntimed out after 900 s"
    finally:
        _running.discard(proc)
    return proc.returncode, output, time.monotonic() - started


def _interrupted(signum: int, frame: object) -> None:
    """SIGTERM or Ctrl+C: interrupt the running tests as Ctrl+C would (pytest then runs its
    teardown, which drops the test databases) and start no more."""
    _stopping.set()
    for proc in list(_running):
        proc.send_signal(signal.SIGINT)


def run_one(m: Mutant, sandbox: Path, dsn: str, tests: Sequence[str] | None) -> Outcome:
    path = sandbox / QUERIES / m.file
    try:
        original = source_of(m)
        mutated = apply(m, original)
    except StaleMutant as exc:
        return Outcome(m, "stale", detail=str(exc))
    path.write_text(mutated)
    try:
        code, output, seconds = _pytest(sandbox, dsn, tests or m.tests)
    finally:
        path.write_text(original)
    if code == 0:
        if m.equivalent:
            return Outcome(m, "equivalent", seconds, ok=True)
        return Outcome(m, "SURVIVED", seconds, detail="no selected test failed")
    if code != 1:
        return Outcome(m, "error", seconds, detail=f"pytest exit {code}: {_tail(output)}")
    if any(marker in output for marker in _INVALID_SQL):
        return Outcome(m, "error", seconds, detail="the mutated SQL is invalid: " + _tail(output))
    if m.equivalent:
        return Outcome(m, "KILLED", seconds, detail="listed as equivalent but killed: review")
    return Outcome(m, "killed", seconds, detail=_first_failure(output), ok=True)


def _first_failure(output: str) -> str:
    """The test that killed the mutant (pytest's summary line, without the file)."""
    for line in output.splitlines():
        if line.startswith("FAILED "):
            return line.removeprefix("FAILED ").split(" - ")[0].rpartition("::")[2]
    return ""


def _tail(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    return " | ".join(lines[-3:])[:300]


@contextlib.contextmanager
def database() -> Iterator[str]:
    given = os.environ.get("LEASECTL_TEST_DSN")
    if given:
        yield given
        return
    from leasectl.db.embedded import EmbeddedServer
    from leasectl.db.embedded.auth import write_passfile
    from tests.util import SUPERUSER_PASSWORD, scratch_parent

    server = EmbeddedServer.temporary(parent=scratch_parent())
    write_passfile(server.passfile, SUPERUSER_PASSWORD)  # as tests/conftest.py's server
    server.start()
    try:
        yield server.dsn()
    finally:
        server.stop(remove=True)


def table(outcomes: Sequence[Outcome]) -> str:
    rows = [("mutant", "file", "statement", "result", "seconds", "killed by")]
    rows += [
        (
            o.mutant.name,
            o.mutant.file,
            o.mutant.statement,
            o.result,
            f"{o.seconds:.1f}",
            o.detail if o.result == "killed" else "",
        )
        for o in outcomes
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |"
             for r in rows]  # fmt: skip
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.mutation", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "-k",
        dest="select",
        action="append",
        help="only mutants whose name contains this (repeatable)",
    )
    parser.add_argument(
        "--tests", nargs="+", help="run these tests for every mutant instead of its own"
    )
    parser.add_argument("--jobs", "-j", type=int, default=1, help="mutants run at a time")
    parser.add_argument(
        "--list", action="store_true", help="check the list against the SQL; run nothing"
    )
    args = parser.parse_args(argv)

    mutants = [m for m in MUTANTS if not args.select or any(k in m.name for k in args.select)]
    names = [m.name for m in MUTANTS]
    if len(set(names)) != len(names):
        raise SystemExit("mutation: two mutants have the same name")
    stale = []
    for m in mutants:
        try:
            apply(m, source_of(m))
        except StaleMutant as exc:
            stale.append(str(exc))
    if args.list:
        for m in mutants:
            print(
                f"{m.name:40} {m.file}:{m.statement}" + ("  (equivalent)" if m.equivalent else "")
            )
        print("\n".join(f"STALE {s}" for s in stale) or f"{len(mutants)} mutants, all found")
        return 1 if stale else 0

    started = time.monotonic()
    with database() as dsn, tempfile.TemporaryDirectory(prefix="leasectl-mutants-") as tmp:
        jobs = max(1, min(args.jobs, len(mutants)))
        sandboxes = [_sandbox(Path(tmp) / f"slot{i}") for i in range(jobs)]
        _check_import(sandboxes[0], dsn)
        everything = sorted({t for m in mutants for t in (args.tests or m.tests)})
        code, output, seconds = _pytest(sandboxes[0], dsn, everything)
        if code != 0:
            print(f"mutation: the unmutated code fails the selected tests:\n{output[-3000:]}")
            return 1
        print(f"unmutated: {len(everything)} test selections pass ({seconds:.1f} s)", flush=True)
        free = list(sandboxes)

        def task(m: Mutant) -> Outcome:
            sandbox = free.pop()
            try:
                outcome = run_one(m, sandbox, dsn, args.tests)
            finally:
                free.append(sandbox)
            print(f"  {m.name}: {outcome.result} ({outcome.seconds:.1f} s)", flush=True)
            return outcome

        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _interrupted)
        with ThreadPoolExecutor(jobs) as pool:
            outcomes = list(pool.map(task, mutants))
        if _stopping.is_set():
            print("mutation: interrupted")
            return 130
    print()
    print(table(outcomes))
    bad = [o for o in outcomes if not o.ok]
    killed = sum(o.result == "killed" for o in outcomes)
    equivalent = sum(o.result == "equivalent" for o in outcomes)
    print(
        f"\n{len(outcomes)} mutants: {killed} killed, {equivalent} equivalent (reviewed), "
        f"{len(bad)} failing the run; {time.monotonic() - started:.0f} s"
    )
    for o in bad:
        print(f"FAIL {o.mutant.name}: {o.result}: {o.detail}")
    reviewed = [m for m in mutants if m.equivalent]
    if reviewed:
        print("\nEquivalent (reviewed by hand): " + ", ".join(m.name for m in reviewed))
        for reason in dict.fromkeys(m.equivalent for m in reviewed):
            print(f"  {reason}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
