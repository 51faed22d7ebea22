"""Which engine an attached server runs, when `attach` is not told: the one whose metric
names its /metrics page has (SGLang's sglang:, vLLM's vllm:).

Until a page has said, the default engine's collector reads the server (its panels say
what it sees: a refused connection, a server still loading). The first page that answers
decides, once: a page with no known engine's names, or none at all (SGLang without
--enable-metrics answers 404), leaves the default. The page is read by a client of its
own for as long as it takes to decide, then closed."""

from __future__ import annotations

import re
from collections.abc import Callable

from collectors.pages import PageClient, PageError
from collectors.readings import Reading, ServerData
from scenarios import engines
from scenarios.engines.base import Engine

DETECT_DEADLINE_S = 2.0  # a page that slow is read on the next poll
_NAME_END = re.compile(r"[{\s]")


def metric_names(text: str) -> list[str]:
    """The sample names of an exposition page, read leniently (a broken line is skipped:
    the engine's own collector then says what is wrong with the page)."""
    names = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            names.append(_NAME_END.split(line, maxsplit=1)[0])
    return names


def speaker_of(names: list[str]) -> Engine | None:
    """The first engine (built-ins before plugins) whose metric names these are; engines of
    the simulated node speak a real engine's dialect and are never guessed for a server."""
    for kind in engines.kinds():
        engine = engines.get(kind)
        if engine.simulated_node or not engine.page_prefixes:
            continue
        if any(n.startswith(engine.page_prefixes) for n in names):
            return engine
    return None


class DetectingCollector:
    """A server's collector that becomes the right engine's at the first page."""

    def __init__(self, url: str, *, api_key: str | None, auth: tuple[str, str] | None,
                 on_engine: Callable[[Engine], None]) -> None:
        self.engine = engines.get(engines.DEFAULT)
        self._url, self._api_key, self._auth = url, api_key, auth
        self._on_engine = on_engine
        self.collector = self.engine.collector(url, api_key=api_key, auth=auth)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        self._client: PageClient | None = PageClient(url, headers=headers, auth=auth)

    async def poll(self) -> Reading[ServerData]:
        if self._client is not None:
            client = self._client
            try:
                await self._detect(client)
            except Exception:  # a poll never raises: whatever went wrong, the default reads
                self._client = None
                await client.aclose()
        return await self.collector.poll()

    async def _detect(self, client: PageClient) -> None:
        try:
            page = await client.get("/metrics", deadline_s=DETECT_DEADLINE_S,
                                    limit_bytes=self.engine.page_limit("/metrics"))
        except (PageError, TimeoutError, OSError):
            return  # not up yet, or not answering: ask again next poll
        engine = None
        if page.status_code == 200:
            engine = speaker_of(metric_names(page.text))
        elif page.status_code != 404:
            return  # a 503 while it loads: ask again
        self._client = None
        await client.aclose()
        if engine is not None and engine is not self.engine:
            old, self.engine = self.collector, engine
            self.collector = engine.collector(self._url, api_key=self._api_key, auth=self._auth)
            await old.close()
            self._on_engine(engine)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        await self.collector.close()
