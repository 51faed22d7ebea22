"""A fleet read through Prometheus's HTTP API: a few aggregated PromQL queries per refresh,
grouped into one reading per node (collectors.fleet_group).

Which node a series belongs to: its `node` label where the scrape config sets one (the usual
relabelling: one label naming the machine across every exporter on it), else dcgm-exporter's
`Hostname`, else the host part of `instance` (exporters on one machine differ only in port).
A `placement` label, where the config sets one, names the node's Engram placement; nothing
in SGLang's metrics says it, an engram-top agent's series do (collectors.agent_series).

Names: dcgm-exporter's DCGM_FI_* (MiB, %, W, bytes/s), node-exporter's node_memory_*, and
each engine's own series as its FleetDialect declares them (collectors/<engine>/): which
engine a node serves with is whose series it has.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Coroutine, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

from collectors import agent_series, router_series
from collectors.base import TooLarge, uncollected
from collectors.fleet_dialect import FleetDialect
from collectors.fleet_group import (
    GPU_FIELDS,
    HOST_FIELDS,
    LATENCY,
    FleetGpu,
    FleetNodeData,
    group,
    host_of,
    node_of,
    short,
)
from collectors.pages import PageClient, PageError, split_userinfo
from collectors.prom_answer import (
    Odd,
    ShapeError,
    decode_answer,
    kind_of,
    labels_of,
    number,
    result_of,
)
from collectors.readings import Reading, Status
from collectors.source import LOCAL, Keyed, SourceKey
from collectors.units import MIB

# Read by the fleet and its tests from here, where the queries are.
__all__ = ["DEADLINE_S", "GPU_FIELDS", "HOST_FIELDS", "FleetGpu", "FleetNodeData",
           "PromQLError", "PromStatus", "PrometheusSource", "group", "host_of", "node_of",
           "queries", "together"]

T = TypeVar("T")

DEADLINE_S = 5.0
LIMIT_BYTES = 32 * 1024 * 1024
# An answer past this is decoded off the event loop (json.loads holds it ~10 ms a MB; in
# pieces on a worker costs twice the CPU, so a 128-node fleet's half-MB stays on it), by one
# worker: answers decoded side by side would only take turns at the GIL with the screen.
PARSE_APART_BYTES = 1024 * 1024
_APART = ThreadPoolExecutor(1, thread_name_prefix="prometheus answers")
GROUP = "node, Hostname, hostname, instance, placement"


def _names(names: Any) -> str:
    return "|".join(names)


def queries(window: str = "1m", match: str = "", *,
            dialects: Sequence[FleetDialect]) -> dict[str, str]:
    """The whole refresh: seven expressions, whatever the fleet's size and engines (``dialects``,
    one at least). ``match`` (label matchers, `instance=~"…"`) narrows every selector to one
    node's series: a node's history is the same expressions over a range."""
    if not dialects:
        raise ValueError("a fleet reads at least one engine's series")

    def sel(name_re: str) -> str:
        return f'{{__name__=~"{name_re}"{", " + match if match else ""}}}'
    servers = sel("|".join(f"{d.name_re}({_names(d.server)})" for d in dialects))
    parts = []
    for d in dialects:
        for figure, (key, q) in LATENCY.items():
            if key in d.latency:
                parts.append(
                    f'label_replace(histogram_quantile({q}, sum by (le, {GROUP}) (rate('
                    f'{sel(f"{d.name_re}{d.latency[key]}_bucket")}[{window}]))), "figure", '
                    f'"{figure}", "", "")')
        if d.output_tokens:
            parts.append(f'label_replace(sum by ({GROUP}) (rate('
                         f'{sel(d.name_re + d.output_tokens)}[{window}])), '
                         '"figure", "output_tok_s", "", "")')
    return {
        # Only the labels it needs: dcgm-exporter's UUID, PCI and driver labels would be
        # most of the answer's bytes at a hundred nodes.
        "gpu": f'max by (__name__, gpu, modelName, {GROUP}) ({sel(_names(GPU_FIELDS))})',
        "host": sel(_names(HOST_FIELDS)),
        # Every rank's scheduler may report (--enable-metrics-for-all-schedulers): the
        # fullest rank speaks for the server.
        "server": f"max by (__name__, {GROUP}) ({servers})",
        "latency": " or ".join(parts),
        "up": "up",
        # The nodes' engram-top agents, where they run: none of these series elsewhere.
        "agent": agent_series.query(match),
        # SGLang's routers and LMCache's servers, where Prometheus scrapes them.
        "stack": router_series.query(window, match),
    }


@dataclass(frozen=True, slots=True)
class PromStatus:
    url: str
    nodes: int
    series: int
    query_ms: float  # all the refresh's queries, end to end
    odd: int = 0  # samples or values left out (no sample, no number, out of range)
    odd_first: str = ""  # the first of them, in words


class PromQLError(PageError):
    """Prometheus refused a query (bad_data, execution, timeout): its own words."""


class PrometheusSource:
    """One Source for every node a Prometheus scrapes: readings keyed (node, "fleet"), and
    one (LOCAL, "prometheus") saying how the server answered."""

    name = "prometheus"

    def __init__(self, url: str, *, dialects: Sequence[FleetDialect], window: str = "1m",
                 headers: dict[str, str] | None = None, deadline_s: float = DEADLINE_S,
                 auth: tuple[str, str] | None = None) -> None:
        # Basic auth from the URL's user:password@ (or `auth`); a bearer token in `headers`
        # wins over it. self.url, which every message quotes, has no password.
        shown, userinfo = split_userinfo(url)
        self.url = shown.rstrip("/")
        self._auth = auth or userinfo
        self.window = window
        self.deadline_s = deadline_s
        self._headers = headers
        self.dialects = tuple(dialects)
        self.queries = queries(window, dialects=self.dialects)
        self._clients = {k: PageClient(self.url, headers=headers, auth=self._auth)
                         for k in self.queries}
        self._failing_since: float | None = None

    async def _apart(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(_APART, uncollected, fn, *args)

    async def query(self, key: str) -> list[Any]:
        return await self._answer(self._clients[key], key,
                                  "/api/v1/query?query=" + quote(self.queries[key], safe=""))

    async def _answer(self, client: PageClient, key: str, path: str) -> list[Any]:
        """The `data.result` list of one query's answer; PageError (ShapeError, PromQLError)
        for an answer that is not one, TimeoutError and TooLarge past the bounds."""
        page = await client.get(path, deadline_s=self.deadline_s, limit_bytes=LIMIT_BYTES)
        what = f"{self.url}: the answer to the {key} query"
        try:
            # A big fleet's answer (2,000 nodes: ~10 MB) is parsed off the event loop, a
            # sample at a time, so that the loop runs meanwhile.
            body = await self._apart(decode_answer, page.content) \
                if len(page.content) > PARSE_APART_BYTES else page.json()
        except RecursionError:  # JSON nested past Python's recursion limit: nobody's answer
            raise ShapeError(f"{what} is nested too deeply to be an answer "
                             f"(HTTP {page.status_code})") from None
        except ValueError:
            kind = page.headers.get("content-type", "").split(";")[0]
            raise PageError(f"{what} is not JSON (HTTP {page.status_code}"
                            f"{', ' + kind if kind else ''})") from None
        if not isinstance(body, dict) or "status" not in body:
            raise ShapeError(f"{what} is JSON but not Prometheus's: {kind_of(body)} with no "
                             f"status (HTTP {page.status_code})")
        if body.get("status") != "success":
            error = short(body.get("error", ""))
            kind = short(body.get("errorType", ""))
            raise PromQLError(f"{self.url}: the {key} query was refused "
                              f"(HTTP {page.status_code} {kind}: {error})")
        return result_of(body, what)

    async def history(self, data: FleetNodeData, start: float, end: float,
                      step: float) -> list[tuple[float, FleetNodeData]]:
        """One node's readings from ``start`` to ``end`` (wall seconds) every ``step``, by
        /api/v1/query_range: the refresh's own expressions narrowed to the node's
        instances, so Prometheus sends this node's series only. Raises PageError (or
        TimeoutError, OSError) as a query does."""
        if not data.instances:
            return []
        match = 'instance=~"' + "|".join(_promql_re(i) for i in data.instances) + '"'
        exprs = queries(self.window, match, dialects=self.dialects)
        keys = ("gpu", "host", "server", "latency")
        clients = [PageClient(self.url, headers=self._headers, auth=self._auth) for _ in keys]
        try:
            answers = await together(self._answer(c, k, "/api/v1/query_range?" + urlencode(
                {"query": exprs[k], "start": f"{start:.3f}", "end": f"{end:.3f}",
                 "step": f"{step:g}"})) for c, k in zip(clients, keys, strict=True))
        finally:
            for c in clients:
                await c.aclose()
        steps: dict[float, dict[str, list[dict[str, Any]]]] = {}
        for key, series in zip(keys, answers, strict=True):
            for s in series:
                metric = labels_of(s)
                points = s.get("values") if metric is not None else None
                for point in points if isinstance(points, list) else ():
                    # Only the steps asked for: a time outside the span (or no number) is
                    # some other server's, and would place a reading anywhere on the clock.
                    t = number(point[0]) if isinstance(point, list) and point else None
                    if t is None or not start - step <= t <= end + step:
                        continue
                    steps.setdefault(t, {k: [] for k in keys})[key].append(
                        {"metric": metric, "value": point})
        out = []
        for t in sorted(steps):
            node = group(steps[t], self.dialects, only=data.node).get(data.node)
            if node is not None:
                out.append((t, node))
        return out

    async def poll(self) -> list[Keyed]:
        """Every node's reading and the server's own; whatever Prometheus (or whatever answers
        in its place) does, one error reading that says what, never an exception."""
        started = time.monotonic()
        odd = Odd()
        try:
            # Concurrently, each on its own connection: the refresh takes the slowest query.
            # The first to fail stops the others, so no query is left reading its
            # connection when the next refresh asks on it.
            answers = await together(self.query(k) for k in self.queries)
            results = dict(zip(self.queries, answers, strict=True))
            for key, items in results.items():
                if items and not any(labels_of(i) is not None for i in items):
                    raise ShapeError(f"{self.url}: an answer of an unexpected shape (none of "
                                     f"the {key} query's {len(items)} results is a sample)")
            # Off the event loop: at 2,000 nodes grouping takes a fair part of a second, and
            # the screen answers keys meanwhile.
            out = await self._apart(self._readings, results, odd, started)
        except Exception as exc:  # any answer at all is said, never raised
            self._failing_since = self._failing_since or started
            return [(SourceKey(LOCAL, "prometheus"), Reading(
                "prometheus", Status.ERROR, message=f"Prometheus: {self.why(exc)}",
                failing_since=self._failing_since))]
        self._failing_since = None
        return out

    def _readings(self, results: dict[str, list[Any]], odd: Odd, started: float) -> list[Keyed]:
        nodes = group(results, self.dialects, None, odd)
        ms = (time.monotonic() - started) * 1000
        series = sum(len(r) for r in results.values())
        out: list[Keyed] = [(SourceKey(node, "fleet"), Reading("fleet", Status.OK, data=data))
                            for node, data in nodes.items()]
        out.append((SourceKey(LOCAL, "prometheus"), Reading(
            "prometheus", Status.OK, data=PromStatus(self.url, len(nodes), series, ms,
                                                     odd.count, odd.first))))
        return out

    def why(self, exc: BaseException) -> str:
        """A failed refresh in words, naming the server."""
        if isinstance(exc, TimeoutError):
            return f"{self.url}: no whole answer within {self.deadline_s:g} s"
        if isinstance(exc, TooLarge):
            return (f"{self.url}: an answer over {LIMIT_BYTES // MIB} MiB, more than a fleet's "
                    "could be; not read")
        if isinstance(exc, (PageError, OSError)):
            return short(str(exc), 300) or f"{self.url}: {type(exc).__name__}"
        return f"{self.url}: an answer that could not be read ({type(exc).__name__}: " \
               f"{short(str(exc))})"

    async def close(self) -> None:
        for client in self._clients.values():
            await client.aclose()


async def together(aws: Iterable[Coroutine[Any, Any, T]]) -> list[T]:
    """Every coroutine's result, run concurrently; when one fails, the others are cancelled
    and awaited before its exception goes up (asyncio.gather leaves them running). Not a
    TaskGroup: on Python 3.11 a cancel that comes as a coroutine fails is dropped there (the
    failure raised instead, the task's cancel count left set), and a poll loop told to
    stop took it for a failed poll and ran on, its quit waiting for ever. Here a cancel is
    a cancel."""
    tasks = [asyncio.ensure_future(aw) for aw in aws]
    try:
        if tasks:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:  # failed, or cancelled: nothing is left running behind
        rest = [t for t in tasks if not t.done()]
        for t in rest:
            t.cancel()
        if rest:
            await asyncio.wait(rest)
    failures = [e for t in tasks if not t.cancelled() and (e := t.exception()) is not None]
    if failures:
        raise failures[0]
    return [t.result() for t in tasks]


def _promql_re(value: str) -> str:
    """``value`` matched literally inside a PromQL double-quoted regex: RE2's escapes (a
    character that is not printable as RE2's \\x{...}, so no control character reaches the
    query), then the string's own (a backslash and a quote)."""
    pattern = "".join(re.escape(c) if c.isprintable() else f"\\x{{{ord(c):x}}}"
                      for c in value)
    return pattern.replace("\\", "\\\\").replace('"', '\\"')

