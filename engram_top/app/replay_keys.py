"""A replay's header line and its keys: play/pause, seek, speed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from collectors import visible
from engram_top.app.mixin import AppMixin
from engram_top.app.sessions import ReplayControls


def replay_line(replay: ReplayControls) -> tuple[Text, Text]:
    def clock(seconds: float) -> str:
        minutes, secs = divmod(int(seconds), 60)
        if minutes < 60:
            return f"{minutes:02d}:{secs:02d}"
        return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}"  # a long session: H:MM:SS

    state = "▶" if replay.playing else "⏸"
    read = replay.read_fraction
    # Blanks end a run rather than start one (some SVG viewers drop a leading blank).
    return (Text.assemble((f" REPLAY {state} ", "bold reverse"),
                          f" {clock(replay.position)}/{clock(replay.duration)} "
                          f"×{replay.speed:g} ",
                          (f"reading {read:.0%} ", "dim") if read < 1 else ""),
            Text(visible(replay.path.name), style="dim"))


class ReplayKeys(AppMixin):
    """For the dashboard's App: the replay's actions (None in a live session: check_action
    hides them there)."""

    replay: ReplayControls | None = None

    if TYPE_CHECKING:  # the App's own
        def refresh_panels(self) -> None: ...

    def action_replay_toggle(self) -> None:
        if self.replay is not None:
            self.replay.toggle()
            self.refresh_panels()

    def action_replay_seek(self, seconds: float) -> None:
        if self.replay is not None:
            self.replay.seek_by(seconds)
            self.refresh_panels()

    def action_replay_to(self, position: float) -> None:
        if self.replay is not None:
            self.replay.seek(position)
            self.refresh_panels()

    def action_replay_speed(self, factor: float) -> None:
        if self.replay is not None:
            self.replay.set_speed(self.replay.speed * factor)
            self.refresh_panels()
