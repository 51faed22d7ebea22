"""The HBM panel: per GPU its memory (the server's share, others', reserved), utilisation,
draw, temperature and what throttles it; under the table the Engram share of PCIe receive
(receive less HiCache's load-back, an estimate, said so), what each GPU's used memory is made
of (the HBM ledger's rows), and the server's own breakdown of one GPU (weights, KV pool,
graphs). Rows are (rank, line) for drawing.fit: the lower the rank, the longer a short panel
keeps it."""

from __future__ import annotations

import re

from rich.console import Group
from rich.text import Text

from collectors import GIB, byte_rate, gib, sglang_gb, tokens, visible, weights_gb
from engram_top import model
from engram_top.app.panels.drawing import (
    bar,
    columns,
    figure,
    first_fitting,
    fit,
    source_line,
    source_rows,
    waiting,
)
from engram_top.model import (
    GpuLedger,
    GpuView,
    RunStore,
    SourceName,
    StoreTopic,
    engram_rx_estimate,
)

# What it is drawn from: it is redrawn when one of these has a new version in the store,
# and then only when what it reads of them (hbm_inputs) changed.
SOURCES = (SourceName.GPU, SourceName.HOST, SourceName.SERVER, StoreTopic.RUN)


def hbm_inputs(store: RunStore) -> tuple[object, ...]:
    """All that hbm_panel reads of the store, as one value to compare: the server's page
    and the host move every second under load, the GPUs' memory seldom, so the panel is
    drawn when this changes (Panel's ``inputs``), not at every reading. Whatever the panel
    comes to read must be added here (tests/app/test_hbm_inputs.py changes each)."""
    run = store.run
    view = model.hicache_facts(store)
    engram = model.engram_facts(store)
    warn = source_line(store, SourceName.GPU, "GPU")
    load_back = None if view is None else view.load_back_by_rank
    return (
        None if warn is None else (warn.plain, str(warn.style)),
        tuple(_shown(g, exact_rx=bool(load_back)) for g in model.gpu_facts(store)),
        bool(model.server_pids(store)),
        load_back,
        None if engram is None else engram.placement,
        tuple(model.hbm_ledger(store)),
        None if run is None else tuple((i, r.graph_mem_usage_gb)
                                       for i, r in run.startup.ranks.items()),
        model.engine_of(store),
        model.word(store, "weights", ""),
    )


def _shown(g: GpuView, exact_rx: bool) -> tuple[object, ...]:
    """What the panel shows of a GPU: its counters' rates and energy, which move at every
    reading, are not drawn; its receive is drawn as byte_rate writes it (the Engram
    estimate, where HiCache reports a load-back, takes the figure itself)."""
    rx = g.pcie_rx_bytes_per_s if exact_rx else byte_rate(g.pcie_rx_bytes_per_s, per_s=False)
    power = None if g.power_w is None else f"{g.power_w:.0f}"
    return (g.index, g.total_bytes, g.reserved_bytes, g.used_bytes, g.server_bytes,
            g.util_gpu_pct, power, g.power_limit_w, g.temperature_c, g.sm_clock_mhz,
            g.throttle_reasons, rx, g.weights_gb, g.kv_cache_gb, g.kv_tokens,
            bool(g.processes))


def hbm_panel(store: RunStore, rows: int | None = None,
              cols: int | None = None) -> Group:
    """HBM per GPU with its draw, temperature and what throttles it. On a narrow panel
    (half of 100 columns) the table drops the per-GPU total and clocks, and throttles get
    lines of their own; on a short one the GPU rows and the throttles stay."""
    out = [(0, w) for w in source_rows(store, SourceName.GPU, "GPU")]
    gpus = model.gpu_facts(store)
    if not gpus:
        return waiting([w for _, w in out], "waiting for the first GPU reading…")
    # With no process list (dcgm-exporter through Prometheus has none), the server's share
    # is unknown: a dash, not 0.0.
    known = any(g.processes for g in gpus) or bool(model.server_pids(store))
    throttled = {g.index: g.throttle_reasons for g in gpus if g.throttle_reasons}
    table = []
    for layout in ("wide", "full", "narrow", "tight"):
        table = columns(*gpu_table(gpus, known, layout, bool(throttled)))
        if cols is None or max(line.cell_len for line in table) <= cols:
            break
    out += [(1, line) for line in table]
    if throttled and layout != "wide":  # the wide table has a column for them
        out += [(1, line) for line in throttle_lines(throttled, cols)]
    under_table = len(out)
    out += engram_rx_rows(store, gpus, cols)  # receive less HiCache's, est.
    total = gib(gpus[0].total_bytes, 0)
    legend = first_fitting(cols, (
        f"■ reserved {gib(gpus[0].reserved_bytes)}  ■ other  ■ this server (srv)  of {total} GiB",
        f"■ reserved {gib(gpus[0].reserved_bytes)} ■ other ■ this server · {total} GiB",
        f"■ rsvd {gib(gpus[0].reserved_bytes)} ■ other ■ srv · {total} GiB"))
    line = Text(legend, style="dim", no_wrap=True, overflow="ellipsis")
    for i, colour in zip([m.start() for m in re.finditer("■", legend)],
                         ("grey50", "yellow", "green"), strict=False):
        line.stylize(colour, i, i + 1)
    out.append((3, line))
    out += hbm_rows(store, cols)
    # The server's breakdown: its three lines where the panel has room for them beside
    # what it keeps before them, else one line of the weights per GPU (a headline figure,
    # so it stays before the legend and the ledger's lines) right under the table.
    breakdown = server_hbm(gpus[0], store)
    kept = sum(rank < 4 for rank, _ in out)
    short = server_hbm_line(gpus[0], store, cols)
    if rows is not None and rows - kept < len(breakdown) and short is not None:
        out.insert(under_table, (2, short))
    else:
        out += [(4, line) for line in breakdown]
    return Group(*fit(out, rows))


# --------------------------------------------------------------------------- the GPU table


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
    label = f"GPU {gpu.index} by {model.engine_of(store)}: "
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
    engine = model.engine_of(store)
    if weights is None:
        note = model.word(store, "weights", "")  # where an engine's metrics give none
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


# --------------------------------------------------------------------------- under the table


def engram_rx_rows(store: RunStore, gpus: list[GpuView],
                   cols: int | None = None) -> list[tuple[int, Text]]:
    """Under the HBM table, where HiCache reports its load-back: each GPU's receive less its
    rank's load-back, "Engram ≈ 812 MB/s per GPU (est.)". Nothing where HiCache is off or
    says nothing of its load-back: the whole receive is not called Engram's."""
    view = model.hicache_facts(store)
    if view is None or not view.load_back_by_rank:
        return []
    est = engram_rx_estimate({g.index: g.pcie_rx_bytes_per_s for g in gpus}, view)
    engram = model.engram_facts(store)
    # With the tables in HBM no Engram row crosses the link: the rest is someone else's.
    name = "other rx" if engram is not None and engram.placement == "device" else "Engram"
    known = {i: v for i, v in est.items() if v is not None}
    text: tuple[str, ...]  # the variants, most detailed first (first_fitting)
    if not known:
        text = (f"{name} ≈ ? (est.: no PCIe receive reading to take HiCache's load-back from)",
                f"{name} ≈ ? (est.: no PCIe receive)")
    else:
        low, high = min(known.values()), max(known.values())
        span = byte_rate(low) if byte_rate(low) == byte_rate(high) else \
            f"{byte_rate(low, per_s=False)}–{byte_rate(high)}"
        unknown = [i for i, v in est.items() if v is None]
        missing = "" if not unknown else f", GPU {','.join(map(str, unknown))} ?"
        each = " · ".join(f"GPU{i} {byte_rate(v)}" if v is not None else f"GPU{i} ?"
                          for i, v in est.items())
        text = (f"{name} ≈ {each} (est.: PCIe rx less HiCache load-back)",
                f"{name} ≈ {span} per GPU{missing} (est.: rx less HiCache load-back)",
                f"{name} ≈ {span} per GPU{missing} (est.)",
                f"{name} ≈ {span}/GPU (est.)")
    return [(2, Text(first_fitting(cols, text), style="cyan", no_wrap=True,
                     overflow="ellipsis"))]


def hbm_rows(store: RunStore, cols: int | None = None) -> list[tuple[int, Text]]:
    """Each GPU's NVML used against what its holders account for: every GPU another process
    holds memory on or where a tenth of the used memory is unexplained (rank 2: on a short
    panel they stay before the legend), else the first GPU (ranks are alike; rank 3)."""
    books = model.hbm_ledger(store)
    notable = [b for b in books if _notable(b)]
    rows = [(2 if notable else 3, Text(first_fitting(cols, _hbm_variants(b)), no_wrap=True,
                                       overflow="ellipsis", style="dim"))
            for b in notable or books[:1]]
    noted = [str(b.index) for b in books if b.note]
    if noted:  # the ledger's reading of the node, said where its figures are
        where = f"GPU{'s' * (len(noted) > 1)} {','.join(noted)}"
        rows.append((2, Text(first_fitting(cols, (
            f"{where}: NVML's pids are not on this host (another PID namespace): taken as "
            "the server's",
            f"{where}: pids of another PID namespace, taken as the server's",
            f"{where}: other PID namespace")), no_wrap=True, overflow="ellipsis",
            style="dim")))
    return rows


def _notable(book: GpuLedger) -> bool:
    others = any(not ln.server and (ln.bytes or 0) > 0 for ln in book.lines)
    return others or abs(book.unexplained_bytes) > 0.1 * max(1, book.used_bytes)


def _hbm_variants(book: GpuLedger) -> tuple[str, ...]:
    engine = [ln for ln in book.lines if ln.server]
    unknown = [ln.name.split(" (")[0] for ln in engine if ln.bytes is None]
    known = sum(ln.bytes or 0.0 for ln in engine)
    others = [ln for ln in book.lines if not ln.server]
    # A process's name is another tenant's text: shown as what it is, never acting.
    other_text = " · ".join(f"{visible(ln.name)} {figure(ln)}" for ln in others)
    unexpl = gib(book.unexplained_bytes)
    head = f"GPU{book.index} used {gib(book.used_bytes)} = "
    parts = [f"engine {gib(known)}" + (f" ({', '.join(unknown)} ?)" if unknown else "")]
    if others:
        parts.append(other_text)
    parts.append(f"unexplained {unexpl} GiB")
    # Narrower: who else holds memory matters more than the sum (an on-call's next look).
    named = f"GPU{book.index} {other_text} · ? {unexpl}" if others else ""
    return (head + " + ".join(parts), *([named] if named else []),
            f"GPU{book.index} {gib(book.used_bytes)} = eng {gib(known)}"
            + (f" + others {gib(sum(ln.bytes or 0 for ln in others))}" if others else "")
            + f" + ? {unexpl}")
