-- Bounds on what a worker or an operator may write, so that no role can freeze, blind or crash
-- the readers and workers that others run. {schema} is the quoted schema name.
-- Migration 5 bounded what a producer writes; these are the columns a worker role may write
-- directly (grant_worker) and the text an operator hands the audited functions.
--
-- * workers: lease_ttl and heartbeat_every within 0 to 3650 days (the longest duration the
--   command line takes, core/config.py MAX_DURATION): '100000000 years' made every read that
--   adds one to now() fail ("timestamp out of range") and every one that loads it fail (no
--   timedelta holds it). worker_id and hostname at most 400 characters, queues at most 1000
--   names of at most 200 characters in all 200,000.
-- * jobs: lease_owner at most 400 characters (a worker id), last_error at most 4000 (what the
--   worker keeps of an error, runtime/worker.py _error_text). A 19 MB lease_owner made inspect
--   take minutes and the console's detail screen stop answering keys.
-- * job_attempts: lease_owner at most 400, error at most 4000 characters (as jobs).
-- * job_events: actor and reason at most 1000 characters (as queue_events, migration 7).
--
-- jobs.attempts has no upper bound here: a lease counts one more attempt at every claim, and
-- releases and requeues may take it past max_attempts, so any bound is reachable by the claim
-- itself, whose +1 would then fail as the integer's maximum does. The worker copes instead:
-- a due job it cannot count another attempt for is failed alone (jobs_fail_unclaimable).
--
-- Rows already outside these bounds. jobs and job_attempts rows are updated again by other
-- roles' statements (a claim keeps last_error; a completion closes its attempt), and a NOT
-- VALID constraint still checks every new row version: one old row out of bounds would make
-- every such statement fail. So their rows are cut to the bounds first, each cut job with an
-- audit event ('bounded', the lengths before). The constraint is added NOT VALID before the
-- cut, so that its lock (ACCESS EXCLUSIVE, to the commit) keeps new rows from slipping in
-- between, and it is not validated after: every row was just made to hold, a validation would
-- read both tables a second time under that lock. workers and job_events rows are kept as they
-- are (NOT VALID): an event is never updated, a workers row only by the worker that owns it,
-- and the readers bound what they read of both (intervals clamped, text cut: docs/design.md).
--
-- The jobs bounds join migration 5's in one constraint: every UPDATE of jobs prepares each
-- CHECK constraint anew, and one constraint costs less than two (BENCHMARKS.md).
ALTER TABLE {schema}.jobs DROP CONSTRAINT jobs_bounded_values;
ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_bounded_values CHECK (
    char_length(queue) <= 200
    AND max_attempts <= 1000
    AND run_at BETWEEN '0001-01-02 00:00+00' AND '9999-12-30 00:00+00'
    AND char_length(lease_owner) <= 400
    AND char_length(last_error) <= 4000
) NOT VALID;
ALTER TABLE {schema}.job_attempts ADD CONSTRAINT job_attempts_bounded_values CHECK (
    char_length(lease_owner) <= 400 AND char_length(error) <= 4000
) NOT VALID;
ALTER TABLE {schema}.job_events ADD CONSTRAINT job_events_bounded_values CHECK (
    char_length(actor) <= 1000 AND char_length(reason) <= 1000
) NOT VALID;
ALTER TABLE {schema}.workers ADD CONSTRAINT workers_bounded_values CHECK (
    lease_ttl BETWEEN interval '0' AND interval '3650 days'
    AND heartbeat_every BETWEEN interval '0' AND interval '3650 days'
    AND char_length(worker_id) <= 400
    AND char_length(hostname) <= 400
    AND cardinality(queues) <= 1000
    AND char_length(array_to_string(queues, '')) <= 200000
) NOT VALID;

-- (octet_length first: it reads a stored value's size without decompressing or fetching it.)
WITH outside AS (
    SELECT id, char_length(lease_owner) AS lease_owner_chars,
           char_length(last_error) AS last_error_chars
    FROM {schema}.jobs
    WHERE (octet_length(lease_owner) > 400 AND char_length(lease_owner) > 400)
       OR (octet_length(last_error) > 4000 AND char_length(last_error) > 4000)
    FOR UPDATE
), fixed AS (
    UPDATE {schema}.jobs AS j
    SET lease_owner = left(j.lease_owner, 400), last_error = left(j.last_error, 4000)
    FROM outside AS o
    WHERE j.id = o.id
    RETURNING j.id
)
INSERT INTO {schema}.job_events (job_id, actor, action, reason, before, after)
SELECT f.id, 'leasectl init', 'bounded',
       'text longer than the bounds of schema version 15 (lease_owner <= 400 characters, '
       || 'last_error <= 4000) cut to its beginning',
       jsonb_build_object('lease_owner_chars', o.lease_owner_chars,
                          'last_error_chars', o.last_error_chars),
       jsonb_build_object('lease_owner_chars', least(o.lease_owner_chars, 400),
                          'last_error_chars', least(o.last_error_chars, 4000))
FROM fixed AS f JOIN outside AS o ON o.id = f.id;

UPDATE {schema}.job_attempts
SET lease_owner = left(lease_owner, 400), error = left(error, 4000)
WHERE (octet_length(lease_owner) > 400 AND char_length(lease_owner) > 400)
   OR (octet_length(error) > 4000 AND char_length(error) > 4000);
