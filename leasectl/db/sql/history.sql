-- `leasectl list`: a page of jobs that match a filter, newest first, read through whatever index
-- the filter allows. Each part of the filter is bound; a part not given is NULL (or false) and
-- folds away when the statement is planned with its values (a custom plan: the history
-- settings force one), so the planner sees only the parts given. The statuses come as one
-- boolean each, so that the plan's predicate names them as constants and a partial index on
-- them (Pending, Processing, Stuck, the finished history) applies.
--
-- %(window_first)s: a window of finish times narrower than the time since its end is read whole
-- through the finished-history index and sorted (ordering by id + 0 keeps the planner from the
-- primary key): walking the ids down from the newest, which the planner prefers for a LIMIT,
-- would first pass every job finished since the window's end (it cannot know that ids follow
-- finish times), the whole history for a window a month back (db/history.py, BENCHMARKS.md).

-- name: history_settings
-- The listing transaction's settings (a custom plan per execution, the caller's statement timeout) and its now().
SELECT set_config('plan_cache_mode', 'force_custom_plan', true) AS plan_cache_mode,
       set_config('statement_timeout', %(timeout_ms)s::text, true) AS statement_timeout,
       now() AS db_now;

-- name: jobs_list
-- A page of jobs matching the filter, %(floor)s <= id < %(after)s, newest first, at most %(limit)s rows; texts cut to %(text_chars)s.
-- The page is picked first and only its rows' texts are made: a payload is cast to text only
-- when it is stored in at most %(payload_cast_bytes)s bytes (NULL text beyond: a 16 MB payload
-- takes a third of a second to cast, a page of them past any timeout), with its stored size.
SELECT j.id, j.queue, j.status, j.priority, j.attempts, j.max_attempts,
       left(j.lease_owner, %(text_chars)s::integer) AS lease_owner,
       left(j.last_error, %(text_chars)s::integer) AS last_error,
       char_length(j.last_error) AS last_error_chars,
       left(p.text, %(text_chars)s::integer) AS payload_text, char_length(p.text) AS payload_chars,
       pg_column_size(j.payload) AS payload_bytes,
       j.run_at, j.created_at, j.updated_at, j.finished_at, j.concurrency_key,
       kh.id AS key_holder
FROM (
    SELECT j.*
    FROM {schema}.jobs AS j
    WHERE (%(after)s::bigint IS NULL OR j.id < %(after)s::bigint)
      AND (%(floor)s::bigint IS NULL OR j.id >= %(floor)s::bigint)
      AND (%(any_state)s::boolean
           OR (%(pending)s::boolean AND j.status = 'Pending')
           OR (%(processing)s::boolean AND j.status = 'Processing')
           OR (%(stuck)s::boolean AND j.status = 'Stuck')
           OR (%(completed)s::boolean AND j.status = 'Completed')
           OR (%(failed)s::boolean AND j.status = 'Failed')
           OR (%(cancelled)s::boolean AND j.status = 'Cancelled')
           OR (%(waiting)s::boolean AND j.status = 'Waiting'))
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
      AND (%(owner)s::text IS NULL OR j.lease_owner = %(owner)s::text)
      AND (%(error)s::text IS NULL OR j.last_error ILIKE %(error)s::text)
      AND (%(payload)s::jsonb IS NULL OR j.payload @> %(payload)s::jsonb)
      AND (%(created_since)s::interval IS NULL OR j.created_at >= now() - %(created_since)s::interval)
      AND (%(created_until)s::interval IS NULL OR j.created_at < now() - %(created_until)s::interval)
      AND (%(finished_since)s::interval IS NULL
           OR j.finished_at >= now() - %(finished_since)s::interval)
      AND (%(finished_until)s::interval IS NULL
           OR j.finished_at < now() - %(finished_until)s::interval)
    ORDER BY CASE WHEN %(window_first)s::boolean THEN j.id + 0 ELSE j.id END DESC
    LIMIT %(limit)s::integer
) AS j
CROSS JOIN LATERAL (
    SELECT CASE WHEN pg_column_size(j.payload) <= %(payload_cast_bytes)s::integer
                THEN j.payload::text END AS text
    OFFSET 0
) AS p
-- A Waiting job's key holder: its key's head (jobs_key_head_idx, one probe per Waiting row).
LEFT JOIN LATERAL (
    SELECT h.id FROM {schema}.jobs AS h
    WHERE j.status = 'Waiting' AND h.queue = j.queue AND h.concurrency_key = j.concurrency_key
      AND h.status IN ('Pending', 'Processing', 'Stuck')
) AS kh ON true
ORDER BY j.id DESC

-- name: jobs_count
-- How many jobs match the filter of jobs_list (the same predicates), counting at most %(cap)s (NULL: all).
SELECT count(*) AS jobs
FROM (
    SELECT 1
    FROM {schema}.jobs AS j
    WHERE (%(after)s::bigint IS NULL OR j.id < %(after)s::bigint)
      AND (%(floor)s::bigint IS NULL OR j.id >= %(floor)s::bigint)
      AND (%(any_state)s::boolean
           OR (%(pending)s::boolean AND j.status = 'Pending')
           OR (%(processing)s::boolean AND j.status = 'Processing')
           OR (%(stuck)s::boolean AND j.status = 'Stuck')
           OR (%(completed)s::boolean AND j.status = 'Completed')
           OR (%(failed)s::boolean AND j.status = 'Failed')
           OR (%(cancelled)s::boolean AND j.status = 'Cancelled')
           OR (%(waiting)s::boolean AND j.status = 'Waiting'))
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
      AND (%(owner)s::text IS NULL OR j.lease_owner = %(owner)s::text)
      AND (%(error)s::text IS NULL OR j.last_error ILIKE %(error)s::text)
      AND (%(payload)s::jsonb IS NULL OR j.payload @> %(payload)s::jsonb)
      AND (%(created_since)s::interval IS NULL OR j.created_at >= now() - %(created_since)s::interval)
      AND (%(created_until)s::interval IS NULL OR j.created_at < now() - %(created_until)s::interval)
      AND (%(finished_since)s::interval IS NULL
           OR j.finished_at >= now() - %(finished_since)s::interval)
      AND (%(finished_until)s::interval IS NULL
           OR j.finished_at < now() - %(finished_until)s::interval)
    LIMIT %(cap)s::bigint
) AS matching;

-- name: jobs_id_range
-- The lowest and the highest job id (NULLs: no jobs), read from the primary key's ends.
SELECT min(id) AS low, max(id) AS high FROM {schema}.jobs;
