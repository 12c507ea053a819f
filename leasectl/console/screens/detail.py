"""`enter`: one job as `leasectl inspect` shows it, with the same renderables
(leasectl/present/detail.py), under a title line that says as of when."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from rich.console import Group, RenderableType
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from leasectl.console.messages import DetailFailed, DetailLoaded
from leasectl.console.view import Action, as_panel_job
from leasectl.core.actions import ACTIONS
from leasectl.core.errors import LeasectlError
from leasectl.core.models import JobDetail, PanelJob
from leasectl.present.detail import detail_renderables
from leasectl.present.styles import status_text
from leasectl.present.text import lit
from leasectl.present.times import local_stamp

# An error or a reason in a table cell is cut here: the column is narrow, and 100,000 characters
# folded into it would be thousands of lines. (The job's last error is shown whole.)
CELL_LIMIT = 2000


class DetailScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("ctrl+r", "reload", "Reload"),
        *(Binding(a.key, f"act('{a.name}')", a.verb) for a in ACTIONS.values()),
        Binding("P", "pause", "Pause"),
    ]

    def __init__(
        self,
        job_id: int,
        load: Callable[[int], JobDetail],
        act: Callable[[Action, list[PanelJob]], None] | None = None,
        pause: Callable[[str | None], None] | None = None,
    ) -> None:
        """``load`` reads the job (in a thread: it may block on the database); ``act``
        confirms and runs a guarded action on the job as this screen last loaded it; ``pause``
        confirms and pauses (or resumes) its queue."""
        super().__init__()
        self.pause = pause
        self.job_id = job_id
        self.load = load
        self.act = act
        self.detail: JobDetail | None = None

    def compose(self) -> ComposeResult:
        yield Static(Text(f" Job #{self.job_id}", style="bold"), id="detail-title")
        with VerticalScroll(id="detail-body"):
            yield Static(Text(f"loading job #{self.job_id}…", style="dim"), id="detail-content")
        yield Footer(compact=True)  # every key within 80 columns

    def on_mount(self) -> None:
        self.action_reload()

    def action_back(self) -> None:
        self.dismiss(None)

    def action_reload(self) -> None:
        self._load(self.job_id)

    def action_act(self, name: str) -> None:
        """Act on the job as shown (guarded on that state); reload (ctrl+r) to see the change."""
        if self.detail is None:
            self.notify(f"Job #{self.job_id} is not loaded yet: nothing to act on.", timeout=4)
        elif self.act is not None:
            self.act(Action(name), [as_panel_job(self.detail.job)])

    def action_pause(self) -> None:
        """Pause (or resume) the job's queue."""
        if self.detail is None:
            self.notify(f"Job #{self.job_id} is not loaded yet: its queue is not known.", timeout=4)
        elif self.pause is not None:
            self.pause(self.detail.job.queue)

    @work(thread=True, exclusive=True, exit_on_error=False, group="detail")
    def _load(self, job_id: int) -> None:
        try:
            detail = self.load(job_id)
        except LeasectlError as exc:
            self.post_message(DetailFailed(job_id, str(exc)))
        except Exception as exc:
            self.post_message(DetailFailed(job_id, f"{type(exc).__name__}: {exc}"))
        else:
            self.post_message(DetailLoaded(detail))

    def on_detail_loaded(self, message: DetailLoaded) -> None:
        self.detail = message.detail
        self.query_one("#detail-title", Static).update(title(message.detail))
        self.query_one("#detail-content", Static).update(render_detail(message.detail))

    def on_detail_failed(self, message: DetailFailed) -> None:
        self.query_one("#detail-content", Static).update(
            lit(f"cannot load job #{message.job_id}: {message.error}", "red")
        )


def title(d: JobDetail) -> Text:
    job = d.job
    text = Text()
    text.append(f" Job #{job.id} ", style="bold reverse")
    text.append_text(lit(f"  {job.queue}  ", "bold"))
    text.append_text(status_text(job.status, bold=True))
    text.append(f"   as of {local_stamp(d.db_now)} (database clock)", style="dim")
    return text


def render_detail(d: JobDetail) -> RenderableType:
    return Group(*detail_renderables(d, cell_limit=CELL_LIMIT))
