-- name: jobs_requeue_expired
-- One watcher batch (the function of migration 6, given an owner filter by migration 9):
-- expired leases (of one queue, of one lease owner, when given) -> Pending, Failed or Stuck.
-- The function runs with the schema owner's rights and its own planner settings (index paths,
-- one plan per session); it writes each moved job's audit row. `detail`: a row per moved job,
-- else a row per new status with its count (n).
SELECT * FROM {schema}.jobs_requeue_expired(
    %(limit)s::integer, %(queue)s::text, %(mark)s::boolean, %(actor)s::text, %(reason)s::text,
    %(detail)s::boolean, %(owner)s::text
);

-- name: jobs_expired_list
-- What a watcher pass would move, without locking or changing anything (`--dry-run`).
SELECT id, queue, status::text AS status, attempts, max_attempts, lease_owner, lease_until,
       heartbeat_at
FROM {schema}.jobs
WHERE status = 'Processing' AND lease_until < now()
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(owner)s::text IS NULL OR lease_owner = %(owner)s::text)
ORDER BY lease_until, id
LIMIT %(limit)s;

-- name: jobs_keys_heal
-- The watcher's healing pass (migration 18's function): up to `max_keys` keys with Waiting jobs, after the key (`after_queue`, `after_key`); a key left without a head gets its first Waiting job promoted. Rows: the promoted jobs, then the last key looked at (promoted NULL; NULL queue: the walk reached the end).
SELECT queue, concurrency_key, promoted
FROM {schema}.jobs_keys_heal(%(max_keys)s::integer, %(after_queue)s::text, %(after_key)s::text);
