"""The dashboard's panels: each turns facts from the store into a Rich renderable.

Memory is shown in binary units (GiB), as nvidia-smi's MiB and SGLang's "GB" (which is GiB)
are. Every panel says when its source is failing and how old its values are.
"""

from __future__ import annotations

import re
from typing import Any

from rich.console import Group
from rich.text import Text

from collectors.safetext import visible
from collectors.units import (
    GIB,
    MIB,
    gb_per_s,
    gib,
    gib_change,
    latency,
    percent,
    rate,
    seconds,
    sglang_gb,
    tokens,
    weights_gb,
)
from engram_top.model import facts
from engram_top.model.store import RunStore
from engram_top.model.views import GpuView, HostView, Quantiles

BAR_WIDTH = 24
SPARK = "▁▂▃▄▅▆▇█"


def bar(parts: list[tuple[float, str]], total: float, width: int = BAR_WIDTH) -> Text:
    """A horizontal stacked bar: each (value, style) part in proportion to total."""
    text = Text()
    used = 0
    for value, style in parts:
        cells = 0 if total <= 0 else round(width * max(0.0, value) / total)
        cells = min(cells, width - used)
        text.append("█" * cells, style=style)
        used += cells
    text.append("░" * (width - used), style="grey37")
    return text


def sparkline(values: list[float], width: int = 30) -> Text:
    values = values[-width:]
    if not values:
        return Text("")
    lo, hi = min(values), max(values)
    span = hi - lo or 1.0
    return Text("".join(SPARK[int((v - lo) / span * (len(SPARK) - 1))] for v in values),
                style="cyan")


def source_line(store: RunStore, kind: str, label: str) -> Text | None:
    """A line saying the source is failing, and for how long its values have been stale;
    for a server that was stopped, that the figures are its last."""
    st = facts.source_status(store, kind)
    run = store.run
    if kind == "server" and st.status == "starting" and st.message.startswith("waiting"):
        return Text(st.message, style="dim")  # a start-up before its port opens
    if st.status in ("ok", "starting"):
        return None
    age = st.last_good_age_s
    if kind == "server" and run is not None and run.state in ("stopping", "stopped"):
        return Text("server stopped" + ("" if age is None else
                                        f": the figures below are its last, {age:.0f} s old"),
                    style="dim yellow")
    stale = "no good reading yet" if age is None else f"last good value {age:.0f} s old"
    style = "yellow" if st.status == "unavailable" else "bold red"
    return Text(f"{label}: {visible(st.message)} ({stale})", style=style)


def _warnings(store: RunStore, kind: str, label: str) -> list[Any]:
    """A panel's first rows: its source's failure, if it is failing."""
    warn = source_line(store, kind, label)
    return [warn] if warn else []


def _waiting(rows: list[Any], text: str) -> Group:
    return Group(*rows, Text(text, style="dim"))


# --------------------------------------------------------------------------- HBM


def hbm_panel(store: RunStore, rows: int | None = None,
              cols: int | None = None) -> Group:
    """HBM per GPU with its draw, temperature and what throttles it. On a narrow panel
    (half of 100 columns) the table drops the per-GPU total and clocks, and throttles get
    lines of their own; on a short one the GPU rows and the throttles stay."""
    out = [(0, w) for w in _warnings(store, "gpu", "GPU")]
    gpus = facts.gpu_facts(store)
    if not gpus:
        return _waiting([w for _, w in out], "waiting for the first GPU reading…")
    # With no process list (dcgm-exporter through Prometheus has none), the server's share
    # is unknown: a dash, not 0.0.
    known = any(g.processes for g in gpus) or bool(facts.server_pids(store))
    throttled = {g.index: g.throttle_reasons for g in gpus if g.throttle_reasons}
    table = []
    for layout in ("wide", "full", "narrow", "tight"):
        table = columns(*_gpu_table(gpus, known, layout, bool(throttled)))
        if cols is None or max(line.cell_len for line in table) <= cols:
            break
    out += [(1, line) for line in table]
    if throttled and layout != "wide":  # the wide table has a column for them
        out += [(1, line) for line in _throttle_lines(throttled, cols)]
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
    out += [(4, line) for line in _server_hbm(gpus[0], store)]
    return Group(*fit(out, rows))


def _gpu_table(gpus: list[GpuView], known: bool, layout: str,
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
    head = ["GPU", "GiB" if small else "GiB used", "", "srv", "util",
            *[h[0] for h in shown], "rx GB/s"]
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
            gb_per_s(g.pcie_rx_bytes_per_s)]
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


def _throttle_lines(throttled: dict[int, tuple[str, ...]], cols: int | None) -> list[Text]:
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


def _server_hbm(gpu: GpuView, store: RunStore) -> list[Text]:
    """Where the server's HBM goes on one GPU, by SGLang's own figures (GB there = GiB)."""
    run = store.run
    ranks = (run.startup.get("ranks") or {}) if run else {}
    r0 = ranks.get(gpu.index) or {}
    weights = gpu.weights_gb
    kv = gpu.kv_cache_gb
    graphs = r0.get("graph_mem_usage_gb")
    engine = facts.engine_of(store)
    if weights is None:
        return [Text(f"{engine}'s breakdown appears as the weights load"
                     + (" (from its log: its metrics give no weights)" if engine == "vLLM"
                        else ""), style="dim")]
    parts = [("weights", weights, "cyan"), ("KV pool", kv, "magenta"), ("graphs", graphs, "blue")]
    shown = [(v * GIB, st) for _, v, st in parts if v is not None]
    label = f"GPU {gpu.index} by {engine}"
    lines = [[Text(label, style="bold"), bar(shown, gpu.total_bytes, 28)],
             ["", Text.assemble(*[(f"{name} {weights_gb(v)} GB  " if name == "weights" else
                                   f"{name} {sglang_gb(v)} GB  ", st)
                                  for name, v, st in parts if v is not None])]]
    if gpu.kv_tokens is not None:
        lines.append(["", f"KV capacity {tokens(gpu.kv_tokens)} tokens"])
    return columns(lines)


def columns(rows: list[list[Text | str]], justify: str = "") -> list[Text]:
    """Cells as aligned lines, one space between columns, each column as wide as its widest
    cell; ``justify`` gives "l" or "r" per column (left when not given). Lines, not a Rich
    Table: equal lines compare equal, so a panel whose figures did not move is not redrawn
    (Panel.refresh_from)."""
    cells = [[c if isinstance(c, Text) else Text(c) for c in row] for row in rows]
    widths = [max(c.cell_len for c in col) for col in zip(*cells, strict=True)]
    out = []
    for row in cells:
        line = Text(no_wrap=True, overflow="ellipsis")
        for i, (cell, width) in enumerate(zip(row, widths, strict=True)):
            pad = " " * (width - cell.cell_len)
            if i:
                line.append(" ")
            if justify[i:i + 1] == "r":
                line.append(pad)
                line.append_text(cell)
            else:
                line.append_text(cell)
                if i < len(row) - 1:
                    line.append(pad)
        out.append(line)
    return out


# --------------------------------------------------------------------------- KV pool


def kv_panel(store: RunStore, rows: int | None = None,
             cols: int | None = None) -> Group:
    """The KV pool; on a short panel the rows that matter most (capacity, use, requests,
    what is not a number) stay and the others go first."""
    out = [(0, w) for w in _warnings(store, "server", facts.engine_of(store))]
    kv = facts.kv_facts(store)
    if kv is None or kv.capacity_tokens is None:
        return _waiting([w for _, w in out],
                        "KV pool not allocated yet (the server reports it once ready)")
    usage = kv.token_usage
    room = None if cols is None else cols - LABEL_WIDTH - 1  # what a value may take
    out.append((1, row("capacity", first_fitting(room, (
        f"{tokens(kv.capacity_tokens)} tokens"
        + ("" if kv.kv_cache_gb is None else f" · {sglang_gb(kv.kv_cache_gb)} GB/GPU"),
        f"{tokens(kv.capacity_tokens)} tokens")))))
    split = {name: u for name, u in (("full", kv.full_usage), ("swa", kv.swa_usage))
             if u is not None}
    # The fullest pool is the bottleneck; which one it is, said where there are several.
    worst = max(split, key=split.__getitem__) if len(split) > 1 else None
    used = f"{percent(usage, 1)}" + (f" {worst.upper()}" if worst and worst != "full" else "")
    out.append((1, row("in use", Text.assemble(
        bar([(usage or 0.0, "magenta")], 1.0, 12 if room is None or room >= 44 else 8),
        (" ", "grey37"), used,
        # An engine that gives the usage as a fraction only: no token count made up.
        "" if kv.used_tokens is None and "num_used_tokens" in facts.not_reported(store)
        else f" · {tokens(kv.used_tokens)} tokens"))))
    if kv.pools or split:  # a hybrid model's pools (DeepSeek-V4.x): the full one is the capacity
        sizes = kv.pools or {}
        each = [f"{name} {percent(split[name], 1)}" if name in split else None
                for name in ("full", "swa")]
        of = {name: f" of {tokens(sizes[name])}" for name in ("swa",) if sizes.get(name)}
        rest = [f"{name} {tokens(sizes[name])}" for name in ("c4", "c128") if sizes.get(name)]
        usage_part = " · ".join(f"{e}{of.get(n, '')}" for n, e in zip(("full", "swa"), each,
                                                                       strict=True) if e)
        sizes_part = " · ".join(f"{n} {tokens(sizes[n])}" for n in ("full", "swa", "c4", "c128")
                                if sizes.get(n))
        out.append((4, row("pools", first_fitting(room, tuple(v for v in (
            " · ".join(x for x in (usage_part, *rest) if x), usage_part, sizes_part) if v)))))
    if kv.available_tokens is not None or kv.evictable_tokens is not None:
        out.append((3, row("free", f"{tokens(kv.available_tokens)} available · "
                                   f"{tokens(kv.evictable_tokens)} evictable")))
    # vLLM preempts where SGLang retracts: the same pressure, in the engine's own word.
    word = "preempted" if facts.engine_of(store) == "vLLM" else "retracted"
    retracted = "" if kv.retracted is None else f" · {kv.retracted} {word}"
    if kv.retracted_per_s:
        retracted += (f" ({kv.retracted_per_s:.2f}/s)" if retracted
                      else f" · {word} {kv.retracted_per_s:.2f}/s")
    out.append((1, row("requests", f"{kv.running if kv.running is not None else '–'} running · "
                                   f"{kv.queued if kv.queued is not None else '–'} queued"
                                   f"{retracted}")))
    if kv.queue_time is not None or kv.cache_hit_rate is not None:
        q = kv.queue_time
        wait = f"p50 {quantile(q, 'p50')} · p99 {quantile(q, 'p99')}"
        out.append((3, row("queue", first_fitting(room, (
            f"{wait} · cache hit {percent(kv.cache_hit_rate, 1)}",
            f"{wait} · hit {percent(kv.cache_hit_rate, 0)}", wait)))))
    out.append((5, row("trend", sparkline(_series(store, "token_usage")))))
    out += [(2, line) for line in _unavailable(kv.unavailable)]
    out += [(2 if i == 0 else 4, Text(problem, style="yellow", no_wrap=True,
                                      overflow="ellipsis"))
            for i, problem in enumerate(kv.page_problems[:3])]
    missing = facts.not_reported(store)
    if missing:  # an engine without these figures: said once, not shown as zeros
        names = {"num_used_tokens": "tokens in use", "weight_gb": "weights",
                 "graph_gb": "graph memory"}
        said = ", ".join(names.get(k, k) for k in missing)
        out.append((6, Text(f"{facts.engine_of(store)}'s metrics give no {said}",
                            style="dim", no_wrap=True, overflow="ellipsis")))
    if store.run is not None:
        out.append((6, Text(f"placement: {store.run.placement}", style="dim")))
    return Group(*fit(out, rows))


LABEL_WIDTH = 8  # the longest row label of a panel ("capacity", "requests")


def row(label: str, value: str | Text, width: int = LABEL_WIDTH) -> Text:
    """One ``label value`` line that never wraps: a value too long for the panel ends in
    an ellipsis, and the label keeps its width."""
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append(f"{label:<{width}} ", style="bold")
    line.append(value if isinstance(value, Text) else Text(value))
    return line


def first_fitting(room: int | None, variants: tuple[str, ...]) -> str:
    """The most detailed of ``variants`` (most first) that fits ``room`` cells; the last,
    to be cut with an ellipsis, when none does."""
    for text in variants:
        if room is None or len(text) <= room:
            return text
    return variants[-1]


def fit(rows: list[tuple[int, Any]], height: int | None) -> list[Any]:
    """The rows that fit in ``height`` lines, the most important (lowest rank) first, shown
    in their own order; every row when the height is unknown or enough."""
    if not height or height <= 0 or len(rows) <= height:
        return [r for _, r in rows]
    keep = sorted(range(len(rows)), key=lambda i: (rows[i][0], i))[:height]
    return [rows[i][1] for i in sorted(keep)]


# --------------------------------------------------------------------------- host RAM


def host_panel(store: RunStore, rows: int | None = None,
               cols: int | None = None) -> Group:
    out = [(0, w) for w in _warnings(store, "host", "host")]
    h = facts.host_facts(store)
    if h is None:
        return _waiting([w for _, w in out], "waiting for the first host reading…")
    width = 6  # "server"
    out.append((1, row("used", Text.assemble(bar([(h.used_bytes, "blue")], h.total_bytes, 12),
                                             " ", f"{gib(h.used_bytes)} of "
                                                  f"{gib(h.total_bytes, 0)} GiB"), width)))
    # The scenario list's host Δ of the live run is this figure (facts.run_host_delta_bytes)
    delta = h.delta_bytes
    out.append((1, row("Δ", Text("–" if delta is None else f"{host_delta(delta)} since launch",
                                 style="bold green" if (delta or 0) > 50 * GIB else ""), width)))
    # Pinned host memory (the Engram tables) shows in Shmem and huge pages (the help says).
    out.append((3, row("Shmem", f"{gib(h.shmem_bytes)} GiB · huge pages "
                                f"{gib(h.hugepages_bytes)} GiB", width)))
    out.append((3, row("server", f"RSS {gib(h.server_rss_bytes)} GiB · "
                                 f"RssShmem {gib(h.server_rss_shmem_bytes)}", width)))
    swap = (2 if h.swap_used_bytes else 5, row("swap", f"{gib(h.swap_used_bytes)} GiB used",
                                               width))
    engram = engram_rows(store, cols)
    # The lines fit() keeps before the NUMA ones; what is left decides how the nodes show.
    room = rows - sum(rank < NUMA_RANK for rank, _ in [*out, swap, *engram]) if rows else None
    out += [*numa_rows(h, room), swap, *engram]
    return Group(*fit(out, rows))


def host_delta(delta_bytes: float | None) -> str:
    """Host memory taken since a launch, as the Host RAM panel and the scenario list both
    write it: "+195.4 GiB"."""
    return "–" if delta_bytes is None else f"{gib_change(delta_bytes)} GiB"


NUMA_RANK = 5  # below the Engram and Shmem rows; above a swap that holds nothing


def numa_rows(h: HostView, room: int | None = None) -> list[tuple[int, Text]]:
    """On a multi-socket host, one line per NUMA node (a single node says nothing new):
    where the server's shared memory sits shows which GPUs read the tables across the
    socket link. With ``room`` for fewer lines than nodes, one line for all the nodes: a
    node shown alone would hide what the others hold."""
    nodes = h.numa_nodes if len(h.numa_nodes) > 1 else ()
    out: list[tuple[int, Text]] = []
    if nodes and (room is None or room >= len(nodes)):
        for n in nodes:
            share = ("" if n.server_shared_bytes is None
                     else f" · server {gib(n.server_shared_bytes, 0)} GiB")
            out.append((NUMA_RANK, row(f"N{n.node}", f"{gib(n.used_bytes, 0)}/"
                                                     f"{gib(n.total_bytes, 0)} GiB{share}", 6)))
    elif nodes and room:
        known = all(n.server_shared_bytes is not None for n in nodes)
        what, key = ("server", "server_shared_bytes") if known else ("used", "used_bytes")
        each = " · ".join(f"N{n.node} {gib(getattr(n, key), 0)}" for n in nodes)
        out.append((NUMA_RANK, row("NUMA", f"{what} {each} GiB", 6)))
    if h.numa_problem:
        out.append((6, Text(h.numa_problem, style="dim", no_wrap=True, overflow="ellipsis")))
    return out


PINNED = {True: "pinned", False: "unpinned (ATS)", None: "pinning unknown"}


def engram_rows(store: RunStore, cols: int | None = None) -> list[tuple[int, Text]]:
    """The Engram row, ranked for fit(): where the tables are, what they hold of host
    memory, how often the layers look rows up, and whether the prefetch engages (and why
    not)."""
    e = facts.engram_facts(store)
    out: list[tuple[int, Text]] = []
    if e is not None and e.placement is not None:
        line = Text.assemble(("Engram ", "bold"), (f"{e.placement} ", "bold cyan"),
                             no_wrap=True, overflow="ellipsis")
        if e.layout:
            line.append(f"· {e.layout} layout")
        out.append((2, line))
        if e.resident_mib:
            held = f"  {gib(e.resident_mib * MIB)} GiB resident, {PINNED[e.pinned]}"
            huge = "" if e.huge_pct is None else f", {e.huge_pct:.0f}%"
            out.append((3, Text(first_fitting(cols, (f"{held}{huge} in huge pages",
                                                     f"{held}{huge} huge")),
                                no_wrap=True, overflow="ellipsis")))
        if e.lookups_per_s is not None or e.hit_rate_pct is not None:
            # The rate needs two statistics lines of a layer; the hit rate only one.
            looked = ("lookups –/s" if e.lookups_per_s is None
                      else rate(e.lookups_per_s, "lookups/s"))
            out.append((4, Text(f"  {looked}" + ("" if e.hit_rate_pct is None
                                                 else f" · row cache hit {e.hit_rate_pct:.1f}%"),
                                no_wrap=True, overflow="ellipsis")))
        if e.prefetch != "n/a":
            style = {"engaged": "green", "off": "dim"}.get(e.prefetch, "bold yellow")
            # The verdict may be long (every failing condition): it wraps rather than hides.
            out.append((2, Text(f"  {e.verdict}", style=style)))
    run = facts.run_facts(store)
    for table in run.engram_host_tables if run else ():
        if table.no_huge_pages_warning:  # the tables' one warning: lookups ~10x slower
            out.append((2, Text(f"Engram {table.label}: {table.huge_pct:.0f}% huge: "
                                f"{table.no_huge_pages_warning}", style="bold yellow")))
    return out


# --------------------------------------------------------------------------- latency


def latency_panel(store: RunStore, rows: int | None = None,
                  cols: int | None = None) -> Group:
    out = _warnings(store, "server", facts.engine_of(store))
    lat = facts.latency_facts(store)
    if lat is None:
        return _waiting(out, "no latency yet (the server reports once it serves)")
    table: list[list[Text | str]] = [[Text(h, style="bold") for h in ("", "p50", "p99", "mean")]]
    shown = [(lat.ttft, "TTFT"), (lat.itl, "TPOT (ITL)"), (lat.e2e, "end to end")]
    if lat.tpot is not None:  # vLLM's per-request figure, apart from the inter-token one
        shown.insert(2, (lat.tpot, "TPOT/request"))
    for q, label in shown:
        if q is None:
            table.append([Text(label, style="bold"), "–", "–", "–"])
        else:
            table.append([Text(label, style="bold"), quantile(q, "p50"), quantile(q, "p99"),
                          latency(q.mean)])
    out += columns(table, "lrrr")
    output = rate(lat.output_tokens_per_s, "tok/s")
    # The trend takes what the line leaves (label, figure, two blanks), 24 at most: cut
    # short, it would end in an ellipsis and read as a value.
    spark = 24 if cols is None else max(0, min(24, cols - 10 - len(output) - 2))
    figures: list[list[Text | str]] = [
        [Text("output", style="bold"),
         Text.assemble(f"{output}  ", sparkline(_series(store, "output_tokens_per_s"), spark))
         if spark else Text(output)],
        [Text("requests", style="bold"), rate(lat.requests_per_s, "req/s")]]
    load = store.load
    if load:
        figures.append([Text("demo load", style="bold"),
                        f"{load['concurrency']} streams · {load['completed']} done · "
                        f"{load['failed']} failed"])
        if load.get("last_error"):
            figures.append(["", Text(load["last_error"][:80], style="red")])
    out += columns(figures)
    out += _unavailable(lat.unavailable)
    out.append(Text(f"window {lat.window_s or 0:.0f} s, from {lat.engine}'s histograms",
                    style="dim"))
    return Group(*out)


def quantile(q: Quantiles | None, which: str) -> str:
    """A windowed quantile; one that fell in the histogram's +Inf bucket is only known to
    be above its highest bound, and says so ("> 30 s"); one in its lowest bucket, below
    that bound ("< 300 ms")."""
    if q is None:
        return latency(None)
    if getattr(q, f"{which}_under", False) and q.first_bound is not None:
        return "< " + latency(q.first_bound)
    value = getattr(q, which)
    return ("> " if getattr(q, f"{which}_over", False) else "") + latency(value)


def _unavailable(why: dict[str, str]) -> list[Text]:
    """Figures the server sent as NaN or Inf: shown as such, with the rank that sent them."""
    return [Text(f"{label} {reason}", style="yellow", no_wrap=True, overflow="ellipsis")
            for label, reason in why.items()]


def _series(store: RunStore, metric: str) -> list[float]:
    """The watched server's recent values of ``metric``."""
    s = store.line("server", metric)
    return [] if s is None else s.values(last=60)


# --------------------------------------------------------------------------- header

PHASE_LABELS = {"launching": "launching", "distributed_init": "distributed init",
                "weights": "loading weights", "kv_pool": "allocating KV pool",
                "graphs": "capturing CUDA graphs", "http": "starting HTTP",
                "warmup": "warming up", "ready": "ready", "failed": "failed",
                "stopping": "stopping", "stopped": "stopped"}
# The same phases in a table cell of 11 ("▸ KV pool").
PHASE_SHORT = {"launching": "launching", "distributed_init": "dist init", "weights": "weights",
               "kv_pool": "KV pool", "graphs": "graphs", "http": "HTTP", "warmup": "warm-up"}
STATE_STYLES = {"ready": "bold green", "starting": "bold yellow", "launching": "bold yellow",
                "stopping": "bold yellow", "stopped": "bold", "exited": "bold red",
                "failed": "bold red"}


def header(store: RunStore, now: float, width: int | None = None,
           lead: tuple[Text, Text] | None = None) -> Text:
    """The header line: the node, the scenario, its state and how far its start-up is (or
    how long it took). Given the line's ``width``, what matters least goes first when it
    does not fit: the node-time note, the node, the program's name, then the bar narrows;
    the scenario and its state always stay. ``lead`` (a replay's position, then its file's
    name, which goes before the bar does) comes first."""
    run = store.run
    if run is None:
        return Text.assemble(*(lead or ()), ("engram-top · preparing the node…", "bold"))
    down = store.latest.get("server")
    state = run.state
    if state == "ready" and down is not None and down.status.value == "error":
        state = "not answering"
    elif state == "ready" and run.degraded:
        state = "degraded"  # a TP rank died; the server still answers
    parts: list[tuple[str, Text]] = []  # (name, text), in screen order
    if lead is not None:
        parts.append(("lead", lead[0]))
        parts.append(("lead file", lead[1]))
        parts.append(("lead end", Text("  ")))
    parts.append(("program", Text("engram-top · ", style="bold")))
    # Visible here, so that the widths the line is fitted by are the ones shown.
    parts.append(("node", Text(f"{visible(run.node)} · ")))
    parts.append(("scenario", Text.assemble((f"{visible(run.scenario)} ", "bold cyan"), "· ")))
    # Each part ends with its own blank and none starts with one: a viewer that drops a
    # leading blank of a styled run (some SVG renderers do) cannot glue two words.
    parts.append(("state", Text(f"{state.upper()} ", style=STATE_STYLES.get(state, "bold red"))))
    if run.state in ("starting", "launching"):
        elapsed = now - run.launched_at
        expected = run.expected_ready_s
        frac = min(0.99, elapsed / expected) if expected else 0.0
        progress = f"{PHASE_LABELS.get(run.phase, run.phase)} · {seconds(elapsed)}"
        if expected:
            progress += f" of ~{seconds(expected)}"
        parts.append(("bar", Text.assemble(bar([(frac, "yellow")], 1.0, 20), " ")))
        parts.append(("progress", Text(progress + " ")))
    elif run.ready_s is not None and state in ("ready", "attached", "degraded", "not answering"):
        parts.append(("ready", Text(f"in {seconds(run.ready_s)} ")))
        if run.time_scale != 1:
            parts.append(("node time", Text(f"(×{run.time_scale:g}: "
                                            f"{run.node_seconds(run.ready_s):.0f} s node time) ",
                                            style="dim")))
    elif run.ready_s is not None:  # stopping, stopped, exited: not a countdown
        parts.append(("ready", Text(f"· it had been ready in {seconds(run.ready_s)} ",
                                    style="dim")))
    if run.exit_code is not None and run.state in ("exited", "failed"):
        parts.append(("exit", Text(f"exit code {run.exit_code}", style="red")))
    for drop in ("node time", "node", "program", "lead file", "bar"):
        if width is None or sum(t.cell_len for _, t in parts) <= width:
            break
        parts = [(name, t) for name, t in parts if name != drop]
    text = Text(no_wrap=True, overflow="ellipsis")
    for _, t in parts:
        text.append_text(t)
    return text


# SGLang's prefix, "[2026-11-29 11:03:58 TP0] " (ranks: TP, DP, PP, EP, ...): 26 columns of a
# narrow pane before the message starts. The pane shows the time and ranks; the file keeps it.
LOG_PREFIX = re.compile(r"^\[\d{4}-\d{2}-\d{2} (\d{2}:\d{2}:\d{2})((?: [A-Z]{2}\d+)*)\] ")
# vLLM's, "(EngineCore pid=3561) INFO 12-02 12:24:53 [core.py:133] ": 58 columns. The pane
# keeps the time, the process (its first word) and a level that is not INFO.
VLLM_PREFIX = re.compile(r"^\((\w+)(?: rank=\d+)? pid=\d+\) (DEBUG|INFO|WARNING|ERROR|CRITICAL) "
                         r"\d\d-\d\d (\d\d:\d\d:\d\d)(?:\.\d+)? \[[\w./-]+:\d+\] ")


def log_line(line: str, style: str = "") -> Text:
    """A server log line for the log pane: a short, dim time and rank, then the message."""
    m = LOG_PREFIX.match(line)
    if m is not None:
        text = Text(f"{m.group(1)}{m.group(2)} ", style="dim")
    elif (v := VLLM_PREFIX.match(line)) is not None:
        level = "" if v.group(2) == "INFO" else f" {v.group(2)}"
        text = Text(f"{v.group(3)} {v.group(1)}{level} ", style="dim")
        m = v
    else:
        return Text(line, style=style)
    text.append(line[m.end():], style=style)
    return text

