"""The recorded corpus (tests/data/sim-pages/, made by its capture.py) played into the
collectors in-process: a clock the test moves, and a page client that answers from the
recorded files instead of a socket. What a collector does with a page, its windows, rates
and cadences, runs as it does live, with no server and no sleep."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from collectors.base import TooLarge
from collectors.host import ProcBackend
from collectors.pages import ConnectFailed, Page
from collectors.units import KIB, MIB

CORPUS = Path(__file__).parent / "data" / "sim-pages"
URL = "http://127.0.0.1:30000"  # the address the recorded collectors are told


class ManualClock:
    """Monotonic seconds that move only when the test says: a collector's ``clock``."""

    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> float:
        self.t += seconds
        return self.t


@dataclass(frozen=True)
class Poll:
    t: float  # seconds after the first poll, as recorded
    answers: dict[str, Page]


@dataclass(frozen=True)
class Recording:
    folder: Path
    polls: tuple[Poll, ...]
    meta: dict[str, Any]  # the manifest's other keys: the server, the load's client figures

    def text(self, name: str) -> str:
        return (self.folder / name).read_text()

    def page(self, n: int, path: str = "/metrics") -> str:
        return self.polls[n].answers[path].text


def recording(name: str) -> Recording:
    folder = CORPUS / name
    manifest = json.loads((folder / "manifest.json").read_text())
    polls = tuple(
        Poll(p["t"], {path: Page(a["status"], (folder / a["file"]).read_bytes(),
                                 {"content-type": a["content_type"]}, URL + path)
                      for path, a in p["answers"].items()})
        for p in manifest.pop("polls"))
    return Recording(folder, polls, manifest)


class CorpusClient:
    """PageClient's get() and aclose() over answers the test sets: a recorded Page, or an
    exception to raise (ConnectFailed for a server that is gone). A path never answered is
    a 404. Every path asked is kept in ``asked``, in order."""

    def __init__(self) -> None:
        self.answers: dict[str, Page | BaseException] = {}
        self.asked: list[str] = []
        self.refused: ConnectFailed | None = None  # set: nothing listens
        self.closed = False

    def serve(self, answers: dict[str, Page | BaseException]) -> None:
        """These answers from now on; the other paths keep theirs."""
        self.answers.update(answers)

    def refuse(self, refusing: bool = True) -> None:
        """Nothing listens (until called with False): every path is refused, as PageClient
        says it."""
        self.refused = ConnectFailed(URL.removeprefix("http://"),
                                     ConnectionRefusedError(111, "Connection refused")) \
            if refusing else None

    async def get(self, path: str, *, deadline_s: float, limit_bytes: int) -> Page:
        self.asked.append(path)
        if self.refused is not None:
            raise self.refused
        answer = self.answers.get(path)
        if answer is None:
            return Page(404, b"Not Found", {}, URL + path)
        if isinstance(answer, BaseException):
            raise answer
        if len(answer.content) > limit_bytes:
            raise TooLarge(f"{URL}{path}: more than {limit_bytes / MIB:g} MiB")
        return answer

    async def aclose(self) -> None:
        self.closed = True


def attach(collector: Any, clock: ManualClock) -> CorpusClient:
    """The collector reads from a CorpusClient from now on (its socket client closed
    unused: it never connected)."""
    client = CorpusClient()
    collector.client = client
    assert collector.clock is clock, "make the collector with clock=the test's clock"
    return client


def played(rec: Recording, clock: ManualClock) -> Iterator[Poll]:
    """The recording's polls, the clock set to each one's time (from the clock's start)
    before it is given: ``for poll in played(...): client.serve(poll.answers); await poll()``."""
    start = clock.t
    for poll in rec.polls:
        clock.t = start + poll.t
        yield poll


# --------------------------------------------------------------------------- host


HOST = CORPUS / "host"


class RecordedProc(ProcBackend):
    """The recorded /proc and /sys. A process's descendants from the recorded children
    files (psutil reads the live /proc only); every other read is ProcBackend's own."""

    def children(self, pid: int) -> list[int] | None:
        if not (self.proc / str(pid)).is_dir():
            return None
        out, todo = [], [pid]
        while todo:
            kids = self.thread_children(todo.pop(0)) or []
            out += kids
            todo += kids
        return out


def kib(text: str, key: str) -> int:
    found = re.search(rf"^{key}:\s+(\d+) kB$", text, re.MULTILINE)
    assert found is not None, key
    return int(found.group(1)) * KIB
