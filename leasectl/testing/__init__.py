"""Helpers for testing an application that uses leasectl: ``drain`` (run a queue's jobs through
the worker's own claim, fence and completion, in the test's process), ``assert_enqueued`` /
``assert_not_enqueued``, and ``fresh_schema``; the pytest plugin (``leasectl.testing.plugin``,
registered by an entry point) gives the ``leasectl_schema`` fixture. docs/testing.md.

Lazy, like ``leasectl`` itself: pytest loads the plugin in every test session of an environment
where leasectl is installed, and that must not import psycopg or the worker runtime.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from leasectl.testing.asserts import assert_enqueued, assert_not_enqueued
    from leasectl.testing.draining import Drained, DrainTimeout, JobRun, Outcome, drain
    from leasectl.testing.schema import LeasectlSchema, fresh_schema

_WHERE = {
    "drain": "leasectl.testing.draining",
    "Drained": "leasectl.testing.draining",
    "DrainTimeout": "leasectl.testing.draining",
    "JobRun": "leasectl.testing.draining",
    "Outcome": "leasectl.testing.draining",
    "assert_enqueued": "leasectl.testing.asserts",
    "assert_not_enqueued": "leasectl.testing.asserts",
    "LeasectlSchema": "leasectl.testing.schema",
    "fresh_schema": "leasectl.testing.schema",
}

__all__ = [
    "DrainTimeout",
    "Drained",
    "JobRun",
    "LeasectlSchema",
    "Outcome",
    "assert_enqueued",
    "assert_not_enqueued",
    "drain",
    "fresh_schema",
]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'leasectl.testing' has no attribute {name!r}")
