"""The embedded server trusts nobody: every connection needs the password in its passfile, which
only the server directory's owner reads; a cluster an older leasectl made with trust auth gets
one on its next start. Each test makes its own EmbeddedServer.temporary() and removes it."""

from __future__ import annotations

import stat
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from leasectl.db.embedded import EmbeddedServer
from leasectl.db.embedded.auth import read_password

pytestmark = pytest.mark.full

TRUSTING_HBA = "local all all trust\nhost all all 127.0.0.1/32 trust\n"


@pytest.fixture
def server() -> Iterator[EmbeddedServer]:
    srv = EmbeddedServer.temporary()
    try:
        srv.start()
        yield srv
    finally:
        srv.stop(remove=True, mode="immediate")


def without_password(dsn: str) -> str:
    """The DSN another local account could use: everything but the passfile it cannot read."""
    params = conninfo_to_dict(dsn)
    params["passfile"] = f"{params['passfile']}.missing"  # nor ~/.pgpass
    return make_conninfo("", **params)


def refused(dsn: str) -> str:
    with pytest.raises(psycopg.OperationalError) as caught:
        psycopg.connect(without_password(dsn), connect_timeout=5).close()
    return str(caught.value)


def test_a_connection_without_the_password_is_refused(server: EmbeddedServer) -> None:
    message = refused(server.dsn())
    assert "password" in message
    wrong = make_conninfo(without_password(server.dsn()), password="guess")
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(wrong, connect_timeout=5).close()
    with psycopg.connect(server.dsn(), autocommit=True) as conn:  # the DSN itself still works
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_the_password_is_in_a_private_file_not_in_the_dsn(server: EmbeddedServer) -> None:
    password = read_password(server.passfile)
    assert password is not None and len(password) >= 32
    assert password not in server.dsn()
    assert stat.S_IMODE(server.passfile.stat().st_mode) == 0o600
    assert password not in server.log_path.read_text(encoding="utf-8", errors="replace")


def test_a_trusting_cluster_gets_a_password_on_its_next_start(server: EmbeddedServer) -> None:
    """As an older leasectl left it: trust in pg_hba.conf, no passfile, still running."""
    (server.pgdata / "pg_hba.conf").write_text(TRUSTING_HBA, encoding="utf-8")
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute("SELECT pg_reload_conf()")
        conn.execute("ALTER ROLE postgres PASSWORD NULL")
    server.passfile.unlink()
    psycopg.connect(without_password(server.dsn()), connect_timeout=5).close()  # trusted
    server.start()
    assert "password" in refused(server.dsn())
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    server.restart()  # the same password again, from the file
    assert "password" in refused(server.dsn())
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
