-- name: jobs_prune
-- Delete one batch of finished (Completed, Failed, Cancelled) jobs older than the cutoff, oldest first (their attempts go too).
WITH doomed AS (
    SELECT id FROM {schema}.jobs
    WHERE status IN ('Completed', 'Failed', 'Cancelled') AND finished_at < now() - %(older_than)s
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
    ORDER BY finished_at
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM {schema}.jobs AS j USING doomed AS d WHERE j.id = d.id RETURNING j.id
), events AS (
    DELETE FROM {schema}.job_events AS e USING deleted AS d
    WHERE NOT %(keep_events)s AND e.job_id = d.id
    RETURNING e.id
)
SELECT (SELECT count(*) FROM deleted) AS jobs, (SELECT count(*) FROM events) AS events;

-- name: jobs_prune_count
-- How many finished jobs a prune would delete (for --dry-run; reads the finished_at index).
SELECT count(*) AS jobs FROM {schema}.jobs
WHERE status IN ('Completed', 'Failed', 'Cancelled') AND finished_at < now() - %(older_than)s
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text);
