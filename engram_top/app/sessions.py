"""What the dashboard needs of a session, whichever it is: the live one (engram_top.live:
servers started, switched, stopped, attached to), a replay (engram_top.record.replay: play,
pause, seek, speed), or a test's fixed store; and what the fleet's screens need of a fleet
session (engram_top.fleet's). Each declares it all, so the app never asks a session what it
has, nor names the concrete one (tests/app/test_session_protocol.py checks the sessions against
these)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from engram_top.alerts import AlertWatch
from engram_top.compare import Slo
from engram_top.model import LeftRunning, Reading, RunStore

if TYPE_CHECKING:  # the dashboard never loads the fleet (Prometheus's client) for these
    from engram_top.fleet import FleetRow, NodeDetail, PromStatus


@runtime_checkable
class ReplayControls(Protocol):
    """A recording being played: where it is, and the keys that move it."""

    @property
    def path(self) -> Path: ...
    @property
    def playing(self) -> bool: ...
    @property
    def position(self) -> float: ...
    @property
    def duration(self) -> float: ...
    @property
    def speed(self) -> float: ...
    @property
    def read_fraction(self) -> float: ...

    def toggle(self) -> bool: ...
    def seek(self, seconds: float) -> float: ...
    def seek_by(self, delta: float) -> float: ...
    def set_speed(self, x: float) -> float: ...


@runtime_checkable
class DashboardSession(Protocol):
    """The store the dashboard draws, the alerts it toasts, and the calls its keys make. A
    session that cannot start servers (a replay) refuses them with a message the app shows."""

    # Read only (a replay's store is a ReplayStore); the app sets slos from its config.
    @property
    def store(self) -> RunStore: ...
    @property
    def alerts(self) -> AlertWatch: ...
    slos: tuple[Slo, ...]  # the config's [slo]: what a load's requests are held to

    @property
    def replay(self) -> ReplayControls | None:
        """The recording it plays, if it is a replay: the app shows its controls."""
    @property
    def poll_interval(self) -> float:
        """Seconds between readings: the screen is redrawn as often (within bounds)."""
    @property
    def secrets(self) -> Sequence[str]:
        """What a snapshot of it must not show (an API key)."""
    @property
    def attaching(self) -> Sequence[str]:
        """The servers its start will attach and has not yet (their URLs as shown): the
        scenario list has their rows from the first frame."""

    async def start(self) -> None: ...
    async def close(self) -> None: ...
    def close_now(self) -> None:
        """What it holds (servers, folders) closed without a loop: the CLI's last resort."""
    def left_running(self) -> Sequence[LeftRunning]:
        """The servers closing leaves running (once closed: has left): the dashboard asks
        about an adopted one before it quits, and the CLI names each as the command ends."""
    async def start_scenario(self, name: str, force: bool = False) -> object: ...
    async def switch(self, name: str, force: bool = False) -> object: ...
    async def stop_scenario(self) -> None: ...
    async def attach(self, url: str) -> None: ...


@runtime_checkable
class FleetView(Protocol):
    """What the fleet's screens need of a fleet session: its nodes' rows and the age of their
    figures, how Prometheus answered, a node's detail in the dashboard's own panels, and its
    lifetime (a borrowed one is started and closed by its owner)."""

    @property
    def url(self) -> str: ...  # shown: without a user:password@
    @property
    def credential(self) -> str: ...  # which credential is sent, in words ("" for none)
    @property
    def interval(self) -> float: ...  # seconds between polls
    @property
    def polls(self) -> int: ...  # polls answered so far: a new one means new rows
    @property
    def status(self) -> Reading[Any] | None: ...  # the last poll's (None before the first)
    @property
    def nodes(self) -> Mapping[str, tuple[float, object]]: ...  # node -> (read at, figures)
    @property
    def clock(self) -> Callable[[], float]: ...  # the clock its readings' times are on
    on_poll: Callable[[], None] | None  # called after each poll

    def rows(self) -> list[FleetRow]: ...
    def row_of(self, node: str) -> FleetRow | None: ...
    def prom_status(self) -> PromStatus | None:
        """The last answer's size and cost (None while it fails)."""
    def detail(self, node: str) -> NodeDetail | None:
        """A node's figures as a store of its own, for the dashboard's panels."""
    def feed(self, d: NodeDetail) -> bool:
        """The node's latest figures into its detail's store (False: none new)."""
    async def load_history(self, d: NodeDetail) -> str:
        """The node's recent past into its detail; what was loaded, in words."""
    async def start(self) -> None: ...
    async def close(self) -> None: ...
