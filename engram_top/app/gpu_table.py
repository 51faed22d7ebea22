"""The HBM panel's table (per GPU: memory, the server's share, utilisation, power, what
throttles it) and the server's own breakdown of one GPU (weights, KV pool, graphs)."""

from __future__ import annotations

from rich.text import Text

from collectors.units import GIB, byte_rate, gib, sglang_gb, tokens, weights_gb
from engram_top.app.panel_text import bar, columns, first_fitting
from engram_top.model import facts
from engram_top.model.store import RunStore
from engram_top.model.views import GpuView


def gpu_table(gpus: list[GpuView], known: bool, layout: str,
              throttled: bool) -> tuple[list[list[Text | str]], str]:
    """The rows of the GPU table and their justification. "wide" has the clocks and the
    throttles as columns, "full" each GPU's total and power limit, "narrow" (46 columns)
    neither: the total is in the legend, and a limit all GPUs share is in the header;
    "tight" is narrow with a shorter bar, for limits that differ."""
    small = layout in ("narrow", "tight")
    limits = {g.power_limit_w for g in gpus}
    shared = limits.pop() if len(limits) == 1 else None
    power_head = f"W/{shared:.0f}" if small and shared is not None else "power W"
    health = [  # (header, justify, cell of a GPU), each only where some GPU has it
        ("°C", "r", lambda g: _dash(g.temperature_c), any(g.temperature_c is not None
                                                           for g in gpus)),
        (power_head, "r", lambda g: _power(g, power_head == "power W"),
         any(g.power_w is not None for g in gpus)),
        ("SM MHz", "r", lambda g: _dash(g.sm_clock_mhz),
         layout == "wide" and any(g.sm_clock_mhz is not None for g in gpus)),
    ]
    shown = [h for h in health if h[3]]
    # PCIe receive in the unit each figure reads in (the header says /s): a host-prefetch
    # GPU's few MB/s is "4.20 MB", never 0.00 GB/s beside a chart that shows it.
    head = ["GPU", "GiB" if small else "GiB used", "", "srv", "util",
            *[h[0] for h in shown], "rx/s"]
    wide_throttles = layout == "wide" and throttled
    if wide_throttles:
        head.append("throttled")
    table: list[list[Text | str]] = [[Text(h, style="bold") for h in head]]
    for g in gpus:
        server = g.server_bytes
        other = max(0, g.used_bytes - server)
        used = gib(g.used_bytes) if small else f"{gib(g.used_bytes)}/{gib(g.total_bytes, 0)}"
        marked = Text(f"{g.index}!", style="bold yellow") if g.throttle_reasons \
            else f"{g.index}"
        row_cells: list[Text | str] = [
            marked, used,
            bar([(g.reserved_bytes, "grey50"), (other, "yellow"), (server, "green")],
                g.total_bytes, {"narrow": 6, "tight": 4}.get(layout, 10)),
            gib(server) if known else "–",
            "–" if g.util_gpu_pct is None else f"{g.util_gpu_pct}%",
            *[h[2](g) for h in shown],
            byte_rate(g.pcie_rx_bytes_per_s, per_s=False)]
        if wide_throttles:
            row_cells.append(Text(",".join(g.throttle_reasons or ()), style="bold yellow"))
        table.append(row_cells)
    return table, "lrlrr" + "".join(h[1] for h in shown) + "r" + ("l" if wide_throttles else "")


def _dash(value: int | None) -> str:
    return "–" if value is None else f"{value}"


def _power(g: GpuView, with_limit: bool) -> str:
    """Draw in W; with its limit where the header does not give it."""
    if g.power_w is None:
        return "–"
    if with_limit and g.power_limit_w is not None:
        return f"{g.power_w:.0f}/{g.power_limit_w:.0f}"
    return f"{g.power_w:.0f}"


def throttle_lines(throttled: dict[int, tuple[str, ...]], cols: int | None) -> list[Text]:
    """"throttled sw_power_cap: GPU 0-3", the reasons on one line where they fit, else one
    line each (a name is never cut)."""
    by_reason: dict[str, list[int]] = {}
    for index, reasons in throttled.items():
        for reason in reasons:
            by_reason.setdefault(reason, []).append(index)
    parts = [f"{reason}: GPU {_ranges(ids)}" for reason, ids in by_reason.items()]
    one = "throttled " + " · ".join(parts)
    texts = [one] if cols is None or len(one) <= cols else [f"throttled {p}" for p in parts]
    return [Text(t, style="bold yellow", no_wrap=True, overflow="ellipsis") for t in texts]


def _ranges(ids: list[int]) -> str:
    """0,1,2,3,5 as 0-3,5."""
    spans: list[list[int]] = []
    for i in sorted(ids):
        if spans and spans[-1][1] == i - 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return ",".join(f"{a}-{b}" if b > a + 1 else (f"{a},{b}" if b == a + 1 else f"{a}")
                    for a, b in spans)


def _graphs_gb(gpu: GpuView, store: RunStore) -> float | None:
    run = store.run
    rank = run.startup.ranks.get(gpu.index) if run is not None else None
    return rank.graph_mem_usage_gb if rank is not None else None


def server_hbm_line(gpu: GpuView, store: RunStore, cols: int | None) -> Text | None:
    """server_hbm in one line, for a panel without room for its three: the weights per
    GPU whole, then the KV pool and graphs as room allows (GB as the engine writes it)."""
    if gpu.weights_gb is None:
        return None
    weights = f"weights {weights_gb(gpu.weights_gb)}"
    kv = "" if gpu.kv_cache_gb is None else f" · KV {sglang_gb(gpu.kv_cache_gb)}"
    graphs_gb = _graphs_gb(gpu, store)
    graphs = "" if graphs_gb is None else f" · graphs {sglang_gb(graphs_gb)}"
    label = f"GPU {gpu.index} by {facts.engine_of(store)}: "
    text = first_fitting(cols, (f"{label}{weights}{kv}{graphs} GB", f"{weights}{kv}{graphs} GB",
                                f"{weights}{kv} GB", f"{weights} GB"))
    line = Text(text, no_wrap=True, overflow="ellipsis")
    line.highlight_words(["weights"], style="cyan")
    line.highlight_words(["KV"], style="magenta")
    return line


def server_hbm(gpu: GpuView, store: RunStore) -> list[Text]:
    """Where the server's HBM goes on one GPU, by SGLang's own figures (GB there = GiB)."""
    weights = gpu.weights_gb
    kv = gpu.kv_cache_gb
    graphs = _graphs_gb(gpu, store)
    engine = facts.engine_of(store)
    if weights is None:
        note = facts.word(store, "weights", "")  # where an engine's metrics give none
        return [Text(f"{engine}'s breakdown appears as the weights load"
                     + (f" ({note})" if note else ""), style="dim")]
    parts = [("weights", weights, "cyan"), ("KV pool", kv, "magenta"), ("graphs", graphs, "blue")]
    shown = [(v * GIB, st) for _, v, st in parts if v is not None]
    label = f"GPU {gpu.index} by {engine}"
    lines: list[list[Text | str]] = [
        [Text(label, style="bold"), bar(shown, gpu.total_bytes, 28)],
        ["", Text.assemble(*[(f"{name} {weights_gb(v)} GB  " if name == "weights" else
                              f"{name} {sglang_gb(v)} GB  ", st)
                             for name, v, st in parts if v is not None])]]
    if gpu.kv_tokens is not None:
        lines.append(["", f"KV capacity {tokens(gpu.kv_tokens)} tokens"])
    return columns(lines)
