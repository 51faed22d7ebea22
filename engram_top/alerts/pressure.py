"""The checks for memory and serving pressure: requests retracted, the SLOs breached, HiCache
dropping tokens for host pressure, a PCIe link near saturation, and what an HBM or host
memory alert names (who holds the GPU's memory, which host ledger line grew). Each finding
says what to look at next. Pure, over a RunStore; the monitor calls them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from collectors.readings import HostData, Quantiles, Reading, Status
from collectors.safetext import visible
from collectors.source import SourceName
from collectors.units import GB, GIB, latency_bucket
from engram_top.alerts.definitions import (
    HICACHE_DROPS,
    NUMA_AVAILABLE,
    PCIE,
    RETRACTIONS,
    SHM_LEFTOVER,
    SLO,
)
from engram_top.alerts.finding import Finding
from engram_top.model.facts import gpu_facts, kv_facts, latency_facts, word
from engram_top.model.hicache import engram_rx_estimate, hicache_facts
from engram_top.model.ledger import HostLedger, pid_label
from engram_top.model.store import RunStore, SeriesName
from engram_top.model.views import GpuView
from scenarios.runstate import SERVING

# What one lane carries each way, in bytes a second, by PCIe generation (after line coding:
# 8b/10b for Gen1-2, 128b/130b for Gen3-5, FLIT for Gen6).
LANE_BYTES_PER_S = {1: 0.25 * GB, 2: 0.5 * GB, 3: 0.985 * GB, 4: 1.969 * GB, 5: 3.938 * GB,
                    6: 7.563 * GB}
# An SLO is judged from a window of at least this many requests: one slow first request
# after a start is no breach.
SLO_MIN_REQUESTS = 10
# A host ledger line must have grown by this much to be named as the one that grew.
GREW_AT_LEAST = 0.5 * GIB
# Reclaimable: it counts as available, so its growth never explains a shortage.
NOT_A_CAUSE = frozenset({"page cache"})


class SloBound(Protocol):
    """An [slo] entry (engram_top.compare.slo.Slo), as the alerts read it: read only, as
    that frozen dataclass's fields are."""

    @property
    def metric(self) -> str: ...
    @property
    def percentile(self) -> float: ...
    @property
    def max_s(self) -> float: ...


def server_down(store: RunStore) -> Reading[Any] | None:
    """The watched server's latest reading, where a ready or attached server has failed two
    polls in a row (its figures are stale from then on); else None. Two, so that one lost
    poll is no alarm."""
    run = store.run
    if run is None or run.state not in SERVING:
        return None
    latest = store.latest.get(SourceName.SERVER)
    if latest is None or latest.status is not Status.ERROR or latest.failing_since is None:
        return None
    return latest if latest.at > latest.failing_since else None


def hbm_holders(gpu: GpuView) -> str:
    """Who holds a GPU's memory: the largest holder that is not the server (name, pid, GiB)
    and the server's share; or why no process is named."""
    if not gpu.processes:
        return "NVML lists no process on it (another container's, or the driver's)"
    ranked = sorted(gpu.processes, key=lambda p: -(p.used_bytes or 0))
    outside = [p for p in ranked if not p.server]
    parts = []
    if outside and (held := outside[0].used_bytes) is not None:
        top = outside[0]
        name = top.name or ("a process of another PID namespace" if top.seen is False
                            else "a process")
        whose = pid_label(top.pid, top.container, "not the server's")
        parts.append(f"{name} {whose} holds "
                     f"{held / GIB:,.1f} GiB")
    elif outside:
        parts.append(f"{len(outside)} other process{'es' * (len(outside) > 1)} "
                     "(NVML gives no figure)")
    if gpu.server_bytes:
        parts.append(f"the server {gpu.server_bytes / GIB:,.1f} GiB")
    return ", ".join(parts) or "NVML gives no figure per process"


def hbm_cause(store: RunStore) -> dict[int, str]:
    """Each GPU's holders, for the HBM alert."""
    return {g.index: hbm_holders(g) for g in gpu_facts(store)}


def ledger_figures(ledger: HostLedger | None) -> dict[str, float]:
    """The host ledger's lines with a figure, by name."""
    if ledger is None:
        return {}
    return {ln.name: ln.bytes for ln in ledger.lines if ln.bytes is not None}


def host_cause(now: dict[str, float], first: dict[str, float], since: str) -> str:
    """The ledger line that grew the most since the run was first seen (``first``), else
    the largest line: what a host memory alert names."""
    grown = {name: b - first[name] for name, b in now.items()
             if name in first and name not in NOT_A_CAUSE}
    if grown:
        name, by = max(grown.items(), key=lambda kv: kv[1])
        if by >= GREW_AT_LEAST:
            return f"{name} grew the most, +{by / GIB:,.1f} GiB since {since} " \
                   f"(now {now[name] / GIB:,.1f} GiB)"
    causes = {n: b for n, b in now.items() if n not in NOT_A_CAUSE}
    if not causes:
        return "no host ledger yet"
    name, held = max(causes.items(), key=lambda kv: kv[1])
    return f"the largest ledger line is {name}, {held / GIB:,.1f} GiB"


def largest_others(host: HostData | None) -> str:
    """The processes outside the server's tree that hold the most, as the HBM alert names
    a GPU's: "; largest outside the server: NAME (pid P) X GiB, ..." ("" where not read)."""
    held = host.largest_others[:2] if host is not None else ()
    if not held:
        return ""
    return "; largest outside the server: " + ", ".join(
        f"{visible(p.name)} {pid_label(p.pid, p.container)} {p.rss_bytes / GIB:,.1f} GiB"
        for p in held)


def _holders_on(host: HostData, node: int) -> str:
    """The processes outside the server's tree that hold the most on NUMA node ``node``
    (of the largest ones, read every 30 s): "; outside the server there: NAME (pid P) X GiB"
    ("" where none holds a GiB there, or where they were not read per node)."""
    there = sorted(((dict(p.numa_bytes).get(node, 0), p) for p in host.largest_others),
                   key=lambda bp: -bp[0])
    named = [f"{visible(p.name)} {pid_label(p.pid, p.container)} {b / GIB:,.1f} GiB"
             for b, p in there[:2]
             if b >= GIB]
    return "; outside the server there: " + ", ".join(named) if named else ""


def numa_nodes(store: RunStore, ledger: HostLedger | None, limit: float,
               hysteresis: float) -> Iterator[Finding]:
    """Each NUMA node nearly full (available: total less in use, page cache counted free),
    on a host of two or more, with the node's largest ledger lines: the host as a whole can
    look fine while one node spills or reclaims."""
    host: HostData | None = store.data(SourceName.HOST)
    if host is None or len(host.numa_nodes) < 2:
        return  # one node: host-available says it
    per_node = ledger.per_node if ledger is not None else {}
    for n in host.numa_nodes:
        if not n.total_bytes:
            continue
        available = max(0, n.total_bytes - n.used_bytes)
        pct = 100.0 * available / n.total_bytes
        if pct >= limit + hysteresis:
            continue
        held = sorted(((ln.bytes, ln.name) for ln in per_node.get(n.node, [])
                       if ln.bytes and ln.name not in NOT_A_CAUSE and ln.name != "free"),
                      reverse=True)[:2]
        largest = ", ".join(f"{name} {b / GIB:,.1f} GiB" for b, name in held) or "no ledger yet"
        largest += _holders_on(host, n.node)
        yield Finding(f"{NUMA_AVAILABLE.name}:node{n.node}", NUMA_AVAILABLE.severity,
                      f"NUMA node {n.node} {pct:.1f}% available (< {limit:g}%): "
                      f"{available / GIB:,.1f} of {n.total_bytes / GIB:,.1f} GiB; largest: "
                      f"{largest}; memory placed there now spills to another node (its reads "
                      "cross the socket link); look at the Host RAM panel's node rows",
                      firing=pct < limit)


def shm_leftovers(store: RunStore, limit_gib: float) -> Iterator[Finding]:
    """/dev/shm's files that no live process holds, above ``limit_gib`` in all: RAM that
    only removing them gives back. Named largest first, with the command that removes them
    (the reader checks that nothing holds them first: a live segment is no leftover)."""
    host: HostData | None = store.data(SourceName.HOST)
    files = host.shm_unheld if host is not None else ()
    total = sum(f.bytes for f in files)
    if not files or total <= limit_gib * GIB:
        return
    shown = ", ".join(f"{visible(f.name)} {f.bytes / GIB:,.1f} GiB ({_age(f.age_s)} old)"
                      for f in files[:3])
    more = f" and {len(files) - 3} more" if len(files) > 3 else ""
    names = " ".join(f"/dev/shm/{visible(f.name)}" for f in files[:3])
    yield Finding(SHM_LEFTOVER.name, SHM_LEFTOVER.severity,
                  f"/dev/shm holds {total / GIB:,.1f} GiB that no live process has open or "
                  f"mapped (> {limit_gib:g} GiB): {shown}{more}; a killed engine's segments "
                  f"are host RAM until removed: once no server of theirs runs, rm {names}"
                  f"{' ...' if more else ''}")


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def retractions(store: RunStore, limit: float) -> Iterator[Finding]:
    kv = kv_facts(store)
    rate = kv.retracted_per_s if kv is not None else None
    if rate is None or rate <= limit:
        return
    used = "" if kv is None or kv.token_usage is None else \
        f", KV pool {100 * kv.token_usage:.0f}% used"
    yield Finding(RETRACTIONS.name, RETRACTIONS.severity,
                  f"{rate:,.2f} requests {word(store, 'retracted')} a second (> {limit:g}/s): "
                  f"the KV pool ran out mid-decode{used}; look at the KV panel (usage, "
                  "queue): fewer concurrent requests or a larger KV pool")


def _seconds(value: float) -> str:
    return f"{value * 1000:,.0f} ms" if value < 1 else f"{value:,.1f} s"


def slo_breaches(store: RunStore, slos: Sequence[SloBound]) -> Iterator[Finding]:
    """Each p50 or p99 bound of the [slo] table that the server's window is past. A quantile
    whose bucket is too wide to resolve it (Quantiles.bucketed) is said by its bucket, never
    by the interpolated figure: past the bound where the whole bucket is, "not resolved"
    where the bucket holds the bound (the alert fires there as histogram_quantile's figure
    would, and says that much only)."""
    lat = latency_facts(store)
    if lat is None or not slos:
        return
    said = []
    for s in slos:
        q: Quantiles | None = {"ttft": lat.ttft, "tpot": lat.tpot or lat.itl,
                               "e2e": lat.e2e}.get(s.metric)
        if q is None or q.count < SLO_MIN_REQUESTS or s.percentile not in (50, 99):
            continue
        b = q.bucketed("p99" if s.percentile == 99 else "p50")
        if b.value is None or b.value <= s.max_s:
            continue
        what = f"p{s.percentile:g} {s.metric.upper()}"
        window = f"over the last {lat.window_s or 30:g} s"
        bound = f"the [slo] bound of {s.max_s * 1000:,.0f} ms"
        if not b.coarse or b.lo is None:
            said.append(f"{what} {_seconds(b.value)} {window}, past {bound}")
        elif b.lo >= s.max_s:  # the whole bucket lies past the bound
            said.append(f"{what} {latency_bucket(b.lo, b.hi)} {window}, past {bound}")
        else:
            said.append(f"{what} {latency_bucket(b.lo, b.hi)} {window}, a histogram bucket "
                        f"that holds {bound}: not resolved")
    if said:
        kv = kv_facts(store)
        queued = f" ({kv.queued:,} queued)" if kv is not None and kv.queued else ""
        yield Finding(SLO.name, SLO.severity,
                      "; ".join(said) + f"{queued}; look at the queue and the KV panel, and "
                      "the latency panel's p50 against p99")


def queued_without_first_token(store: RunStore) -> int:
    """Requests queued while too few got a first token in the window to measure TTFT by:
    the SLO is not met then, whatever the last quantile said (0: not so)."""
    lat = latency_facts(store)
    kv = kv_facts(store)
    if lat is None or kv is None or not kv.queued:
        return 0
    count = lat.ttft.count if lat.ttft is not None else 0
    return kv.queued if count < SLO_MIN_REQUESTS else 0


def hicache_drops(store: RunStore, limit: float, available_bytes: float | None
                  ) -> Iterator[Finding]:
    view = hicache_facts(store)
    rate = view.dropped_host_pressure_per_s if view is not None else None
    if view is None or rate is None or rate <= limit:
        return
    pool = ""
    if view.used_tokens is not None and view.total_tokens:
        pool = f": host pool {view.used_tokens:,} of {view.total_tokens:,} tokens"
    avail = "" if available_bytes is None else \
        f", host memory {available_bytes / GIB:,.1f} GiB available"
    yield Finding(HICACHE_DROPS.name, HICACHE_DROPS.severity,
                  f"HiCache dropped {rate:,.0f} tokens/s for host pressure (> {limit:g}/s)"
                  f"{pool}{avail}; look at the Host RAM ledger (HiCache host pools, other "
                  "tenants) and --hicache-size")


def link_bytes_per_s(gpu: GpuView) -> float | None:
    lane = LANE_BYTES_PER_S.get(gpu.pcie_gen or 0)
    return None if lane is None or not gpu.pcie_width else lane * gpu.pcie_width


def pcie(store: RunStore, now: float, limit_pct: float, window_s: float, band: float
         ) -> Iterator[Finding]:
    """Each GPU whose receive, averaged over the window, is near what its link carries."""
    gpus = gpu_facts(store)
    rx_now: dict[int, float | None] = {}
    for gpu in gpus:
        series = store.line(SourceName.GPU, SeriesName.PCIE_RX, gpu=str(gpu.index))
        points = [v for _, v in series.fine_since(now - window_s)] if series else []
        rx_now[gpu.index] = sum(points) / len(points) if points else gpu.pcie_rx_bytes_per_s
    view = hicache_facts(store)
    engram = engram_rx_estimate(rx_now, view)
    for gpu in gpus:
        link, rx = link_bytes_per_s(gpu), rx_now.get(gpu.index)
        if link is None or rx is None:
            continue
        pct = 100.0 * rx / link
        if pct <= limit_pct - band:
            continue
        apart = ""
        load_back = view.load_back_by_rank.get(gpu.index) if view is not None else None
        if load_back is not None and engram.get(gpu.index) is not None:
            apart = (f": HiCache load-back {load_back / GB:,.1f} GB/s, Engram "
                     f"~{(engram[gpu.index] or 0) / GB:,.1f} GB/s (an estimate)")
        yield Finding(PCIE.id(gpu.index), PCIE.severity,
                      f"GPU {gpu.index} PCIe receive {rx / GB:,.1f} GB/s over {window_s:g} s, "
                      f"{pct:.0f}% of its Gen{gpu.pcie_gen} x{gpu.pcie_width} link "
                      f"({link / GB:,.1f} GB/s){apart}; look at `h` (PCIe per GPU)",
                      firing=pct > limit_pct)
