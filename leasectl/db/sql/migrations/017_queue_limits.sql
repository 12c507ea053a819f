-- Flow control: per-queue concurrency caps, rate limits and a ramp, enforced by PostgreSQL in
-- the claim statements themselves (every worker, every process: no worker's local counter).
-- {schema} is the quoted schema name; as in migration 6, the bodies name no schema.
--
-- A queue is limited while it has a queue_limits row; `leasectl limit --clear` deletes it. The
-- claims ask claim_budget(queue, wanted) how many jobs they may take (their walk's outer LIMIT,
-- evaluated once, before the walk locks any job) and hand what they took to claim_settle. A
-- queue without a row costs one primary-key probe per claim; a limited queue's claims are
-- serialised on its row (FOR UPDATE), which only the owner and these functions can lock: no role
-- is granted UPDATE on queue_limits.
--
-- concurrency: at most this many live leases (Processing with lease_until >= now(): a killed
-- worker's slot is free when its lease lapses, not before). rate: starts per second, a token
-- bucket of `burst` tokens (NULL: max(1, rate), one second's worth). ramp_from..ramp_until: the
-- cap and the rate rise linearly from a floor (1 lease; min(rate, 1)/s) to the configured values.
-- tokens/tokens_at: the bucket, as the last claim left it. throttled: claims a limit cut short.
CREATE TABLE {schema}.queue_limits (
    queue       text PRIMARY KEY,
    concurrency integer,
    rate        double precision,
    burst       integer,
    ramp_from   timestamptz,
    ramp_until  timestamptz,
    tokens      double precision NOT NULL DEFAULT 0,
    tokens_at   timestamptz NOT NULL DEFAULT now(),
    throttled   bigint NOT NULL DEFAULT 0,
    set_at      timestamptz NOT NULL DEFAULT now(),
    set_by      text NOT NULL,
    reason      text NOT NULL,
    CONSTRAINT queue_limits_bounded_values CHECK (
        char_length(queue) BETWEEN 1 AND 200
        AND concurrency BETWEEN 1 AND 100000
        AND rate BETWEEN 0.001 AND 1000000
        AND burst BETWEEN 1 AND 1000000
        AND char_length(set_by) <= 1000
        AND char_length(reason) BETWEEN 1 AND 1000
    ),
    CONSTRAINT queue_limits_some_limit CHECK (concurrency IS NOT NULL OR rate IS NOT NULL),
    CONSTRAINT queue_limits_burst_with_rate CHECK (burst IS NULL OR rate IS NOT NULL),
    CONSTRAINT queue_limits_ramp CHECK (
        (ramp_from IS NULL) = (ramp_until IS NULL) AND ramp_until > ramp_from
        AND ramp_until - ramp_from <= interval '1 day'
    ),
    CONSTRAINT queue_limits_bucket CHECK (tokens >= 0 AND tokens <= 1000000)
);

ALTER TABLE {schema}.queue_events DROP CONSTRAINT queue_events_action;
ALTER TABLE {schema}.queue_events ADD CONSTRAINT queue_events_action
    CHECK (action IN ('pause', 'resume', 'limit', 'unlimit'));

-- A limit's settings as its audit rows keep them (before/after), and as `limits --json` shows.
CREATE FUNCTION {schema}.queue_limit_json(l {schema}.queue_limits) RETURNS jsonb
LANGUAGE sql STABLE SET search_path = pg_catalog, {schema}, pg_temp AS $$
SELECT jsonb_build_object('concurrency', l.concurrency, 'rate', l.rate, 'burst', l.burst,
                          'ramp_from', l.ramp_from, 'ramp_until', l.ramp_until,
                          'set_at', l.set_at, 'set_by', l.set_by, 'reason', l.reason)
$$;

-- How far a ramp has come at time t: 0 at ramp_from, 1 at ramp_until and after (or no ramp).
CREATE FUNCTION {schema}.queue_limit_ramp(l {schema}.queue_limits, t timestamptz)
RETURNS double precision
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, {schema}, pg_temp AS $$
SELECT CASE WHEN l.ramp_until IS NULL OR t >= l.ramp_until THEN 1.0::double precision
            WHEN t <= l.ramp_from THEN 0.0::double precision
            ELSE extract(epoch FROM t - l.ramp_from)::double precision
                 / extract(epoch FROM l.ramp_until - l.ramp_from)::double precision END
$$;

-- The limits in force at time t, the ramp applied: (cap, rate per second, bucket size); NULL
-- for what is not limited. The floor a ramp rises from: 1 lease, min(rate, 1) a second, 1 token.
CREATE FUNCTION {schema}.queue_limit_now(
    l {schema}.queue_limits, t timestamptz,
    OUT cap integer, OUT rate double precision, OUT burst double precision
)
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    f double precision := queue_limit_ramp(l, t);
    floor_rate double precision;
BEGIN
    cap := CASE WHEN l.concurrency IS NOT NULL
                THEN greatest(1, ceil(l.concurrency * f))::integer END;
    IF l.rate IS NOT NULL THEN
        floor_rate := least(l.rate, 1.0);
        rate := floor_rate + (l.rate - floor_rate) * f;
        burst := greatest(1.0, coalesce(l.burst, greatest(1.0, l.rate)) * f);
    END IF;
END
$$;

-- How many of `wanted` jobs a claim of `queue_name` may take now (the claim walk's LIMIT), and
-- whether the claim must hand what it took to claim_settle (the queue is limited). No row: all
-- of them, after one primary-key probe. Else the row is locked FOR UPDATE (the claims of this
-- queue take turns; the lock is held to the claim's commit), and each statement below takes a
-- fresh snapshot (a volatile function in READ COMMITTED), so the live leases counted include
-- every claim the previous holder of the lock committed. The bucket is refilled here, by the
-- clock read under the lock. `done_ids`: the leases this same statement completes (owner
-- `owner_name`): counted as free, as they are once it commits.
--
-- A role that holds the row (a worker role calling this in a transaction it leaves open) makes
-- the others wait at most the lock_timeout below; then the claim takes nothing this time.
CREATE FUNCTION {schema}.claim_budget(
    queue_name text, wanted integer, done_ids bigint[], owner_name text,
    OUT budget integer, OUT settle boolean, OUT contended boolean
)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, {schema}, pg_temp
SET lock_timeout = '1s'
AS $$
DECLARE
    l queue_limits;
    t timestamptz;
    v_cap integer;
    v_rate double precision;
    v_burst double precision;
    v_live integer;
    v_tokens double precision;
BEGIN
    budget := greatest(coalesce(wanted, 0), 0);
    settle := false;
    IF budget = 0 OR NOT EXISTS (SELECT FROM queue_limits AS q WHERE q.queue = queue_name) THEN
        RETURN;
    END IF;
    -- A pause wins over any limit: the claim takes nothing, spends no token, counts no throttle.
    IF EXISTS (SELECT FROM queue_state AS p WHERE p.queue = queue_name) THEN
        budget := 0;
        RETURN;
    END IF;
    contended := false;
    BEGIN
        SELECT * INTO l FROM queue_limits AS q WHERE q.queue = queue_name FOR UPDATE NOWAIT;
    EXCEPTION WHEN lock_not_available THEN
        contended := true;  -- another claim holds it: the worker is told (WorkerStore.trip)
        BEGIN
            SELECT * INTO l FROM queue_limits AS q WHERE q.queue = queue_name FOR UPDATE;
        EXCEPTION WHEN lock_not_available THEN
            budget := 0;  -- held past the lock timeout: nothing this time (the worker polls)
            RETURN;
        END;
    END;
    IF l.queue IS NULL THEN  -- cleared meanwhile
        RETURN;
    END IF;
    settle := true;
    -- A claim that completes nothing (while its queue's claims contend for the row, the worker
    -- sends their completions in a statement of their own: WorkerStore.trip) commits without
    -- waiting for its WAL flush, so the row's lock is released at its commit, not after the
    -- flush: the claims of the queue take turns on it, and each would otherwise wait for the
    -- flush of every one before it (with fsync on, a limited queue drained at 12-38% of an
    -- unlimited one's rate).
    -- A claim lost with a server crash's last moments is a lease lost: its job is claimed
    -- again, as after any lost lease; no completion is ever committed this way.
    IF cardinality(coalesce(done_ids, '{}')) = 0 THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    t := clock_timestamp();
    SELECT n.cap, n.rate, n.burst INTO v_cap, v_rate, v_burst FROM queue_limit_now(l, t) AS n;
    IF v_cap IS NOT NULL THEN
        SELECT count(*) INTO v_live
        FROM jobs AS j
        WHERE j.status = 'Processing' AND j.queue = queue_name AND j.lease_until >= now()
          AND NOT (j.id = ANY (coalesce(done_ids, '{}')) AND j.lease_owner = owner_name);
        budget := least(budget, greatest(v_cap - v_live, 0));
    END IF;
    IF v_rate IS NOT NULL THEN
        v_tokens := least(v_burst, l.tokens + v_rate * greatest(
            extract(epoch FROM t - l.tokens_at)::double precision, 0.0));
        UPDATE queue_limits AS q SET tokens = v_tokens, tokens_at = t
        WHERE q.queue = queue_name;
        budget := least(budget, floor(v_tokens)::integer);
    END IF;
END
$$;

-- What a claim took of its budget: its tokens are spent, a claim a limit cut short is counted
-- (throttled), and the worker is told how long to wait before it claims this queue again:
-- NULL when no limit cut the claim short, the seconds until the next token when the rate did,
-- 0 when only the cap did (a slot frees when a lease ends: no time is known).
CREATE FUNCTION {schema}.claim_settle(
    queue_name text, used integer, budget integer, wanted integer
) RETURNS double precision
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, {schema}, pg_temp
AS $$
DECLARE
    l queue_limits;
    cut boolean := used >= budget AND budget < wanted;
    v_rate double precision;
BEGIN
    UPDATE queue_limits AS q
    SET tokens = CASE WHEN q.rate IS NULL THEN q.tokens
                      ELSE greatest(q.tokens - used, 0) END,
        throttled = q.throttled + CASE WHEN cut THEN 1 ELSE 0 END
    WHERE q.queue = queue_name
    RETURNING * INTO l;
    IF NOT FOUND OR NOT cut THEN
        RETURN NULL;
    END IF;
    SELECT n.rate INTO v_rate FROM queue_limit_now(l, l.tokens_at) AS n;
    IF v_rate IS NOT NULL AND l.tokens < 1 THEN
        RETURN (1 - l.tokens) / v_rate;
    END IF;
    RETURN 0;
END
$$;

-- Set a queue's limits (audited as 'limit', before and after; the workers are told on the
-- enqueue channel so that a throttled worker claims again at once). Values not given (NULL)
-- are not limited: a limit replaces the one before it whole. A set ends any ramp. The bucket
-- starts full, or keeps what it had when the queue was limited already (at most the new burst).
CREATE FUNCTION {schema}.queue_limit_set(
    queue_name text, new_concurrency integer, new_rate double precision, new_burst integer,
    actor_name text, audit_reason text, channel text
) RETURNS SETOF {schema}.queue_limits
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    v_old queue_limits;
    v_new queue_limits;
    full_bucket double precision := CASE WHEN new_rate IS NULL THEN 0
        ELSE coalesce(new_burst, greatest(1.0, new_rate)) END;
BEGIN
    SELECT * INTO v_old FROM queue_limits AS q WHERE q.queue = queue_name FOR UPDATE;
    IF FOUND THEN
        UPDATE queue_limits AS q
        SET concurrency = new_concurrency, rate = new_rate, burst = new_burst,
            ramp_from = NULL, ramp_until = NULL,
            tokens = CASE WHEN v_old.rate IS NULL THEN full_bucket
                          ELSE least(q.tokens, full_bucket) END,
            set_at = now(), set_by = actor_name, reason = audit_reason
        WHERE q.queue = queue_name
        RETURNING * INTO v_new;
    ELSE
        INSERT INTO queue_limits AS q (queue, concurrency, rate, burst, tokens, tokens_at,
                                       set_by, reason)
        VALUES (queue_name, new_concurrency, new_rate, new_burst, full_bucket,
                clock_timestamp(), actor_name, audit_reason)
        RETURNING * INTO v_new;
    END IF;
    INSERT INTO queue_events (queue, actor, action, reason, before, after)
    VALUES (queue_name, actor_name, 'limit', audit_reason,
            CASE WHEN v_old.queue IS NOT NULL THEN queue_limit_json(v_old) END,
            queue_limit_json(v_new));
    PERFORM pg_notify(channel, left(queue_name, 128));
    RETURN NEXT v_new;
END
$$;

-- Clear a queue's limits (audited as 'unlimit', with the limits it ended; the workers are told).
-- Returns the limits it ended; nothing when the queue had none.
CREATE FUNCTION {schema}.queue_limit_clear(
    queue_name text, actor_name text, audit_reason text, channel text
) RETURNS SETOF {schema}.queue_limits
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    ended queue_limits;
BEGIN
    DELETE FROM queue_limits AS q WHERE q.queue = queue_name RETURNING * INTO ended;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    INSERT INTO queue_events (queue, actor, action, reason, before, after)
    VALUES (queue_name, actor_name, 'unlimit', audit_reason, queue_limit_json(ended), NULL);
    PERFORM pg_notify(channel, left(queue_name, 128));
    RETURN NEXT ended;
END
$$;

-- Start a ramp on a limited queue and end its pause, if it is paused, in one transaction
-- (`leasectl resume QUEUE --ramp 5m`): the cap and the rate rise from their floor to the
-- configured values over `ramp`; the bucket starts with one token. Audited as 'limit' (the ramp
-- in `after`), and as 'resume' by queue_resume when there was a pause. Returns the limits with
-- their ramp and whether a pause ended; nothing when the queue has no limits (nothing changed).
CREATE FUNCTION {schema}.queue_ramp(
    queue_name text, ramp interval, actor_name text, audit_reason text, channel text
) RETURNS TABLE (limits {schema}.queue_limits, resumed boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    v_old queue_limits;
    v_new queue_limits;
    ended boolean;
BEGIN
    SELECT * INTO v_old FROM queue_limits AS q WHERE q.queue = queue_name FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    UPDATE queue_limits AS q
    SET ramp_from = clock_timestamp(), ramp_until = clock_timestamp() + ramp,
        tokens = least(q.tokens, 1.0), tokens_at = clock_timestamp()
    WHERE q.queue = queue_name
    RETURNING * INTO v_new;
    INSERT INTO queue_events (queue, actor, action, reason, before, after)
    VALUES (queue_name, actor_name, 'limit', coalesce(audit_reason, v_old.reason),
            queue_limit_json(v_old), queue_limit_json(v_new));
    ended := EXISTS (SELECT FROM queue_resume(queue_name, actor_name, audit_reason, channel));
    PERFORM pg_notify(channel, left(queue_name, 128));
    RETURN QUERY SELECT v_new, ended;
END
$$;

REVOKE ALL ON FUNCTION {schema}.queue_limit_json FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.queue_limit_ramp FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.queue_limit_now FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.claim_budget FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.claim_settle FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.queue_limit_set FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.queue_limit_clear FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.queue_ramp FROM PUBLIC;

-- Roles granted by an older leasectl keep working after this upgrade (every claim now calls
-- claim_budget and claim_settle): workers (who may UPDATE jobs' status) execute them; readers of
-- jobs read queue_limits and what is in force now (queue_limit_now, queue_limit_ramp: `limits`,
-- the console); whoever may pause may limit.
CREATE FUNCTION pg_temp.leasectl_carry_grants() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    role_name text;
BEGIN
    FOR role_name IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = 'jobs'::regclass AND a.privilege_type = 'SELECT'
          AND a.grantee NOT IN (0, c.relowner)
    LOOP
        EXECUTE format('GRANT SELECT ON queue_limits TO %s', role_name);
        EXECUTE format('GRANT EXECUTE ON FUNCTION queue_limit_now, queue_limit_ramp TO %s',
                       role_name);
    END LOOP;
    FOR role_name IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_attribute t, aclexplode(t.attacl) a
        WHERE t.attrelid = 'jobs'::regclass AND t.attname = 'status'
          AND a.privilege_type = 'UPDATE'
        UNION
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = 'jobs'::regclass AND a.privilege_type = 'UPDATE'
          AND a.grantee NOT IN (0, c.relowner)
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION claim_budget, claim_settle TO %s', role_name);
    END LOOP;
    FOR role_name IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_proc p, aclexplode(p.proacl) a
        WHERE p.oid = 'queue_pause'::regproc AND a.privilege_type = 'EXECUTE'
          AND a.grantee NOT IN (0, p.proowner)
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION queue_limit_set, queue_limit_clear, queue_ramp '
                       'TO %s', role_name);
    END LOOP;
END
$$;
SELECT pg_temp.leasectl_carry_grants();
DROP FUNCTION pg_temp.leasectl_carry_grants();
