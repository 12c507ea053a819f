-- Per-minute, per-queue history (`leasectl stats`, the exporter's pickup latency), kept by the
-- database as migration 11 keeps the counters: statement-level AFTER triggers with transition
-- tables append to a heap without an index (queue_history_deltas), and the fold that moves the
-- counters' deltas (the exporter every second, `watch` after each pass) moves these into
-- queue_history, one row per (queue, minute). No round trip and no hot row is added to a worker's
-- statement: its claim's INSERT of attempts and its completion's UPDATE of them each append a few
-- rows to the unindexed heap. Readers add the deltas not folded yet (as the exporter does).
-- {schema} is the quoted schema name; as in migration 6, the bodies name no schema.
--
-- Minutes are UTC minutes (date_trunc's third argument): the session's time zone never moves
-- a bucket. What each column counts:
--   enqueued   jobs inserted (by created_at's minute; a duplicate of a unique key inserts none);
--   started    attempts opened (claims and takeovers, by started_at's minute);
--   completed, failed, retried   as the counters count them (migration 11), by the minute of
--              the statement that ended the attempt;
--   pickup     a histogram of pickup latency over the minute's started attempts: started_at
--              minus when the job became due, greatest(created_at, run_at), in milliseconds,
--              in history_bucket's log-scale buckets (element b + 1 counts bucket b);
--   pending    (queue_backlog) the due Pending jobs of each queue, sampled by the first fold of
--              a minute, counted to a cap (capped: a lower bound); queue_backlog_minutes holds
--              the minutes sampled, so that a queue without a sample in one of them had none.

CREATE TABLE {schema}.queue_history (
    queue     text NOT NULL,
    minute    timestamptz NOT NULL,
    enqueued  bigint NOT NULL DEFAULT 0 CHECK (enqueued >= 0),
    started   bigint NOT NULL DEFAULT 0 CHECK (started >= 0),
    completed bigint NOT NULL DEFAULT 0 CHECK (completed >= 0),
    failed    bigint NOT NULL DEFAULT 0 CHECK (failed >= 0),
    retried   bigint NOT NULL DEFAULT 0 CHECK (retried >= 0),
    pickup    bigint[],
    PRIMARY KEY (queue, minute)
);
-- Every queue's minutes (stats without --queue, the exporter, prune).
CREATE INDEX queue_history_minute_idx ON {schema}.queue_history (minute);

-- No index and no key: the triggers' INSERT is the cheapest write there is (migration 11).
-- `counter`: enqueued, completed, failed, retried, or pickup (one started attempt in `bucket`).
CREATE TABLE {schema}.queue_history_deltas (
    queue   text NOT NULL,
    minute  timestamptz NOT NULL,
    counter text NOT NULL,
    bucket  smallint NOT NULL DEFAULT 0,
    delta   bigint NOT NULL CHECK (delta > 0)
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
        autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 5000);

CREATE TABLE {schema}.queue_backlog (
    queue   text NOT NULL,
    minute  timestamptz NOT NULL,
    pending bigint NOT NULL CHECK (pending >= 0),
    capped  boolean NOT NULL,
    PRIMARY KEY (queue, minute)
);
CREATE INDEX queue_backlog_minute_idx ON {schema}.queue_backlog (minute);

CREATE TABLE {schema}.queue_backlog_minutes (
    minute  timestamptz PRIMARY KEY
);

-- The pickup latency's bucket: 0 below 1 ms, then b for [2^((b-1)/2), 2^(b/2)) ms (a factor of
-- sqrt 2 a bucket), 63 from 2^31 ms (about 25 days) on. leasectl/core/history.py reads them.
CREATE FUNCTION {schema}.history_bucket(ms float8) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN ms IS NULL OR ms < 1 THEN 0
            ELSE least(63, 1 + floor(2 * ln(ms) / ln(2)))::smallint END;

-- Two histograms added element by element (either may be NULL or shorter).
CREATE FUNCTION {schema}.history_add(a bigint[], b bigint[]) RETURNS bigint[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN a IS NULL THEN b WHEN b IS NULL THEN a
            ELSE ARRAY(SELECT coalesce(a[i], 0) + coalesce(b[i], 0)
                       FROM generate_series(1, greatest(cardinality(a), cardinality(b))) AS i
                       ORDER BY i) END;

-- Jobs inserted, per queue and minute of created_at: one row per statement and queue.
CREATE FUNCTION {schema}.history_from_jobs() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, {schema}, pg_temp
SET jit = off
AS $$
BEGIN
    INSERT INTO queue_history_deltas (queue, minute, counter, delta)
    SELECT j.queue, date_trunc('minute', j.created_at, 'UTC'), 'enqueued', count(*)
    FROM new_jobs AS j
    GROUP BY 1, 2;
    RETURN NULL;
END
$$;

CREATE TRIGGER history_from_jobs AFTER INSERT ON {schema}.jobs
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.history_from_jobs();

-- Attempts opened (a claim's, a takeover's, a claim by id): per queue, minute and pickup bucket.
-- The job is read by primary key (its queue, created_at, run_at: the claim does not change
-- run_at), as counters_from_attempts reads it.
CREATE FUNCTION {schema}.history_from_attempts_opened() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, {schema}, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
BEGIN
    INSERT INTO queue_history_deltas (queue, minute, counter, bucket, delta)
    SELECT j.queue, date_trunc('minute', s.started_at, 'UTC'), 'pickup',
           history_bucket(extract(epoch FROM s.started_at - greatest(j.created_at, j.run_at))
                          * 1000),
           count(*)
    FROM (SELECT job_id, coalesce(started_at, now()) AS started_at FROM new_attempts) AS s
    CROSS JOIN LATERAL (
        SELECT queue, created_at, run_at FROM jobs WHERE id = s.job_id OFFSET 0) AS j
    GROUP BY 1, 2, 4;
    RETURN NULL;
END
$$;

CREATE TRIGGER history_from_attempts_opened AFTER INSERT ON {schema}.job_attempts
    REFERENCING NEW TABLE AS new_attempts
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.history_from_attempts_opened();

-- Migration 11's counters_from_attempts, whose counts now go to the history as well (by the
-- minute of the statement that ended the attempt): one read of each job, one trigger, for both.
CREATE OR REPLACE FUNCTION {schema}.counters_from_attempts() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, {schema}, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
BEGIN
    WITH net AS (
        SELECT k.counter, j.queue, sum(c.sign) AS delta
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
        HAVING sum(c.sign) > 0
    ), counted AS (
        INSERT INTO counter_deltas (counter, action, queue, delta)
        SELECT counter, '', queue, delta FROM net
    )
    INSERT INTO queue_history_deltas (queue, minute, counter, delta)
    SELECT queue, date_trunc('minute', statement_timestamp(), 'UTC'), counter, delta FROM net;
    RETURN NULL;
END
$$;

-- Move up to max_rows deltas into queue_history, as counters_fold (migration 16) moves the
-- counters': never waiting for another transaction's row locks (a key another fold holds is
-- left to a later fold; no value changes either way, since readers add unfolded deltas), key
-- order, a delta locked before it is deleted (added once). Then, once a minute (the first fold
-- that makes the minute's queue_backlog_minutes row), the due Pending jobs of each queue that
-- has Pending jobs (at most queue_limit queues, a loose index scan of jobs_claimable_idx), each
-- counted to greatest(cap_floor, budget / queues) entries of the index (capped: that many or more).
-- Returns how many deltas moved.
CREATE FUNCTION {schema}.history_fold(max_rows integer, queue_limit integer, budget bigint,
                                      cap_floor bigint) RETURNS bigint
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
    WITH keys AS MATERIALIZED (
        SELECT h.queue, h.minute
        FROM queue_history AS h
        WHERE (h.queue, h.minute) IN (
            SELECT queue, minute FROM queue_history_deltas LIMIT max_rows)
        ORDER BY h.queue, h.minute
        FOR UPDATE SKIP LOCKED
    ), taken AS (
        DELETE FROM queue_history_deltas
        WHERE ctid = ANY (ARRAY(
            SELECT d.ctid
            FROM queue_history_deltas AS d
            WHERE (d.queue, d.minute) IN (SELECT queue, minute FROM keys)
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

-- Delete up to max_rows rows of history (each table) older than `keep`; returns how many.
CREATE FUNCTION {schema}.history_prune(keep interval, max_rows integer) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, {schema}, pg_temp
SET lock_timeout = '100ms'
AS $$
DECLARE
    cutoff timestamptz := statement_timestamp() - keep;
    n bigint;
    total bigint := 0;
BEGIN
    IF keep IS NULL OR keep < interval '1 minute' THEN
        RAISE EXCEPTION 'history is kept for at least a minute, not %', keep
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    DELETE FROM queue_history WHERE ctid = ANY (ARRAY(
        SELECT ctid FROM queue_history WHERE minute < cutoff ORDER BY minute LIMIT max_rows
        FOR UPDATE SKIP LOCKED));
    GET DIAGNOSTICS n = ROW_COUNT;
    total := total + n;
    DELETE FROM queue_backlog WHERE ctid = ANY (ARRAY(
        SELECT ctid FROM queue_backlog WHERE minute < cutoff ORDER BY minute LIMIT max_rows
        FOR UPDATE SKIP LOCKED));
    GET DIAGNOSTICS n = ROW_COUNT;
    total := total + n;
    DELETE FROM queue_backlog_minutes WHERE ctid = ANY (ARRAY(
        SELECT ctid FROM queue_backlog_minutes WHERE minute < cutoff ORDER BY minute
        LIMIT max_rows FOR UPDATE SKIP LOCKED));
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN total + n;
END
$$;

REVOKE ALL ON FUNCTION {schema}.history_from_jobs FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.history_from_attempts_opened FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.history_fold FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.history_prune FROM PUBLIC;

-- Roles an older leasectl granted: those that read the counters read the history; those that
-- fold the counters (operators) fold and prune it, with no second `leasectl grant`.
CREATE FUNCTION pg_temp.leasectl_carry_grants() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    role_name text;
BEGIN
    FOR role_name IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = 'counter_totals'::regclass AND a.privilege_type = 'SELECT'
          AND a.grantee NOT IN (0, c.relowner)
    LOOP
        EXECUTE format('GRANT SELECT ON queue_history, queue_history_deltas, queue_backlog, '
                       'queue_backlog_minutes TO %s', role_name);
    END LOOP;
    FOR role_name IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_proc p, aclexplode(p.proacl) a
        WHERE p.oid = 'counters_fold(integer)'::regprocedure AND a.privilege_type = 'EXECUTE'
          AND a.grantee NOT IN (0, p.proowner)
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION history_fold, history_prune TO %s', role_name);
    END LOOP;
END
$$;
SELECT pg_temp.leasectl_carry_grants();
DROP FUNCTION pg_temp.leasectl_carry_grants();
