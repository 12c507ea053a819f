-- The console's Queues view (`Q`) and its queue screen: run with the scrape's statements
-- (metrics.sql: each queue's Pending, Stuck and leases) and the history's (stats.sql), in one
-- read-only REPEATABLE READ transaction under the console's settings and statement timeout
-- (db/queues_view.py). These read the per-minute history (migration 20) of every queue over a
-- window, as stats_counts and stats_backlog read it for one: queue_history and queue_backlog by
-- their minute index (a window's minutes of every queue, whatever the history kept before it),
-- plus the deltas no fold has moved yet (a heap without an index, as small as the last fold left
-- it). Minutes are UTC minutes, from date_trunc('minute', now() - %(since)s, 'UTC') on.

-- name: queues_view_history
-- Per queue and minute of the window: jobs enqueued, completed and failed for good (folded history plus unfolded deltas), at most %(row_limit)s rows, the newest minutes first (a cut drops the oldest).
SELECT c.queue, c.minute, sum(c.enqueued)::bigint AS enqueued,
       sum(c.completed)::bigint AS completed, sum(c.failed)::bigint AS failed
FROM (
    SELECT h.queue, h.minute, h.enqueued, h.completed, h.failed
    FROM {schema}.queue_history AS h
    WHERE h.minute >= date_trunc('minute', now() - %(since)s::interval, 'UTC')
    UNION ALL
    SELECT d.queue, d.minute,
           CASE WHEN d.counter = 'enqueued' THEN d.delta ELSE 0 END,
           CASE WHEN d.counter = 'completed' THEN d.delta ELSE 0 END,
           CASE WHEN d.counter = 'failed' THEN d.delta ELSE 0 END
    FROM {schema}.queue_history_deltas AS d
    WHERE d.counter IN ('enqueued', 'completed', 'failed')
      AND d.minute >= date_trunc('minute', now() - %(since)s::interval, 'UTC')
) AS c
GROUP BY c.queue, c.minute
HAVING sum(c.enqueued) + sum(c.completed) + sum(c.failed) > 0
ORDER BY c.minute DESC, c.queue
LIMIT %(row_limit)s;

-- name: queues_view_backlog
-- Per queue and minute sampled in the window: its due Pending jobs as the fold counted them (capped: a lower bound; estimated: the planner's estimate past the cap), at most %(row_limit)s rows, the newest minutes first.
-- (Ordered by queue first, the walk would be the primary key's, whole: every minute kept.)
SELECT b.queue, b.minute, b.pending, b.capped, b.estimated
FROM {schema}.queue_backlog AS b
WHERE b.minute >= date_trunc('minute', now() - %(since)s::interval, 'UTC')
ORDER BY b.minute DESC, b.queue
LIMIT %(row_limit)s;

-- name: queues_view_paused
-- One queue's pause (queue_state's primary key), if it is paused: when, by whom, why (cut to 200 characters).
SELECT queue, paused_at, paused_by, left(reason, 200) AS reason
FROM {schema}.queue_state
WHERE queue = %(queue)s::text;
