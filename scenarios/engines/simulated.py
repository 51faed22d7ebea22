"""The simulated node's servers: `python -m engram_top sim serve`. Their GPUs are the
simulated node's, and their start-up and service run on scaled time; the same model
(memory, scheduler, the seed-calibrated timings of each placement) is behind both kinds:

  - "simulated" speaks SGLang's log, HTTP and metrics dialect, so it shares SGLang's parser
    and collector;
  - "simulated-vllm" speaks vLLM's (`sim serve --dialect vllm`), so it shares vLLM's; like
    vLLM it has the device and host-prefetch placements only.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

from scenarios.engines.base import PLACEMENTS, Engine, ScenarioSpec, SpecT
from scenarios.engines.sglang import ENGRAM_ENV, SGLangSpeaker
from scenarios.engines.vllm import PLACEMENTS as VLLM_PLACEMENTS
from scenarios.engines.vllm import VllmSpeaker


class SimulatedNode(Engine):
    """What a server on the simulated node is, whichever dialect it speaks: its launch,
    its key in a file, its scaled clock."""

    simulated_node = True
    follows_reference = True
    dialect_args: tuple[str, ...] = ()  # `sim serve`'s dialect flag, where not SGLang's

    def argv(self, sc: ScenarioSpec, key_file: Path | None, node_dir: Path | None) -> list[str]:
        assert node_dir is not None, "a simulated scenario needs the simulated node's folder"
        # A command line, not an import: the simulator is the product's, a layer above.
        argv = [sys.executable, "-m", "engram_top", "sim", "serve", "--node-dir", str(node_dir),
                "--placement", sc.placement or "device", "--host", sc.host,
                "--port", str(sc.port), "--time-scale", repr(sc.time_scale),
                "--serve-scale", repr(sc.serve_scale), *self.dialect_args]
        if sc.api_key:
            argv += (["--api-key-file", str(key_file)] if key_file is not None
                     else ["--api-key", sc.api_key])
        return [*argv, *sc.args]

    def key_file_text(self, sc: ScenarioSpec) -> str | None:
        return f"{sc.api_key}\n" if sc.api_key else None

    def clock(self, sc: ScenarioSpec) -> tuple[float, float]:
        return sc.time_scale, sc.serve_scale

    def tune(self, sc: SpecT, time_scale: float | None, serve_scale: float | None,
             stream_interval: int | None = None) -> SpecT:
        if time_scale is not None:
            sc = dataclasses.replace(sc, time_scale=time_scale)
        if serve_scale is not None:
            sc = dataclasses.replace(sc, serve_scale=serve_scale)
        if stream_interval is not None and "--stream-interval" not in sc.args:
            sc = dataclasses.replace(sc, args=(*sc.args, "--stream-interval",
                                               str(stream_interval)))
        return sc


class Simulated(SimulatedNode, SGLangSpeaker):
    kind = "simulated"
    label = "simulated node"

    def launch_env(self, sc: ScenarioSpec) -> dict[str, str]:
        # The V4.1 preview build's Engram switches, as a real launch of the placement has
        # them: its process environment says where the tables are (attach reads it there).
        return {**ENGRAM_ENV.get(sc.placement or "device", {}), **sc.env}

    def problems(self, m: dict[str, Any]) -> list[tuple[str, str]]:
        if m.get("placement") not in PLACEMENTS:
            return [("placement", f"a simulated scenario needs one of {', '.join(PLACEMENTS)}")]
        return []


class SimulatedVllm(SimulatedNode, VllmSpeaker):
    kind = "simulated-vllm"
    label = "simulated vLLM node"
    dialect_args = ("--dialect", "vllm")

    def argv(self, sc: ScenarioSpec, key_file: Path | None, node_dir: Path | None) -> list[str]:
        if node_dir is None:
            # VllmSpeaker.engram() reads a launch's --engram-config flags from its argv,
            # without a node: the simulated server takes none (its --placement says it, and
            # its log's non-default args say what a real vLLM would have been given).
            return []
        return super().argv(sc, key_file, node_dir)

    def problems(self, m: dict[str, Any]) -> list[tuple[str, str]]:
        placement = m.get("placement")
        if placement == "host":
            return [("placement", "vLLM has no host placement without prefetch: its host "
                                  "placement reads ahead on a side stream (host-prefetch); "
                                  "use host-prefetch or device")]
        if placement not in VLLM_PLACEMENTS:
            return [("placement", f"a simulated vLLM scenario needs one of "
                                  f"{', '.join(VLLM_PLACEMENTS)}")]
        return []


ENGINE = Simulated()
VLLM_ENGINE = SimulatedVllm()
