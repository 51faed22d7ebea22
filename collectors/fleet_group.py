"""How a refresh's answers become the fleet's nodes: which node a series describes, and
each node's GPU, host, server and latency figures as one FleetNodeData (the names the
queries ask for are here too, so a reader and its query never disagree).

Which node a series belongs to: its `node` label where the scrape config sets one, else
dcgm-exporter's `Hostname` (`hostname` on its main branch since 2026-05), else the host part
of `instance`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from collectors.agent_series import AgentFigures, AgentReader
from collectors.fleet_dialect import FleetDialect
from collectors.prom_answer import (
    Labels,
    Odd,
    in_range,
    is_number_text,
    labels_of,
    number,
    say_range,
    small_index,
    value_of,
)
from collectors.router_series import StackFigures, StackReader
from collectors.units import MIB

NODE_LABELS = ("node", "Hostname", "hostname", "instance")

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
    # What the node's engram-top agent serves; None where no agent runs there.
    agent: AgentFigures | None = None
    # A router's or LMCache's figures where the node runs one (collectors.router_series).
    stack: StackFigures | None = None

    @property
    def hbm_used(self) -> tuple[int, int] | None:
        used = [g.used_bytes for g in self.gpus if g.used_bytes is not None]
        return (min(used), max(used)) if used else None


def short(v: Any, limit: int = 120) -> str:
    text = v if isinstance(v, str) else repr(v)
    return text if len(text) <= limit else text[:limit] + "…"


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
                odd.add(f"a {key} result that is no sample ({short(item, 60)})")
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
        odd.add(f"{node} {name} = {short(raw, 40)}: "
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
               for key in ("gpu", "host", "server", "latency", "up", "agent", "stack")}
    agents = AgentReader()
    stacks = StackReader()

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
    for labels, raw in samples["agent"]:
        # Not through seen(): an agent's `placement` labels are its scenarios' (its series
        # say the server's placement themselves), never the scrape config's.
        node = node_of(labels, aliases)
        if only is not None and node != only:
            continue
        if labels.get("instance"):
            instances.setdefault(node, set()).add(labels["instance"])
        if (v := _figure("agent", raw, node, labels, odd)) is not None:
            agents.add(node, labels, v)
    for labels, raw in samples["stack"]:
        figure = labels.get("figure", "")
        if (node := seen(labels)) and (v := _figure(figure, raw, node, labels, odd)) is not None:
            stacks.add(node, labels, v)
    names = sorted(set(gpus) | set(host) | set(server) | set(latency) | set(jobs)
                   | agents.nodes() | stacks.nodes())
    out: dict[str, FleetNodeData] = {}
    for node in names:
        missing = []
        if node not in gpus:
            missing.append("dcgm-exporter (GPU figures)")
        if node not in host:
            missing.append("node-exporter (host memory)")
        stack = stacks.figures(node)
        if node not in server and stack is None:  # a router's node has no engine to miss
            missing.append(server_missing(dialects))
        missing += down.get(node, [])
        out[node] = FleetNodeData(
            node=node, placement=placement.get(node),
            gpus=tuple(_gpu(i, g) for i, g in sorted(gpus.get(node, {}).items(),
                                                       key=lambda kv: _index(kv[0]))),
            host=host.get(node, {}), server=server.get(node, {}),
            latency=latency.get(node, {}), missing=tuple(missing),
            instances=tuple(sorted(instances.get(node, ()))), dialect=speaks.get(node),
            server_silent=(node not in server and stack is None) or node in engine_down,
            agent=agents.figures(node), stack=stack)
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
