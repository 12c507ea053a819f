-- Concurrency keys: at most one job at a time per (queue, concurrency_key), run in queue order
-- (priority, run_at, id), without holding up other keys and without touching the claim.
-- {schema} is the quoted schema name. The reasoning (each race and what closes it) is in
-- docs/design.md, "Concurrency keys".
--
-- The new status. Database.migrate commits this line first (a transaction cannot use an enum
-- value it added), then runs the rest of the file in a new transaction, where it is a no-op.
ALTER TYPE {schema}.job_status ADD VALUE IF NOT EXISTS 'Waiting';

-- Bounded by its type, as unique_key (migration 12): no CHECK for every UPDATE to evaluate.
ALTER TABLE {schema}.jobs ADD COLUMN concurrency_key varchar(200);

-- The guarantee: at most one job per (queue, key) in the head states. Pending, Processing and
-- Stuck hold the key (a quarantined job keeps it until an operator acts: a payment in doubt
-- must not be overtaken by the next one). The key's other jobs are Waiting: not in the claim
-- index, so the claim walks past none of them and needs no change.
CREATE UNIQUE INDEX jobs_key_head_idx ON {schema}.jobs (queue, concurrency_key)
    WHERE concurrency_key IS NOT NULL AND status IN ('Pending', 'Processing', 'Stuck');
-- The Waiting jobs of each key in queue order: promotion takes the first; the watcher's
-- healing pass walks the keys (a loose index scan, one probe per key).
CREATE INDEX jobs_waiting_idx ON {schema}.jobs (queue, concurrency_key, priority, run_at, id)
    WHERE status = 'Waiting';
-- A Waiting job is live: its unique_key holds as a Pending one's. The index of migration 12
-- made again with Waiting in its predicate (enqueue's ON CONFLICT names it; an older
-- leasectl's predicate, without Waiting, still implies this one).
DROP INDEX {schema}.jobs_unique_key_idx;
CREATE UNIQUE INDEX jobs_unique_key_idx ON {schema}.jobs (queue, unique_key)
    WHERE unique_key IS NOT NULL AND status IN ('Pending', 'Processing', 'Stuck', 'Waiting');

-- The key's lock: a transaction-scoped advisory lock (class: a hash of the schema's name, so
-- that two schemas do not share one; object: a hash of queue and key; two keys that share a
-- hash only share a lock). Producers (and an operator's requeue of a finished keyed job) take
-- it and keep it until they commit; a head's exit tries it, waits for it a little, never
-- longer. jobs_enqueue computes the same two hashes with pg_catalog's functions alone.
CREATE FUNCTION {schema}.jobs_key_lock_id(q text, k text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN pg_catalog.hashtext(q OPERATOR(pg_catalog.||) E'\x1f' OPERATOR(pg_catalog.||) k);

CREATE FUNCTION {schema}.jobs_key_lock_class() RETURNS integer
LANGUAGE sql STABLE SET search_path = pg_catalog, {schema}, pg_temp AS $$
SELECT hashtext(n.nspname::text) FROM pg_class AS c
JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE c.oid = 'jobs'::regclass;
$$;

-- Take the key's lock, as the arrival trigger does (for tests and tools; anyone may take an
-- advisory lock). Returns 1.
CREATE FUNCTION {schema}.jobs_key_lock(q text, k text) RETURNS integer
LANGUAGE plpgsql SET search_path = pg_catalog, {schema}, pg_temp AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(jobs_key_lock_class(), jobs_key_lock_id(q, k));
    RETURN 1;
END
$$;

-- Promote the key's first Waiting job (priority, run_at, id) to Pending when the key has no
-- head; returns its id, else NULL. Safe whoever calls it: jobs_key_head_idx refuses a second
-- head whatever this sees. Each statement sees the latest commits (READ COMMITTED); a picked
-- job cancelled meanwhile (its UPDATE finds it no longer Waiting) gives way to the next.
CREATE FUNCTION {schema}.jobs_key_promote(q text, k text) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    next_id bigint;
BEGIN
    FOR i IN 1..10 LOOP
        IF EXISTS (SELECT FROM jobs WHERE queue = q AND concurrency_key = k
                   AND status IN ('Pending', 'Processing', 'Stuck')) THEN
            RETURN NULL;
        END IF;
        SELECT id INTO next_id FROM jobs
        WHERE queue = q AND concurrency_key = k AND status = 'Waiting'
        ORDER BY priority, run_at, id LIMIT 1;
        IF next_id IS NULL THEN
            RETURN NULL;
        END IF;
        UPDATE jobs SET status = 'Pending', updated_at = now()
        WHERE id = next_id AND status = 'Waiting';
        IF FOUND THEN
            RETURN next_id;
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

-- A keyed job arrives (INSERT, or an operator's requeue of a finished one): under the key's
-- lock, it is Pending when the key has no head and no Waiting job, else Waiting (a key whose
-- Waiting jobs lost their head, which the healing pass would find, gets its first promoted).
-- The lock is kept to the end of the transaction: producers of one key take turns, and a head
-- that leaves meanwhile waits for this commit (briefly, see jobs_key_exit) to see this job.
CREATE FUNCTION {schema}.jobs_key_arrive() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp AS $$
BEGIN
    IF NEW.status <> 'Pending' THEN
        RETURN NEW;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext(TG_TABLE_SCHEMA::text),
                                  jobs_key_lock_id(NEW.queue, NEW.concurrency_key));
    IF EXISTS (SELECT FROM jobs WHERE queue = NEW.queue
               AND concurrency_key = NEW.concurrency_key
               AND status IN ('Pending', 'Processing', 'Stuck')) THEN
        NEW.status := 'Waiting';
    ELSIF EXISTS (SELECT FROM jobs WHERE queue = NEW.queue
                  AND concurrency_key = NEW.concurrency_key AND status = 'Waiting') THEN
        NEW.status := 'Waiting';
        PERFORM jobs_key_promote(NEW.queue, NEW.concurrency_key);
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER jobs_key_arrive BEFORE INSERT ON {schema}.jobs
    FOR EACH ROW WHEN (NEW.concurrency_key IS NOT NULL)
    EXECUTE FUNCTION {schema}.jobs_key_arrive();
CREATE TRIGGER jobs_key_return BEFORE UPDATE OF status ON {schema}.jobs
    FOR EACH ROW WHEN (NEW.concurrency_key IS NOT NULL
                       AND OLD.status IN ('Completed', 'Failed', 'Cancelled')
                       AND NEW.status = 'Pending')
    EXECUTE FUNCTION {schema}.jobs_key_arrive();

-- A head leaves (Completed, Failed, Cancelled, Waiting never; or deleted): its key's next job
-- is promoted. A producer whose Waiting job is not committed yet holds the key's lock: the exit
-- waits for it, in 2 ms steps, at most 100 ms per transaction in all (a role that holds the
-- lock, a producer in a long transaction or anyone with pg_advisory_lock, delays a worker by
-- that much and no more); then promotes what it sees. What it could not see is promoted by the
-- producer's own commit (jobs_key_settle) or, at the latest, the watcher's healing pass.
CREATE FUNCTION {schema}.jobs_key_exit() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    left_ms integer := coalesce(
        nullif(current_setting('leasectl.key_wait_ms', true), '')::integer, 100);
BEGIN
    WHILE NOT pg_try_advisory_xact_lock(hashtext(TG_TABLE_SCHEMA::text),
                                        jobs_key_lock_id(OLD.queue, OLD.concurrency_key)) LOOP
        EXIT WHEN left_ms <= 0;
        PERFORM pg_sleep(0.002);
        left_ms := left_ms - 2;
        PERFORM set_config('leasectl.key_wait_ms', left_ms::text, true);
    END LOOP;
    PERFORM jobs_key_promote(OLD.queue, OLD.concurrency_key);
    RETURN NULL;
END
$$;
CREATE TRIGGER jobs_key_exit AFTER UPDATE OF status ON {schema}.jobs
    FOR EACH ROW WHEN (OLD.concurrency_key IS NOT NULL
                       AND OLD.status IN ('Pending', 'Processing', 'Stuck')
                       AND NEW.status NOT IN ('Pending', 'Processing', 'Stuck'))
    EXECUTE FUNCTION {schema}.jobs_key_exit();
CREATE TRIGGER jobs_key_gone AFTER DELETE ON {schema}.jobs
    FOR EACH ROW WHEN (OLD.concurrency_key IS NOT NULL
                       AND OLD.status IN ('Pending', 'Processing', 'Stuck'))
    EXECUTE FUNCTION {schema}.jobs_key_exit();

-- At the commit of a transaction that made a job Waiting (its key's lock still held): a head
-- that left before this commit, whose exit gave up waiting and could not see this job, is seen
-- now, and the key's first Waiting job is promoted.
CREATE FUNCTION {schema}.jobs_key_settle() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp AS $$
BEGIN
    PERFORM jobs_key_promote(NEW.queue, NEW.concurrency_key);
    RETURN NULL;
END
$$;
CREATE CONSTRAINT TRIGGER jobs_key_settle AFTER INSERT OR UPDATE OF status ON {schema}.jobs
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.status = 'Waiting')
    EXECUTE FUNCTION {schema}.jobs_key_settle();

-- The watcher's healing pass: up to `max_keys` keys with Waiting jobs (after the key
-- `after_queue`, `after_key` in (queue, key) order; NULL: from the first), one index probe
-- each; a key without a head whose lock nobody holds has its first Waiting job promoted. At
-- most 100 promotions a call (each keeps its key's lock to the commit). Rows: the jobs
-- promoted, and last a row with promoted NULL naming the last key looked at (NULL queue: the
-- walk reached the end).
CREATE FUNCTION {schema}.jobs_keys_heal(max_keys integer, after_queue text, after_key text)
RETURNS TABLE (queue text, concurrency_key text, promoted bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    q text := after_queue;
    k text := after_key;
    nq text;
    nk text;
    done integer := 0;
BEGIN
    FOR i IN 1..least(greatest(max_keys, 1), 100000) LOOP
        nq := NULL;
        IF q IS NULL THEN
            SELECT j.queue, j.concurrency_key INTO nq, nk FROM jobs AS j
            WHERE j.status = 'Waiting'
            ORDER BY j.queue, j.concurrency_key LIMIT 1;
        ELSE
            SELECT j.queue, j.concurrency_key INTO nq, nk FROM jobs AS j
            WHERE j.status = 'Waiting' AND (j.queue, j.concurrency_key) > (q, k)
            ORDER BY j.queue, j.concurrency_key LIMIT 1;
        END IF;
        IF nq IS NULL THEN
            q := NULL;
            k := NULL;
            EXIT;
        END IF;
        q := nq;
        k := nk;
        IF NOT EXISTS (SELECT FROM jobs AS j WHERE j.queue = q AND j.concurrency_key = k
                       AND j.status IN ('Pending', 'Processing', 'Stuck'))
           AND pg_try_advisory_xact_lock(jobs_key_lock_class(), jobs_key_lock_id(q, k)) THEN
            queue := q;
            concurrency_key := k;
            promoted := jobs_key_promote(q, k);
            IF promoted IS NOT NULL THEN
                RETURN NEXT;
                done := done + 1;
                EXIT WHEN done >= 100;
            END IF;
        END IF;
    END LOOP;
    queue := q;
    concurrency_key := k;
    promoted := NULL;
    RETURN NEXT;
END
$$;

-- As every function of the schema's: no EXECUTE for PUBLIC (the triggers run them with the
-- owner's rights; the watcher's healing pass is the operators').
REVOKE ALL ON FUNCTION {schema}.jobs_key_promote FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.jobs_keys_heal FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.jobs_key_lock FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.jobs_key_lock_id FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.jobs_key_lock_class FROM PUBLIC;

-- Operator cancel applies to Waiting jobs too (its key's order is kept: the others stay in
-- line). Delete does not (as for Pending: cancel first). The function of migration 10 with
-- Waiting among its statuses.
CREATE OR REPLACE FUNCTION {schema}.jobs_operator_cancel(
    seen_ids bigint[], seen_statuses text[], seen_attempts integer[], seen_owners text[],
    force boolean, actor_name text, audit_reason text
) RETURNS TABLE (id bigint)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp AS $$
WITH seen AS (
    SELECT * FROM unnest(seen_ids, seen_statuses, seen_attempts, seen_owners)
        AS s(id, status, attempts, lease_owner)
), target AS (
    SELECT j.id, j.status, j.attempts, j.lease_owner, j.lease_until, j.heartbeat_at
    FROM jobs AS j JOIN seen AS s ON s.id = j.id
    WHERE j.status::text = s.status
      AND j.attempts = s.attempts
      AND j.lease_owner IS NOT DISTINCT FROM s.lease_owner
      AND j.status IN ('Pending', 'Processing', 'Stuck', 'Waiting')
    FOR UPDATE OF j
), moved AS (
    UPDATE jobs AS j
    SET status = 'Cancelled', lease_until = NULL, finished_at = now(), updated_at = now()
    FROM target AS t
    WHERE j.id = t.id
    RETURNING j.id, j.status, j.attempts, j.finished_at,
              jsonb_build_object('status', t.status, 'attempts', t.attempts,
                                 'lease_owner', t.lease_owner, 'lease_until', t.lease_until,
                                 'heartbeat_at', t.heartbeat_at) AS before
), closed AS (
    UPDATE job_attempts AS a
    SET outcome = 'cancelled', ended_at = now(), heartbeat_at = t.heartbeat_at,
        error = 'cancelled by ' || actor_name
    FROM target AS t
    WHERE a.job_id = t.id AND a.attempt = t.attempts AND a.outcome = 'running'
), events AS (
    INSERT INTO job_events (job_id, actor, action, reason, before, after)
    SELECT m.id, actor_name, 'cancel', audit_reason, m.before,
           jsonb_build_object('status', m.status, 'attempts', m.attempts,
                              'finished_at', m.finished_at)
    FROM moved AS m
)
SELECT moved.id FROM moved ORDER BY moved.id;
$$;
-- Roles granted by an older leasectl keep working: producers may write the key, operators
-- (who may run the watcher's batch) may run the healing pass. As in migration 12, a temporary
-- function, so that the schema is named only in its search_path.
CREATE FUNCTION pg_temp.leasectl_carry_grants() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    role_name text;
BEGIN
    FOR role_name IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_attribute t, aclexplode(t.attacl) a
        WHERE t.attrelid = 'jobs'::regclass AND t.attname = 'payload'
          AND a.privilege_type = 'INSERT' AND a.grantee <> 0
          AND a.grantee <> (SELECT relowner FROM pg_class WHERE oid = 'jobs'::regclass)
    LOOP
        EXECUTE format('GRANT INSERT (concurrency_key) ON jobs TO %s', role_name);
    END LOOP;
    FOR role_name IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_proc p, aclexplode(p.proacl) a
        WHERE p.oid = 'jobs_requeue_expired'::regproc AND a.privilege_type = 'EXECUTE'
          AND a.grantee NOT IN (0, p.proowner)
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION jobs_keys_heal TO %s', role_name);
    END LOOP;
END
$$;
SELECT pg_temp.leasectl_carry_grants();
DROP FUNCTION pg_temp.leasectl_carry_grants();
