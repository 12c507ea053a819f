-- Bounds on what a producer may put in a job, so that nothing it inserts can stop the readers
-- or kill a worker. {schema} is the quoted schema name.
--
-- * run_at is finite and inside the years Python's datetime holds, with a day to spare at each
--   end (a time zone's offset moves a moment across midnight): 'infinity', '-infinity',
--   20000-01-01 or 4713 BC made every read of the row fail (status, inspect, the console, the
--   worker that claimed it).
-- * max_attempts is at most 1000 (documented in the README; enqueue refuses more).
-- * A queue name is at most 200 characters: far below the size a btree entry of the indexes
--   that lead with queue may have (about 2,700 bytes; 800 at 4 bytes a character), where an
--   insert fails with an obscure "index row size" error instead.
--
-- These are the columns a producer writes (grant_producer); the other timestamps are written
-- by the server's now() (workers, the watcher) or by an owner's hand, and the readers tolerate
-- any value there (store._configure). Bounding them too would cost every statement that changes
-- jobs: each one prepares every CHECK expression anew (see jobs_complete_and_claim); with all six
-- timestamps bounded that was 13 to 18 µs of server CPU per single-row UPDATE, with these 4 µs
-- (A/B on one backend: 20,000 single-row UPDATEs in a DO loop, its CPU time, medians of 8).
--
-- Existing rows outside these bounds are fixed before the constraint is added: run_at is
-- clamped to the nearest bound ('-infinity' becomes 0001-01-02, 'infinity' 9999-12-30), a
-- max_attempts above 1000 becomes 1000, a queue name is cut to its first 200 characters (no
-- worker could name the longer one: the command line refuses it). Each fixed job gets an audit
-- event (actor 'leasectl init', action 'bounded') with those values before and after.
WITH outside AS (
    SELECT id, status, queue, run_at, max_attempts
    FROM {schema}.jobs
    WHERE char_length(queue) > 200 OR max_attempts > 1000
       OR NOT (run_at BETWEEN '0001-01-02 00:00+00' AND '9999-12-30 00:00+00')
    FOR UPDATE
), fixed AS (
    UPDATE {schema}.jobs AS j
    SET queue = left(j.queue, 200),
        max_attempts = least(j.max_attempts, 1000),
        run_at = least(greatest(j.run_at, '0001-01-02 00:00+00'), '9999-12-30 00:00+00')
    FROM outside AS o
    WHERE j.id = o.id
    RETURNING j.id, j.status, j.queue, j.run_at, j.max_attempts
)
INSERT INTO {schema}.job_events (job_id, actor, action, reason, before, after)
SELECT f.id, 'leasectl init', 'bounded',
       'values outside the bounds of schema version 5 (run_at within the years 1 to 9999, '
       || 'max_attempts <= 1000, queue names <= 200 characters) clamped',
       to_jsonb(o) - 'id', to_jsonb(f) - 'id'
FROM fixed AS f JOIN outside AS o ON o.id = f.id;

-- One constraint, not one per column: fewer expressions to prepare per statement.
ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_bounded_values CHECK (
    char_length(queue) <= 200
    AND max_attempts <= 1000
    AND run_at BETWEEN '0001-01-02 00:00+00' AND '9999-12-30 00:00+00'
);
