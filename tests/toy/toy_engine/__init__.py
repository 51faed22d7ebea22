"""A test-only serving engine: one module and one registration (an entry point), to show
that engram-top launches, follows, reads and snapshots an engine it has never heard of.
"""

from __future__ import annotations

import sys
from pathlib import Path

import httpx

from collectors.base import FailureTracker, describe
from collectors.readings import Reading, ServerData, Status
from collectors.startup_facts import FAILED, PhaseSpan, StartupFacts
from scenarios.engines import Engine, Readiness

SERVER = Path(__file__).with_name("server.py")
STAGES = {"load": "weights", "serve": "http"}  # the toy's stages as engram-top's phases


class ToyParser:
    def __init__(self) -> None:
        self._phase = "launching"
        self._failed_in: str | None = None
        self._spans: list[PhaseSpan] = []
        self._launch_at: float | None = None
        self._ready_at: float | None = None

    def feed(self, line: str, at: float | None = None) -> list[str]:
        if not line.startswith("toy| "):
            return []
        text = line[5:].strip()
        self._launch_at = self._launch_at if self._launch_at is not None else at
        if text.startswith("stage="):
            self._enter(STAGES.get(text[6:].split()[0], "launching"), at)
            return ["http_running"] if self._phase == "http" else []
        if text == "ready":
            self._enter("ready", at)
            self._ready_at = at
            return ["ready"]
        if text.startswith("fatal:"):
            self._failed_in = self._phase
            self._enter(FAILED, at)
        return []

    def _enter(self, phase: str, at: float | None) -> None:
        if self._spans:
            last = self._spans[-1]
            self._spans[-1] = PhaseSpan(last.phase, last.start, at)
        self._spans.append(PhaseSpan(phase, at, None))
        self._phase = phase

    def current_phase(self) -> str:
        return self._phase

    @property
    def failed_in(self) -> str | None:
        return self._failed_in

    def facts(self) -> StartupFacts:
        return StartupFacts(phase=self._phase, timeline=tuple(self._spans),
                            launch_at=self._launch_at, ready_at=self._ready_at,
                            ready=self._ready_at is not None)


class ToyCollector:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.client = httpx.AsyncClient(base_url=self.url, timeout=2.0)
        self.tracker = FailureTracker(f"toy {self.url}")

    async def poll(self) -> Reading[ServerData]:
        try:
            stats = (await self.client.get("/stats")).raise_for_status().json()
        except Exception as exc:
            return self.tracker.fail(Status.ERROR, describe(exc))
        return self.tracker.ok(ServerData(
            url=self.url, healthy=True, version=stats["engine"],
            max_total_num_tokens=stats["capacity_tokens"],
            num_used_tokens=float(stats["used_tokens"])))

    async def close(self) -> None:
        await self.client.aclose()


class Toy(Engine):
    kind = "toy"
    label = "toy"
    readiness = Readiness(health_only_after_s=60.0)  # its "ready" line decides
    own_polls = ('"GET /stats ', '"GET /health ')
    error_markers = ("fatal:",)

    def argv(self, sc, key_file, node_dir):  # type: ignore[no-untyped-def]
        return [sys.executable, str(SERVER), "--host", sc.host, "--port", str(sc.port),
                *sc.args]

    def parser(self) -> ToyParser:
        return ToyParser()

    def collector(self, url, api_key=None, auth=None):  # type: ignore[no-untyped-def]
        return ToyCollector(url)


ENGINE = Toy()
