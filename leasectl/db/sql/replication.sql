-- name: replication_settings
-- The primary's settings that a standby needs (wal_level replica or logical, WAL senders free).
SELECT current_setting('wal_level') AS wal_level,
       current_setting('max_wal_senders')::int AS max_wal_senders

-- name: replication_set_sync_names
-- The standbys whose flush a commit waits for (ALTER SYSTEM: psycopg binds the value on the client).
ALTER SYSTEM SET synchronous_standby_names = %(names)s

-- name: replication_set_sync_commit
-- Whether a commit waits for its WAL (and a synchronous standby's flush) before it returns.
ALTER SYSTEM SET synchronous_commit = %(value)s

-- name: replication_set_wal_keep
-- WAL the primary keeps for a standby that falls behind (no slots: a promotion leaves none behind).
ALTER SYSTEM SET wal_keep_size = %(size)s

-- name: replication_reload
-- Re-read the configuration files, as SIGHUP does.
SELECT pg_reload_conf()

-- name: replication_sync_names
-- The synchronous_standby_names in effect for this session (after a reload has reached it).
SELECT current_setting('synchronous_standby_names') AS names

-- name: replication_in_recovery
-- Whether this server is a standby (in recovery) rather than a primary.
SELECT pg_is_in_recovery() AS in_recovery

-- name: replication_current_lsn
-- The end of the primary's WAL as inserted (past every commit that returned, even unflushed ones).
SELECT pg_current_wal_insert_lsn()::text AS lsn

-- name: replication_replayed
-- Whether this standby has replayed WAL up to %(lsn)s.
SELECT coalesce(pg_last_wal_replay_lsn() >= %(lsn)s::pg_lsn, false) AS replayed

-- name: replication_standby_state
-- The primary's view of one standby's connection, by its application_name.
SELECT state, sync_state, replay_lsn::text AS replay_lsn
FROM pg_stat_replication
WHERE application_name = %(name)s
