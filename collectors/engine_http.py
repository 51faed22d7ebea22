"""The polling loop every engine's HTTP collector shares: a poll never raises, never
outlasts its deadline, and asks /health only as often as it must."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from collectors import page_kind, promtext
from collectors.base import FailureTracker, TooLarge, describe, uncollected
from collectors.figure_bounds import bounded
from collectors.pages import ConnectFailed, Page, PageClient, PageError, bearer
from collectors.readings import Reading, ServerData, StackPage, Status
from collectors.stack_page import stack_page
from collectors.units import MIB
from collectors.windowed import WindowedRate

# The span of the server's windowed figures (latency quantiles, rates, retractions): what
# an alert on them judges, and how long they take to fill after a start.
WINDOW_S = 30.0
# Reading /metrics may cost at most this share of a core: a page that takes longer to parse
# (a server with thousands of label sets, or a hostile one under the size limit) is read
# less often, and the reading says how often. A real engine's page (a few hundred lines)
# parses in milliseconds and is read every poll.
PAGE_SHARE = 0.05
# A page this large is parsed in a worker thread, so the screen keeps drawing meanwhile.
PARSE_APART_BYTES = MIB
# The steps that pace takes (seconds): a page's cost moves a little from parse to parse, and
# the interval the reading states should not (its message is an event when it changes).
PACE_STEPS = (2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0)


class EngineCollector:
    """Polls one server: /health on a cadence, an info call now and then, /metrics every
    poll. Subclasses say which pages and how to read them (``_server_info``, ``_metrics``,
    ``PAGE_LIMITS``); the deadlines, the health cadence and failures-as-readings are here."""

    PAGE_LIMITS: dict[str, int] = {"/health": MIB}
    SOURCE = "server"  # the reading's source prefix
    PAGE_PREFIXES: tuple[str, ...] = ()  # the engine's own /metrics names

    def __init__(self, url: str, *, api_key: str | None = None, timeout: float = 2.0,
                 deadline_s: float = 5.0, window_s: float = WINDOW_S, info_every_s: float = 15.0,
                 health_every_s: float = 5.0, source: str | None = None,
                 auth: tuple[str, str] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.url = url.rstrip("/")
        # Monotonic seconds: the windows' times, the health and info cadences, the
        # readings' times (a test's own clock moves them without sleeping).
        self.clock = clock
        self.window_s = window_s
        self.info_every_s = info_every_s
        # A read timeout alone never trips on a page that drips a byte a second.
        # Each request gets this long in all, so a poll always ends and the next one goes.
        self.deadline_s = deadline_s
        self.tracker = FailureTracker(source or f"{self.SOURCE} {self.url}", clock)
        # Loopback or a node's own network only; never follows redirects to elsewhere. The
        # API key wins over a URL's user:password (one Authorization header; PageClient).
        self.client = PageClient(self.url, headers=bearer(api_key), auth=auth,
                                 connect_timeout_s=timeout)
        self._info: dict[str, Any] | None = None
        self._info_at = 0.0
        self.health_every_s = health_every_s
        self._healthy_at: float | None = None  # when /health last said 200
        self._page_text: str | None = None  # the last /metrics page parsed, and its families
        self._page_families: dict[str, promtext.Family] = {}
        self._page_skipped = promtext.Skipped()  # the lines of that page it left out
        self._reuse = promtext.Reuse()  # what that parse keeps for the next page's
        self._page_stack: StackPage | None = None  # that page as a router's or a cache's
        self._parse_s = 0.0  # the CPU seconds the last new page took to parse
        self._metrics_at: float | None = None  # when /metrics was last read whole
        self._metrics_fields: dict[str, Any] = {}  # what it gave
        self._stack_requests = WindowedRate(window_s)  # a router's requests, where it is one

    async def close(self) -> None:
        await self.client.aclose()

    async def poll(self) -> Reading[ServerData]:
        try:
            return await self._poll()
        except Exception as exc:  # a collector never lets a failure escape
            return self.tracker.fail(Status.ERROR, describe(exc))

    async def _get(self, path: str) -> Page:
        """GET within the deadline and the size a page of its kind can have: TimeoutError
        (the builtin) or TooLarge past them."""
        return await self.client.get(path, deadline_s=self.deadline_s,
                                     limit_bytes=self.PAGE_LIMITS.get(path, 16 * MIB))

    async def _families(self, text: str) -> dict[str, promtext.Family]:
        """A /metrics page's families. An idle server's page is the same from one poll to
        the next: it is parsed once (what the readers take from the families is pure, and
        the windows still get a point every poll). A line it cannot read is left out (the
        reading says which); ValueError where the text is no metrics page (page_kind.read)."""
        if text != self._page_text:
            skipped = promtext.Skipped()

            def parse() -> tuple[dict[str, promtext.Family], float]:
                started = time.thread_time()
                return page_kind.read(text, skipped, self._reuse), \
                    time.thread_time() - started

            # Run uncollected: its time is the page's own cost, which paces the next reads
            # (metrics_every_s), and not a collection of the whole process's objects that
            # its allocations set off (tens of ms, once, in a big process): that runs after.
            if len(text) > PARSE_APART_BYTES:
                families, self._parse_s = await asyncio.to_thread(uncollected, parse)
            else:
                families, self._parse_s = uncollected(parse)
            self._page_families, self._page_skipped = families, skipped
            self._page_text = text
            # Whether it is a router's or LMCache's: told once a page, not once a poll.
            self._page_stack = stack_page(self._page_families, self.PAGE_PREFIXES)
        return self._page_families

    def metrics_every_s(self) -> float:
        """How long between two reads of /metrics: 0 (every poll) unless its page costs
        more than PAGE_SHARE of a core at that, then the next of PACE_STEPS."""
        needed = self._parse_s / PAGE_SHARE
        if needed <= 1.0:
            return 0.0
        return next((step for step in PACE_STEPS if step >= needed), PACE_STEPS[-1])

    async def _metrics_read(self, now: float) -> dict[str, Any]:
        """The figures of /metrics, kept to stand for it until it is read again (while a
        slow page is paced: the windows unchanged, as nothing new was read)."""
        self._metrics_fields = await self._metrics(now)
        self._metrics_at = now
        return self._metrics_fields

    async def _poll(self) -> Reading[ServerData]:
        now = self.clock()
        # A server that was healthy and answers /metrics is asked /health only every
        # health_every_s: one request a poll instead of two, where most of a poll's cost
        # is the HTTP round trip. Starting, failing or due, it is asked every poll, and so
        # while a slow page is not read (/health tells that it went away meanwhile).
        paced = self._metrics_at is not None and now - self._metrics_at < self.metrics_every_s()
        if paced or self._healthy_at is None or now - self._healthy_at >= self.health_every_s:
            try:
                health = await self._get("/health")
            except ConnectFailed as exc:
                return self._refused(exc)
            except TimeoutError:
                return self.tracker.fail(Status.ERROR, f"{self.url}/health gave no whole answer "
                                                       f"within {self.deadline_s:g} s")
            except (TooLarge, PageError) as exc:
                return self.tracker.fail(Status.ERROR, f"/health: {exc}")
            if health.status_code not in (200, 503):
                self._healthy_at = None
                return self.tracker.fail(Status.ERROR,
                                         f"/health answered HTTP {health.status_code}")
            self._healthy_at = now if health.status_code == 200 else None
        healthy = self._healthy_at is not None
        fields: dict[str, Any] = {"url": self.url, "healthy": healthy}
        problems: list[str] = []
        if self._info is None or now - self._info_at > self.info_every_s:
            try:
                self._info = await self._server_info()
                self._info_at = now
            except TimeoutError:
                problems.append(f"server_info: no whole answer within {self.deadline_s:g} s")
            except (PageError, ValueError) as exc:
                problems.append(f"server_info: {describe(exc)}")
        if self._info is not None:
            fields.update(self._info)
        try:
            fields.update(self._metrics_fields if paced else await self._metrics_read(now))
        except ConnectFailed as exc:
            return self._refused(exc)  # it went away since its last /health
        except promtext.PromTextError as exc:
            problems.append(f"metrics page: {exc}")
        except TimeoutError:
            problems.append(f"/metrics: no whole page within {self.deadline_s:g} s")
        except (PageError, ValueError) as exc:
            problems.append(f"metrics: {describe(exc)}")
        data = bounded(ServerData(**fields))
        if problems:
            self._healthy_at = None  # ask /health again next time
            return self.tracker.fail(Status.ERROR, "; ".join(problems), data)
        if not healthy:
            # SGLang answers 503 while it warms up and again while it shuts down.
            return self.tracker.ok(data, Status.STARTING,
                                   "not serving (/health 503: starting, or shutting down)")
        skipped = self._page_skipped
        notes = [f"metrics page: {skipped}"] if skipped.count else []
        every = self.metrics_every_s()
        if every:
            mib = len(self._page_text or "") / MIB
            size = f"{mib:.0f} MiB" if mib >= 1 else "under a MiB"
            notes.append(f"metrics page ({size}) is slow to parse: read every {every:.0f} s")
        if data.stack_page is not None:
            return self.tracker.ok(data, message=f"{data.stack_page.summary}: not an engine; "
                                                 "the GPU memory and KV pool are its workers' "
                                                 "(attach to one)")
        return self.tracker.ok(data, message="; ".join(notes))

    def _refused(self, exc: ConnectFailed) -> Reading[ServerData]:
        self._healthy_at = None
        if exc.refused:
            return self.tracker.fail(Status.ERROR,
                                     f"no server at {self.url} (connection refused)")
        return self.tracker.fail(Status.ERROR, f"cannot reach {self.url}: {exc}")

    def _stack_fields(self, now: float) -> dict[str, Any] | None:
        """Where the last page read (_families) is a router's or LMCache's rather than this
        engine's (none of its names, page_kind's router or cache): the fields it gives, its
        requests' rate included. None for any other page, which the engine's reader takes
        as before."""
        page = self._page_stack
        if page is None:
            return None
        if page.requests_total is not None:
            self._stack_requests.add(now, page.requests_total)
        return {"stack_page": page, "requests_per_s": self._stack_requests.rate(now),
                "window_s": self.window_s}

    async def _server_info(self) -> dict[str, Any]:
        """ServerData fields from the engine's info endpoints (asked every info_every_s)."""
        raise NotImplementedError

    async def _metrics(self, now: float) -> dict[str, Any]:
        """ServerData fields from one /metrics page (windowed figures included)."""
        raise NotImplementedError
