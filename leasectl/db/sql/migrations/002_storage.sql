-- Storage settings for a hot, churning queue table. {schema} is the quoted schema name.
-- jobs keeps fillfactor 70 (set in 001) so that heartbeats (lease_until, heartbeat_at: not
-- indexed) stay HOT updates; vacuum early so that dead versions do not pile up in the live
-- partial indexes that claims scan.
ALTER TABLE {schema}.jobs SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 1
);
-- An attempt row is written at claim and updated once when it ends: leave room for that HOT update.
ALTER TABLE {schema}.job_attempts SET (
    fillfactor = 85,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.05
);
-- Worker rows are updated by every worker-level heartbeat.
ALTER TABLE {schema}.workers SET (fillfactor = 70);
