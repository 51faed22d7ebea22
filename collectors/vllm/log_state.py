"""What the vLLM log reader knows of the latest launch while its lines come in; frozen into
StartupFacts by collectors.vllm.facts."""

from __future__ import annotations

from dataclasses import dataclass, field

from collectors.startup_facts import DecodeStats, LogError, PhaseSpan
from collectors.vllm.log_figures import EngineFigures, RankFigures
from collectors.vllm.ranks import Place


@dataclass
class LogState:
    phase: str = "launching"
    failed_in: str | None = None
    failed_from: str = ""  # "text", "frames" or "phase": what failed_in was taken from
    cause: str | None = None
    cause_generic: bool = False
    ranks: dict[Place, RankFigures] = field(default_factory=dict)
    engine: EngineFigures = field(default_factory=EngineFigures)
    frames: list[str] = field(default_factory=list)
    args: dict[str, object] = field(default_factory=dict)  # non-default args, Namespace
    config: dict[str, object] = field(default_factory=dict)  # the engine's config line
    command: dict[str, object] = field(default_factory=dict)  # a pasted launch command
    # What other lines state of the settings ("Chunked prefill is enabled with
    # max_num_batched_tokens=N"): under every dump of them.
    stated: dict[str, object] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    version: str | None = None
    engram: dict[str, str] = field(default_factory=dict)
    engram_messages: list[str] = field(default_factory=list)
    errors: list[LogError] = field(default_factory=list)
    spans: list[PhaseSpan] = field(default_factory=list)
    uvicorn_pid: int | None = None
    url: str | None = None
    ready_at: float | None = None
    failed_at: float | None = None
    stopping_at: float | None = None
    stopped_at: float | None = None
    launch_at: float | None = None
    after_launch: bool | None = None  # the first phase line seen was a later phase's
    decode: DecodeStats | None = None
    context_len: int | None = None
