-- name: embedded_set_password
-- The embedded server's superuser password (single-user mode, no bound parameters: our own hex, quoted).
ALTER ROLE postgres PASSWORD %(password)s
