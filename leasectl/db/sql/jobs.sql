-- name: jobs_enqueue
-- Insert one job per payload in one statement, at most one live job per queue and unique key (a job with a concurrency key is Waiting while its key is busy), and wake idle workers of the queues (NOTIFY, sent when the transaction commits).
-- A column that varies between the jobs comes as an array beside the payloads (`*_each`), one
-- that does not as one value (NULL array), so that N copies send N payloads and no more.
-- Rows: the jobs inserted (`duplicate` false) and, for a key that found a live job already
-- there, that job (`duplicate` true). The live job looked up is the one this statement's
-- snapshot sees: a key whose job was committed by another transaction while this one waited on
-- it comes back in no row, and Enqueue.run asks again in a new statement.
-- It runs on the application's connection too (leasectl.enqueue), under the application's
-- search_path: every operator, function and non-keyword type is named with its schema, so
-- that no look-alike in a schema others may create in (public) is ever chosen (design.md).
WITH given AS (
    SELECT g.n, g.payload,
           coalesce(g.queue, %(queue)s::pg_catalog.text) AS queue,
           coalesce(g.priority, %(priority)s::integer) AS priority,
           coalesce(g.delay, %(delay)s::interval) AS delay,
           coalesce(g.max_attempts, %(max_attempts)s::integer) AS max_attempts,
           coalesce(g.unique_key, %(unique_key)s::pg_catalog.text) AS unique_key,
           coalesce(g.concurrency_key, %(concurrency_key)s::pg_catalog.text) AS concurrency_key,
           coalesce(g.timeout, %(timeout)s::interval) AS timeout
    -- (ROWS FROM: the many-argument unnest, which exists only unqualified.)
    FROM ROWS FROM (
             pg_catalog.unnest(%(payloads)s::pg_catalog.jsonb[]),
             pg_catalog.unnest(%(queue_each)s::pg_catalog.text[]),
             pg_catalog.unnest(%(priority_each)s::integer[]),
             pg_catalog.unnest(%(delay_each)s::interval[]),
             pg_catalog.unnest(%(max_attempts_each)s::integer[]),
             pg_catalog.unnest(%(unique_key_each)s::pg_catalog.text[]),
             pg_catalog.unnest(%(concurrency_key_each)s::pg_catalog.text[]),
             pg_catalog.unnest(%(timeout_each)s::interval[]))
         WITH ORDINALITY
         AS g(payload, queue, priority, delay, max_attempts, unique_key, concurrency_key, timeout,
              n)
), locked AS (
    -- The concurrency keys' locks (migration 18), all of them before the first row, in (queue,
    -- key) order (sorted by the caller): two enqueues of several keys never wait on each other
    -- in a cycle. No key: no row to read, one count of 0.
    -- (As migration 18's jobs_key_lock: class the schema's name, object the key's hash.)
    SELECT pg_catalog.count(pg_catalog.pg_advisory_xact_lock(
               pg_catalog.hashtext(%(lock_class)s::pg_catalog.text),
               pg_catalog.hashtext(l.queue OPERATOR(pg_catalog.||) E'\x1f'
                                   OPERATOR(pg_catalog.||) l.concurrency_key))) AS n
    FROM ROWS FROM (
             pg_catalog.unnest(%(lock_queues)s::pg_catalog.text[]),
             pg_catalog.unnest(%(lock_keys)s::pg_catalog.text[])) AS l(queue, concurrency_key)
), inserted AS (
    -- A job with a concurrency key is made Waiting instead of Pending while its key is busy, by
    -- migration 18's trigger (jobs_key_arrive), under the key's lock.
    -- (trace_context: the enqueuing span's, one for the whole call; migration 28.)
    INSERT INTO {schema}.jobs (queue, payload, priority, run_at, max_attempts, unique_key,
                               concurrency_key, timeout, trace_context)
    SELECT queue, payload, priority, pg_catalog.now() OPERATOR(pg_catalog.+) delay,
           max_attempts, unique_key, concurrency_key, timeout,
           %(trace_context)s::pg_catalog.text
    FROM given
    WHERE (SELECT locked.n FROM locked) OPERATOR(pg_catalog.>=) 0
    ORDER BY n
    -- jobs_unique_key_idx (migration 12): a key with a live job, committed or not, inserts
    -- nothing (an uncommitted one is waited for: inserted if it rolls back). Its predicate,
    -- written with pg_catalog's operator, is the index's.
    ON CONFLICT (queue, unique_key)
        WHERE unique_key IS NOT NULL
          AND status OPERATOR(pg_catalog.=) ANY (
              ARRAY['Pending', 'Processing', 'Stuck', 'Waiting']::{schema}.job_status[])
        DO NOTHING
    RETURNING id, queue, unique_key
), existing AS (
    -- The keyed jobs' (queue, key) pairs come again on their own (`keyed_*`), so that `given`
    -- is read once, streamed into the INSERT.
    SELECT j.id, j.queue, j.unique_key
    FROM ROWS FROM (
             pg_catalog.unnest(%(keyed_queues)s::pg_catalog.text[]),
             pg_catalog.unnest(%(keyed_keys)s::pg_catalog.text[])) AS k(queue, unique_key)
    JOIN {schema}.jobs AS j
      ON j.queue OPERATOR(pg_catalog.=) k.queue
     AND j.unique_key OPERATOR(pg_catalog.=) k.unique_key
    WHERE j.unique_key IS NOT NULL
      AND j.status OPERATOR(pg_catalog.=) ANY (
          ARRAY['Pending', 'Processing', 'Stuck', 'Waiting']::{schema}.job_status[])
), notified AS (
    SELECT pg_catalog.count(pg_catalog.pg_notify(%(channel)s, pg_catalog.left(q, 128))) AS sent
    FROM pg_catalog.unnest(%(notify)s::pg_catalog.text[]) AS q
)
SELECT r.id, r.queue, r.unique_key, r.duplicate
FROM (
    SELECT i.id, i.queue, i.unique_key, false AS duplicate FROM inserted AS i
    UNION ALL
    SELECT e.id, e.queue, e.unique_key, true FROM existing AS e
    WHERE NOT EXISTS (
        SELECT FROM inserted AS i
        WHERE i.queue OPERATOR(pg_catalog.=) e.queue
          AND i.unique_key OPERATOR(pg_catalog.=) e.unique_key
    )
) AS r CROSS JOIN notified
ORDER BY r.id;

-- name: jobs_complete_and_claim
-- A worker's round trip: complete its finished leases (fenced), then lease due Pending jobs.
-- Rows come in no set order; each carries `completed_ids`, the finished leases accepted (the
-- others were lost); with nothing claimed, one row of NULLs carries them. Lapsed leases are
-- jobs_claim_expired's, so that the statement every busy worker repeats stays small.
-- One UPDATE does both completions and claims: each part that changes jobs sets up its
-- indexes and CHECK constraints anew (BENCHMARKS.md, "One UPDATE of jobs per round trip").
-- Flow control (migrations 17, 24): the walk takes at most the queue's budget (claim_budget,
-- for a queue with limits; all of `limit` for one without), each job claimed under the shard of
-- the limit its place in the budget names (`shards`, NULL without limits), and what it took is
-- settled (claim_settle, only for a limited queue whose claim took less than it asked or than
-- its budget); `throttle_wait` says when a limit cut the claim short (seconds to the next
-- token; 0: the cap), NULL otherwise.
WITH budget AS (
    -- (claim_budget only for a queue whose limits this statement's snapshot sees: a queue
    -- without limits pays one probe of queue_limits' primary key, and no function call.)
    SELECT b.budget, b.settle, b.shards, b.held, b.wait
    FROM {schema}.queue_limits AS l
    CROSS JOIN LATERAL {schema}.claim_budget(
        l.queue, %(limit)s, %(done_ids)s::bigint[], %(owner)s, l.shards) AS b
    WHERE l.queue = %(queue)s
    UNION ALL
    SELECT %(limit)s, false, NULL::smallint[], NULL::smallint, NULL::double precision
    WHERE NOT EXISTS (SELECT FROM {schema}.queue_limits AS l WHERE l.queue = %(queue)s)
), picked AS (
    -- The inner LIMIT is a constant (1000, the most a claim takes), so that a generic plan walks
    -- the claim index in order; the outer one stops the walk at `limit` rows, all it locks.
    -- The walk starts at the claim key `from_*` (priority, run_at, id), the first job of the
    -- previous claim, to skip the dead entries of jobs claimed since the last vacuum (cost:
    -- BENCHMARKS.md, "The claim index's dead head"). The head is (-2^31, -infinity, -2^63);
    -- when the worker goes back to it: Worker._dispatch_loop.
    SELECT id FROM (
        SELECT id
        FROM {schema}.jobs
        WHERE status = 'Pending' AND queue = %(queue)s AND run_at <= now()
          AND (priority, run_at, id) >= (%(from_priority)s, %(from_run_at)s, %(from_id)s)
          -- Not while the queue is paused: a probe of queue_state's primary key, done once per
          -- statement (it names no column of jobs: a one-time filter over the index walk).
          AND NOT EXISTS (SELECT FROM {schema}.queue_state AS s WHERE s.queue = %(queue)s)
        ORDER BY priority, run_at, id
        LIMIT 1000
        FOR UPDATE SKIP LOCKED
    ) AS due
    -- (An InitPlan: evaluated once, when the walk starts and before it locks any job.)
    LIMIT (SELECT budget FROM budget)
), targets AS (
    -- The finished leases with their attempt (the fence), then the picked jobs with NULL and
    -- the shard each is claimed under (the budget's, in order).
    -- One function scan, not UNION ALL: with UNION ALL the re-check after a concurrent
    -- heartbeat failed, and a completion was refused.
    SELECT f.id, f.attempt, f.shard
    FROM unnest(%(done_ids)s::bigint[] || ARRAY(SELECT id FROM picked),
                %(done_attempts)s::integer[],
                array_fill(NULL::smallint, ARRAY[cardinality(%(done_ids)s::bigint[])])
                    || (SELECT shards FROM budget)) AS f(id, attempt, shard)
), changed AS (
    UPDATE {schema}.jobs AS j
    SET status = (CASE WHEN t.attempt IS NULL THEN 'Processing'
                       ELSE 'Completed' END)::{schema}.job_status,
        lease_owner = CASE WHEN t.attempt IS NULL THEN %(owner)s ELSE j.lease_owner END,
        lease_until = CASE WHEN t.attempt IS NULL THEN now() + %(ttl)s END,
        heartbeat_at = CASE WHEN t.attempt IS NULL THEN now() ELSE j.heartbeat_at END,
        attempts = CASE WHEN t.attempt IS NULL THEN j.attempts + 1 ELSE j.attempts END,
        finished_at = CASE WHEN t.attempt IS NULL THEN j.finished_at ELSE now() END,
        last_error = CASE WHEN t.attempt IS NULL THEN j.last_error END,
        limit_shard = CASE WHEN t.attempt IS NULL THEN t.shard ELSE j.limit_shard END,
        updated_at = now()
    FROM targets AS t
    -- (`IS NOT DISTINCT FROM`, `status::text`: `=` in forms no index serves, so a generic plan
    -- finds rows by primary key, never through jobs_processing_idx.)
    -- (`j.id = ANY (ARRAY[t.id])`: `j.id = t.id` that is no merge key, so a plan made on an
    -- empty table still probes the primary key per row instead of reading all of it; the same
    -- for every key join below. See BENCHMARKS.md, "Plans made on tables analysed empty".)
    -- A picked job is Pending and locked by this statement; a finished one must still be
    -- this owner's lease at that attempt.
    WHERE j.id = ANY (ARRAY[t.id])
      AND (t.attempt IS NULL
           OR (j.attempts = t.attempt AND j.lease_owner IS NOT DISTINCT FROM %(owner)s
               AND j.status::text = 'Processing'))
    RETURNING j.*, t.attempt IS NOT NULL AS completing
), closed AS (
    UPDATE {schema}.job_attempts AS a
    SET outcome = 'completed', ended_at = now(), heartbeat_at = c.heartbeat_at
    FROM changed AS c
    WHERE c.completing AND a.job_id = ANY (ARRAY[c.id]) AND a.attempt = c.attempts
), opened AS (
    -- (queue, due_at: the history counts the pickup when the attempt ends, migration 31.)
    INSERT INTO {schema}.job_attempts (job_id, attempt, lease_owner, started_at, heartbeat_at,
                                       queue, due_at)
    SELECT id, attempts, lease_owner, now(), now(), queue, greatest(created_at, run_at)
    FROM changed WHERE NOT completing
), settled AS (
    -- (A function, not an UPDATE here: claim_budget changed shard rows in this statement, and
    -- an UPDATE of the statement itself would skip a row the statement changed.) A claim that
    -- took all it asked for settles nothing: its tokens are spent already.
    SELECT {schema}.claim_settle(%(queue)s, u.used, b.budget, %(limit)s, b.shards, b.held,
                                 b.wait) AS throttle_wait
    FROM budget AS b,
         (SELECT count(*)::integer AS used FROM changed WHERE NOT completing) AS u
    WHERE b.settle AND (u.used < b.budget OR b.budget < %(limit)s)
)
-- (No ORDER BY: the store puts the few rows of a batch in claim order itself, cheaper than a
-- Sort node the executor would set up on every call.)
SELECT c.*, d.ids AS completed_ids, (SELECT throttle_wait FROM settled) AS throttle_wait
FROM (SELECT array_agg(id) FILTER (WHERE completing) AS ids FROM changed) AS d
LEFT JOIN (SELECT * FROM changed WHERE NOT completing) AS c ON true;

-- name: jobs_fail_unclaimable
-- Fail the due Pending jobs a claim cannot lease, alone: attempts at the integer's maximum (written by hand: no bound on attempts, migration 15), whose +1 failed the whole claim. Run only after it did, on its walk (key, limit).
WITH picked AS (
    SELECT id
    FROM {schema}.jobs
    WHERE status = 'Pending' AND queue = %(queue)s AND run_at <= now()
      AND (priority, run_at, id) >= (%(from_priority)s, %(from_run_at)s, %(from_id)s)
    ORDER BY priority, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.jobs AS j
SET status = 'Failed', lease_until = NULL, finished_at = now(), updated_at = now(),
    last_error = 'attempts is ' || j.attempts
                 || ', the most its integer holds: no attempt can be counted; failed unrun'
FROM picked AS p
WHERE j.id = p.id AND j.attempts >= 2147483647
RETURNING j.id;

-- name: jobs_claim_expired
-- Take over up to `limit` lapsed leases of one queue (priority order), closing their attempts.
-- The condition of every lease is re-checked in the UPDATE (a heartbeat may have renewed it);
-- the lapsed attempt is closed 'expired' and a new one opened, in the same statement.
-- The queue's limits apply as in jobs_complete_and_claim (claim_budget, claim_settle: each job
-- taken over is claimed under its shard of the limit).
WITH budget AS (
    SELECT b.budget, b.settle, b.shards, b.held, b.wait
    FROM {schema}.queue_limits AS l
    CROSS JOIN LATERAL {schema}.claim_budget(l.queue, %(limit)s, '{}'::bigint[], %(owner)s,
                                             l.shards) AS b
    WHERE l.queue = %(queue)s
    UNION ALL
    SELECT %(limit)s, false, NULL::smallint[], NULL::smallint, NULL::double precision
    WHERE NOT EXISTS (SELECT FROM {schema}.queue_limits AS l WHERE l.queue = %(queue)s)
), picked AS (
    SELECT id, heartbeat_at FROM (
        SELECT id, heartbeat_at, priority, run_at
        FROM {schema}.jobs
        WHERE status = 'Processing' AND queue = %(queue)s AND lease_until < now()
          AND attempts < max_attempts
          -- Not while the queue is paused (as jobs_complete_and_claim).
          AND NOT EXISTS (SELECT FROM {schema}.queue_state AS s WHERE s.queue = %(queue)s)
        ORDER BY priority, run_at, id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) AS lapsed
    LIMIT (SELECT budget FROM budget)
), slots AS (
    -- Each picked job with the shard it is claimed under (the budget's, in order).
    SELECT u.id, u.heartbeat_at, u.shard
    FROM unnest(ARRAY(SELECT id FROM picked), ARRAY(SELECT heartbeat_at FROM picked),
                (SELECT shards FROM budget)) AS u(id, heartbeat_at, shard)
    WHERE u.id IS NOT NULL
), claimed AS (
    UPDATE {schema}.jobs AS j
    SET status = 'Processing', lease_owner = %(owner)s, lease_until = now() + %(ttl)s,
        heartbeat_at = now(), attempts = j.attempts + 1, limit_shard = p.shard,
        updated_at = now()
    FROM slots AS p
    -- (`status::text`: not through jobs_processing_idx; see jobs_complete_and_claim.)
    WHERE j.id = ANY (ARRAY[p.id]) AND j.status::text = 'Processing' AND j.lease_until < now()
    RETURNING j.*, p.heartbeat_at AS previous_heartbeat_at
), closed AS (
    -- The lapsed lease's attempt, looked up by primary key (a plan that holds for any size).
    UPDATE {schema}.job_attempts AS a
    SET outcome = 'expired', ended_at = now(), heartbeat_at = c.previous_heartbeat_at,
        error = 'lease expired; taken over by ' || c.lease_owner
    FROM claimed AS c
    WHERE a.job_id = ANY (ARRAY[c.id]) AND a.attempt = c.attempts - 1
      AND a.outcome = 'running'
), opened AS (
    INSERT INTO {schema}.job_attempts (job_id, attempt, lease_owner, started_at, heartbeat_at,
                                       queue, due_at)
    SELECT id, attempts, lease_owner, now(), now(), queue, greatest(created_at, run_at)
    FROM claimed
), settled AS (
    SELECT {schema}.claim_settle(%(queue)s, u.used, b.budget, %(limit)s, b.shards, b.held,
                                 b.wait) AS throttle_wait
    FROM budget AS b, (SELECT count(*)::integer AS used FROM claimed) AS u
    WHERE b.settle AND (u.used < b.budget OR b.budget < %(limit)s)
)
SELECT c.*, (SELECT throttle_wait FROM settled) AS throttle_wait
FROM claimed AS c
ORDER BY c.priority, c.run_at, c.id;

-- name: job_claim_by_id
-- Lease one named job at once: Pending, or Processing with a lapsed lease; its queue not paused, and within its queue's limits.
-- The job's queue's limits apply as to any claim (claim_budget for one job, claim_settle): a
-- named job is no way around a cap or a rate.
WITH previous AS (
    SELECT id, queue, heartbeat_at FROM {schema}.jobs WHERE id = %(id)s
), budget AS (
    SELECT p.queue, b.budget, b.settle, b.shards, b.held, b.wait
    FROM previous AS p,
         {schema}.claim_budget(p.queue, 1, '{}'::bigint[], %(owner)s) AS b
), claimed AS (
    UPDATE {schema}.jobs AS j
    SET status = 'Processing', lease_owner = %(owner)s, lease_until = now() + %(ttl)s,
        heartbeat_at = now(), attempts = j.attempts + 1,
        limit_shard = (SELECT shards[1] FROM budget), updated_at = now()
    WHERE j.id = %(id)s
      AND (j.status = 'Pending' OR (j.status = 'Processing' AND j.lease_until < now()))
      -- (Not one at the integer's maximum: its +1 would fail the statement.)
      AND j.attempts < 2147483647
      -- Not while its queue is paused: a pause stops every claim of the queue's jobs, this
      -- one too (resume the queue to run it).
      AND NOT EXISTS (SELECT FROM {schema}.queue_state AS s WHERE s.queue = j.queue)
      AND (SELECT budget FROM budget) > 0
    RETURNING j.*
), closed AS (
    UPDATE {schema}.job_attempts AS a
    SET outcome = 'expired', ended_at = now(), heartbeat_at = p.heartbeat_at,
        error = 'lease expired; taken over by ' || c.lease_owner
    FROM claimed AS c JOIN previous AS p ON p.id = c.id
    WHERE a.job_id = c.id AND a.attempt < c.attempts AND a.outcome = 'running'
      AND a.job_id = %(id)s
), opened AS (
    INSERT INTO {schema}.job_attempts (job_id, attempt, lease_owner, started_at, heartbeat_at,
                                       queue, due_at)
    SELECT id, attempts, lease_owner, now(), now(), queue, greatest(created_at, run_at)
    FROM claimed
), settled AS (
    SELECT {schema}.claim_settle(b.queue, u.used, b.budget, 1, b.shards, b.held, b.wait)
        AS throttle_wait
    FROM budget AS b, (SELECT count(*)::integer AS used FROM claimed) AS u
    WHERE b.settle AND (u.used < b.budget OR b.budget < 1)
)
SELECT c.*, NULL::timestamptz AS previous_heartbeat_at, s.throttle_wait
FROM claimed AS c LEFT JOIN settled AS s ON true;

-- name: jobs_heartbeat
-- Extend the leases this owner still holds (fenced by id, owner, attempts, status); returns them.
-- Each lease may carry its handler's latest progress (ctx.progress: a fraction and a message,
-- the message cut to its column by the worker), written with the attempt it is of (migration
-- 32: a claim clears none; the readers show a report of the job's current attempt only); NULL
-- progress leaves the stored one as it is.
-- A lapsed lease nobody took over is renewed, unless its queue has a concurrency cap: a claim
-- counts a lapsed lease's slot free and may have taken it, so a renewal could make one live
-- lease more than the cap. (The clock, not now(): the lease as it stands when the row is
-- read, however long the statement waited to read it.)
UPDATE {schema}.jobs AS j
SET lease_until = now() + %(ttl)s, heartbeat_at = now(),
    progress = coalesce(f.progress, j.progress),
    progress_message = CASE WHEN f.progress IS NULL THEN j.progress_message ELSE f.message END,
    progress_attempt = CASE WHEN f.progress IS NULL THEN j.progress_attempt ELSE f.attempt END
FROM unnest(%(ids)s::bigint[], %(attempts)s::integer[], %(progress)s::real[],
            %(messages)s::text[]) AS f(id, attempt, progress, message)
-- (These forms of `=`: found by primary key, as in jobs_complete_and_claim.)
WHERE j.id = ANY (ARRAY[f.id]) AND j.attempts = f.attempt
  AND j.lease_owner IS NOT DISTINCT FROM %(owner)s AND j.status::text = 'Processing'
  AND (j.lease_until >= clock_timestamp()
       OR NOT EXISTS (SELECT FROM {schema}.queue_limits AS l
                      WHERE l.queue = j.queue AND l.concurrency IS NOT NULL))
RETURNING j.id, j.lease_until;

-- name: job_complete_in_transaction
-- Complete one lease inside a handler's own transaction (JobContext.transaction): the fence of
-- jobs_complete_and_claim's completions (id, attempt, owner, Processing), the same row changes.
-- Times are statement_timestamp(): now() is the transaction's start, maybe long before.
-- It runs under the application's search_path (the handler's connection is not pinned): the
-- enum's comparison names its operator, which a look-alike in public would otherwise take.
WITH changed AS (
    UPDATE {schema}.jobs AS j
    SET status = 'Completed', lease_until = NULL, finished_at = statement_timestamp(),
        last_error = NULL, updated_at = statement_timestamp()
    WHERE j.id = %(id)s AND j.attempts = %(attempt)s AND j.lease_owner = %(owner)s
      AND j.status OPERATOR(pg_catalog.=) 'Processing'::{schema}.job_status
    RETURNING j.id, j.attempts, j.heartbeat_at
), closed AS (
    UPDATE {schema}.job_attempts AS a
    SET outcome = 'completed', ended_at = statement_timestamp(), heartbeat_at = c.heartbeat_at
    FROM changed AS c
    WHERE a.job_id = c.id AND a.attempt = c.attempts
)
SELECT id FROM changed;

-- name: job_fail
-- Record a fenced failure: back to Pending after %(delay)s while attempts remain, else Failed;
-- the attempt keeps the error and the handler's traceback (detail; NULL when none), its kind and its job's queue (what `errors` reads from job_attempts_failed_idx alone, migration 29).
WITH failed AS (
    UPDATE {schema}.jobs AS j
    SET status = (CASE WHEN %(retry)s AND j.attempts < j.max_attempts
                       THEN 'Pending' ELSE 'Failed' END)::{schema}.job_status,
        run_at = CASE WHEN %(retry)s AND j.attempts < j.max_attempts
                      THEN now() + %(delay)s ELSE j.run_at END,
        finished_at = CASE WHEN %(retry)s AND j.attempts < j.max_attempts
                           THEN NULL ELSE now() END,
        lease_until = NULL, last_error = %(error)s, updated_at = now()
    WHERE j.id = %(id)s AND j.attempts = %(attempt)s AND j.lease_owner = %(owner)s
      AND j.status = 'Processing'
    RETURNING j.id, j.status, j.run_at, j.attempts, j.heartbeat_at, j.queue
), closed AS (
    UPDATE {schema}.job_attempts AS a
    SET outcome = 'failed', ended_at = now(), heartbeat_at = f.heartbeat_at, error = %(error)s,
        error_detail = %(detail)s, error_kind = %(kind)s, queue = f.queue
    FROM failed AS f
    WHERE a.job_id = f.id AND a.attempt = f.attempts AND a.job_id = %(id)s
)
SELECT id, status::text AS status, run_at FROM failed;

-- name: job_snooze
-- Snooze a fenced lease: Pending again at now() + %(delay)s without spending its attempt (max_attempts one higher, at most 1000), counted in snoozes (at most 100); the attempt ends 'snoozed'.
-- The fence is job_fail's (id, attempt, owner, Processing); the bound on snoozes is part of it
-- (the worker fails an attempt that would snooze once more, and never sends it). last_error
-- stays the previous failure's: a snooze is no error.
WITH snoozed AS (
    UPDATE {schema}.jobs AS j
    SET status = 'Pending', run_at = now() + %(delay)s, lease_until = NULL,
        snoozes = j.snoozes + 1, max_attempts = least(j.max_attempts + 1, 1000),
        updated_at = now()
    -- (These forms of `=`: found by primary key, never through jobs_processing_idx, as in
    -- jobs_heartbeat: a worker may hold a thousand leases.)
    WHERE j.id = %(id)s AND j.attempts = %(attempt)s
      AND j.lease_owner IS NOT DISTINCT FROM %(owner)s
      AND j.status::text = 'Processing' AND j.snoozes < %(max_snoozes)s
    RETURNING j.id, j.attempts, j.heartbeat_at, j.run_at, j.snoozes
), closed AS (
    UPDATE {schema}.job_attempts AS a
    -- (No error: readers of the latest error, as the console's Stuck panel, skip none.)
    SET outcome = 'snoozed', ended_at = now(), heartbeat_at = s.heartbeat_at
    FROM snoozed AS s
    WHERE a.job_id = s.id AND a.attempt = s.attempts AND a.job_id = %(id)s
)
SELECT id, run_at, snoozes FROM snoozed;

-- name: jobs_release
-- Hand fenced leases back to Pending unfinished (graceful shutdown); the attempt stays counted.
WITH released AS (
    UPDATE {schema}.jobs AS j
    SET status = 'Pending', lease_until = NULL, updated_at = now()
    FROM unnest(%(ids)s::bigint[], %(attempts)s::integer[]) AS f(id, attempt)
    -- (These forms of `=`: by primary key, as in jobs_complete_and_claim.)
    WHERE j.id = ANY (ARRAY[f.id]) AND j.attempts = f.attempt
      AND j.lease_owner IS NOT DISTINCT FROM %(owner)s AND j.status::text = 'Processing'
    RETURNING j.id, j.attempts, j.heartbeat_at
), closed AS (
    UPDATE {schema}.job_attempts AS a
    SET outcome = 'released', ended_at = now(), heartbeat_at = r.heartbeat_at
    FROM released AS r
    WHERE a.job_id = ANY (ARRAY[r.id]) AND a.attempt = r.attempts
)
SELECT id FROM released;

-- name: jobs_cancelled_of
-- Which of these jobs are Cancelled (a worker whose heartbeat was refused says why; rare).
SELECT id FROM {schema}.jobs WHERE id = ANY(%(ids)s::bigint[]) AND status = 'Cancelled';

-- name: job_get
-- One job by id.
SELECT * FROM {schema}.jobs WHERE id = %(id)s;

-- name: jobs_get_many
-- Several jobs by id (to explain why a guarded action skipped them).
SELECT * FROM {schema}.jobs WHERE id = ANY(%(ids)s::bigint[]) ORDER BY id;

-- name: job_attempts_list
-- The attempt history of one job, oldest first.
SELECT * FROM {schema}.job_attempts WHERE job_id = %(id)s ORDER BY attempt;

-- name: job_events_list
-- The audit events of one job, oldest first.
SELECT * FROM {schema}.job_events WHERE job_id = %(id)s ORDER BY id;

-- name: job_inspect
-- One job for `inspect`: its payload as exact text (whole, or its first `payload_chars`) and its length; its text fields whole or cut; a Waiting job's key holder.
-- (The payload is never decoded here: its numbers keep their digits, any depth is fine, and a
-- large one is cut on the server instead of being sent whole to show its beginning.)
-- lease_owner and last_error: whole, or their first `text_chars` characters (a role may have
-- written megabytes before migration 15), each with its size in bytes when it was cut.
SELECT j.id, j.queue, j.status, j.priority, j.run_at, j.attempts, j.max_attempts,
       CASE WHEN %(text_chars)s::integer IS NULL THEN j.lease_owner
            ELSE substr(j.lease_owner, 1, %(text_chars)s::integer) END AS lease_owner,
       CASE WHEN char_length(j.lease_owner) > %(text_chars)s::integer
            THEN octet_length(j.lease_owner) END AS lease_owner_cut_bytes,
       j.lease_until, j.heartbeat_at,
       CASE WHEN %(text_chars)s::integer IS NULL THEN j.last_error
            ELSE substr(j.last_error, 1, %(text_chars)s::integer) END AS last_error,
       CASE WHEN char_length(j.last_error) > %(text_chars)s::integer
            THEN octet_length(j.last_error) END AS last_error_cut_bytes,
       j.created_at, j.updated_at, j.finished_at, j.unique_key, j.concurrency_key,
       -- (progress_attempt: job_from_row keeps the current attempt's report only, migration 32.)
       j.snoozes, j.timeout, j.progress, j.progress_message, j.progress_attempt,
       -- A Waiting job's key holder: the key's head (jobs_key_head_idx, one probe).
       (SELECT h.id FROM {schema}.jobs AS h
        WHERE j.status = 'Waiting' AND h.queue = j.queue
          AND h.concurrency_key = j.concurrency_key
          AND h.status IN ('Pending', 'Processing', 'Stuck')) AS key_holder,
       CASE WHEN %(payload_chars)s::integer IS NULL THEN p.text
            ELSE left(p.text, %(payload_chars)s::integer) END AS payload_text,
       length(p.text) AS payload_length
FROM {schema}.jobs AS j
-- (OFFSET 0: the text is made once, not once per use.)
CROSS JOIN LATERAL (SELECT j.payload::text AS text OFFSET 0) AS p
WHERE j.id = %(id)s;

-- name: job_attempts_inspect
-- The attempts of one job for `inspect`: all, or the latest `rows` (oldest first) with their owner and error cut to `text_chars` characters (sizes in bytes of the cut ones) and how many there are.
SELECT a.job_id, a.attempt,
       CASE WHEN %(text_chars)s::integer IS NULL THEN a.lease_owner
            ELSE substr(a.lease_owner, 1, %(text_chars)s::integer) END AS lease_owner,
       CASE WHEN char_length(a.lease_owner) > %(text_chars)s::integer
            THEN octet_length(a.lease_owner) END AS lease_owner_cut_bytes,
       a.started_at, a.heartbeat_at, a.ended_at, a.outcome,
       CASE WHEN %(text_chars)s::integer IS NULL THEN a.error
            ELSE substr(a.error, 1, %(text_chars)s::integer) END AS error,
       CASE WHEN char_length(a.error) > %(text_chars)s::integer
            THEN octet_length(a.error) END AS error_cut_bytes,
       a.error_detail, a.total
FROM (
    SELECT *, count(*) OVER () AS total
    FROM {schema}.job_attempts
    WHERE job_id = %(id)s
    ORDER BY attempt DESC
    LIMIT %(rows)s
) AS a
ORDER BY a.attempt;

-- name: job_events_inspect
-- The audit events of one job for `inspect`: all, or the latest `rows` (oldest first) with actor and reason cut to `text_chars` characters and before/after only as far as `inspect` shows them (status, attempts, lease_owner cut), and how many there are.
SELECT e.id, e.job_id, e.at,
       CASE WHEN %(text_chars)s::integer IS NULL THEN e.actor
            ELSE substr(e.actor, 1, %(text_chars)s::integer) END AS actor,
       CASE WHEN char_length(e.actor) > %(text_chars)s::integer
            THEN octet_length(e.actor) END AS actor_cut_bytes,
       e.action,
       CASE WHEN %(text_chars)s::integer IS NULL THEN e.reason
            ELSE substr(e.reason, 1, %(text_chars)s::integer) END AS reason,
       CASE WHEN char_length(e.reason) > %(text_chars)s::integer
            THEN octet_length(e.reason) END AS reason_cut_bytes,
       CASE WHEN %(text_chars)s::integer IS NULL OR jsonb_typeof(e.before) <> 'object' THEN e.before
            ELSE (SELECT coalesce(jsonb_object_agg(d.k, CASE WHEN jsonb_typeof(d.v) = 'string'
                      THEN to_jsonb(substr(d.v #>> '{}', 1, %(text_chars)s::integer))
                      ELSE d.v END), '{}'::jsonb)
                  FROM jsonb_each(e.before) AS d(k, v)
                  WHERE d.k IN ('status', 'attempts', 'lease_owner')) END AS before,
       CASE WHEN %(text_chars)s::integer IS NULL OR jsonb_typeof(e.after) <> 'object' THEN e.after
            ELSE (SELECT coalesce(jsonb_object_agg(d.k, CASE WHEN jsonb_typeof(d.v) = 'string'
                      THEN to_jsonb(substr(d.v #>> '{}', 1, %(text_chars)s::integer))
                      ELSE d.v END), '{}'::jsonb)
                  FROM jsonb_each(e.after) AS d(k, v)
                  WHERE d.k IN ('status', 'attempts', 'lease_owner')) END AS after,
       e.db_role, e.total
FROM (
    SELECT *, count(*) OVER () AS total
    FROM {schema}.job_events
    WHERE job_id = %(id)s
    ORDER BY id DESC
    LIMIT %(rows)s
) AS e
ORDER BY e.id;
