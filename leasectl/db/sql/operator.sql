-- The operator's guarded actions. Their statements are functions of migration 6
-- (006_audited_operations.sql), run with the schema owner's rights: an operator role may
-- execute them but change no table itself, and each change has its job_events row, with the
-- database role that made it. Every caller, the owner too, goes through them.

-- name: jobs_operator_requeue
-- Operator requeue, guarded by the state the operator saw (status, attempts, lease_owner), with a new priority and N more attempts when given (migration 26); ids moved.
SELECT id FROM {schema}.jobs_operator_requeue(
    %(ids)s::bigint[], %(statuses)s::text[], %(attempts)s::integer[], %(owners)s::text[],
    %(force)s::boolean, %(actor)s::text, %(reason)s::text, %(priority)s::integer,
    %(more_attempts)s::integer
);

-- name: jobs_operator_cancel
-- Operator cancel (-> Cancelled) of Pending, Stuck or Processing jobs (the lease revoked), guarded like requeue (migration 10).
SELECT id FROM {schema}.jobs_operator_cancel(
    %(ids)s::bigint[], %(statuses)s::text[], %(attempts)s::integer[], %(owners)s::text[],
    %(force)s::boolean, %(actor)s::text, %(reason)s::text
);

-- name: jobs_operator_delete
-- Operator delete of Completed, Failed, Cancelled or Stuck jobs (events kept), guarded like requeue (migration 10).
SELECT id FROM {schema}.jobs_operator_delete(
    %(ids)s::bigint[], %(statuses)s::text[], %(attempts)s::integer[], %(owners)s::text[],
    %(force)s::boolean, %(actor)s::text, %(reason)s::text
);

-- name: jobs_operator_mark_stuck
-- Operator quarantine (-> Stuck) of Pending or expired Processing jobs, guarded like requeue.
SELECT id FROM {schema}.jobs_operator_mark_stuck(
    %(ids)s::bigint[], %(statuses)s::text[], %(attempts)s::integer[], %(owners)s::text[],
    %(force)s::boolean, %(actor)s::text, %(reason)s::text
);
