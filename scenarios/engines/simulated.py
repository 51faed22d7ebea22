"""The simulated node's servers: `python -m engram_top sim serve`. They speak SGLang's log,
HTTP and metrics dialect, so they share its parser and collector; their GPUs are the
simulated node's, and their start-up and service run on scaled time."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scenarios.engines.base import PLACEMENTS
from scenarios.engines.sglang import ENGRAM_ENV, SGLangSpeaker

if TYPE_CHECKING:
    from scenarios.config import Scenario


class Simulated(SGLangSpeaker):
    kind = "simulated"
    label = "simulated node"
    simulated_node = True
    follows_reference = True

    def argv(self, sc: Scenario, key_file: Path | None, node_dir: Path | None) -> list[str]:
        assert node_dir is not None, "a simulated scenario needs the simulated node's folder"
        # A command line, not an import: the simulator is the product's, a layer above.
        argv = [sys.executable, "-m", "engram_top", "sim", "serve", "--node-dir", str(node_dir),
                "--placement", sc.placement or "device", "--host", sc.host,
                "--port", str(sc.port), "--time-scale", repr(sc.time_scale),
                "--serve-scale", repr(sc.serve_scale)]
        if sc.api_key:
            argv += (["--api-key-file", str(key_file)] if key_file is not None
                     else ["--api-key", sc.api_key])
        return [*argv, *sc.args]

    def launch_env(self, sc: Scenario) -> dict[str, str]:
        # The V4.1 preview build's Engram switches, as a real launch of the placement has
        # them: its process environment says where the tables are (attach reads it there).
        return {**ENGRAM_ENV.get(sc.placement or "device", {}), **sc.env}

    def key_file_text(self, sc: Scenario) -> str | None:
        return f"{sc.api_key}\n" if sc.api_key else None

    def problems(self, m: dict[str, Any]) -> list[tuple[str, str]]:
        if m.get("placement") not in PLACEMENTS:
            return [("placement", f"a simulated scenario needs one of {', '.join(PLACEMENTS)}")]
        return []

    def clock(self, sc: Scenario) -> tuple[float, float]:
        return sc.time_scale, sc.serve_scale

    def tune(self, sc: Scenario, time_scale: float | None,
             serve_scale: float | None) -> Scenario:
        if time_scale is not None:
            sc = dataclasses.replace(sc, time_scale=time_scale)
        if serve_scale is not None:
            sc = dataclasses.replace(sc, serve_scale=serve_scale)
        return sc


ENGINE = Simulated()
