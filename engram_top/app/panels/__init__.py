"""The dashboard's panels, one module each, each owning its rows: hbm (per GPU, its ledger,
the Engram share of PCIe receive, the server's breakdown), kv (the KV pool, HiCache's host
tier, a hybrid model's state pool, held requests), host (host RAM, its ledger, NUMA nodes,
the Engram row) and latency; header (the line above them), drawing (what they are drawn
with). A panel is a function of the store, the rows and columns it has (Panel calls it):
its lines as a Rich Group. Memory is shown in binary units (GiB), as nvidia-smi's MiB and
SGLang's "GB" (which is GiB) are; every panel says when its source is failing and how old
its values are."""

from engram_top.app.panels.drawing import source_line
from engram_top.app.panels.hbm import SOURCES as HBM_SOURCES
from engram_top.app.panels.hbm import hbm_inputs, hbm_panel
from engram_top.app.panels.header import (
    PHASE_LABELS,
    PHASE_SHORT,
    STATE_STYLES,
    Shown,
    header,
    run_state,
)
from engram_top.app.panels.host import SOURCES as HOST_SOURCES
from engram_top.app.panels.host import engram_rows, host_delta, host_panel, numa_rows
from engram_top.app.panels.kv import SOURCES as KV_SOURCES
from engram_top.app.panels.kv import kv_panel
from engram_top.app.panels.latency import SOURCES as LATENCY_SOURCES
from engram_top.app.panels.latency import latency_panel

__all__ = ["HBM_SOURCES", "HOST_SOURCES", "KV_SOURCES", "LATENCY_SOURCES", "PHASE_LABELS",
           "PHASE_SHORT", "STATE_STYLES", "Shown", "engram_rows", "hbm_inputs", "hbm_panel",
           "header", "host_delta", "host_panel", "kv_panel", "latency_panel", "numa_rows",
           "run_state", "source_line"]
