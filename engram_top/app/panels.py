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
    MIB,
    gib,
    gib_change,
    latency,
    percent,
    rate,
    seconds,
    sglang_gb,
    tokens,
)
from engram_top.app import hicache_rows, ledger_rows, pool_rows
from engram_top.app.gpu_table import gpu_table, server_hbm, server_hbm_line, throttle_lines
from engram_top.app.panel_text import (
    LABEL_WIDTH,
    bar,
    columns,
    first_fitting,
    fit,
    quantile,
    row,
    sparkline,
    unavailable,
)
from engram_top.model import facts
from engram_top.model.store import RunFacts, RunStore, SourceName
from engram_top.model.views import HostView, KvView


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
        table = columns(*gpu_table(gpus, known, layout, bool(throttled)))
        if cols is None or max(line.cell_len for line in table) <= cols:
            break
    out += [(1, line) for line in table]
    if throttled and layout != "wide":  # the wide table has a column for them
        out += [(1, line) for line in throttle_lines(throttled, cols)]
    under_table = len(out)
    out += hicache_rows.engram_rx_rows(store, gpus, cols)  # receive less HiCache's, est.
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
    out += ledger_rows.hbm_rows(store, cols)
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
    # An engine that gives the usage as a fraction only: no token count made up.
    counted = not (kv.used_tokens is None and "num_used_tokens" in facts.not_reported(store))
    width = 12 if room is None or room >= 44 else 8
    out.append((1, row("in use", Text.assemble(
        bar([(usage or 0.0, "magenta")], 1.0, width), (" ", "grey37"),
        first_fitting(None if room is None else room - width - 1,
                      _in_use(kv, split, counted))))))
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
    # The same pressure has each engine's own word (SGLang retracts, vLLM preempts).
    word = facts.word(store, "retracted")
    retracted = "" if kv.retracted is None else f" · {kv.retracted} {word}"
    if kv.retracted_per_s:
        retracted += (f" ({kv.retracted_per_s:.2f}/s)" if retracted
                      else f" · {word} {kv.retracted_per_s:.2f}/s")
    out.append((1, row("requests", f"{kv.running if kv.running is not None else '–'} running · "
                                   f"{kv.queued if kv.queued is not None else '–'} queued"
                                   f"{retracted}")))
    # The window's hit rate; else, from one page's counters, the rate since the start, said so.
    hit, since = kv.cache_hit_rate, ""
    if hit is None and kv.cache_hit_since_start is not None:
        hit, since = kv.cache_hit_since_start, " since start"
    if kv.queue_time is not None or hit is not None:
        q = kv.queue_time
        wait = f"p50 {quantile(q, 'p50')} · p99 {quantile(q, 'p99')}"
        out.append((3, row("queue", first_fitting(room, (
            f"{wait} · cache hit {percent(hit, 1)}{since}",
            f"{wait} · hit {percent(hit, 0)}{since}", wait)))))
    out += hicache_rows.kv_rows(store, cols)  # the host tier, where the server has one
    out += pool_rows.kv_rows(store, kv, cols)  # Mamba state, paused and aborted, where reported
    out.append((5, row("trend", sparkline(_series(store, "token_usage")))))
    out += [(2, line) for line in unavailable(kv.unavailable)]
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


def _in_use(kv: KvView, split: dict[str, float], counted: bool) -> tuple[str, ...]:
    """The "in use" row's words, most first. The bar is the server's token usage, the
    fullest pool's (the bottleneck): with several pools it names that pool and its size,
    never reading as a share of the capacity above (the full pool's) when it is the sliding
    window's; the tokens in use are the full pool's, said beside it."""
    used = f"{tokens(kv.used_tokens)} tokens" if counted else ""
    pct = percent(kv.token_usage, 1)
    if not split:  # one pool: the capacity's
        return (f"{pct} · {used}" if used else pct,)
    worst = max(split, key=split.__getitem__)
    if worst == "full":
        return tuple(v for v in (f"full pool {pct} · {used}" if used else "",
                                 f"full pool {pct} · {used.removesuffix(' tokens')}"
                                 if used else "", f"full pool {pct}") if v)
    size = (kv.pools or {}).get(worst)
    of = f" of {tokens(size)}" if size else ""
    full = split.get("full")
    beside = ", ".join(x for x in (None if full is None else percent(full, 1),
                                   used or None) if x)
    return tuple(v for v in (f"{worst} pool {pct}{of} · full {beside}" if beside else "",
                             f"{worst} pool {pct}{of}", f"{worst} pool {pct}") if v)


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
    # Δ (the scenario list's figure, facts.run_host_delta_bytes), then whose memory it is.
    out += ledger_rows.host_rows(store, cols)
    # Pinned host memory (the Engram tables) shows in Shmem and huge pages (the help says);
    # the ledger rows say whose it is, so a short panel drops this one first.
    out.append((7, row("Shmem", f"{gib(h.shmem_bytes)} GiB · huge pages "
                                f"{gib(h.hugepages_bytes)} GiB", width)))
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
    out += unavailable(lat.unavailable)
    out.append(Text(f"window {lat.window_s or 0:.0f} s, from {lat.engine}'s histograms",
                    style="dim"))
    return Group(*out)


def _series(store: RunStore, metric: str) -> list[float]:
    """The watched server's recent values of ``metric``."""
    s = store.line(SourceName.SERVER, metric)
    return [] if s is None else s.values(last=60)


# --------------------------------------------------------------------------- header

PHASE_LABELS = {"launching": "launching", "distributed_init": "distributed init",
                "weights": "loading weights", "kv_pool": "allocating KV pool",
                "graphs": "capturing CUDA graphs", "http": "starting HTTP",
                "warmup": "warming up", "ready": "ready", "failed": "failed",
                "stopping": "stopping", "stopped": "stopped"}
# The same phases in the scenario list's state cell of 9 ("▸ KV pool"); the header says
# each in full (PHASE_LABELS).
PHASE_SHORT = {"launching": "launch", "distributed_init": "init", "weights": "weights",
               "kv_pool": "KV pool", "graphs": "graphs", "http": "HTTP", "warmup": "warm-up"}
STATE_STYLES = {"ready": "bold green", "starting": "bold yellow", "launching": "bold yellow",
                "stopping": "bold yellow", "stopped": "bold", "exited": "bold red",
                "failed": "bold red"}


def run_state(store: RunStore, run: RunFacts, silent: str = "not answering") -> str:
    """A run's state as the screen says it. A server we watch but did not start has no
    exit for the supervisor to see: a failed poll is how it is known gone (a killed
    attached server must not read ATTACHED), said as ``silent``."""
    down = store.latest.get(SourceName.SERVER) if run is store.run else None
    if run.state in ("ready", "attached") and down is not None and down.status.value == "error":
        return silent
    if run.state == "ready" and run.degraded:
        return "degraded"  # a TP rank died; the server still answers
    return str(run.state)


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
    state = run_state(store, run)
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

