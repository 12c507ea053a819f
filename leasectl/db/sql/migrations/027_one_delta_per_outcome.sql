-- One delta row per attempt outcome instead of two. Since migration 20 the completion's trigger
-- (counters_from_attempts) wrote the same completed / failed / retried counts twice, to
-- counter_deltas (the exporter's *_total series) and to queue_history_deltas (the per-minute
-- history): two INSERTs on the worker's path and, under a held xmin horizon, two row versions
-- per counting statement that no vacuum may remove. Now the trigger writes only the history's
-- delta, and history_fold, which moves it into queue_history, adds the same sums to
-- counter_totals in the same statement: a delta is deleted once, so it is added to both once.
-- Readers of the counters add the unfolded history deltas of those three counters (as they add
-- the unfolded counter_deltas), so a total is exact and never goes down; history_prune deletes
-- queue_history's minutes, never a delta nor a total, so it lowers no counter. Operator and
-- watcher actions stay in counter_deltas (counters_fold, migrations 11 and 16).
-- {schema} is the quoted schema name; as in migration 6, the bodies name no schema.
--
-- The switch must not count a delta twice nor drop one: the history's outcome deltas written
-- before it are already in counter_deltas, and a fold of the old definition must not take a
-- delta of the new trigger (it would miss its total). So, in this order (the order the writers
-- take these locks, so no deadlock): every transaction that updated attempts under the old
-- trigger ends first (SHARE on job_attempts waits for them and holds new ones back); every fold
-- in flight ends first (ACCESS EXCLUSIVE on the counters' and the history's delta tables: a
-- fold starts by reading counter_deltas, so one held back here calls history_fold, and compiles
-- its new body, only after this commits). Then the old outcome deltas move into queue_history
-- alone, as the old fold would have moved them.
LOCK TABLE {schema}.job_attempts IN SHARE MODE;
LOCK TABLE {schema}.counter_deltas, {schema}.counter_totals, {schema}.queue_history_deltas
    IN ACCESS EXCLUSIVE MODE;

WITH moved AS (
    DELETE FROM {schema}.queue_history_deltas
    WHERE counter IN ('completed', 'failed', 'retried')
    RETURNING queue, minute, counter, delta
)
INSERT INTO {schema}.queue_history AS h (queue, minute, completed, failed, retried)
SELECT queue, minute,
       coalesce(sum(delta) FILTER (WHERE counter = 'completed'), 0),
       coalesce(sum(delta) FILTER (WHERE counter = 'failed'), 0),
       coalesce(sum(delta) FILTER (WHERE counter = 'retried'), 0)
FROM moved
GROUP BY queue, minute
ON CONFLICT (queue, minute) DO UPDATE
SET completed = h.completed + excluded.completed,
    failed = h.failed + excluded.failed,
    retried = h.retried + excluded.retried;

-- Migration 20's trigger function, writing the history's delta only (the statement's minute).
CREATE OR REPLACE FUNCTION {schema}.counters_from_attempts() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, {schema}, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
BEGIN
    INSERT INTO queue_history_deltas (queue, minute, counter, delta)
    SELECT j.queue, date_trunc('minute', statement_timestamp(), 'UTC'), k.counter, sum(c.sign)
    FROM (
        SELECT job_id, outcome, 1 AS sign FROM new_attempts
        WHERE outcome IN ('completed', 'failed')
        UNION ALL
        SELECT job_id, outcome, -1 FROM old_attempts
        WHERE outcome IN ('completed', 'failed')
    ) AS c
    CROSS JOIN LATERAL (SELECT queue, status FROM jobs WHERE id = c.job_id OFFSET 0) AS j
    CROSS JOIN LATERAL (
        VALUES ('completed', c.outcome = 'completed'),
               ('failed', c.outcome = 'failed'),
               ('retried', c.outcome = 'failed' AND j.status = 'Pending')
    ) AS k(counter, hit)
    WHERE k.hit
    GROUP BY k.counter, j.queue
    HAVING sum(c.sign) > 0;
    RETURN NULL;
END
$$;

-- Migration 20's fold, which also adds the outcome deltas it moves to counter_totals. It still
-- never waits for another transaction's row locks: a delta is taken only when its minute's
-- queue_history row and, for an outcome, its counter's totals row are both locked by this fold
-- (SKIP LOCKED); the rest wait for a later fold, and no value changes meanwhile since readers
-- add the unfolded deltas. A key's first totals row (0), like its first minute's row, is made
-- first, in a subtransaction of its own.
CREATE OR REPLACE FUNCTION {schema}.history_fold(max_rows integer, queue_limit integer,
                                                 budget bigint, cap_floor bigint) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, {schema}, pg_temp
SET lock_timeout = '100ms'
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    k record;
    moved bigint;
    sampled bigint := 0;
    this_minute timestamptz := date_trunc('minute', statement_timestamp(), 'UTC');
BEGIN
    FOR k IN
        SELECT DISTINCT d.queue, d.minute
        FROM (SELECT queue, minute FROM queue_history_deltas LIMIT max_rows) AS d
        WHERE NOT EXISTS (
            SELECT FROM queue_history AS h WHERE h.queue = d.queue AND h.minute = d.minute)
        ORDER BY d.queue, d.minute
    LOOP
        BEGIN
            INSERT INTO queue_history (queue, minute) VALUES (k.queue, k.minute)
            ON CONFLICT (queue, minute) DO NOTHING;
        EXCEPTION WHEN lock_not_available THEN
            NULL;  -- another fold, still open, inserts it: its deltas wait for a later fold
        END;
    END LOOP;
    FOR k IN
        SELECT DISTINCT d.counter, d.queue
        FROM (SELECT counter, queue FROM queue_history_deltas LIMIT max_rows) AS d
        WHERE d.counter IN ('completed', 'failed', 'retried')
          AND NOT EXISTS (
            SELECT FROM counter_totals AS t
            WHERE t.counter = d.counter AND t.action = '' AND t.queue = d.queue)
        ORDER BY d.counter, d.queue
    LOOP
        BEGIN
            INSERT INTO counter_totals (counter, action, queue, value)
            VALUES (k.counter, '', k.queue, 0)
            ON CONFLICT (counter, action, queue) DO NOTHING;
        EXCEPTION WHEN lock_not_available THEN
            NULL;  -- as above
        END;
    END LOOP;
    WITH keys AS MATERIALIZED (
        SELECT h.queue, h.minute
        FROM queue_history AS h
        WHERE (h.queue, h.minute) IN (
            SELECT queue, minute FROM queue_history_deltas LIMIT max_rows)
        ORDER BY h.queue, h.minute
        FOR UPDATE SKIP LOCKED
    ), totals AS MATERIALIZED (
        SELECT t.counter, t.queue
        FROM counter_totals AS t
        WHERE t.counter IN ('completed', 'failed', 'retried') AND t.action = ''
          AND t.queue IN (SELECT queue FROM keys)
        ORDER BY t.counter, t.action, t.queue
        FOR UPDATE SKIP LOCKED
    ), taken AS (
        DELETE FROM queue_history_deltas
        WHERE ctid = ANY (ARRAY(
            SELECT d.ctid
            FROM queue_history_deltas AS d
            WHERE (d.queue, d.minute) IN (SELECT queue, minute FROM keys)
              AND (d.counter NOT IN ('completed', 'failed', 'retried')
                   OR (d.counter, d.queue) IN (SELECT counter, queue FROM totals))
            LIMIT max_rows
            FOR UPDATE OF d SKIP LOCKED))
        RETURNING queue, minute, counter, bucket, delta
    ), sums AS (
        SELECT queue, minute,
               coalesce(sum(delta) FILTER (WHERE counter = 'enqueued'), 0) AS enqueued,
               coalesce(sum(delta) FILTER (WHERE counter = 'pickup'), 0) AS started,
               coalesce(sum(delta) FILTER (WHERE counter = 'completed'), 0) AS completed,
               coalesce(sum(delta) FILTER (WHERE counter = 'failed'), 0) AS failed,
               coalesce(sum(delta) FILTER (WHERE counter = 'retried'), 0) AS retried
        FROM taken
        GROUP BY queue, minute
    ), buckets AS (
        SELECT queue, minute, bucket, sum(delta) AS n
        FROM taken
        WHERE counter = 'pickup'
        GROUP BY queue, minute, bucket
    ), hist AS (
        SELECT m.queue, m.minute, array_agg(coalesce(b.n, 0)::bigint ORDER BY g.i) AS pickup
        FROM (SELECT queue, minute, max(bucket) AS top FROM buckets GROUP BY queue, minute) AS m
        CROSS JOIN LATERAL generate_series(0, m.top) AS g(i)
        LEFT JOIN buckets AS b ON b.queue = m.queue AND b.minute = m.minute AND b.bucket = g.i
        GROUP BY m.queue, m.minute
    ), added AS (
        UPDATE queue_history AS h
        SET enqueued = h.enqueued + s.enqueued,
            started = h.started + s.started,
            completed = h.completed + s.completed,
            failed = h.failed + s.failed,
            retried = h.retried + s.retried,
            pickup = history_add(h.pickup, p.pickup)
        FROM sums AS s
        LEFT JOIN hist AS p ON p.queue = s.queue AND p.minute = s.minute
        WHERE h.queue = s.queue AND h.minute = s.minute
    ), counted AS (
        UPDATE counter_totals AS t
        SET value = t.value + o.delta
        FROM (SELECT counter, queue, sum(delta) AS delta
              FROM taken
              WHERE counter IN ('completed', 'failed', 'retried')
              GROUP BY counter, queue) AS o
        WHERE t.counter = o.counter AND t.action = '' AND t.queue = o.queue
    )
    SELECT count(*) INTO moved FROM taken;

    BEGIN
        INSERT INTO queue_backlog_minutes (minute) VALUES (this_minute)
        ON CONFLICT (minute) DO NOTHING;
        GET DIAGNOSTICS sampled = ROW_COUNT;
    EXCEPTION WHEN lock_not_available THEN
        sampled := 0;  -- another fold, still open, samples this minute
    END;
    IF sampled > 0 THEN
        INSERT INTO queue_backlog (queue, minute, pending, capped)
        WITH RECURSIVE q AS (
            (SELECT 1 AS n, queue
             FROM jobs
             WHERE status = 'Pending'
             ORDER BY queue
             LIMIT 1)
            UNION ALL
            SELECT q.n + 1, nx.queue
            FROM q
            CROSS JOIN LATERAL (
                SELECT queue
                FROM jobs
                WHERE status = 'Pending' AND queue > q.queue
                ORDER BY queue
                LIMIT 1
            ) AS nx
            WHERE q.n < queue_limit
        ), cap AS (
            SELECT greatest(cap_floor, budget / greatest(1, count(*))) AS cap FROM q
        )
        SELECT q.queue, this_minute, c.due, c.seen > cap.cap
        FROM q
        CROSS JOIN cap
        CROSS JOIN LATERAL (
            SELECT count(*) FILTER (WHERE x.run_at <= statement_timestamp()) AS due,
                   count(*) AS seen
            FROM (SELECT run_at
                  FROM jobs
                  WHERE status = 'Pending' AND queue = q.queue
                  LIMIT cap.cap + 1) AS x
        ) AS c;
    END IF;
    RETURN moved;
END
$$;

-- The history's deltas now carry every completion's count: vacuumed unthrottled after a held
-- horizon, as migration 23 does for counter_deltas.
ALTER TABLE {schema}.queue_history_deltas SET (autovacuum_vacuum_cost_delay = 0);
