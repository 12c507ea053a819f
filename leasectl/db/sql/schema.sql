-- name: schema_lock
-- Serialise concurrent `init` runs on one schema for the rest of the transaction.
SELECT pg_advisory_xact_lock(1818584436, hashtext(%(schema)s));

-- name: schema_lock_session
-- The same lock for a whole `init` (its transactions, when a migration adds enum values), until schema_unlock_session or the session's end: another `init` waits for all of them.
SELECT pg_advisory_lock(1818584436, hashtext(%(schema)s));

-- name: schema_unlock_session
-- Release schema_lock_session.
SELECT pg_advisory_unlock(1818584436, hashtext(%(schema)s));

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

-- name: session_read_only
-- Make every transaction of this session read-only: the connection of reads sent to a hot standby
-- (`tui`/`status --read-dsn`) can never write, whichever server the DSN names.
SELECT set_config('default_transaction_read_only', 'on', false);

-- name: jobs_update_privilege
-- Whether the current role may run the operator's actions (else the console is read-only).
-- They are the audited functions of migration 6 (an operator has no UPDATE on jobs).
SELECT count(*) = 2 AND bool_and(has_function_privilege(p.oid, 'EXECUTE')) AS can_update
FROM pg_catalog.pg_proc AS p
JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
WHERE n.nspname = %(schema)s
  AND p.proname IN ('jobs_operator_requeue', 'jobs_operator_mark_stuck');

-- name: prepared_parameter_types
-- The parameter types the server inferred for a statement this session prepared (by name).
SELECT parameter_types::oid[] FROM pg_prepared_statements WHERE name = %(name)s;

-- name: session_lock_timeout
-- Bound this transaction's lock waits (an operator's action): past it, the statement fails and nothing changes.
SELECT set_config('lock_timeout', %(lock_timeout)s::text, true);

-- name: schemas_writable_by_others
-- leasectl's schema and public, where roles other than the owner hold CREATE (grantee 0: PUBLIC).
SELECT n.nspname AS schema,
       pg_catalog.array_agg(
           DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                         ELSE pg_catalog.pg_get_userbyid(a.grantee)::text END
       ) AS roles
FROM pg_catalog.pg_namespace AS n
CROSS JOIN LATERAL pg_catalog.aclexplode(n.nspacl) AS a
WHERE n.nspname = ANY (ARRAY[%(schema)s::text, 'public'])
  AND a.privilege_type = 'CREATE'
  AND a.grantee <> n.nspowner
GROUP BY n.nspname
ORDER BY n.nspname;
