"""A snapshot's summary.md: the comparison in the seed's terms, then the headline readings
at snapshot time, read from snapshot.json's data (already redacted)."""

from __future__ import annotations

from typing import Any

from collectors.safetext import visible
from collectors.source import SourceName
from collectors.units import (
    GIB,
    NA,
    bucket_text,
    byte_rate,
    decimal_bytes,
    gib_text,
    ms_text,
    percent,
    weights_gb,
)
from engram_top.model.death import death_lines
from engram_top.model.fingerprint import fingerprint_lines
from engram_top.model.store import RunStore
from scenarios.runstate import SERVING


def summary_markdown(store: RunStore, data: dict[str, Any], comparison_md: str) -> str:
    """The comparison in the seed's terms, then the headline readings at snapshot time."""
    run = data.get("run")
    title = f"{run['scenario']} ({run['placement']})" if run else "no run"
    lines = [f"# engram-top snapshot: {title}", "",
             f"Taken {data['taken_at']} on {store.node or 'an unnamed node'}."]
    if run:
        ready = run.get("ready_s")
        # A server it watches but did not start stays "attached" or "ready" to the
        # supervisor: failing polls are how it is known silent.
        failed = store.latest.get(SourceName.SERVER)
        silent = f", not answering ({failed.message})" if run["state"] in SERVING \
            and failed is not None and not failed.ok else ""
        lines.append(f"Run: {run['scenario']}, state {run['state']}{silent}"
                     + ("" if ready is None else f", ready after {ready:.1f} s "
                        f"(node-equivalent {run['ready_s_node']:.1f} s)") + ".")
    notes = data.get("notes")  # what the source said of itself: a recording's damage
    if isinstance(notes, list) and notes:
        lines += ["", "## Notes", ""] + [f"- {note}" for note in notes]
    deaths = [d for r in store.runs for d in r.deaths]
    if deaths:  # first after the notes: what an on-call engineer opens the file for
        lines += ["", "## Deaths", ""]
        for death in deaths:
            lines += death_lines(death)
    lines += ["", "## Comparison", "", *comparison_md.rstrip().split("\n"), "",
              "## Readings now", ""]
    lines += _readings(data)
    alerts = data.get("alerts")
    if alerts:
        lines += ["", "## Alerts", ""]
        lines += [f"- {a.get('severity', 'alert')}: {a.get('message') or a.get('id')}"
                  if isinstance(a, dict) else f"- {a}" for a in alerts]
    watched = store.run
    if watched is not None and watched.fingerprint is not None:  # what it ran as, on what
        lines += ["", "## Fingerprint", "", *fingerprint_lines(watched.fingerprint)]
    lines += ["", "## Files", "",
              "- screen.svg: the dashboard as rendered (absent when taken without a screen)",
              "- history.png: HBM per GPU, KV usage, host RAM and TTFT over the last hour",
              "- snapshot.json: every reading, the runs, scenario definitions, the comparison",
              "- timeseries.parquet, timeseries.csv: the series, one row per point",
              "", "Secrets (API keys, tokens) are replaced by `<redacted>` (`[redacted]` in this "
              "file) in every file.", ""]
    # Names, messages and verdicts come from servers and files: a line each, no control.
    return "\n".join(map(visible, lines))


def _readings(data: dict[str, Any]) -> list[str]:
    out = []
    for g in data.get("gpus") or []:
        share = g.get("server_bytes")
        out.append(f"- GPU {g['index']} ({g['name']}): HBM {gib_text(g['used_bytes'])} of "
                   f"{gib_text(g['total_bytes'])} GiB used, server {gib_text(share)} GiB; "
                   f"weights {weights_gb(g.get('weights_gb'), NA)} GB, "
                   f"KV {_num(g.get('kv_tokens'), ',')} tokens")
    stack = data.get("stack_page")
    if stack:  # the URL is a router's or LMCache's: its figures, and where the memory is
        workers = ", ".join(stack.get("workers") or ()) or "not named on its page"
        out.append(f"- Serves {stack.get('summary')}; no GPU memory or KV pool of its own: "
                   f"its workers hold them ({workers})")
    kv = data.get("kv")
    if kv and not stack:
        usage = kv.get("token_usage")
        out.append(f"- KV pool: {_num(kv.get('capacity_tokens'), ',')} tokens, "
                   f"usage {percent(usage)}, "
                   f"{_num(kv.get('running'), 'd')} running, {_num(kv.get('queued'), 'd')} "
                   "queued")
        pools = kv.get("pools")
        if pools:
            out.append("- KV pools (tokens): " + ", ".join(
                f"{name} {_num(n, ',')}" for name, n in pools.items()))
    engram = data.get("engram")
    if engram and engram.get("placement"):
        resident = engram.get("resident_mib")
        out.append(f"- Engram: {engram['placement']}"
                   + (f" ({engram['layout']} layout)" if engram.get("layout") else "")
                   + ("" if not resident else f", {resident / 1024:.1f} GiB resident")
                   + f"; {engram.get('verdict')}")
    out += hicache_lines(data.get("hicache"), data.get("gpus") or [],
                         (data.get("engram") or {}).get("placement"))
    host = data.get("host")
    if host:
        book = data.get("host_ledger") or {}
        delta = book.get("server_delta_bytes")
        others = book.get("others_delta_bytes")
        out.append(f"- Host RAM: {gib_text(host['used_bytes'])} of {gib_text(host['total_bytes'])} "
                   f"GiB used (MemTotal - MemAvailable), the server "
                   f"{'n/a' if delta is None else f'{delta / GIB:+.1f}'} GiB since launch"
                   + ("" if others is None else f" (others {others / GIB:+.1f} GiB)")
                   + f", Shmem {gib_text(host.get('shmem_bytes'))} GiB")
        out += ledger_lines(book)
    out += hbm_ledger_lines(data.get("hbm_ledger") or [])
    lat = data.get("latency")
    if lat:
        window = lat.get("window_s")
        out.append(f"- Latency ({'n/a' if window is None else f'{window:.0f}'} s window): "
                   f"TTFT {_quantiles(lat.get('ttft'))}, TPOT {_quantiles(lat.get('itl'))}, "
                   f"end-to-end {_quantiles(lat.get('e2e'))}; output "
                   f"{_num(lat.get('output_tokens_per_s'), '.1f')} tok/s")
    stale = [f"{kind} {r['status']} ({r['message']})"
             for kind, r in (data.get("readings") or {}).items() if r["status"] != "ok"]
    if stale:
        out.append(f"- Sources not OK: {'; '.join(stale)}")
    return out or ["- no reading yet"]


def hicache_lines(hicache: dict[str, Any] | None, gpus: list[dict[str, Any]],
                  placement: str | None = None) -> list[str]:
    """HiCache's host tier (where the server has one), then each GPU's PCIe receive with the
    Engram share estimated where HiCache reports its load-back (with the tables in HBM, the
    rest is not Engram's: "other")."""
    out = []
    if hicache:
        per, ranks, pool = (hicache.get(k) for k in ("pool_bytes_per_rank", "ranks",
                                                      "pool_bytes"))
        out.append(
            f"- HiCache host tier: {decimal_bytes(per, NA)} per rank x {_num(ranks, 'd')} "
            f"ranks = {decimal_bytes(pool, NA)} ({hicache.get('source')}); host pool "
            f"{_num(hicache.get('used_tokens'), ',')} of {_num(hicache.get('total_tokens'), ',')}"
            f" tokens; load-back {byte_rate(hicache.get('load_back_bytes_per_s'), none=NA)}, "
            f"backup {byte_rate(hicache.get('backup_bytes_per_s'), none=NA)}, dropped for host "
            f"pressure {_num(hicache.get('dropped_host_pressure_per_s'), ',.1f')} tokens/s, "
            f"evicted {_num(hicache.get('evicted_per_s'), ',.1f')} tokens/s")
    est = (hicache or {}).get("engram_rx_estimate_bytes_per_s") or {}
    rx = [(g["index"], g.get("pcie_rx_bytes_per_s")) for g in gpus]
    name = "other" if placement == "device" else "Engram"
    if any(v is not None for _, v in rx):
        out.append("- PCIe receive: " + "; ".join(
            f"GPU {i} {byte_rate(v, none=NA)}" + (
                f" ({name} ≈ {byte_rate(est[str(i)], none=NA)}, estimated: receive less "
                "HiCache load-back)" if str(i) in est else "") for i, v in rx))
    return out


def _ledger_gib(value: float | None) -> str:
    return "unknown" if value is None else f"{gib_text(value)} GiB"


def _ledger_items(lines: list[dict[str, Any]]) -> str:
    return "; ".join(f"{visible(ln['name'])} {_ledger_gib(ln['bytes'])} "
                     f"({visible(ln['source'])})" for ln in lines)


def ledger_lines(book: dict[str, Any]) -> list[str]:
    """The host ledger's lines, then each NUMA node's, as summary.md lists them."""
    each = _ledger_items
    out = []
    if book.get("lines"):
        where = f" (the server in {visible(book['container'])})" if book.get("container") else ""
        out.append(f"- Host RAM ledger{where}: {each(book['lines'])}")
    for node, lines in (book.get("per_node") or {}).items():
        out.append(f"  - NUMA node {node}: {each(lines)}")
    return out


def hbm_ledger_lines(gpus: list[dict[str, Any]]) -> list[str]:
    return [f"- HBM ledger GPU {g['index']}: NVML used {_ledger_gib(g['used_bytes'])} = "
            + _ledger_items(g["lines"])
            + f"; unexplained {_ledger_gib(g['unexplained_bytes'])}"
            + (f" ({g['note']})" if g.get("note") else "") for g in gpus]


def _quantiles(q: dict[str, Any] | None) -> str:
    """"p50 <= 100 ms, p99 100-200 ms, mean 3.6 ms": each quantile as the dashboard shows
    it (its bucket where the interpolation is no measurement, Quantiles.bucketed), then the
    exact mean."""
    if not q or q.get("p50") is None:
        return "n/a"
    mean = "" if q.get("mean") is None else f", mean {ms_text(q['mean'])}"
    return f"p50 {_quantile(q, 'p50')}, p99 {_quantile(q, 'p99')}{mean}"


def _quantile(q: dict[str, Any], which: str) -> str:
    """One quantile of snapshot.json's latency (a Quantiles as plain data)."""
    bucket = q.get(f"{which}_bucket")
    if bucket and (q.get(f"{which}_coarse") or q.get(f"{which}_over")):
        return bucket_text(bucket[0], bucket[1])
    return ms_text(q.get(which))


def _num(value: Any, spec: str) -> str:
    return "n/a" if value is None else format(int(value) if spec in (",", "d") else value, spec)
