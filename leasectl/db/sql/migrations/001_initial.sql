-- The leasectl schema, version 1. {schema} is replaced by the quoted schema name.
CREATE SCHEMA IF NOT EXISTS {schema};

CREATE TYPE {schema}.job_status AS ENUM ('Pending', 'Processing', 'Completed', 'Failed', 'Stuck');

CREATE TYPE {schema}.attempt_outcome AS ENUM (
    'running', 'completed', 'failed', 'expired', 'released', 'marked_stuck', 'requeued'
);

CREATE TABLE {schema}.jobs (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue         text NOT NULL DEFAULT 'default',
    payload       jsonb NOT NULL DEFAULT '{}'::jsonb,
    status        {schema}.job_status NOT NULL DEFAULT 'Pending',
    priority      integer NOT NULL DEFAULT 0,
    run_at        timestamptz NOT NULL DEFAULT now(),
    attempts      integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts  integer NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
    lease_owner   text,
    lease_until   timestamptz,
    heartbeat_at  timestamptz,
    last_error    text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz,
    CONSTRAINT jobs_processing_has_lease
        CHECK (status <> 'Processing' OR (lease_owner IS NOT NULL AND lease_until IS NOT NULL))
) WITH (fillfactor = 70);

-- Claim: the next Pending jobs of a queue in priority order. Only live rows are in it.
CREATE INDEX jobs_claimable_idx ON {schema}.jobs (queue, priority, run_at, id)
    WHERE status = 'Pending';
-- Watcher, console, status: the Processing set (bounded by the fleet's concurrency).
-- lease_until and heartbeat_at are deliberately not indexed so that a heartbeat is a HOT update.
CREATE INDEX jobs_processing_idx ON {schema}.jobs (queue, lease_owner)
    WHERE status = 'Processing';
CREATE INDEX jobs_stuck_idx ON {schema}.jobs (queue, updated_at)
    WHERE status = 'Stuck';
-- Throughput and pruning of finished history, by time.
CREATE INDEX jobs_finished_idx ON {schema}.jobs (finished_at)
    WHERE status IN ('Completed', 'Failed');

CREATE TABLE {schema}.job_attempts (
    job_id        bigint NOT NULL REFERENCES {schema}.jobs (id) ON DELETE CASCADE,
    attempt       integer NOT NULL,
    lease_owner   text NOT NULL,
    started_at    timestamptz NOT NULL DEFAULT now(),
    heartbeat_at  timestamptz,
    ended_at      timestamptz,
    outcome       {schema}.attempt_outcome NOT NULL DEFAULT 'running',
    error         text,
    PRIMARY KEY (job_id, attempt)
);

CREATE TABLE {schema}.job_events (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id   bigint NOT NULL,
    at       timestamptz NOT NULL DEFAULT now(),
    actor    text NOT NULL,
    action   text NOT NULL,
    reason   text,
    before   jsonb,
    after    jsonb
);
CREATE INDEX job_events_job_idx ON {schema}.job_events (job_id, id);

CREATE TABLE {schema}.workers (
    worker_id        text PRIMARY KEY,
    hostname         text NOT NULL,
    pid              integer NOT NULL,
    queues           text[] NOT NULL,
    lease_ttl        interval NOT NULL,
    heartbeat_every  interval NOT NULL,
    started_at       timestamptz NOT NULL DEFAULT now(),
    last_seen_at     timestamptz NOT NULL DEFAULT now(),
    stopped_at       timestamptz
);
CREATE INDEX workers_last_seen_idx ON {schema}.workers (last_seen_at);
