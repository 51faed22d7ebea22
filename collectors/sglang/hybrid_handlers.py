"""The handlers of a hybrid model's pool lines, by rank: a sliding-window (SWA) model's two
KV pools and their total, a post-capture resize, and a Mamba model's state pool.

A SWA model sizes a full pool and a smaller SWA pool, and logs "KV Cache is allocated"
once for each (in either order, labelled "Full"/"SWA" or not): its capacity is the FULL
pool's, which "Use sliding window memory pool. full_layer_tokens=.., swa_layer_tokens=.."
states, and its KV total the "SWAKVPool mem usage: X GB, swa size: .., full size: .." line's.
"""

from __future__ import annotations

from collectors.sglang.launch_state import MAX_POOLS, LaunchState
from collectors.sglang.line_prefix import LogLine
from collectors.sglang.log_lines import numeric_pairs
from collectors.sglang.log_patterns import (
    AVAIL,
    KV_FIELD,
    KV_INLINE_DTYPE,
    SWA_KV_POOL,
    SWA_KV_SIZE,
    group_float,
    nz,
    state_fields,
    sum_known,
)
from collectors.startup_facts import KvPool


class HybridPoolHandlers(LaunchState):
    """Reads the sliding-window, post-capture and Mamba pool lines."""

    def _on_swa_pool(self, ln: LogLine, events: list[str]) -> None:
        # "Use sliding window memory pool. full_layer_tokens=.., swa_layer_tokens=..", its
        # "(all SWA). swa_layer_tokens=.." form, and "Post-capture KV sizing:" restating
        # them after a resize (the latest line is the pool that serves).
        sizes: dict[str, int] = {}
        for name, value in numeric_pairs(ln.msg).items():
            low = name.lower()
            pool = "full" if low.startswith("full") else "swa" if low.startswith("swa") \
                else None
            if pool is not None and isinstance(value, int) and value >= 0:
                sizes.setdefault(pool, value)
        if sizes.get("swa") == 0 and sizes.get("full"):
            del sizes["swa"]  # a post-capture restatement of a model with no SWA layers
        if not sizes:
            return
        st = self._rank(ln)
        st.swa_pool = sizes
        st.all_swa = "all swa" in ln.msg.lower() or ("swa" in sizes and "full" not in sizes)
        self._phases.open("kv_pool", st.pool_ends, ln.t)
        events.append("kv_sizing")

    def _on_swa_kv(self, ln: LogLine, events: list[str]) -> None:
        m = SWA_KV_POOL.search(ln.msg)
        if m is None:
            return
        st = self._rank(ln)
        if m.group(1).lower() == "mem usage":  # a VA upper bound is no memory taken yet
            st.swa_kv["total_gb"] = nz(float(m.group(2)))
        for pool, value in SWA_KV_SIZE.findall(ln.msg[m.end():]):
            st.swa_kv[pool.lower()] = int(value)
        self._phases.open("kv_pool", st.pool_ends, ln.t)
        events.append("kv_allocated")

    def _on_post_capture_kv(self, ln: LogLine, events: list[str]) -> None:
        # "Post-capture KV sizing: KV cache allocated. dtype: .., #tokens: N, KV size: X GB,
        # avail mem=.. GB": the pool that serves, once the graphs took theirs.
        st = self._rank(ln)
        sizes = {key: nz(float(value)) for key, value in KV_FIELD.findall(ln.msg)}
        tokens = sizes.get("#tokens")
        inline = KV_INLINE_DTYPE.search(ln.msg)
        if len(st.pools) < MAX_POOLS:
            total = sum_known((sizes.get("K size"), sizes.get("V size"), sizes.get("KV size")))
            st.pools.append(KvPool(
                tokens=None if tokens is None else int(tokens), k_size_gb=sizes.get("K size"),
                v_size_gb=sizes.get("V size"), kv_size_gb=sizes.get("KV size"),
                total_gb=total, dtype=inline.group(1) if inline else st.kv_dtype, at=ln.t,
                label="post-capture",
            ))
        avail = group_float(AVAIL, ln.msg)
        if avail is not None:
            st.pool_end_avail_gb = avail
        events.append("kv_allocated")

    def _on_mamba(self, ln: LogLine, events: list[str]) -> None:
        # "Mamba Cache is allocated. max_mamba_cache_size: N, conv_state size: X GB,
        # ssm_state size: Y GB [intermediate_.. size: ..]": a Mamba model's state pool.
        body = ln.msg[ln.msg.find("allocated") + len("allocated"):]
        fields = state_fields(body)
        if not fields:
            return
        st = self._rank(ln)
        st.mamba = fields
        self._phases.open("kv_pool", st.pool_ends, ln.t)
        events.append("mamba_allocated")
