"""What a page is when it is not the metrics page one expected: the usual neighbours of an
inference server's /metrics on a GPU node (dcgm-exporter, node-exporter, vLLM, Prometheus
itself, a Python client's defaults) and the texts people paste instead (nvidia-smi's table,
a JSON body, an HTML page). For ``inspect-metrics`` and the collectors' messages: say what
the page is and what it holds, rather than a list of nulls or a parse error on line 1.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from collectors import promtext
from collectors.promtext import Family

# Name prefixes of the exporters that are no engine, the first match wins. The engines'
# own come from the caller (each engine declares its prefixes: scenarios.engines.page_kinds).
EXPORTERS: tuple[tuple[str, str], ...] = (
    ("DCGM_FI_", "dcgm-exporter"),
    ("node_", "node-exporter"),
    ("prometheus_", "prometheus"),
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


def read(text: str, skipped: promtext.Skipped) -> dict[str, Family]:
    """A page's families, read around the lines it cannot read (each put in ``skipped``):
    a page pasted with an author's ``...`` between families, or two pages run together,
    keeps every well-formed sample. ValueError where that is not a metrics page after all:
    no line read (the first bad line, a PromTextError), or a text with bad lines that looks
    like something else (an HTML login page with one line that happens to parse)."""
    families = promtext.parse(text, skipped)
    if not skipped.first:
        return families
    kind = of_text(text)
    if kind is not None:
        raise ValueError(f"not a Prometheus metrics page: it is {kind.summary}") \
            from skipped.first[0]
    if not families:
        raise skipped.first[0]
    return families
