"""What a page is when it is not the metrics page one expected: the usual neighbours of an
inference server's /metrics on a GPU node (dcgm-exporter, node-exporter, vLLM, Prometheus
itself, a Python client's defaults) and the texts people paste instead (nvidia-smi's table,
a JSON body, an HTML page). For ``inspect-metrics`` and the collectors' messages: say what
the page is and what it holds, rather than a list of nulls or a parse error on line 1.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from collectors import promread, promtext
from collectors.promtext import Family

# Name prefixes of the exporters that are no engine, the first match wins. The engines'
# own come from the caller (each engine declares its prefixes: scenarios.engines.page_kinds).
EXPORTERS: tuple[tuple[str, str], ...] = (
    ("DCGM_FI_", "dcgm-exporter"),
    ("node_", "node-exporter"),
    ("prometheus_", "prometheus"),
    # The rest of a serving stack: SGLang's router (sgl-model-gateway: smg_ since its
    # late-2025 releases) and LMCache's own API server.
    ("sgl_router_", "sgl-router"),
    ("smg_", "sgl-router"),
    ("lmcache:", "lmcache"),
)
_SMI_GPU = re.compile(r"^\|\s+\d+\s+(NVIDIA[^|]*?)\s{2,}", re.MULTILINE)
MAX_NAMED = 8  # families named in a summary


@dataclass(frozen=True)
class PageKind:
    kind: str  # sglang, vllm, dcgm-exporter, node-exporter, prometheus, other, nvidia-smi...
    summary: str  # one line: what it is and what it holds
    found: dict[str, object] = field(default_factory=dict)


def of_families(fams: dict[str, Family],
                engines: Sequence[tuple[str, tuple[str, ...]]] = ()) -> PageKind:
    """What a parsed Prometheus page is, by its families' names. ``engines``: (kind, its
    name prefixes) of each engine, the default first: on a tie, the earlier one reads it."""
    exporters = (*((p, kind) for kind, prefixes in engines for p in prefixes), *EXPORTERS)
    preference = {kind: -i for i, (kind, _) in enumerate(engines)}
    counts: dict[str, int] = {}
    for name in fams:
        for prefix, kind in exporters:
            if name.startswith(prefix):
                counts[kind] = counts.get(kind, 0) + 1
                break
    if not counts:
        named = ", ".join(sorted(fams)[:MAX_NAMED]) or "none"
        return PageKind("other", f"a Prometheus page of {len(fams)} families ({named}), "
                                 "none of an exporter known here", {"families": len(fams)})
    kind = max(counts, key=lambda k: (counts[k], preference.get(k, -len(engines))))
    if kind == "dcgm-exporter":
        return _dcgm(fams)
    if kind == "node-exporter":
        return _node(fams)
    if kind == "sgl-router":
        return _router(fams)
    if kind == "lmcache":
        lmcache = lmcache_figures(fams)
        return PageKind("lmcache", "an LMCache page (its KV cache tier): "
                        + (lmcache_summary(lmcache) or "no figure known here"),
                        {"families": sum(1 for n in fams if n.startswith("lmcache:")),
                         **lmcache})
    names = sorted(n for n in fams if any(n.startswith(p) for p, k in exporters if k == kind))
    # Another engine's names beside these (a gateway's page, compatibility names): said,
    # and which one the page was read as.
    others = {k: n for k, n in counts.items() if k != kind and k in preference}
    also = "".join(f"; it also holds {n} of {k}'s famil{'y' if n == 1 else 'ies'}"
                   + (", as many: read as the default engine's" if n == counts[kind] else "")
                   for k, n in sorted(others.items()))
    return PageKind(kind, f"a {kind} page: {len(names)} families ({', '.join(names[:MAX_NAMED])}"
                          f"{', ...' if len(names) > MAX_NAMED else ''}){also}",
                    {"families": len(names), **({"other_engines": others} if others else {})})


def _label_values(fams: dict[str, Family], prefix: str, label: str) -> set[str]:
    out: set[str] = set()
    for name, fam in fams.items():
        if name.startswith(prefix):
            out.update(v for s in fam.samples for k, v in s.labels if k == label)
    return out


def _dcgm(fams: dict[str, Family]) -> PageKind:
    gpus = _label_values(fams, "DCGM_FI_", "gpu") or _label_values(fams, "DCGM_FI_", "UUID")
    models = sorted(_label_values(fams, "DCGM_FI_", "modelName"))
    hosts = sorted(_label_values(fams, "DCGM_FI_", "Hostname"))
    fields = sorted(n for n in fams if n.startswith("DCGM_FI_"))
    return PageKind(
        "dcgm-exporter",
        f"a dcgm-exporter page (NVIDIA DCGM's GPU metrics): {len(gpus)} GPU(s)"
        + (f" ({', '.join(models)})" if models else "")
        + (f" on {', '.join(hosts)}" if hosts else "")
        + f", {len(fields)} fields ({', '.join(fields[:MAX_NAMED])}"
        + (", ...)" if len(fields) > MAX_NAMED else ")"),
        {"gpus": len(gpus), "models": models, "hosts": hosts, "families": len(fields)})


def _node(fams: dict[str, Family]) -> PageKind:
    found: dict[str, object] = {"families": sum(1 for n in fams if n.startswith("node_"))}
    parts = []
    for key, name in (("mem_total_gib", "node_memory_MemTotal_bytes"),
                      ("mem_available_gib", "node_memory_MemAvailable_bytes")):
        fam = fams.get(name)
        if fam is not None and fam.samples:
            found[key] = round(fam.samples[0].value / 1024**3, 1)
    if "mem_total_gib" in found:
        parts.append(f"host memory {found['mem_total_gib']} GiB"
                     + (f", {found['mem_available_gib']} GiB available"
                        if "mem_available_gib" in found else ""))
    cpus = _label_values(fams, "node_cpu_seconds_total", "cpu")
    if cpus:
        found["cpus"] = len(cpus)
        parts.append(f"{len(cpus)} CPUs")
    return PageKind("node-exporter", "a node-exporter page (host metrics)"
                    + (": " + ", ".join(parts) if parts else ""), found)


def of_text(text: str) -> PageKind | None:
    """What a text that is not Prometheus' format looks like, or None when nothing known."""
    head = text.lstrip()[:4096]
    if "NVIDIA-SMI" in head or "Driver Version:" in head:
        gpus = _SMI_GPU.findall(text)
        return PageKind("nvidia-smi", "nvidia-smi's text output, not a metrics page"
                        + (f": {len(gpus)} GPU(s) ({', '.join(sorted(set(gpus)))})"
                           if gpus else ""), {"gpus": len(gpus)})
    if head[:1] in ("{", "["):
        return PageKind("json", "a JSON body, not a metrics page (/server_info or "
                                "/get_model_info answer in JSON; /metrics does not)")
    low = head[:256].lower()
    if low.startswith(("<!doctype html", "<html")) or "<html" in low:
        return PageKind("html", "an HTML page, not a metrics page (a login or proxy page?)")
    return None


def read(text: str, skipped: promtext.Skipped, reuse: promtext.Reuse | None = None
         ) -> dict[str, Family]:
    """A page's families, read around the lines it cannot read (each put in ``skipped``):
    a page pasted with an author's ``...`` between families, or two pages run together,
    keeps every well-formed sample. ValueError where that is not a metrics page after all:
    no line read (the first bad line, a PromTextError), or a text with bad lines that looks
    like something else (an HTML login page with one line that happens to parse).
    ``reuse``: what the last page of the same source left (promtext.Reuse)."""
    families = promtext.parse(text, skipped, reuse)
    if not skipped.first:
        return families
    kind = of_text(text)
    if kind is not None:
        raise ValueError(f"not a Prometheus metrics page: it is {kind.summary}") \
            from skipped.first[0]
    if not families:
        raise skipped.first[0]
    return families


def _total(fams: dict[str, Family], *names: str) -> float | None:
    """The first of ``names`` the page has, summed over its series (a gauge's too); None
    where that sum is no number."""
    for name in names:
        total = promread.counter_total(fams, name)
        if total is not None:
            return total if math.isfinite(total) else None
    return None


def _router(fams: dict[str, Family]) -> PageKind:
    """SGLang's router: its workers, requests and cache-aware routing, in either era's names."""
    found: dict[str, object] = {"families": sum(1 for n in fams
                                                if n.startswith(("sgl_router_", "smg_")))}
    figures = {
        # smg_worker_health is 1 per healthy worker: its sum counts them.
        "active_workers": _total(fams, "sgl_router_active_workers", "smg_worker_health",
                                 "smg_worker_pool_size"),
        "requests_total": _total(fams, "sgl_router_requests_total", "smg_requests_total",
                                 "smg_http_requests_total"),
        "running_requests": _total(fams, "sgl_router_running_requests"),
        "cache_hits_total": _total(fams, "sgl_router_cache_hits_total"),
        "cache_misses_total": _total(fams, "sgl_router_cache_misses_total"),
    }
    found.update({k: v for k, v in figures.items() if v is not None})
    workers = _label_values(fams, "sgl_router_", "worker") | \
        _label_values(fams, "sgl_router_", "worker_url") | _label_values(fams, "smg_", "worker")
    if workers:
        found["workers"] = sorted(workers)[:MAX_NAMED]
    parts = []
    if figures["active_workers"] is not None:
        parts.append(f"{figures['active_workers']:g} active worker(s)")
    elif workers:
        parts.append(f"{len(workers)} worker(s) named")
    if figures["requests_total"] is not None:
        parts.append(f"{figures['requests_total']:,.0f} requests")
    if figures["running_requests"] is not None:
        parts.append(f"{figures['running_requests']:g} running")
    hits, misses = figures["cache_hits_total"], figures["cache_misses_total"]
    if hits is not None and misses is not None and hits + misses > 0:
        found["cache_hit_rate_since_start"] = hits / (hits + misses)
        parts.append(f"cache-aware routing hit {hits / (hits + misses):.1%}")
    return PageKind("sgl-router", "an SGLang router page (sgl-router / sgl-model-gateway)"
                    + (": " + ", ".join(parts) if parts else ""), found)


def lmcache_figures(fams: dict[str, Family]) -> dict[str, float]:
    """LMCache's figures since it started (its own page, or beside vLLM's on a vLLM page):
    tokens asked for and hit, the hit rate those make, its gauges of hit rate and use."""
    out = {key: v for key, names in (
        ("requested_tokens_total", ("lmcache:num_requested_tokens",)),
        ("hit_tokens_total", ("lmcache:num_hit_tokens",)),
        ("stored_tokens_total", ("lmcache:num_stored_tokens",)),
        ("retrieve_hit_rate", ("lmcache:retrieve_hit_rate",)),
        ("local_cache_usage", ("lmcache:local_cache_usage",)),
    ) if (v := _total(fams, *names)) is not None}
    asked, hit = out.get("requested_tokens_total"), out.get("hit_tokens_total")
    if asked and hit is not None:
        out["hit_rate_since_start"] = min(1.0, max(0.0, hit / asked))
    return out


def lmcache_summary(figures: dict[str, float]) -> str:
    parts = []
    if "hit_tokens_total" in figures and "requested_tokens_total" in figures:
        parts.append(f"{figures['hit_tokens_total']:,.0f} of "
                     f"{figures['requested_tokens_total']:,.0f} tokens asked for were hits")
    if "hit_rate_since_start" in figures:
        parts.append(f"hit rate {figures['hit_rate_since_start']:.1%} since the start")
    if "local_cache_usage" in figures:
        parts.append(f"local cache use {figures['local_cache_usage']:,.0f}")
    return ", ".join(parts)
