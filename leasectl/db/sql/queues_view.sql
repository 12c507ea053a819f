-- The console's Queues view (`Q`) and its queue screen: run with the scrape's statements
-- (metrics.sql: each queue's Pending, Stuck and leases) and the history's (stats.sql), in one
-- read-only REPEATABLE READ transaction under the console's settings and statement timeout
-- (db/queues_view.py). These read the per-minute history (migration 20) of every queue over a
-- window, as stats_counts and stats_backlog read it for one: queue_history and queue_backlog by
-- their minute index (a window's minutes of every queue, whatever the history kept before it),
-- plus the deltas no fold has moved yet (a heap without an index, as small as the last fold left
-- it). Minutes are UTC minutes, from date_trunc('minute', now() - %(since)s, 'UTC') on.

-- name: queues_view_minutes
-- Per queue with history in the window: its minutes in arrays, each minute as its offset from the window's first (0 on). Rows of counts, kind history (folded) and deltas (not folded yet; a minute's counts are the two added): jobs enqueued, completed and failed for good; rows of kind backlog, of the minutes from now() - %(sampled_since)s on (those the trend compares): the due Pending jobs the fold counted (capped_at: the minutes counted to the cap, a lower bound; estimated_at: the planner's estimate past the cap). At most %(row_limit)s minutes of each, the newest first (a cut drops the oldest; in the minute it cuts, any queue's).
-- A row per queue, not per queue and minute, and minutes as integers: a Python object per
-- queue, no timestamp to load (BENCHMARKS.md, "This round's costs"). A queue_history row is
-- its (queue, minute)'s only one (the primary key): no grouping by minute but the deltas'. The
-- arrays of one row are aggregated from the same rows in one order: their elements match.
-- (The minute index walked backward, no sort; ordered by queue first, the walk would be the
-- primary key's, whole: every minute kept.)
SELECT h.queue, 'history' AS kind, array_agg(h.at) AS at, array_agg(h.enqueued) AS enqueued,
       array_agg(h.completed) AS completed, array_agg(h.failed) AS failed,
       NULL::bigint[] AS pending, NULL::integer[] AS capped_at, NULL::integer[] AS estimated_at
FROM (
    SELECT h.queue, h.enqueued, h.completed, h.failed,
           (date_part('epoch', h.minute - date_trunc('minute', now() - %(since)s::interval, 'UTC'))
            / 60)::integer AS at
    FROM {schema}.queue_history AS h
    WHERE h.minute >= date_trunc('minute', now() - %(since)s::interval, 'UTC')
      AND h.enqueued + h.completed + h.failed > 0
    ORDER BY h.minute DESC
    LIMIT %(row_limit)s
) AS h
GROUP BY h.queue
UNION ALL
SELECT d.queue, 'deltas', array_agg(d.at), array_agg(d.enqueued), array_agg(d.completed),
       array_agg(d.failed), NULL, NULL, NULL
FROM (
    SELECT d.queue,
           (date_part('epoch', d.minute - date_trunc('minute', now() - %(since)s::interval, 'UTC'))
            / 60)::integer AS at,
           coalesce(sum(d.delta) FILTER (WHERE d.counter = 'enqueued'), 0)::bigint AS enqueued,
           coalesce(sum(d.delta) FILTER (WHERE d.counter = 'completed'), 0)::bigint AS completed,
           coalesce(sum(d.delta) FILTER (WHERE d.counter = 'failed'), 0)::bigint AS failed
    FROM {schema}.queue_history_deltas AS d
    WHERE d.counter IN ('enqueued', 'completed', 'failed')
      AND d.minute >= date_trunc('minute', now() - %(since)s::interval, 'UTC')
    GROUP BY d.queue, d.minute
    ORDER BY d.minute DESC
    LIMIT %(row_limit)s
) AS d
GROUP BY d.queue
UNION ALL
SELECT b.queue, 'backlog', array_agg(b.at), NULL, NULL, NULL, array_agg(b.pending),
       array_agg(b.at) FILTER (WHERE b.capped), array_agg(b.at) FILTER (WHERE b.estimated)
FROM (
    SELECT b.queue, b.pending, b.capped, b.estimated,
           (date_part('epoch', b.minute - date_trunc('minute', now() - %(since)s::interval, 'UTC'))
            / 60)::integer AS at
    FROM {schema}.queue_backlog AS b
    WHERE b.minute >= date_trunc('minute', now() - %(sampled_since)s::interval, 'UTC')
    ORDER BY b.minute DESC
    LIMIT %(row_limit)s
) AS b
GROUP BY b.queue;

-- name: queues_view_paused
-- One queue's pause (queue_state's primary key), if it is paused: when, by whom, why (cut to 200 characters).
SELECT queue, paused_at, paused_by, left(reason, 200) AS reason
FROM {schema}.queue_state
WHERE queue = %(queue)s::text;
