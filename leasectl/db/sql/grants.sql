-- Least-privilege grants for `leasectl grant`. {schema} and {role} are rendered as quoted
-- identifiers (psycopg.sql.Identifier); nothing else is ever spliced in. No block grants
-- DELETE, TRUNCATE, REFERENCES, TRIGGER or ownership: no role made here can drop or empty a table.
-- Each block may run again on a role granted by an older leasectl: it takes back what that
-- version granted and this one does not.

-- name: grant_viewer
-- Read-only: status, stats, inspect, requeue-stuck --dry-run, the console in read-only mode and
-- the exporter. Not counters_fold (migration 16): a read-only role takes no lock a writer needs; the
-- exporter run as a viewer reads totals plus deltas and leaves folding to `watch`.
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT ON {schema}.jobs, {schema}.job_attempts, {schema}.job_events, {schema}.workers,
    {schema}.schema_migrations, {schema}.queue_state, {schema}.queue_events,
    {schema}.counter_totals, {schema}.counter_deltas, {schema}.queue_limits,
    {schema}.schedules, {schema}.schedule_slots, {schema}.schedule_events,
    {schema}.queue_history, {schema}.queue_history_deltas, {schema}.queue_backlog,
    {schema}.queue_backlog_minutes, {schema}.queue_limit_shards TO {role};
GRANT EXECUTE ON FUNCTION {schema}.queue_limit_now, {schema}.queue_limit_ramp TO {role};

-- name: grant_operator
-- Viewer plus the audited operations (requeue, mark-stuck, requeue-stuck, watch, pause, resume,
-- limit, cancel, delete, schedule: migration 19's functions, `watch` enqueues their slots), the
-- counters' and the history's fold (`watch` folds after each pass) and the history's prune
-- (`watch`, `prune`).
-- The guarded actions and the watcher's batch (migration 6), pause and resume (migration 7) are
-- functions that run with the owner's rights and write the audit row of every change; an
-- operator changes no table itself.
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT ON {schema}.jobs, {schema}.job_attempts, {schema}.job_events, {schema}.workers,
    {schema}.schema_migrations, {schema}.queue_state, {schema}.queue_events,
    {schema}.counter_totals, {schema}.counter_deltas, {schema}.queue_limits,
    {schema}.schedules, {schema}.schedule_slots, {schema}.schedule_events,
    {schema}.queue_history, {schema}.queue_history_deltas, {schema}.queue_backlog,
    {schema}.queue_backlog_minutes, {schema}.queue_limit_shards TO {role};
GRANT EXECUTE ON FUNCTION {schema}.queue_limit_now, {schema}.queue_limit_ramp TO {role};
-- Taken back: what operators were granted before, which let them change any column of any job,
-- and write audit rows, directly. (A table-wide REVOKE also takes the column privileges of a
-- role that is a worker too: `leasectl grant` runs --worker after --operator in one command.)
REVOKE UPDATE ON {schema}.jobs FROM {role};
REVOKE UPDATE ON {schema}.job_attempts FROM {role};
REVOKE INSERT ON {schema}.job_events FROM {role};
GRANT EXECUTE ON FUNCTION {schema}.jobs_operator_requeue, {schema}.jobs_operator_mark_stuck,
    {schema}.jobs_requeue_expired, {schema}.queue_pause, {schema}.queue_resume,
    {schema}.jobs_operator_cancel, {schema}.jobs_operator_delete, {schema}.counters_fold,
    {schema}.jobs_keys_heal, {schema}.history_fold, {schema}.history_prune,
    {schema}.queue_limit_set, {schema}.queue_limit_clear, {schema}.queue_ramp,
    {schema}.schedule_put, {schema}.schedule_remove, {schema}.schedule_pause,
    {schema}.schedule_resume, {schema}.schedule_run, {schema}.schedule_enqueue,
    {schema}.schedule_slots_prune TO {role};

-- name: grant_worker
-- What `leasectl worker` needs: claim, heartbeat, complete, fail, release, its workers row.
-- (queue_state: every claim looks whether its queue is paused. claim_budget, claim_settle: every
-- claim asks its queue's budget and settles it (migrations 17, 24) and writes the shard of the
-- limit each lease is claimed under (limit_shard); no UPDATE on queue_limits or its shards, so
-- no worker can lock a queue's limit but through them.)
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT ON {schema}.jobs, {schema}.job_attempts, {schema}.workers,
    {schema}.schema_migrations, {schema}.queue_state, {schema}.queue_limits,
    {schema}.queue_limit_shards TO {role};
GRANT EXECUTE ON FUNCTION {schema}.queue_limit_now, {schema}.queue_limit_ramp TO {role};
-- (snoozes, max_attempts: a snooze, job_snooze; progress, progress_message: heartbeats carry
-- it, migration 21; progress_attempt: the attempt it is of, migration 32.)
GRANT UPDATE (status, lease_owner, lease_until, heartbeat_at, attempts, run_at, finished_at,
    last_error, updated_at, snoozes, max_attempts, progress, progress_message, limit_shard,
    progress_attempt)
    ON {schema}.jobs TO {role};
-- (queue, error_kind: a failure's, job_fail; migration 29.)
-- (queue, due_at: each claim's, for the history's pickup when the attempt ends; migration 31.)
GRANT INSERT (job_id, attempt, lease_owner, started_at, heartbeat_at, queue, due_at),
    UPDATE (outcome, ended_at, heartbeat_at, error, error_detail, queue, error_kind)
    ON {schema}.job_attempts TO {role};
GRANT INSERT (worker_id, hostname, pid, queues, lease_ttl, heartbeat_every, started_at,
    last_seen_at), UPDATE (last_seen_at, stopped_at, queues, lease_ttl, heartbeat_every)
    ON {schema}.workers TO {role};
GRANT EXECUTE ON FUNCTION {schema}.claim_budget, {schema}.claim_settle TO {role};

-- name: grant_producer
-- What `leasectl enqueue` (an application adding jobs) needs: insert jobs and read their ids.
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT ON {schema}.schema_migrations TO {role};
-- (trace_context: the enqueuing span's, migration 28.)
GRANT INSERT (queue, payload, priority, run_at, max_attempts, unique_key, concurrency_key,
    timeout, trace_context),
    SELECT (id, queue, unique_key, status) ON {schema}.jobs TO {role};

-- name: roles_existing
-- Which of the named roles exist (a grant to a missing role fails with a clearer message).
SELECT rolname FROM pg_catalog.pg_roles WHERE rolname = ANY(%(roles)s::text[]);
