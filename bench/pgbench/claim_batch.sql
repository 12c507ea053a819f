-- The leased pattern in raw SQL, 50 jobs per transaction: claim up to 50 Pending jobs in one
-- statement (FOR UPDATE SKIP LOCKED), then complete all of them, fenced, in one statement.
WITH p AS (
    SELECT id FROM leasectl.jobs
    WHERE status = 'Pending' AND queue = 'default' AND run_at <= now()
    ORDER BY priority, run_at, id
    LIMIT 50
    FOR UPDATE SKIP LOCKED
), c AS (
    UPDATE leasectl.jobs AS j
    SET status = 'Processing', lease_owner = 'pgbench', lease_until = now() + interval '30 s',
        heartbeat_at = now(), attempts = j.attempts + 1, updated_at = now()
    FROM p
    WHERE j.id = p.id
    RETURNING j.id, j.attempts
)
SELECT coalesce(array_agg(id), '{}') AS ids, coalesce(array_agg(attempts), '{}') AS attempts
FROM c \gset
UPDATE leasectl.jobs AS j
SET status = 'Completed', finished_at = now(), updated_at = now(), lease_until = NULL
FROM unnest(:ids::bigint[], :attempts::integer[]) AS f(id, attempt)
WHERE j.id = f.id AND j.attempts = f.attempt AND j.lease_owner = 'pgbench'
  AND j.status = 'Processing';
