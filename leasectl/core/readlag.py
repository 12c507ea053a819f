"""Reads from a hot standby: when its lag makes the countdowns stale (pure logic).

A read served by a standby is as of the last transaction it replayed, and every countdown is
computed against that time (the read clock, ``read_clock``), never the local clock. Behind by
more than a lease TTL, a lease shown live may have lapsed on the primary (or been renewed, or
its job moved): the console and ``status`` say so.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from leasectl.core.models import OwnerHealth

# A worker's lease TTL unless it says otherwise (``leasectl worker --lease-ttl``'s default).
DEFAULT_LEASE_TTL = timedelta(seconds=30)


def stale_after(owners: Iterable[OwnerHealth]) -> timedelta:
    """The lag past which countdowns are stale: the shortest lease TTL any owner declared
    (the leases that move soonest), else the workers' default."""
    ttls = [o.lease_ttl for o in owners if o.lease_ttl is not None and o.lease_ttl > timedelta(0)]
    return min(ttls, default=DEFAULT_LEASE_TTL)


def countdowns_stale(lag: timedelta | None, owners: Iterable[OwnerHealth]) -> bool:
    """Whether a read ``lag`` behind its primary (None: read from the primary) makes every
    countdown stale."""
    return lag is not None and lag > stale_after(owners)
