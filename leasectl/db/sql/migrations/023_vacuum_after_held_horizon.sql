-- Autovacuum for the queue tables, for the minutes after a held xmin horizon is released (a
-- transaction left idle, a long report, a standby's hot_standby_feedback, a stale replication
-- slot). While the horizon is held no setting helps: vacuum may remove no version newer than it,
-- and every job leaves dead versions behind (about two in jobs, one in job_attempts, half of one
-- in counter_deltas: bench/held_bloat.py). Once it is released, these settings let the first
-- vacuum of each table come at the next autovacuum cycle and run unthrottled.
-- {schema} is the quoted schema name.
--
-- No cost delay on the hot tables: their vacuum is work the claims wait for (dead entries at the
-- head of the claim index), not background work to spread out. No truncation at the end of a
-- vacuum: it takes an ACCESS EXCLUSIVE lock, which queues every claim behind it while it waits;
-- the free pages at the end of the table are reused by the next jobs anyway.
ALTER TABLE {schema}.jobs SET (
    autovacuum_vacuum_cost_delay = 0,
    vacuum_truncate = false
);
-- As jobs (002) for the attempts: vacuumed at 1% of the table plus a thousand dead versions,
-- not at 2% plus 50 (at ten million attempts: after 101,000 dead versions, not 200,050).
ALTER TABLE {schema}.job_attempts SET (
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0,
    vacuum_truncate = false
);
-- A row per worker, a new version at every heartbeat: vacuumed at a fixed count, whatever the
-- table's size.
ALTER TABLE {schema}.workers SET (
    autovacuum_vacuum_threshold = 500,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_cost_delay = 0
);
-- The counters' deltas (migration 11: its thresholds kept, its triggers untouched): unthrottled.
ALTER TABLE {schema}.counter_deltas SET (autovacuum_vacuum_cost_delay = 0);
