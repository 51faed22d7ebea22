"""Where the simulated server's bytes go, per GPU and on the host, for each placement.

The KV allocator follows SGLang's policy: the static budget is fixed, weights take their
share, the KV pools take the rest. Of the KV bytes the fixed pools (engram_top.sim.pools)
come first and the full pool gets the remainder. The budget is set so the device placement's
full pool lands on the seed's KV capacity; the host placements then get every freed weight
byte as full-pool KV, which is what the seed reports ("under the same allocator policy").
"""

from __future__ import annotations

from dataclasses import dataclass

from collectors.units import GIB
from engram_top.seed.reference import Reference
from engram_top.sim import pools
from engram_top.sim.pools import PAGE_SIZE, Dsv4Pools


def kv_capacity_tokens(ref: Reference, placement: str, held_by_others: int = 0) -> int:
    """The full pool: what the fixed pools leave of the KV bytes, in whole pages (0 or less:
    no room for one)."""
    free = kv_bytes_per_gpu(ref, placement, held_by_others) - pools.fixed_bytes(ref)
    return free // int(ref.kv_bytes_per_token * PAGE_SIZE) * PAGE_SIZE


def kv_bytes_per_gpu(ref: Reference, placement: str, held_by_others: int = 0) -> int:
    """``held_by_others``: HBM another process holds on the fullest GPU. SGLang profiles
    the memory it finds free after loading the weights, so what another tenant holds comes
    out of the KV budget (its rest_memory), on every rank alike (the smallest rank's)."""
    device = ref.placements["device"]
    budget = (device.weights_gib * GIB + pools.fixed_bytes(ref)
              + device.kv_tokens * ref.kv_bytes_per_token)
    return int(budget - ref.placements[placement].weights_gib * GIB - held_by_others)


@dataclass(frozen=True)
class MemoryPlan:
    """Bytes the server holds at ready: per GPU (each rank alike) and on the host."""

    context_bytes: int
    weights_bytes: int
    kv_bytes: int  # every KV pool together
    kv_tokens: int  # the full pool
    graphs_bytes: int
    host_process_bytes: int  # anonymous memory of the server's processes (whole node)
    host_table_bytes: int  # Engram tables in shared host memory (whole node)
    host_pinned_extra_bytes: int  # prefetch staging, pinned (whole node)
    pools: Dsv4Pools
    # SGLang's --mem-fraction-static, rounded to 3 places as its automatic choice is: the
    # share of the GPU that weights and KV may take, the KV pools getting what weights leave.
    mem_fraction_static: float

    @property
    def gpu_bytes(self) -> int:
        return self.context_bytes + self.weights_bytes + self.kv_bytes + self.graphs_bytes

    @property
    def host_bytes(self) -> int:
        return self.host_process_bytes + self.host_table_bytes + self.host_pinned_extra_bytes


def plan(ref: Reference, placement: str, held_by_others: int = 0) -> MemoryPlan:
    """``held_by_others``: HBM other processes hold on the fullest GPU at launch."""
    p = ref.placements[placement]
    device_delta = ref.placements["device"].host_delta_gib * GIB
    tables = 0
    extra = 0
    if placement != "device":
        tables = int(ref.raw["derived"]["engram_tables_gib"]["value"] * GIB)
        # What the placement's host delta holds beyond the processes and the tables.
        extra = max(0, int(p.host_delta_gib * GIB - device_delta - tables))
    kv_bytes = max(0, kv_bytes_per_gpu(ref, placement, held_by_others))
    kv_tokens = max(0, kv_capacity_tokens(ref, placement, held_by_others))
    return MemoryPlan(
        context_bytes=int(ref.context_gib * GIB),
        weights_bytes=int(p.weights_gib * GIB),
        kv_bytes=kv_bytes,
        kv_tokens=kv_tokens,
        graphs_bytes=int(ref.graphs_gib * GIB),
        host_process_bytes=int(device_delta),
        host_table_bytes=tables,
        host_pinned_extra_bytes=extra,
        pools=pools.size_pools(ref, kv_tokens),
        # The fraction is chosen before profiling: another tenant's bytes do not change it.
        mem_fraction_static=_mem_fraction_static(ref, p.weights_gib * GIB,
                                                 kv_bytes_per_gpu(ref, placement)),
    )


def _mem_fraction_static(ref: Reference, weights: float, kv: int) -> float:
    # The same for every placement: freed weight bytes all go to KV.
    after_weights = ref.gpu_total_bytes - ref.gpu_reserved_bytes - ref.context_gib * GIB - weights
    return round(1 - (after_weights - kv) / ref.gpu_total_bytes, 3)
