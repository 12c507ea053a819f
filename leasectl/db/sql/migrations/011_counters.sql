-- Counters for the exporter (`leasectl metrics`'s *_total series), kept by the database itself,
-- so that every path that ends an attempt or writes an audit row counts (worker, watcher,
-- operator functions, CLI, console, a hand-written statement) and every exporter reads the same
-- values. {schema} is the quoted schema name; as in migration 6, the bodies name no schema.
--
-- Statement-level AFTER triggers with transition tables append one row per (counter, action,
-- queue) per statement to counter_deltas: an INSERT into a heap without an index, which no other
-- transaction waits for. A single row per counter, updated by every completing worker, would
-- hold its row lock until the commit's flush and so serialise every completion behind the one
-- before it. counters_fold moves deltas into counter_totals (a delta is deleted once, so two
-- folds at once never count it twice, and it is added to its total in the same statement); the
-- exporter reads totals plus the deltas not folded yet in one snapshot. The counters are not
-- derived from the history tables, so prune, retention and delete never lower them.

CREATE TABLE {schema}.counter_totals (
    counter text NOT NULL,
    action  text NOT NULL DEFAULT '',
    queue   text NOT NULL,
    value   bigint NOT NULL CHECK (value >= 0),
    PRIMARY KEY (counter, action, queue)
);

-- No index and no key: the trigger's INSERT is the cheapest write there is; counters_fold finds
-- rows by their ctid. Vacuumed every few thousand folded rows, not at a fraction of the table.
CREATE TABLE {schema}.counter_deltas (
    counter text NOT NULL,
    action  text NOT NULL DEFAULT '',
    queue   text NOT NULL,
    delta   bigint NOT NULL CHECK (delta > 0)
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
        autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 5000);

-- Attempts that ended: `completed`, `failed` (retried or final) and `retried` (a failed attempt
-- whose job went back to Pending), per queue. What counts is the change: the statement's new
-- rows minus its old rows, so that an attempt updated again after it ended (old and new both
-- `completed`) is not counted twice; a net change that is not an increase adds nothing. The job
-- is read by primary key after the statement (its status then says whether the failure was
-- retried): a subquery per row (OFFSET 0 keeps it one, so no plan ever reads the jobs table
-- whole, whatever its statistics), and no JIT (a trigger's statement is small).
CREATE FUNCTION {schema}.counters_from_attempts() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, {schema}, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
BEGIN
    INSERT INTO counter_deltas (counter, action, queue, delta)
    SELECT k.counter, '', j.queue, sum(c.sign)
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

CREATE TRIGGER counters_from_attempts AFTER UPDATE ON {schema}.job_attempts
    REFERENCING OLD TABLE AS old_attempts NEW TABLE AS new_attempts
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.counters_from_attempts();

-- Audit rows by action: `watcher` (jobs_requeue_expired: requeue, mark_stuck, fail) and
-- `operator` (requeue, requeue_forced, mark_stuck, mark_stuck_forced, cancel, delete). The
-- watcher and the operator both write `requeue` and `mark_stuck`; the watcher's rows are the
-- ones whose `after` holds both lease_until and run_at (the function writes that document; no
-- operator action's does). The queue: the job's, or a deleted job's from its `before`.
CREATE FUNCTION {schema}.counters_from_job_events() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, {schema}, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
BEGIN
    INSERT INTO counter_deltas (counter, action, queue, delta)
    SELECT s.counter, e.action, coalesce(e.before ->> 'queue', j.queue, ''), count(*)
    FROM new_events AS e
    LEFT JOIN LATERAL (SELECT queue FROM jobs WHERE id = e.job_id OFFSET 0) AS j ON true
    CROSS JOIN LATERAL (
        SELECT CASE
            WHEN e.action IN ('requeue', 'mark_stuck', 'fail')
                 AND e.after ? 'lease_until' AND e.after ? 'run_at' THEN 'watcher'
            WHEN e.action IN ('requeue', 'requeue_forced', 'mark_stuck', 'mark_stuck_forced',
                              'cancel', 'delete') THEN 'operator'
        END AS counter
    ) AS s
    WHERE s.counter IS NOT NULL
    GROUP BY s.counter, e.action, 3;
    RETURN NULL;
END
$$;

CREATE TRIGGER counters_from_job_events AFTER INSERT ON {schema}.job_events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.counters_from_job_events();

-- Pauses and resumes, per queue: operator actions too.
CREATE FUNCTION {schema}.counters_from_queue_events() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp AS $$
BEGIN
    INSERT INTO counter_deltas (counter, action, queue, delta)
    SELECT 'operator', e.action, e.queue, count(*)
    FROM new_events AS e
    WHERE e.action IN ('pause', 'resume')
    GROUP BY e.action, e.queue;
    RETURN NULL;
END
$$;

CREATE TRIGGER counters_from_queue_events AFTER INSERT ON {schema}.queue_events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.counters_from_queue_events();

-- Move up to max_rows deltas into the totals, in one statement; returns how many it moved.
-- A delta is deleted once: a second fold at the same time waits for the first's row locks and
-- then skips the rows it deleted. Totals are updated in key order, so two folds never deadlock.
CREATE FUNCTION {schema}.counters_fold(max_rows integer) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp AS $$
WITH moved AS (
    DELETE FROM counter_deltas
    WHERE ctid = ANY (ARRAY(SELECT ctid FROM counter_deltas LIMIT max_rows))
    RETURNING counter, action, queue, delta
), added AS (
    INSERT INTO counter_totals AS t (counter, action, queue, value)
    SELECT counter, action, queue, sum(delta)
    FROM moved
    GROUP BY counter, action, queue
    ORDER BY counter, action, queue
    ON CONFLICT (counter, action, queue) DO UPDATE SET value = t.value + excluded.value
)
SELECT count(*) FROM moved;
$$;

REVOKE ALL ON FUNCTION {schema}.counters_fold FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.counters_from_attempts FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.counters_from_job_events FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.counters_from_queue_events FROM PUBLIC;

-- Roles granted by an older leasectl that read the audit (viewers, operators: the exporter's
-- roles) read the counters and fold them after this upgrade, with no second `leasectl grant`.
CREATE FUNCTION pg_temp.leasectl_carry_grants() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    role_name text;
BEGIN
    FOR role_name IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = 'job_events'::regclass AND a.privilege_type = 'SELECT'
          AND a.grantee NOT IN (0, c.relowner)
    LOOP
        EXECUTE format('GRANT SELECT ON counter_totals, counter_deltas TO %s', role_name);
        EXECUTE format('GRANT EXECUTE ON FUNCTION counters_fold TO %s', role_name);
    END LOOP;
END
$$;
SELECT pg_temp.leasectl_carry_grants();
DROP FUNCTION pg_temp.leasectl_carry_grants();
