-- Bounds on what a job row may hold, so that nothing a producer (or an owner's hand) inserts
-- can stop the readers or kill a worker. {schema} is the quoted schema name.
--
-- * Timestamps are finite and inside the years Python's datetime holds, with a day to spare
--   at each end (a time zone's offset moves a moment across midnight): 'infinity',
--   '-infinity', 20000-01-01 or 4713 BC made every read of the row fail (status, inspect, the
--   console, the worker that claimed it).
-- * max_attempts is at most 1000 (documented in the README; enqueue refuses more).
-- * A queue name is at most 200 characters: far below the size a btree entry of the indexes
--   that lead with queue may have (about 2,700 bytes, 800 at 4 bytes a character), where an
--   insert fails with an obscure "index row size" error instead.
--
-- Existing rows outside these bounds are fixed before the constraint is added: timestamps are
-- clamped to the nearest bound ('-infinity' becomes 0001-01-02, 'infinity' 9999-12-30), a
-- max_attempts above 1000 becomes 1000, a queue name is cut to its first 200 characters (no
-- worker could name the longer one: the command line refuses it). Each fixed job gets an audit
-- event (actor 'leasectl init', action 'bounded') with its values before and after.
WITH outside AS (
    SELECT id, status, queue, run_at, created_at, updated_at, lease_until, heartbeat_at,
           finished_at, max_attempts
    FROM {schema}.jobs
    WHERE char_length(queue) > 200 OR max_attempts > 1000
       OR NOT (run_at BETWEEN '0001-01-02 00:00+00' AND '9999-12-30 00:00+00')
       OR NOT (created_at BETWEEN '0001-01-02 00:00+00' AND '9999-12-30 00:00+00')
       OR NOT (updated_at BETWEEN '0001-01-02 00:00+00' AND '9999-12-30 00:00+00')
       OR NOT coalesce(lease_until BETWEEN '0001-01-02 00:00+00' AND '9999-12-30 00:00+00', true)
       OR NOT coalesce(heartbeat_at BETWEEN '0001-01-02 00:00+00' AND '9999-12-30 00:00+00', true)
       OR NOT coalesce(finished_at BETWEEN '0001-01-02 00:00+00' AND '9999-12-30 00:00+00', true)
    FOR UPDATE
), fixed AS (
    UPDATE {schema}.jobs AS j
    SET queue = left(j.queue, 200),
        max_attempts = least(j.max_attempts, 1000),
        -- (least and greatest skip NULLs: a NULL stays NULL.)
        run_at = least(greatest(j.run_at, '0001-01-02 00:00+00'), '9999-12-30 00:00+00'),
        created_at = least(greatest(j.created_at, '0001-01-02 00:00+00'), '9999-12-30 00:00+00'),
        updated_at = least(greatest(j.updated_at, '0001-01-02 00:00+00'), '9999-12-30 00:00+00'),
        lease_until = CASE WHEN j.lease_until IS NOT NULL THEN
            least(greatest(j.lease_until, '0001-01-02 00:00+00'), '9999-12-30 00:00+00') END,
        heartbeat_at = CASE WHEN j.heartbeat_at IS NOT NULL THEN
            least(greatest(j.heartbeat_at, '0001-01-02 00:00+00'), '9999-12-30 00:00+00') END,
        finished_at = CASE WHEN j.finished_at IS NOT NULL THEN
            least(greatest(j.finished_at, '0001-01-02 00:00+00'), '9999-12-30 00:00+00') END
    FROM outside AS o
    WHERE j.id = o.id
    RETURNING j.id, j.status, j.queue, j.run_at, j.created_at, j.updated_at, j.lease_until,
              j.heartbeat_at, j.finished_at, j.max_attempts
)
INSERT INTO {schema}.job_events (job_id, actor, action, reason, before, after)
SELECT f.id, 'leasectl init', 'bounded',
       'values outside the bounds of schema version 5 (timestamps within the years 1 to 9999, '
       || 'max_attempts <= 1000, queue names <= 200 characters) clamped',
       to_jsonb(o) - 'id', to_jsonb(f) - 'id'
FROM fixed AS f JOIN outside AS o ON o.id = f.id;

-- One constraint, not one per column: each statement that changes jobs prepares every CHECK
-- constraint's expression anew (see jobs_complete_and_claim). NULLs pass a CHECK.
ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_bounded_values CHECK (
    char_length(queue) <= 200
    AND max_attempts <= 1000
    AND run_at BETWEEN '0001-01-02 00:00+00' AND '9999-12-30 00:00+00'
    AND created_at BETWEEN '0001-01-02 00:00+00' AND '9999-12-30 00:00+00'
    AND updated_at BETWEEN '0001-01-02 00:00+00' AND '9999-12-30 00:00+00'
    AND lease_until BETWEEN '0001-01-02 00:00+00' AND '9999-12-30 00:00+00'
    AND heartbeat_at BETWEEN '0001-01-02 00:00+00' AND '9999-12-30 00:00+00'
    AND finished_at BETWEEN '0001-01-02 00:00+00' AND '9999-12-30 00:00+00'
);
