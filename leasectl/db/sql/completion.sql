-- Shell completion (`leasectl --install-completion`): names to offer at a TAB, read in a few
-- milliseconds whatever the size of the tables, on a connection of their own.

-- name: completion_settings
-- The completion transaction's statement_timeout (%(timeout_ms)s), so that a TAB never hangs on
-- a sick server.
SELECT set_config('statement_timeout', %(timeout_ms)s::text, true);

-- name: queues_complete
-- Queue names starting with %(prefix)s, at most %(limit)s: those of live jobs (Pending,
-- Processing, Stuck) and those the %(workers)s most recently seen workers serve. Each set of
-- live jobs is read as a skip scan of its partial index (one index probe per distinct queue,
-- at most %(scan)s of them), never row by row: a queue of a million Pending jobs costs one
-- probe. The prefix filters after the scan: under a linguistic collation the names that start
-- with a prefix need not sort together. Finished jobs' queues are not offered (no index leads
-- with their queue).
WITH RECURSIVE pending(queue, n) AS (
    (SELECT queue, 1 FROM {schema}.jobs WHERE status = 'Pending' ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM {schema}.jobs AS j
            WHERE j.status = 'Pending' AND j.queue > p.queue ORDER BY j.queue LIMIT 1), p.n + 1
    FROM pending AS p
    WHERE p.queue IS NOT NULL AND p.n < %(scan)s
), processing(queue, n) AS (
    (SELECT queue, 1 FROM {schema}.jobs WHERE status = 'Processing' ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM {schema}.jobs AS j
            WHERE j.status = 'Processing' AND j.queue > p.queue ORDER BY j.queue LIMIT 1),
           p.n + 1
    FROM processing AS p
    WHERE p.queue IS NOT NULL AND p.n < %(scan)s
), stuck(queue, n) AS (
    (SELECT queue, 1 FROM {schema}.jobs WHERE status = 'Stuck' ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM {schema}.jobs AS j
            WHERE j.status = 'Stuck' AND j.queue > p.queue ORDER BY j.queue LIMIT 1), p.n + 1
    FROM stuck AS p
    WHERE p.queue IS NOT NULL AND p.n < %(scan)s
), served AS (
    -- (A workers row from before migration 15 may list any number of names of any length:
    -- only names a queue may have, among its first 1000.)
    SELECT q.queue
    FROM (SELECT queues FROM {schema}.workers ORDER BY last_seen_at DESC LIMIT %(workers)s) AS w
    CROSS JOIN LATERAL unnest(w.queues[1:1000]) AS q(queue)
    WHERE char_length(q.queue) <= 200
)
SELECT DISTINCT queue
FROM (
    SELECT queue FROM pending
    UNION ALL SELECT queue FROM processing
    UNION ALL SELECT queue FROM stuck
    UNION ALL SELECT queue FROM served
) AS names
WHERE queue IS NOT NULL AND starts_with(queue, %(prefix)s::text)
ORDER BY queue
LIMIT %(limit)s;
