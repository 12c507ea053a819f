"""Typed errors meant for users; `cli/entry.py` makes each one line on stderr and an exit code."""

from __future__ import annotations


class LeasectlError(Exception):
    """An operational error: the message is shown as is, the exit code is 1."""

    exit_code = 1


class UsageError(LeasectlError):
    """Bad input on the command line (malformed duration, JSON, id...): exit code 2."""

    exit_code = 2


class ConfigError(LeasectlError):
    """No DSN, bad DSN or schema name."""


class ConnectionFailed(LeasectlError):
    """The server cannot be reached or refused the login."""


class SchemaMissing(LeasectlError):
    """The leasectl schema has not been initialised in this database."""


class SchemaNewer(LeasectlError):
    """The schema has migrations this leasectl does not know: a newer leasectl migrated it."""


class JobNotFound(LeasectlError):
    """An id that names no job."""


class PermissionDenied(LeasectlError):
    """The database role lacks a privilege the command needs."""


class QueryTimeout(LeasectlError):
    """A statement ran past the time limit its command set (``list --timeout``)."""


class LockBusy(LeasectlError):
    """Another session held a lock the statement needed past its lock timeout: nothing changed
    (an operator's action never waits on a worker or a transaction left open)."""


class EmbeddedServerError(LeasectlError):
    """The embedded PostgreSQL could not be started or stopped."""


class TerminalGone(LeasectlError):
    """The console's terminal went away (hung up): nobody sees the message, the exit code is
    the one a shell reports for a process killed by SIGHUP."""

    exit_code = 129


class LeaseLost(Exception):
    """Raised by ``with ctx.transaction()`` when the job's fenced completion was refused (the
    lease was lost: taken over, requeued or cancelled): the transaction was rolled back, the
    handler's writes in it are gone, and the job is someone else's now. Not a user error."""
