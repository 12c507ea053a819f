-- name: schema_lock
-- Serialise concurrent `init` runs on one schema for the rest of the transaction.
SELECT pg_advisory_xact_lock(1818584436, hashtext(%(schema)s));

-- name: schema_exists
-- Whether the leasectl tables exist in this schema (checked before any command runs).
SELECT to_regclass(%(jobs_table)s) IS NOT NULL AS jobs,
       to_regclass(%(migrations_table)s) IS NOT NULL AS migrations;

-- name: migrations_table_create
-- The bookkeeping table of applied migrations.
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {schema}.schema_migrations (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);

-- name: migrations_applied
-- Versions already applied, ascending.
SELECT version FROM {schema}.schema_migrations ORDER BY version;

-- name: migration_record
-- Remember that one migration was applied (same transaction as the migration).
INSERT INTO {schema}.schema_migrations (version, name) VALUES (%(version)s, %(name)s);

-- name: server_info
-- The server's version and clock, for the console header and `status`.
SELECT current_setting('server_version') AS server_version, now() AS db_now,
       current_database() AS database;

-- name: jobs_update_privilege
-- Whether the current role may change jobs (the console turns read-only when it may not).
SELECT has_table_privilege(%(jobs_table)s, 'UPDATE') AS can_update;

-- name: prepared_parameter_types
-- The parameter types the server inferred for a statement this session prepared (by name).
SELECT parameter_types::oid[] FROM pg_prepared_statements WHERE name = %(name)s;
