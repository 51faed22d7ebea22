"""The handlers of SGLang's start-up lines about memory, by rank: the distributed init,
weight loads, the KV pool (a hybrid model's several pools too) and graph captures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from collectors.sglang import log_lines
from collectors.sglang.launch_state import MAX_CAPTURES, MAX_LOADS, MAX_POOLS, LaunchState
from collectors.sglang.line_prefix import LogLine
from collectors.sglang.log_patterns import (
    AVAIL,
    DIST,
    ELAPSED,
    GRAPH,
    GRAPH_FAILED,
    HICACHE_HOST,
    KV_BUDGET,
    KV_DTYPE,
    KV_FIELD,
    KV_INLINE_DTYPE,
    MEM_USAGE,
    group_float,
    nz,
    pool_label,
    sum_known,
    to_float,
)
from collectors.sglang.phase_timeline import FINAL
from collectors.startup_facts import GraphCapture, KvPool, WeightLoad
from collectors.units import GB


class MemoryHandlers(LaunchState):
    """Reads the figures each rank prints as its memory fills."""

    def _on_dist(self, ln: LogLine, events: list[str]) -> None:
        # "Init torch distributed begin." / "... ends. elapsed=.. s, mem usage=.. GB" (older
        # builds: "end", no elapsed=); 0.5.x: "Init parallel begin." / "... ends. elapsed=..".
        m = DIST.search(ln.msg)
        if m is None:
            return
        if m.group(1).lower() == "begin" and self._phases.phase in FINAL \
                and not self._is_late(ln.t):
            self._relaunch(ln, events)  # a server that was ready (or died) starts again
        st = self._rank(ln)
        if m.group(1).lower() == "begin":
            self._phases.open("distributed_init", st.dist_begins, ln.t)
            st.dist_begins += 1
            events.append("distributed_init_begin")
        else:
            st.dist_elapsed_s = group_float(ELAPSED, ln.msg)
            st.dist_mem_gb = group_float(MEM_USAGE, ln.msg)
            self._phases.close("distributed_init", st.dist_ends, ln.t)
            st.dist_ends += 1
            events.append("distributed_init_end")

    def _on_weights(self, ln: LogLine, events: list[str]) -> None:
        msg = ln.msg
        if "Load weight begin" in msg and self._phases.phase in FINAL \
                and not self._is_late(ln.t):
            self._relaunch(ln, events)
        st = self._rank(ln)
        if "Load weight begin" in msg:
            late = self._late_begin(st.loads, ln.t)
            if late is not None:  # its end came first (lines out of order): the same load
                st.loads[late] = replace(st.loads[late], begin_avail_gb=group_float(AVAIL, msg),
                                         begin_at=ln.t)
                self._phases.open("weights", late, ln.t)
                events.append("weights_begin")
                return
            if len(st.loads) >= MAX_LOADS:  # the same loads again and again: one more is noise
                events.append("weights_begin")
                return
            st.open_load = len(st.loads)
            st.loads.append(
                WeightLoad(begin_avail_gb=group_float(AVAIL, msg), begin_at=ln.t)
            )
            self._phases.open("weights", st.open_load, ln.t)
            events.append("weights_begin")
            return
        pos = msg.find("Load weight end")
        if pos < 0:
            return
        # "Load weight end. elapsed=.. s, type=.., [dtype=..|quant=.., ]avail mem=.. GB,
        # mem usage=.. GB." - split into key=value so new or missing keys do not matter.
        values: dict[str, str] = {}
        for part in msg[pos + len("Load weight end"):].split(","):
            key, sep, value = part.strip(" .").partition("=")
            if sep:
                values[key.strip()] = value.strip().rstrip(".").strip()
        if st.open_load is None:  # no begin seen: still record the load
            if len(st.loads) >= MAX_LOADS:
                events.append("weights_end")
                return
            st.open_load = len(st.loads)
            st.loads.append(WeightLoad())
            self._phases.open("weights", st.open_load, None)
        idx = st.open_load
        load = st.loads[idx]
        avail = to_float(values.get("avail mem"))
        usage = to_float(values.get("mem usage"))
        derived = False
        if usage is None and avail is not None and load.begin_avail_gb is not None:
            # Builds that print no "mem usage=": the free memory the load took.
            usage, derived = round(max(0.0, load.begin_avail_gb - avail), 2), True
        st.loads[idx] = replace(
            load,
            elapsed_s=to_float(values.get("elapsed")),
            model_type=values.get("type"),
            dtype=values.get("dtype"),
            quant=values.get("quant"),
            avail_gb=avail,
            mem_usage_gb=usage,
            mem_usage_derived=derived,
            end_at=ln.t,
        )
        st.open_load = None
        self._phases.close("weights", idx, ln.t)
        events.append("weights_end")

    @staticmethod
    def _late_begin(passes: Sequence[WeightLoad | GraphCapture], t: float | None,
                    kind: str | None = None) -> int | None:
        """The pass a begin line belongs to when its end line came first (lines out of
        order): one ended at or after ``t`` without a begin of its own."""
        if t is None:
            return None
        for idx, done in enumerate(passes):
            if done.begin_at is None and done.end_at is not None and done.end_at >= t \
                    and (kind is None or getattr(done, "kind", kind) == kind):
                return idx
        return None

    def _on_baseline(self, ln: LogLine, events: list[str]) -> None:
        # "Memory baseline taken. mem usage=0.00 GB" (0.5.x, after the distributed init).
        self._rank(ln).baseline_gb = group_float(MEM_USAGE, ln.msg)
        events.append("memory_baseline")

    def _on_kv_dtype(self, ln: LogLine, events: list[str]) -> None:
        m = KV_DTYPE.search(ln.msg)
        if m:
            self._rank(ln).kv_dtype = m.group(1)

    def _on_kv(self, ln: LogLine, events: list[str]) -> None:
        if "VA upper bound" in ln.msg:  # a post-capture build's reservation, not its pool
            return
        st = self._rank(ln)
        sizes: dict[str, float] = {}
        for key, value in KV_FIELD.findall(ln.msg):
            sizes.setdefault(key, nz(float(value)))
        k, v, kv = sizes.get("K size"), sizes.get("V size"), sizes.get("KV size")
        extra = sizes.get("Landmark size")
        if extra is None and k is None and v is None and kv is None:
            extra = sizes.get("Cache size")
        total = sum_known((k, v, kv, extra))
        tokens = sizes.get("#tokens")
        inline = KV_INLINE_DTYPE.search(ln.msg)  # 0.5.x: "allocated. dtype: torch.bfloat16, .."
        if inline is not None:
            st.kv_dtype = inline.group(1)
        if len(st.pools) < MAX_POOLS:
            st.pools.append(KvPool(
                tokens=None if tokens is None else int(tokens), k_size_gb=k, v_size_gb=v,
                kv_size_gb=kv, extra_gb=extra, total_gb=total, dtype=st.kv_dtype, at=ln.t,
                label=pool_label(ln.msg),
            ))
        # This rank's KV pass: its pool ends so far.
        self._phases.open("kv_pool", st.pool_ends, ln.t)
        events.append("kv_allocated")

    def _on_kv_sizing(self, ln: LogLine, events: list[str]) -> None:
        """A hybrid model's KV sizing: memory profiling, the SWA sizing, the memory
        calculation, the pool sizes and the pool's construction (its sizes again)."""
        msg = ln.msg
        st = self._rank(ln)
        full: object = None
        if "Memory profiling:" in msg:
            st.profile = log_lines.memory_profiling(msg)
        elif "memory calculation:" in msg:
            calc = log_lines.memory_calculation(msg)
            if len(st.kv_sizings) < MAX_POOLS:
                st.kv_sizings.append(calc)
            full = calc.get("full_tokens")
        elif "pool sizes:" in msg:
            sizes = log_lines.pool_sizes(msg[msg.find("pool sizes:"):])
            if len(st.pool_sizes) < MAX_POOLS:
                st.pool_sizes.append(sizes)  # a second line: a draft model's pools
            full = sizes.get("full")
        elif "SWA sizing:" in msg:
            st.swa_sizing = log_lines.swa_sizing(msg)
        elif (m := KV_BUDGET.search(msg)) is not None:
            # "The available memory for KV cache is 9.19 GB.": the pool's budget, where no
            # line sizes the pool itself (rank_state's last resort for its GiB).
            if len(st.kv_sizings) < MAX_POOLS:
                st.kv_sizings.append({"kv_budget_gb": float(m.group(1))})
        elif "Init" in msg and "TokenToKVPool" in msg:
            # The pool's constructor: the same sizes once more, under its own names. It
            # completes the latest sizes line (or stands for one that was not printed).
            sizes = log_lines.pool_sizes(msg[msg.find("TokenToKVPool"):])
            if not st.pool_sizes:
                st.pool_sizes.append({})
            for key, value in sizes.items():
                st.pool_sizes[-1].setdefault(key, value)
        else:
            return
        self._phases.open("kv_pool", st.pool_ends, ln.t)
        events.append("kv_sizing")
        if isinstance(full, int) and full < 0:  # what the weights left cannot hold a pool
            self._record_error(ln, "oom", events, phase="kv_pool")

    def _on_pool_end(self, ln: LogLine, events: list[str]) -> None:
        st = self._rank(ln)
        st.pool_end_avail_gb = group_float(AVAIL, ln.msg)
        self._phases.close("kv_pool", st.pool_ends, ln.t)
        st.pool_ends += 1
        events.append("kv_pool_end")

    def _on_hicache(self, ln: LogLine, events: list[str]) -> None:
        # HiCache's host pool on this rank; a hybrid model may size one per KV pool, so a
        # rank's lines add up (bounded as the KV pools are: a repeating log is noise).
        m = HICACHE_HOST.search(ln.msg)
        if m is None:
            return
        st = self._rank(ln)
        if st.hicache_lines >= MAX_POOLS:
            return
        size = float(m.group(1).replace(",", "")) * GB  # SGLang divides by 1e9 here
        st.hicache_bytes = (st.hicache_bytes or 0.0) + size
        st.hicache_lines += 1
        self._phases.open("kv_pool", st.pool_ends, ln.t)
        events.append("hicache_allocated")

    def _on_graph(self, ln: LogLine, events: list[str]) -> None:
        m = GRAPH.search(ln.msg)
        if m is None:  # "Capture cuda graph bs [..]" and other progress lines
            if GRAPH_FAILED.search(ln.msg):  # "Capture cuda graph failed: CUDA error: .."
                self._on_graph_failed(ln, events)
            return
        kind = " ".join(m.group(1).lower().split()) or "default"
        st = self._rank(ln)
        msg = ln.msg
        if m.group(2).lower() == "begin":
            late = self._late_begin(st.graphs, ln.t, kind)
            if late is not None:  # its end came first (lines out of order)
                st.graphs[late] = replace(st.graphs[late], begin_at=ln.t,
                                          begin_avail_gb=group_float(AVAIL, msg))
                self._phases.open("graphs", late, ln.t)
                events.append("graphs_begin")
                return
            if len(st.graphs) >= MAX_CAPTURES:  # the same captures again and again: noise
                events.append("graphs_begin")
                return
            idx = len(st.graphs)
            st.graphs.append(GraphCapture(
                kind, begin_avail_gb=group_float(AVAIL, msg), begin_at=ln.t
            ))
            st.open_graphs[kind] = idx
            self._phases.open("graphs", idx, ln.t)
            events.append("graphs_begin")
            return
        idx_or_none = st.open_graphs.pop(kind, None)
        if idx_or_none is None and st.open_graphs:
            # Begin and end worded differently ("Capture cuda graph begin" .. "Capture target
            # decode CUDA graph end"): close the most recent open capture.
            latest = max(st.open_graphs, key=st.open_graphs.__getitem__)
            idx_or_none = st.open_graphs.pop(latest)
        if idx_or_none is None:  # end without any begin
            if len(st.graphs) >= MAX_CAPTURES:
                events.append("graphs_end")
                return
            idx = len(st.graphs)
            st.graphs.append(GraphCapture(kind))
        else:
            idx = idx_or_none
        st.graphs[idx] = replace(
            st.graphs[idx],
            elapsed_s=group_float(ELAPSED, msg),
            mem_usage_gb=group_float(MEM_USAGE, msg),
            avail_gb=group_float(AVAIL, msg),
            end_at=ln.t,
        )
        self._phases.close("graphs", idx, ln.t)
        events.append("graphs_end")

    def _on_graph_failed(self, ln: LogLine, events: list[str]) -> None:
        """A capture that failed ("Capture cuda graph failed: CUDA error: no kernel image
        is available .."): the graph phase's failure, whatever its words."""
        low = ln.msg.lower()
        kind = "oom" if "out of memory" in low else "cuda" if "cuda error" in low \
            else "exception"
        self._record_error(ln, kind, events, phase="graphs")
