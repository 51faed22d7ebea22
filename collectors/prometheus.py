"""A fleet read through Prometheus's HTTP API: a few aggregated PromQL queries per refresh,
grouped into one reading per node.

Which node a series belongs to: its `node` label where the scrape config sets one (the usual
relabelling: one label naming the machine across every exporter on it), else dcgm-exporter's
`Hostname` (`hostname` on dcgm-exporter's main branch since 2026-05), else the host part of
`instance` (exporters on one machine differ only in port). A `placement` label, where the
config sets one, names the node's Engram placement; nothing in SGLang's metrics says it.

Names: dcgm-exporter's DCGM_FI_* (MiB, %, W, bytes/s), node-exporter's node_memory_*, and
each engine's own series as its FleetDialect declares them (collectors/<engine>/): which
engine a node serves with is whose series it has.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

from collectors.base import TooLarge
from collectors.fleet_dialect import FleetDialect
from collectors.pages import PageClient, PageError, split_userinfo
from collectors.prom_answer import (
    Labels,
    Odd,
    ShapeError,
    in_range,
    is_number_text,
    kind_of,
    labels_of,
    number,
    result_of,
    say_range,
    small_index,
    value_of,
)
from collectors.readings import Reading, Status
from collectors.source import LOCAL, Keyed, SourceKey
from collectors.units import MIB

T = TypeVar("T")

DEADLINE_S = 5.0
LIMIT_BYTES = 32 * 1024 * 1024
PARSE_APART_BYTES = 1024 * 1024
NODE_LABELS = ("node", "Hostname", "hostname", "instance")
GROUP = "node, Hostname, hostname, instance, placement"

GPU_FIELDS = {
    "DCGM_FI_DEV_FB_USED": "used_mib", "DCGM_FI_DEV_FB_FREE": "free_mib",
    "DCGM_FI_DEV_FB_RESERVED": "reserved_mib", "DCGM_FI_DEV_GPU_UTIL": "util_pct",
    "DCGM_FI_DEV_POWER_USAGE": "power_w", "DCGM_FI_PROF_PCIE_TX_BYTES": "pcie_tx",
    "DCGM_FI_PROF_PCIE_RX_BYTES": "pcie_rx", "DCGM_FI_PROF_NVLINK_TX_BYTES": "nvlink_tx",
    "DCGM_FI_PROF_NVLINK_RX_BYTES": "nvlink_rx",
}
HOST_FIELDS = {
    "node_memory_MemTotal_bytes": "total", "node_memory_MemAvailable_bytes": "available",
    "node_memory_Shmem_bytes": "shmem", "node_memory_HugePages_Total": "huge_total",
    "node_memory_HugePages_Free": "huge_free", "node_memory_Hugepagesize_bytes": "huge_size",
    "node_memory_SwapTotal_bytes": "swap_total", "node_memory_SwapFree_bytes": "swap_free",
    "node_memory_AnonHugePages_bytes": "anon_huge", "node_memory_Cached_bytes": "cached",
    "node_memory_MemFree_bytes": "free",
}
LATENCY = {  # figure -> (the dialect's histogram of it, quantile)
    "ttft_p50": ("ttft", 0.5), "ttft_p99": ("ttft", 0.99),
    "tpot_p50": ("tpot", 0.5), "tpot_p99": ("tpot", 0.99),
}
LATENCY_FIGURES = (*LATENCY, "output_tok_s")


def _names(names: Any) -> str:
    return "|".join(names)


def queries(window: str = "1m", match: str = "", *,
            dialects: Sequence[FleetDialect]) -> dict[str, str]:
    """The whole refresh: five expressions, whatever the fleet's size and engines (``dialects``,
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
    }


@dataclass(frozen=True, slots=True)
class FleetGpu:
    index: str
    model: str = ""
    used_bytes: int | None = None
    free_bytes: int | None = None
    reserved_bytes: int | None = None
    util_pct: float | None = None
    power_w: float | None = None
    pcie_rx_bytes_per_s: float | None = None
    pcie_tx_bytes_per_s: float | None = None

    @property
    def total_bytes(self) -> int | None:
        # dcgm-exporter's default fields carry no total: used + free + reserved is it.
        used, free, reserved = self.used_bytes, self.free_bytes, self.reserved_bytes
        if used is None or free is None or reserved is None:
            return None
        return used + free + reserved


@dataclass(frozen=True, slots=True)
class FleetNodeData:
    node: str
    placement: str | None  # the scrape config's `placement` label, where it sets one
    gpus: tuple[FleetGpu, ...] = ()
    host: dict[str, float] = field(default_factory=dict)
    server: dict[str, float] = field(default_factory=dict)
    latency: dict[str, float] = field(default_factory=dict)  # seconds, tok/s
    # What this node lacks: "dcgm-exporter (GPU figures)", "node-exporter (host memory)", an
    # engine's /metrics (server_missing), targets Prometheus cannot scrape ("… down (…)").
    missing: tuple[str, ...] = ()
    # The `instance` labels its series came from: what a query for this node alone matches.
    instances: tuple[str, ...] = ()
    # The engine whose series its server figures are; None where it has none.
    dialect: FleetDialect | None = None
    # No engine's figures, or an engine's scrape job down: the server says nothing.
    server_silent: bool = False

    @property
    def hbm_used(self) -> tuple[int, int] | None:
        used = [g.used_bytes for g in self.gpus if g.used_bytes is not None]
        return (min(used), max(used)) if used else None


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

    async def query(self, key: str) -> list[Any]:
        return await self._answer(self._clients[key], key,
                                  "/api/v1/query?query=" + quote(self.queries[key], safe=""))

    async def _answer(self, client: PageClient, key: str, path: str) -> list[Any]:
        """The `data.result` list of one query's answer; PageError (ShapeError, PromQLError)
        for an answer that is not one, TimeoutError and TooLarge past the bounds."""
        page = await client.get(path, deadline_s=self.deadline_s, limit_bytes=LIMIT_BYTES)
        what = f"{self.url}: the answer to the {key} query"
        try:
            # A big fleet's answer (2,000 nodes: ~10 MB) is parsed off the event loop.
            body = await asyncio.to_thread(page.json) if len(page.content) > PARSE_APART_BYTES \
                else page.json()
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
            error = _short(body.get("error", ""))
            kind = _short(body.get("errorType", ""))
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
            nodes = await asyncio.to_thread(group, results, self.dialects, None, odd)
        except Exception as exc:  # any answer at all is said, never raised
            self._failing_since = self._failing_since or started
            return [(SourceKey(LOCAL, "prometheus"), Reading(
                "prometheus", Status.ERROR, message=f"Prometheus: {self.why(exc)}",
                failing_since=self._failing_since))]
        self._failing_since = None
        ms = (time.monotonic() - started) * 1000
        series = sum(len(r) for r in answers)
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
            return _short(str(exc), 300) or f"{self.url}: {type(exc).__name__}"
        return f"{self.url}: an answer that could not be read ({type(exc).__name__}: " \
               f"{_short(str(exc))})"

    async def close(self) -> None:
        for client in self._clients.values():
            await client.aclose()


async def together(aws: Iterable[Coroutine[Any, Any, T]]) -> list[T]:
    """Every coroutine's result, run concurrently in a TaskGroup; when one fails, the others
    are cancelled and awaited before its exception goes up (asyncio.gather leaves them)."""
    try:
        async with asyncio.TaskGroup() as tasks:
            started = [tasks.create_task(aw) for aw in aws]
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0] from None
    return [t.result() for t in started]


def _short(v: Any, limit: int = 120) -> str:
    text = v if isinstance(v, str) else repr(v)
    return text if len(text) <= limit else text[:limit] + "…"


def _promql_re(value: str) -> str:
    """``value`` matched literally inside a PromQL double-quoted regex: RE2's escapes (a
    character that is not printable as RE2's \\x{...}, so no control character reaches the
    query), then the string's own (a backslash and a quote)."""
    pattern = "".join(re.escape(c) if c.isprintable() else f"\\x{{{ord(c):x}}}"
                      for c in value)
    return pattern.replace("\\", "\\\\").replace('"', '\\"')


def host_of(instance: str) -> str:
    """"10.0.0.7:9400" -> "10.0.0.7", "[fe80::1]:9100" -> "[fe80::1]"; else as it is."""
    if instance.startswith("["):
        return instance.split("]", 1)[0] + "]"
    return instance.rsplit(":", 1)[0] if instance.count(":") == 1 else instance


def node_of(labels: dict[str, str], aliases: dict[str, str] | None = None) -> str:
    """The node a series describes. `aliases` maps an instance's host to the Hostname that
    dcgm-exporter gave on that host, so the same machine's node-exporter and SGLang series
    (which carry no Hostname) land on the same node."""
    for name in NODE_LABELS[:-1]:
        if labels.get(name):
            return labels[name]
    instance = labels.get("instance")
    if not instance:
        return "?"
    host = host_of(instance)
    return (aliases or {}).get(host, host)


def _samples(items: Any, key: str, odd: Odd | None) -> list[tuple[Labels, Any]]:
    """(labels, raw value) of each sample of one query's answer; an item that is no sample
    is left out, and counted in ``odd``."""
    out = []
    for item in items if isinstance(items, list) else ():
        labels = labels_of(item)
        if labels is None:
            if odd is not None:
                odd.add(f"a {key} result that is no sample ({_short(item, 60)})")
            continue
        out.append((labels, value_of(item)))
    return out


def _figure(field_name: str, raw: Any, node: str, labels: Labels, odd: Odd | None
            ) -> float | None:
    """A sample's value as ``field_name``'s figure: None for NaN and ±Inf (Prometheus's own
    "no figure"), and for a value that is no number or outside the field's range (counted in
    ``odd``: a broken exporter's, said rather than shown)."""
    v = number(raw)
    if v is not None and in_range(field_name, v):
        return v
    if odd is not None and (v is not None or not is_number_text(raw)):
        name = labels.get("__name__") or labels.get("figure") or field_name
        odd.add(f"{node} {name} = {_short(raw, 40)}: "
                + ("not a number" if v is None else f"outside {say_range(field_name)}"))
    return None


def server_missing(dialects: Sequence[FleetDialect]) -> str:
    """What a node without any engine's series lacks, in its `missing`."""
    return f"{' or '.join(d.name for d in dialects) or 'an engine'} /metrics"


def group(results: dict[str, Any], dialects: Sequence[FleetDialect], only: str | None = None,
          odd: Odd | None = None) -> dict[str, FleetNodeData]:
    """The queries' series, one FleetNodeData per node (sorted by name), its server figures
    read by ``dialects``; ``only``: that node's alone. What is left out (no sample, no
    number, out of range) is counted in ``odd``; nothing in ``results`` makes it raise."""
    placement: dict[str, str] = {}
    instances: dict[str, set[str]] = {}
    gpus: dict[str, dict[str, dict[str, Any]]] = {}
    host: dict[str, dict[str, float]] = {}
    server: dict[str, dict[str, float]] = {}
    speaks: dict[str, FleetDialect] = {}
    latency: dict[str, dict[str, float]] = {}
    down: dict[str, list[str]] = {}
    engine_down: set[str] = set()  # nodes where a job named for an engine is down
    jobs: dict[str, set[str]] = {}
    samples = {key: _samples(results.get(key), key, odd)
               for key in ("gpu", "host", "server", "latency", "up")}

    aliases: dict[str, str] = {}
    for labels, _ in samples["gpu"]:
        name = labels.get("Hostname") or labels.get("hostname")
        if name and labels.get("instance") and not labels.get("node"):
            aliases[host_of(labels["instance"])] = name

    def seen(labels: Labels) -> str:
        node = node_of(labels, aliases)
        if only is not None and node != only:
            return ""  # another node's: skipped by every loop below
        if labels.get("placement"):
            placement[node] = labels["placement"]
        if labels.get("instance"):
            instances.setdefault(node, set()).add(labels["instance"])
        return node

    for labels, raw in samples["gpu"]:
        field_name = GPU_FIELDS.get(labels.get("__name__", ""))
        if not field_name or not (node := seen(labels)):
            continue
        gpu = gpus.setdefault(node, {}).setdefault(labels.get("gpu", "?"), {
            "model": labels.get("modelName", "")})
        if (v := _figure(field_name, raw, node, labels, odd)) is not None:
            gpu[field_name] = v
    for labels, raw in samples["host"]:
        name = HOST_FIELDS.get(labels.get("__name__", ""))
        if name and (node := seen(labels)) \
                and (v := _figure(name, raw, node, labels, odd)) is not None:
            host.setdefault(node, {})[name] = v
    for labels, raw in samples["server"]:
        found = next(((d, f) for d in dialects
                      if (f := d.field_of(labels.get("__name__", ""))) is not None), None)
        if found is None or not (node := seen(labels)):
            continue
        dialect, name = found
        speaks.setdefault(node, dialect)  # a node with two engines' series: the first's
        if (v := _figure(name, raw, node, labels, odd)) is not None:
            server.setdefault(node, {})[name] = v
    for labels, raw in samples["latency"]:
        name = labels.get("figure", "")
        if name in LATENCY_FIGURES and (node := seen(labels)) \
                and (v := _figure(name, raw, node, labels, odd)) is not None:
            latency.setdefault(node, {})[name] = v
    for labels, raw in samples["up"]:
        if not (node := seen(labels)):
            continue
        job = labels.get("job", "?")
        jobs.setdefault(node, set()).add(job)
        if _figure("up", raw, node, labels, odd) == 0:
            down.setdefault(node, []).append(f"{job} down ({labels.get('instance', '?')})")
            if any(d.name.lower() in job.lower() for d in dialects):
                engine_down.add(node)
    names = sorted(set(gpus) | set(host) | set(server) | set(latency) | set(jobs))
    out: dict[str, FleetNodeData] = {}
    for node in names:
        missing = []
        if node not in gpus:
            missing.append("dcgm-exporter (GPU figures)")
        if node not in host:
            missing.append("node-exporter (host memory)")
        if node not in server:
            missing.append(server_missing(dialects))
        missing += down.get(node, [])
        out[node] = FleetNodeData(
            node=node, placement=placement.get(node),
            gpus=tuple(_gpu(i, g) for i, g in sorted(gpus.get(node, {}).items(),
                                                       key=lambda kv: _index(kv[0]))),
            host=host.get(node, {}), server=server.get(node, {}),
            latency=latency.get(node, {}), missing=tuple(missing),
            instances=tuple(sorted(instances.get(node, ()))), dialect=speaks.get(node),
            server_silent=node not in server or node in engine_down)
    return out


def _index(text: str) -> tuple[int, str]:
    i = small_index(text)
    return (i, "") if i is not None else (1 << 30, text)


def _gpu(index: str, g: dict[str, Any]) -> FleetGpu:
    def mib(name: str) -> int | None:
        return int(g[name] * MIB) if name in g else None  # in range: 16 TiB at most
    return FleetGpu(index=index, model=g.get("model", ""), used_bytes=mib("used_mib"),
                    free_bytes=mib("free_mib"), reserved_bytes=mib("reserved_mib"),
                    util_pct=g.get("util_pct"), power_w=g.get("power_w"),
                    pcie_rx_bytes_per_s=g.get("pcie_rx"), pcie_tx_bytes_per_s=g.get("pcie_tx"))
