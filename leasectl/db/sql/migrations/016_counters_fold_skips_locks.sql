-- The counters (migration 11) against roles that would freeze or inflate them.
-- {schema} is the quoted schema name; as in migration 6, the bodies name no schema.
--
-- 1. counters_fold never waits for another transaction's row locks. Migration 11's fold waited
-- for the deltas and totals another fold had locked: a role that ran it in a transaction it left
-- open froze every later fold, and with it the exporter's scrapes and the watcher's pass. Now a
-- fold takes only the totals rows and deltas nobody holds (SKIP LOCKED) and leaves the rest to a
-- later fold; no value changes either way, since a scrape reads totals plus unfolded deltas. The
-- one wait left, a key's first totals row inserted by a fold still open, is bounded by the
-- function's lock_timeout and skipped. Totals rows are locked in key order and only with SKIP
-- LOCKED, so two folds never deadlock; a delta is locked before it is deleted, so it is added once.
CREATE OR REPLACE FUNCTION {schema}.counters_fold(max_rows integer) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, {schema}, pg_temp
SET lock_timeout = '100ms'
AS $$
DECLARE
    k record;
    moved bigint;
BEGIN
    -- A key's first fold makes its totals row (0) first, each in a subtransaction of its own.
    FOR k IN
        SELECT DISTINCT d.counter, d.action, d.queue
        FROM (SELECT counter, action, queue FROM counter_deltas LIMIT max_rows) AS d
        WHERE NOT EXISTS (
            SELECT FROM counter_totals AS t
            WHERE t.counter = d.counter AND t.action = d.action AND t.queue = d.queue)
        ORDER BY d.counter, d.action, d.queue
    LOOP
        BEGIN
            INSERT INTO counter_totals (counter, action, queue, value)
            VALUES (k.counter, k.action, k.queue, 0)
            ON CONFLICT (counter, action, queue) DO NOTHING;
        EXCEPTION WHEN lock_not_available THEN
            NULL;  -- another fold, still open, inserts it: its deltas wait for a later fold
        END;
    END LOOP;
    WITH keys AS MATERIALIZED (
        SELECT t.counter, t.action, t.queue
        FROM counter_totals AS t
        WHERE (t.counter, t.action, t.queue) IN (
            SELECT counter, action, queue FROM counter_deltas LIMIT max_rows)
        ORDER BY t.counter, t.action, t.queue
        FOR UPDATE SKIP LOCKED
    ), taken AS (
        DELETE FROM counter_deltas
        WHERE ctid = ANY (ARRAY(
            SELECT d.ctid
            FROM counter_deltas AS d
            WHERE (d.counter, d.action, d.queue) IN (SELECT counter, action, queue FROM keys)
            LIMIT max_rows
            FOR UPDATE OF d SKIP LOCKED))
        RETURNING counter, action, queue, delta
    ), added AS (
        UPDATE counter_totals AS t
        SET value = t.value + s.delta
        FROM (SELECT counter, action, queue, sum(delta) AS delta
              FROM taken GROUP BY counter, action, queue) AS s
        WHERE t.counter = s.counter AND t.action = s.action AND t.queue = s.queue
    )
    SELECT count(*) INTO moved FROM taken;
    RETURN moved;
END
$$;

REVOKE ALL ON FUNCTION {schema}.counters_fold FROM PUBLIC;

-- 2. Only roles that fold may run the fold: operators (`watch` folds after each pass) and the
-- owner. A viewer may no longer (the exporter run as a viewer reads totals plus deltas and
-- leaves folding to `watch`), so a read-only role takes no lock the writers need. The roles
-- migration 11 carried EXECUTE to, or `leasectl grant --viewer` granted it to, lose it unless
-- they may run the watcher's batch (an operator).
CREATE FUNCTION pg_temp.leasectl_revoke_fold() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    role_name text;
BEGIN
    FOR role_name IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_proc p, aclexplode(p.proacl) a
        WHERE p.oid = 'counters_fold(integer)'::regprocedure AND a.privilege_type = 'EXECUTE'
          AND a.grantee NOT IN (0, p.proowner)
          AND NOT has_function_privilege(a.grantee, 'jobs_requeue_expired'::regproc, 'EXECUTE')
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION counters_fold FROM %s', role_name);
    END LOOP;
END
$$;
SELECT pg_temp.leasectl_revoke_fold();
DROP FUNCTION pg_temp.leasectl_revoke_fold();

-- 3. An attempt's outcome, once ended, does not change. The attempts trigger counts the change of
-- a statement (new rows minus old rows), so a role that may write outcome (a worker) could count
-- one attempt again and again by flipping it (completed -> failed -> completed, or back to
-- running and on to completed). No leasectl statement ends an attempt that has ended; the WHEN
-- clause is evaluated per updated row without a function call, so the hot path pays a
-- comparison. (What a worker can still do: open attempts and end them, as a handler's claim does.
-- Each attempt it ends counts once.)
CREATE FUNCTION {schema}.attempt_outcome_is_final() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, {schema}, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'attempt % of job % ended %: its outcome does not change',
        OLD.attempt, OLD.job_id, OLD.outcome
        USING ERRCODE = 'check_violation';
END
$$;

REVOKE ALL ON FUNCTION {schema}.attempt_outcome_is_final FROM PUBLIC;

CREATE TRIGGER attempt_outcome_is_final BEFORE UPDATE OF outcome ON {schema}.job_attempts
    FOR EACH ROW
    WHEN (OLD.outcome <> 'running' AND NEW.outcome IS DISTINCT FROM OLD.outcome)
    EXECUTE FUNCTION {schema}.attempt_outcome_is_final();
