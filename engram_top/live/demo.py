"""The embedded default: scenarios/demo.toml on a simulated node, on free ports."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from engram_top.alerts.thresholds import Thresholds
from engram_top.live.load import LoadSpec
from engram_top.live.session import Session, SessionOptions


def demo_file() -> Path:
    """scenarios/demo.toml, installed with the package."""
    return Path(str(resources.files("scenarios").joinpath("demo.toml")))


@dataclass(frozen=True)
class DemoOptions:
    placement: str = "device"
    force: bool = False  # start even where the fit check refuses (--force)
    time_scale: float = 0.1
    serve_scale: float = 1.0
    stream_interval: int | None = None  # its servers' chunk per N tokens; None: SGLang's 1
    node_dir: Path | None = None
    run_dir: Path | None = None
    poll_interval: float = 1.0
    load: LoadSpec | None = LoadSpec()
    thresholds: Thresholds | None = None


class DemoSession(Session):
    """The embedded default: scenarios/demo.toml on a simulated node, on free ports."""

    def __init__(self, options: DemoOptions | None = None) -> None:
        o = options or DemoOptions()
        super().__init__(SessionOptions(
            scenario_file=demo_file(), start=o.placement, state_dir=o.run_dir,
            node_dir=o.node_dir, poll_interval=o.poll_interval, load=o.load, free_ports=True,
            time_scale=o.time_scale, serve_scale=o.serve_scale,
            stream_interval=o.stream_interval, thresholds=o.thresholds,
            force=o.force))
