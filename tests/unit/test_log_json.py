"""``--log-format json``'s formatter: every field of the hostile corpus comes back exactly as it
was from a line of printable ASCII (nothing a terminal or a log shipper could take for a control),
a job's fields are fields of their own, and the DSN's password is taken out of every one."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from leasectl.cli.redaction import Secrets
from leasectl.cli.stderr import LOG_FIELDS, _JsonFormatter
from leasectl.core.models import Job, JobStatus, Lease
from leasectl.runtime.handler_errors import LOG_ERROR_LIMIT, job_fields
from leasectl.runtime.handler_errors import LOG_FIELDS as RUNTIME_LOG_FIELDS
from tests.hostile import CORPUS, NAMES

SECRET = "s3cr3t-Pa55"


def record(msg: str, *args: object, **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("leasectl.worker", logging.WARNING, __file__, 1, msg, args, None)
    rec.__dict__.update(extra)
    return rec


def printable(line: str) -> bool:
    return all(0x20 <= ord(c) < 0x7F for c in line)


def test_the_runtime_and_the_cli_agree_on_the_records_key() -> None:
    assert LOG_FIELDS == RUNTIME_LOG_FIELDS


@pytest.mark.parametrize("text", CORPUS, ids=range(len(CORPUS)))
def test_hostile_text_is_data(text: str) -> None:
    fields = {"job": 1, "attempt": 2, "queue": text[:200], "outcome": "failed", "error": text}
    line = _JsonFormatter(Secrets()).format(
        record("job %s: %s", text, text, **{LOG_FIELDS: fields})
    )
    assert printable(line), repr(line)
    parsed = json.loads(line)
    assert parsed["msg"] == f"job {text}: {text}"
    assert (parsed["queue"], parsed["error"]) == (text[:200], text)


def test_a_jobs_fields_come_from_its_lease_in_order() -> None:
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    job = Job(
        id=7, queue=NAMES[0], payload={}, status=JobStatus.PROCESSING, priority=0, run_at=now,
        attempts=3, max_attempts=5, lease_owner="w", lease_until=now, heartbeat_at=None,
        last_error=None, created_at=now, updated_at=now, finished_at=None,
    )  # fmt: skip
    held = Lease(job=job, owner="w", attempt=3, until=now)
    extra = job_fields(held, "retrying", "ValueError: first line\nsecond" + "x" * 500)
    line = _JsonFormatter(Secrets()).format(record("failed", **extra))
    parsed = json.loads(line)
    assert list(parsed) == ["ts", "level", "logger", "msg", "job", "attempt", "queue", "outcome",
                            "error"]  # fmt: skip
    assert (parsed["job"], parsed["attempt"], parsed["queue"]) == (7, 3, NAMES[0])
    assert parsed["level"] == "warning" and parsed["outcome"] == "retrying"
    assert parsed["error"] == "ValueError: first line"
    long = job_fields(held, "failed", "E: " + "y" * 5000)[LOG_FIELDS]["error"]
    assert len(long) <= LOG_ERROR_LIMIT


def test_no_field_shows_the_password() -> None:
    # (Where it stands as the password: a queue or an id that holds its text is left alone.)
    fields = {"job": 1, "queue": "q", "outcome": "failed", "error": f"E: password={SECRET}"}
    try:
        raise RuntimeError(f"cannot connect password={SECRET}")
    except RuntimeError:
        exc_info = sys.exc_info()
    rec = record("dsn password=%s", SECRET, **{LOG_FIELDS: fields})
    rec.exc_info = exc_info
    line = _JsonFormatter(Secrets(passwords=(SECRET,))).format(rec)
    assert SECRET not in line
    parsed = json.loads(line)
    assert "Traceback" in parsed["exc"] and parsed["error"] == "E: password=***"


def test_a_line_about_no_job_has_only_the_four_fields() -> None:
    parsed = json.loads(_JsonFormatter(Secrets()).format(record("worker w started")))
    assert list(parsed) == ["ts", "level", "logger", "msg"]
    assert parsed["ts"].endswith("Z")


def test_the_design_doc_lists_every_field_in_order() -> None:
    from pathlib import Path

    from leasectl.cli.stderr import JOB_KEYS

    doc = (Path(__file__).resolve().parents[2] / "docs" / "design.md").read_text()
    section = doc.split("\n### Log lines\n", 1)[1].split("\n### ", 1)[0]
    rows = [line.split("`")[1] for line in section.splitlines() if line.startswith("| `")]
    assert rows == ["ts", "level", "logger", "msg", *JOB_KEYS, "exc"]
