"""The parameters of every connection leasectl opens: a pinned search_path, TCP keepalives and
a TCP user timeout (README, "Connections").

- ``search_path`` is ``pg_catalog, pg_temp`` for the whole session (sent in the startup packet as
  ``options``, so it also survives a ``DISCARD ALL``): an operator or function planted in a schema
  others may create in (``public`` before PostgreSQL 15) is never looked up by our statements.
  ``options`` already in the DSN (or ``PGOPTIONS``) are kept; ours come last and win.
- Keepalives and ``tcp_user_timeout`` make a connection whose packets are silently dropped fail
  within about half a minute, instead of the kernel's ~15 minutes. A parameter the DSN names wins.
"""

from __future__ import annotations

import os
from typing import Any

from leasectl.db.dsn import dsn_params

CONNECT_TIMEOUT_S = 5

SEARCH_PATH = "pg_catalog,pg_temp"
SEARCH_PATH_OPTION = f"-c search_path={SEARCH_PATH}"

# Idle 10 s, then a probe every 5 s, 3 unanswered probes: a dead peer is found within ~25 s;
# data unacknowledged for 30 s fails the connection too (libpq's units: seconds, milliseconds).
KEEPALIVE_DEFAULTS: dict[str, str] = {
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
    "tcp_user_timeout": "30000",
}


def session_kwargs(
    dsn: str,
    *,
    application_name: str | None = None,
    connect_timeout: int = CONNECT_TIMEOUT_S,
    autocommit: bool = True,
    pin_search_path: bool = True,
) -> dict[str, Any]:
    """The keyword arguments of ``psycopg.connect(dsn, **kwargs)`` (or a pool's ``kwargs``) for a
    leasectl session on ``dsn``: the DSN's own parameters win over the keepalive defaults, and its
    ``options`` are kept before the pinned search_path. ``pin_search_path=False``: a connection
    the application's own SQL runs on (a handler's ``ctx.transaction()``), which keeps the
    DSN's search_path; leasectl's statement on it names its operators with their schema."""
    given = dsn_params(dsn)
    kwargs: dict[str, Any] = {"autocommit": autocommit, "connect_timeout": connect_timeout}
    if application_name is not None:
        kwargs["application_name"] = application_name
    for name, value in KEEPALIVE_DEFAULTS.items():
        if name not in given:
            kwargs[name] = value
    if pin_search_path:
        kwargs["options"] = pinned_options(given.get("options") or os.environ.get("PGOPTIONS"))
    return kwargs


def pinned_options(options: str | None) -> str:
    """libpq's ``options`` with the pinned search_path last (a later ``-c`` wins)."""
    return (
        f"{options.strip()} {SEARCH_PATH_OPTION}"
        if options and options.strip()
        else (SEARCH_PATH_OPTION)
    )
