"""Migration 33 (claims of a limited queue in one statement while the limit has room) and the
roles: workers granted before it claim within a limit set before it, through the new
claim_budget, with no `leasectl grant` re-run; none of them may call the counted path
(claim_budget_counted) directly any more."""

from __future__ import annotations

import secrets
from datetime import timedelta

import psycopg
import pytest
from psycopg import errors

from tests.integration.test_privileges import KINDS, grant_without, init_to, login_roles
from tests.stores import Stores

pytestmark = pytest.mark.full


def test_workers_granted_at_version_32_claim_a_limited_queue_after_the_upgrade(
    server_dsn: str, empty_db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    tag = secrets.token_hex(4)
    names = {kind: f"lc_v32_{kind}_{tag}" for kind in KINDS}
    with login_roles(server_dsn, empty_db_dsn, names) as roles:
        every = init_to(empty_db_dsn, 32, monkeypatch)
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn, conn.transaction():
            for kind, name in names.items():
                grant_without(conn, kind, name, ())
            # A limit set at version 32 (cap 16: 8 shards of 2), its shards without terms.
            conn.execute(
                "SELECT leasectl.queue_limit_set('q', 16, NULL, NULL, 'op', 'r', 'leasectl_q')"
            )
        with Stores.connect(empty_db_dsn, "leasectl", check_schema=False) as store:
            assert store.db.migrate() == [m.version for m in every][32:]
            store.ops.enqueue([{} for _ in range(20)], queue="q")
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
            terms = conn.execute(
                "SELECT share, fast_from = '-infinity', live_hint FROM leasectl.queue_limit_shards "
                "WHERE queue = 'q' ORDER BY shard"
            ).fetchall()
        assert terms == [(2, True, None)] * 8
        ttl = timedelta(seconds=30)
        with Stores.connect(roles.dsn("worker"), "leasectl") as store:
            taken = [len(store.work.claim("q", f"w-{n}", ttl, 3)) for n in range(8)]
            assert sum(taken) == 16 and store.work.claim("q", "w-late", ttl, 1) == []
        with psycopg.connect(roles.dsn("worker"), autocommit=True) as conn:
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute("SELECT * FROM leasectl.claim_budget_counted('q', 1, '{}', 'w', 8)")
