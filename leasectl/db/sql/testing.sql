-- name: testing_jobs_of_queue
-- The jobs of a queue (any status) whose payload contains %(payload)s (NULL: any), oldest first, at most %(limit)s: what leasectl.testing's assertions read (a test's helper, never scheduled).
SELECT j.*
FROM {schema}.jobs AS j
WHERE j.queue = %(queue)s::text
  AND (%(payload)s::jsonb IS NULL OR j.payload @> %(payload)s::jsonb)
ORDER BY j.id
LIMIT %(limit)s::integer;

-- name: testing_schema_drop
-- Drop a schema the testing fixture made, with everything in it (run under a lock timeout: a session that still holds its tables makes it fail, not wait).
DROP SCHEMA IF EXISTS {schema} CASCADE;
