"""`leasectl list`: a page of jobs as a table or a JSON document, and how to get the next page."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType
from rich.text import Text

from leasectl.core.filters import JobFilter, JobPage, ListedJob
from leasectl.core.literal import shorten
from leasectl.core.models import JobStatus
from leasectl.present.jsonout import jsonable
from leasectl.present.styles import status_text
from leasectl.present.text import lit, table
from leasectl.present.times import ago, timestamp

# What a table cell shows of an error or a payload (the JSON has TEXT_CHARS of each; inspect
# all of it).
CELL_CHARS = 60


def filter_text(flt: JobFilter) -> Text:
    """The filter as the options that made it (values literal)."""
    parts = flt.parts()
    if not parts:
        return Text("all jobs")
    out = Text()
    for i, (option, value) in enumerate(parts):
        if i:
            out.append(" ")
        out.append(f"{option} ")
        out.append_text(lit(shorten(value, 200)))
    return out


def _cut(text: str | None, chars: int | None) -> Text:
    if text is None:
        return Text("-", style="dim")
    whole = chars if chars is not None else len(text)
    shown = text if whole <= CELL_CHARS and len(text) == whole else text[: CELL_CHARS - 1] + "…"
    return lit(shown)


def _payload_cell(job: ListedJob) -> Text:
    """The payload's beginning, or its stored size when it was too big to read for a list."""
    if job.payload_text is None:
        return Text(f"({job.payload_bytes or 0:,} bytes: inspect {job.id})", style="dim")
    return _cut(job.payload_text, job.payload_chars)


def _key_cell(job: ListedJob) -> Text:
    """Its concurrency key; a Waiting job's says which job holds the key (first: cut last)."""
    if job.concurrency_key is None:
        return Text("-")
    cell = Text()
    if job.status == JobStatus.WAITING:
        held = f"job {job.key_holder}" if job.key_holder is not None else "none: promoted soon"
        cell.append(f"⏳ key busy ({held}) ", style="yellow")
    cell.append_text(lit(job.concurrency_key))
    return cell


def _when(page: JobPage, job: ListedJob) -> Text:
    """The time the filter's --since/--until apply to: finished, or created."""
    moment = job.finished_at if page.filter.finished_only else job.created_at
    return Text(ago(page.db_now, moment))


class JobListing:
    """A page as a table, one line per job, laid out for the width it is printed at: the id,
    status, attempts and time whole; queue, owner, error and payload share what is left (the
    payload only from 100 columns, the error from 70), each cut with an ellipsis (``inspect
    ID`` shows them whole)."""

    GAP = 2  # between columns (padding, and the frame's blank column)

    def __init__(self, page: JobPage) -> None:
        self.page = page

    def __rich_console__(
        self, console: Console, options: ConsoleOptions
    ) -> Iterator[RenderableType]:
        page = self.page
        when = page.filter.time_column.removesuffix("_at")
        fixed: list[tuple[str, list[Text]]] = [
            ("id", [Text(str(j.id)) for j in page.jobs]),
            ("status", [status_text(j.status) for j in page.jobs]),
            ("att.", [Text(f"{j.attempts}/{j.max_attempts}") for j in page.jobs]),
            (when, [_when(page, j) for j in page.jobs]),
        ]
        texts: list[tuple[str, list[Text], int]] = [
            ("queue", [lit(j.queue) for j in page.jobs], 30),
            ("owner", [lit(j.lease_owner or "-") for j in page.jobs], 30),
        ]
        if any(j.concurrency_key is not None for j in page.jobs):
            texts.append(("key", [_key_cell(j) for j in page.jobs], CELL_CHARS))
        width = options.max_width
        if width >= 70:
            errors = [_cut(j.last_error, j.last_error_chars) for j in page.jobs]
            texts.append(("last error", errors, CELL_CHARS))
        if width >= 100:
            payloads = [_payload_cell(j) for j in page.jobs]
            texts.append(("payload", payloads, CELL_CHARS))

        def natural(header: str, cells: list[Text]) -> int:
            return max(len(header), *(c.cell_len for c in cells))

        widths = {h: natural(h, cells) for h, cells in fixed}
        left = width - sum(widths.values()) - self.GAP * (len(fixed) + len(texts) - 1)
        wanted = {h: min(cap, natural(h, cells)) for h, cells, cap in texts}
        # Each text column gets its share of what is left, what a narrower one does not need
        # going to the others.
        for i, (h, _, _) in enumerate(sorted(texts, key=lambda t: wanted[t[0]])):
            share = max(4, left // (len(texts) - i))
            widths[h] = min(wanted[h], share)
            left -= widths[h]
        listing = table("")
        order = [
            fixed[0],
            fixed[1],
            texts[0][:2],
            fixed[2],
            texts[1][:2],
            fixed[3],
            *(t[:2] for t in texts[2:]),
        ]
        columns: list[list[Text]] = []
        for header, cells in order:
            right = header in ("id", "att.")
            listing.add_column(
                header,
                justify="right" if right else "left",
                no_wrap=True,
                overflow="ellipsis",
                width=widths[header],
            )
            columns.append(cells)
        for row in zip(*columns, strict=True):
            listing.add_row(*row)
        yield listing


def list_renderables(page: JobPage) -> list[RenderableType]:
    title = Text(f"jobs at {timestamp(page.db_now)} (database clock), newest first", "bold")
    shown = Text("filter: ")
    shown.append_text(filter_text(page.filter))
    if page.filter.since is not None or page.filter.until is not None:
        shown.append(f" (times: {page.filter.time_column})", style="dim")
    parts: list[RenderableType] = [title, shown]
    if not page.jobs:
        below = f" below id {page.after}" if page.after is not None else ""
        parts.append(Text(f"no jobs match{below}", style="dim"))
        return parts
    parts.append(JobListing(page))
    if page.next_after is not None:
        parts.append(Text(f"{len(page.jobs)} job(s); next page: --after {page.next_after}"))
    else:
        parts.append(Text(f"{len(page.jobs)} job(s); no more", style="dim"))
    return parts


def listed_job_json(job: ListedJob) -> dict[str, Any]:
    result: dict[str, Any] = jsonable(job)
    return result


def page_json(page: JobPage) -> dict[str, Any]:
    return {
        "jobs": [listed_job_json(j) for j in page.jobs],
        "next_after": page.next_after,
        "db_now": jsonable(page.db_now),
    }
