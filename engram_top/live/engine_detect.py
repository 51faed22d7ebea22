"""Which engine an attached server runs, when `attach` is not told: the one whose metric
names its /metrics page has (SGLang's sglang:, vLLM's vllm:).

Until a page has said, the default engine's collector reads the server (its panels say
what it sees: a refused connection, a server still loading). The first page that answers
decides at once: a page with no known engine's names, or none at all (SGLang without
--enable-metrics answers 404), leaves the default. A page with several engines' names (a
gateway's, an exporter that adds another's names for compatibility) is read as the engine
with the most families on it, and the events line says so; as many of each, and the engine
it was read as stays, with a word on --engine.

A server is not the same server for ever: a restart on the same port may be the other
engine. So the page is asked again whenever the engine's collector fails (the wrong
engine's collector always does: its names are not on the page) and every RECHECK_S while
it reads well; a page of another engine on CONFIRM pages in a row makes the collector that
engine's, and the events line says so.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import time
from collections.abc import Callable

from collectors.pages import PageClient, PageError
from collectors.readings import Reading, ServerData
from scenarios import engines
from scenarios.engines.base import Engine

DETECT_DEADLINE_S = 2.0  # a page that slow is read on the next poll
RECHECK_S = 30.0  # a page read well is asked again this often (a mixed page may shift)
CONFIRM = 2  # pages in a row of another engine before the collector changes
_NAME_END = re.compile(r"[{\s]")
# A histogram's or summary's series, and a counter's timestamps: one family, not four.
_SUFFIXES = ("_bucket", "_sum", "_count", "_created")


def metric_names(text: str) -> list[str]:
    """The sample names of an exposition page, read leniently (a broken line is skipped:
    the engine's own collector then says what is wrong with the page)."""
    names = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            names.append(_NAME_END.split(line, maxsplit=1)[0])
    return names


def family(name: str) -> str:
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Whose page it is: ``engine`` (None: no known engine's, or a tie), and ``note``, what
    to say when the page holds more than one engine's names."""

    engine: Engine | None
    note: str | None = None


def speakers(names: list[str]) -> list[tuple[Engine, int]]:
    """The engines whose names the page has, with how many families of each, most first
    (built-ins before plugins on a tie). Engines of the simulated node speak a real
    engine's dialect and are never guessed for a server."""
    out = []
    for kind in engines.kinds():
        engine = engines.get(kind)
        if engine.simulated_node or not engine.page_prefixes:
            continue
        count = len({family(n) for n in names if n.startswith(engine.page_prefixes)})
        if count:
            out.append((engine, count))
    return sorted(out, key=lambda pair: -pair[1])  # stable: the registry's order on a tie


def verdict(names: list[str]) -> Verdict:
    found = speakers(names)
    if len(found) <= 1:
        return Verdict(found[0][0] if found else None)
    listing = " and ".join(f"{e.speaks}'s ({n} famil{'y' if n == 1 else 'ies'})"
                           for e, n in found)
    (top, most), (_, next_most) = found[0], found[1]
    if most > next_most:
        return Verdict(top, f"its /metrics page holds {listing} names: read as {top.speaks}, "
                            f"whose names are the most (--engine says which up front)")
    return Verdict(None, f"its /metrics page holds {listing} names, as many of each: which "
                         "engine serves it cannot be told from the page (give --engine)")


def speaker_of(names: list[str]) -> Engine | None:
    """The engine whose metric names these are: the one with the most families on a page
    that holds several; None for none, or as many of two."""
    return verdict(names).engine


class DetectingCollector:
    """A server's collector that becomes the right engine's at the first page, and another
    engine's when the page becomes that engine's. ``on_engine(engine, note)`` is told each
    decision worth a word: the first engine found, a mixed page, a change."""

    def __init__(self, url: str, *, api_key: str | None, auth: tuple[str, str] | None,
                 on_engine: Callable[[Engine, str | None], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.engine = engines.get(engines.DEFAULT)
        self._url, self._api_key, self._auth = url, api_key, auth
        self._on_engine = on_engine
        self._clock = clock
        self.collector = self.engine.collector(url, api_key=api_key, auth=auth)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        self._client = PageClient(url, headers=headers, auth=auth)
        self.decided = False
        self._checked_at: float | None = None
        self._last_ok = False
        self._pending: tuple[Engine | None, int] = (None, 0)  # another engine, pages in a row
        self._said: str | None = None  # the mixed-page note last said

    async def poll(self) -> Reading[ServerData]:
        if self._due():
            self._checked_at = self._clock()
            # A poll never raises: whatever went wrong, the engine it has reads on.
            with contextlib.suppress(Exception):
                await self._detect()
        reading = await self.collector.poll()
        self._last_ok = reading.ok
        return reading

    def _due(self) -> bool:
        if not self.decided or not self._last_ok or self._checked_at is None:
            return True
        return self._clock() - self._checked_at >= RECHECK_S

    async def _detect(self) -> None:
        try:
            page = await self._client.get("/metrics", deadline_s=DETECT_DEADLINE_S,
                                          limit_bytes=self.engine.page_limit("/metrics"))
        except (PageError, TimeoutError, OSError):
            return  # not up yet, or not answering: ask again next poll
        if page.status_code == 404:
            self.decided = True  # no metrics: the engine it is read as stays
            return
        if page.status_code != 200:
            return  # a 503 while it loads: ask again
        found = verdict(metric_names(page.text))
        first = not self.decided
        self.decided = True
        if found.engine is None or found.engine is self.engine:
            self._pending = (None, 0)
            if found.note is not None and found.note != self._said:
                self._said = found.note
                self._on_engine(self.engine, found.note)
            return
        if not first:  # read as one engine already: a change must hold
            engine, count = self._pending
            count = count + 1 if engine is found.engine else 1
            self._pending = (found.engine, count)
            if count < CONFIRM:
                return
        self._pending = (None, 0)
        old = self.engine
        await self._become(found.engine)
        note = found.note
        if not first:
            note = (f"its /metrics page is now {found.engine.speaks}'s, where it was "
                    f"{old.speaks}'s (restarted as another engine?): read as "
                    f"{found.engine.speaks} from now on"
                    + (f"; {found.note}" if found.note else ""))
        self._said = found.note
        self._on_engine(found.engine, note)

    async def _become(self, engine: Engine) -> None:
        old, self.engine = self.collector, engine
        self.collector = engine.collector(self._url, api_key=self._api_key, auth=self._auth)
        await old.close()

    async def close(self) -> None:
        await self._client.aclose()
        await self.collector.close()
