"""The handlers of Engram's lines: its host tables, its configuration, each layer's
statistics, and whatever else it says (kept verbatim, bounded).
"""

from __future__ import annotations

from collectors.log_markers import NO_HUGE_PAGES
from collectors.sglang import log_lines
from collectors.sglang.launch_state import MAX_ENGRAM_LAYERS, MAX_ERROR_TEXT, LaunchState
from collectors.sglang.line_prefix import LogLine
from collectors.sglang.log_patterns import ENGRAM_KEY, ENGRAM_TABLE, PINNED, UNPINNED, mib
from collectors.startup_facts import EngramTable


class EngramHandlers(LaunchState):
    """Reads what the Engram offload prints of its tables and layers."""

    def _on_engram_table(self, ln: LogLine, events: list[str]) -> None:
        msg = ln.msg
        if "memfd" in msg and "cannot open" in msg:
            self._engram_messages.append(msg)
            self._record_error(ln, "engram", events)
            return
        m = ENGRAM_TABLE.search(msg)
        if m is None:  # page-cache drop, MADV_COLLAPSE errno...
            self._engram_messages.append(msg)
            return
        rest = m.group("rest")
        pinned: bool | None = None
        if UNPINNED.search(rest):
            pinned = False
        elif PINNED.search(rest):
            pinned = True
        warn_at = rest.find(NO_HUGE_PAGES)
        self._engram_tables.append(EngramTable(
            label=m.group("label"),
            layout=m.group("layout"),
            resident_mib=mib(m.group("res")),
            huge_mib=mib(m.group("huge")),
            huge_pct=float(m.group("pct")),
            pinned=pinned,
            no_huge_pages_warning=rest[warn_at:].strip() if warn_at >= 0 else None,
            rank=ln.rank,
            at=ln.t,
        ))
        events.append("engram_table")

    def _on_engram_config(self, ln: LogLine, events: list[str]) -> None:
        pos = ln.msg.find("DeepSeek")
        self._engram_config_text = ln.msg[pos:] if pos >= 0 else ln.msg
        self._engram_config.update(ENGRAM_KEY.findall(ln.msg))
        events.append("engram_config")

    def _on_engram_message(self, ln: LogLine, events: list[str]) -> None:
        # Engram lines no reader here knows (a newer build's): kept verbatim, bounded.
        self._engram_messages.append(ln.msg.strip()[:MAX_ERROR_TEXT])

    def _on_engram_layer(self, ln: LogLine, events: list[str]) -> None:
        stats = log_lines.engram_layer(ln.msg)
        if stats is None:
            self._on_engram_message(ln, events)
            return
        layer = int(stats["layer"])
        before = self._engram_layers.get(layer)
        if before is None and len(self._engram_layers) >= MAX_ENGRAM_LAYERS:
            return
        at = before.get("at") if before else None
        stats["interval_s"] = (round(ln.t - at, 6) if isinstance(at, float | int)
                               and ln.t is not None and ln.t > at else None)
        stats["at"] = ln.t
        stats["rank"] = ln.rank
        for key in ("lookups", "reads"):  # since the line before: totals since the log began
            value = stats.get(key)
            total = before.get(f"{key}_total", 0) if before else 0
            if isinstance(value, int) and isinstance(total, int):
                stats[f"{key}_total"] = total + value
        self._engram_layers[layer] = stats
        events.append("engram_layer")
