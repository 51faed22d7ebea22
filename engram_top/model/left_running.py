"""A server a command leaves running as it ends, as the user is told of it: by the dashboard's
quit dialog (an adopted one), and in the line every command prints as it ends."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LeftRunning:
    """``adopted``: an earlier engram-top started it and this command took it over (a quit
    leaves it unless the user says to stop it); ``asked``: the command was told to leave
    what it runs (`run --leave-running`, `switch`), so there is nothing to ask."""

    scenario: str
    pid: int
    host: str
    port: int
    adopted: bool
    asked: bool
    stop_with: str  # the command that stops it (`engram-top stop FILE`)

    def line(self) -> str:
        """What the command prints (callers escape it for the terminal: collectors.safetext)."""
        whose = ", adopted" if self.adopted else ""
        return (f"left running: {self.scenario} (pid {self.pid}) on {self.host}:{self.port}"
                f"{whose}; stop it with `{self.stop_with}`")
