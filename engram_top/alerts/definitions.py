"""Every alert, defined once: its name, severity, thresholds (the config file's [alerts]
keys, each with its default and range), what it says, how it clears and whether the fleet
applies it. The names list, the Thresholds fields, the config file's comments, the fleet's
rules and the README's alert list are all read from ALERTS; the monitor's checks find each
condition and raise it under its definition's name and severity.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Any

from scenarios.bounds import Range, bounded_float, bounded_int

# Every number has its range, so that none can be what start-up cannot take (a 400-digit
# integer is no float) or a window without end. Why these ends: the readings come once a
# second, so a window under a second holds one of them; a day is as long as a live alert
# can mean; a MiB/s rate of a million is past any swap device.
PCT = bounded_float(0, 100, what="a percentage")
WINDOW_S = bounded_float(1, 86400, unit="seconds")
HOLD_S = bounded_float(0, 86400, unit="seconds")
KEEP_S = 30.0  # one overload, one alert: the server's own windows are 30 s


@dataclass(frozen=True)
class Setting:
    """One [alerts] key: its default and how the file's value is checked. kind is "bool",
    "names" (a list of alert names) or the Range of a number; what is how a refusal
    describes a good value (a Range says its own)."""

    key: str
    default: Any
    kind: str | Range
    what: str = ""

    @property
    def described(self) -> str:
        return self.kind.describe() if isinstance(self.kind, Range) else self.what


@dataclass(frozen=True)
class FleetRule:
    """How the fleet applies an alert to a node's row: the row's figure (an attribute of
    engram_top.fleet.session.FleetRow) against the threshold setting, and how the alerts
    column says it ("{:.0f}" takes the figure)."""

    figure: str
    setting: str
    above: bool  # fires above the threshold; else below it
    label: str

    def says(self, row: Any, limit: float) -> str | None:
        value = getattr(row, self.figure)
        if value is None or not (value > limit if self.above else value < limit):
            return None
        return self.label.format(value)


@dataclass(frozen=True)
class AlertDef:
    name: str  # an alert's id is its name, or name:gpuN for one GPU's
    severity: str  # "warning" or "error"
    says: str  # what it means, as the README lists it (Markdown)
    settings: tuple[Setting, ...] = ()
    # Over its settings in the config file; for one without settings, what it is, in the
    # file's closing list of the alerts that have no threshold.
    config_note: str = ""
    per_gpu: bool = False
    # About a fact of the run rather than a measured value: nothing hovers there, so it
    # clears as soon as the fact goes (a new run, a restarted server).
    clears_at_once: bool = False
    # Its start is already in the events, in the words of whoever saw it (the supervisor
    # writes "device exited (code -9)" as it happens, the recorder why it stopped): it
    # toasts and stays on screen while active, but adds no second events line.
    told_elsewhere: bool = False
    fleet: FleetRule | None = None
    # About the server's own figures: once it stops answering or ends they are stale, so the
    # alert ends at once rather than stand on its last reading.
    server_figures: bool = False
    # Holds, as Prometheus' `for` and `keep_firing_for`: how long its condition must hold
    # before it fires, and how long it goes on firing once the condition is gone (at least
    # the [alerts] clear_after_s); the config file's NAME_for_s and NAME_keep_firing_s
    # change them. A window's alert over an overload that comes and goes with each batch
    # fires once for the overload, not once a batch.
    for_s: float = 0.0
    keep_firing_s: float = 0.0

    def id(self, gpu: int | None = None) -> str:
        return self.name if gpu is None else f"{self.name}:gpu{gpu}"

    @property
    def key(self) -> str:
        return self.name.replace("-", "_")

    def hold_settings(self) -> tuple[Setting, ...]:
        """Its holds as [alerts] keys: an alert on a measured figure has both (one about a
        fact, cleared at once, or a GPU's error count that stays, has none)."""
        if self.clears_at_once or self.told_elsewhere or not (self.settings
                                                               or self.server_figures):
            return ()
        return (Setting(f"{self.key}_for_s", self.for_s, HOLD_S),
                Setting(f"{self.key}_keep_firing_s", self.keep_firing_s, HOLD_S))


HBM = AlertDef(
    "hbm", "warning",
    "GPU N's HBM used above `hbm_used_pct` of its total (NVML memory v2, so driver-reserved "
    "memory is not counted as used), naming the process that holds the most of it and its "
    "GiB, the server's share beside it.",
    (Setting("hbm_used_pct", 95.0, PCT),),
    "Any GPU's HBM used (NVML, reserved memory apart) above this share of its total.",
    per_gpu=True, fleet=FleetRule("hbm_pct", "hbm_used_pct", True, "hbm {:.0f}%"))
KV = AlertDef(
    "kv", "warning",
    "the server's KV pool usage (SGLang's `token_usage`) above `kv_usage_pct`.",
    (Setting("kv_usage_pct", 90.0, PCT),),
    "The server's KV pool usage (SGLang's token_usage) above this.", server_figures=True,
    keep_firing_s=KEEP_S, fleet=FleetRule("kv_pct", "kv_usage_pct", True, "kv {:.0f}%"))
HOST_AVAILABLE = AlertDef(
    "host-available", "warning",
    "host memory available (`MemAvailable`) below `host_available_pct` of the total, naming "
    "the host ledger's line that grew the most since the dashboard first saw the run (else "
    "its largest line) and the two largest processes outside the server's tree (by RSS, "
    "read every 30 s).",
    (Setting("host_available_pct", 10.0, PCT),),
    "Host memory available (MemAvailable) below this share of the total.",
    fleet=FleetRule("host_available_pct", "host_available_pct", False, "host {:.0f}% free"))
NUMA_AVAILABLE = AlertDef(
    "numa-available", "warning",
    "on a host of two or more NUMA nodes, node N's memory available (its total less what "
    "is in use, page cache counted free) below `numa_available_pct` of its total, naming the "
    "node's largest ledger lines and the processes outside the server that hold the most "
    "there (of the largest, by their numa_maps, read every 30 s): a rank's Engram tables "
    "that spill to another node read across the socket link, and the kernel reclaims or "
    "kills on a full node while the host as a whole looks fine.",
    (Setting("numa_available_pct", 5.0, PCT),),
    "Any NUMA node's memory available (total less in use, page cache counted free) below "
    "this share of its total, on a host of two or more nodes.")
SHM_LEFTOVER = AlertDef(
    "shm-leftover", "warning",
    "files in `/dev/shm` that no live process has open or mapped hold more than "
    "`shm_leftover_gib` GiB in all (read every 30 s): tmpfs is host RAM that only removing "
    "the files gives back, most often a killed engine's segments (SGLang's `sgl_shm_*` and "
    "`sglang_loads_*`, NCCL's, any engine's), and a restart that needs the room fails. It "
    "names the largest with their sizes and ages and what to remove, and clears once they "
    "are gone.",
    (Setting("shm_leftover_gib", 1.0, bounded_float(0, 1e6, what="a size in GiB")),),
    "Files in /dev/shm that no live process holds, in all, above this many GiB.")
SWAP_IN = AlertDef(
    "swap-in", "warning",
    "pages swapped in faster than `swap_in_mib_per_s` MiB/s, averaged over `swap_window_s` "
    "(from `/proc/vmstat`'s cumulative count).",
    (Setting("swap_in_mib_per_s", 1.0, bounded_float(0, 1e6, what="a rate in MiB/s")),
     Setting("swap_window_s", 5.0, WINDOW_S)),
    "Pages swapped in faster than this (MiB/s), measured over swap_window_s seconds.")
QUEUE_GROWTH = AlertDef(
    "queue-growth", "warning",
    "the server's request queue never shrank over the last `queue_growth_window_s` seconds "
    "and is longer than at their start; it says the queue's length now, and clears once the "
    "queue has drained back to where the growth began, not when the growth stops.",
    (Setting("queue_growth_window_s", 30.0, WINDOW_S),),
    "The server's request queue growing (never shrinking, and longer at the end) for longer "
    "than this many seconds.", server_figures=True)
NO_HUGE_PAGES = AlertDef(
    "no-huge-pages", "warning",
    "SGLang's start-up log said an Engram host table has \"No huge pages\" (expect much "
    "slower host-table lookups).",
    config_note="SGLang's Engram host table warned \"No huge pages\" in its start-up log",
    clears_at_once=True)
SERVER_DIED = AlertDef(
    "server-died", "error",
    "the server exited or failed without being asked to stop (its exit code and failure are "
    "in the text, then, once its death is classified, what killed it and the next action); "
    "`x`, a switch or quitting are asked-for stops.",
    config_note="a server exited or failed without being asked to stop",
    clears_at_once=True, told_elsewhere=True)
RESTART_LOOP = AlertDef(
    "restart-loop", "error",
    "the watched server died `restart_loop_count` times or more within "
    "`restart_loop_window_s` seconds (an attached server that came back on its URL after "
    "each death, or runs of one scenario): each restart meets the same end, so it names the "
    "deaths' classes, the last one's cause and next action; it clears once fewer deaths "
    "fall within the window.",
    (Setting("restart_loop_count", 3, bounded_int(2, 1000, what="a number of deaths")),
     Setting("restart_loop_window_s", 600.0, WINDOW_S)),
    "The watched server dying this many times (or more) within restart_loop_window_s "
    "seconds.", clears_at_once=True)
RANK_DIED = AlertDef(
    "rank-died", "error",
    "a process of a ready server we started (a TP rank, its scheduler) died while the "
    "server still answers; the run is marked degraded.",
    config_note="a process of a running server died while the server still answers: degraded",
    clears_at_once=True, told_elsewhere=True)
SERVER_SILENT = AlertDef(
    "server-silent", "error",
    "a ready server gave no good `/metrics` answer for `server_silent_s` seconds (a poll "
    "that never ends too; while `server-gone` holds, that one says it).",
    (Setting("server_silent_s", 10.0, WINDOW_S),),
    "A ready server that gave no good /metrics answer for this many seconds.",
    fleet=FleetRule("silent_s", "server_silent_s", True, "server silent"))
SERVER_GONE = AlertDef(
    "server-gone", "error",
    "a ready or attached server failed two polls in a row (nothing at its port, no whole "
    "answer, a page that cannot be read): the header reads NOT ANSWERING, and the alerts on "
    "its figures (`kv`, `queue-growth`, `retractions`, `slo`, `hicache-drops`) end, since "
    "those figures are stale. It clears when the server answers.",
    config_note="a ready or attached server failed two polls in a row", clears_at_once=True)
RETRACTIONS = AlertDef(
    "retractions", "warning",
    "the server retracted (vLLM: preempted) more than `retractions_per_s` requests a second "
    "over its 30 s window: its KV pool ran out mid-decode, and each retracted request is "
    "computed again.",
    (Setting("retractions_per_s", 0.1, bounded_float(0, 1e6, what="a rate per second")),),
    "Requests retracted (vLLM: preempted) per second, over the server's 30 s window, above "
    "this.", server_figures=True, keep_firing_s=KEEP_S)
SLO = AlertDef(
    "slo", "warning",
    "the server's TTFT or TPOT (SGLang's inter-token latency) over its 30 s window is past a "
    "p50 or p99 bound of the config file's `[slo]` (else the scenario file's: the demo holds "
    "its own load to p99 TTFT 1 s and TPOT 150 ms), once the window holds 10 requests (a "
    "bound at another percentile holds the demo load's requests only); it does not clear while "
    "requests queue and none got a first token in the window.",
    config_note="the server's p50 or p99 TTFT or TPOT past a bound of the [slo] table",
    server_figures=True, keep_firing_s=KEEP_S)
HICACHE_DROPS = AlertDef(
    "hicache-drops", "warning",
    "SGLang's HiCache dropped tokens for host pressure "
    "(`hicache_dropped_tokens_total{reason=\"host_pressure\"}`) faster than "
    "`hicache_dropped_per_s` a second: its host pool is full or host RAM is short, so "
    "those prefixes are computed again.",
    (Setting("hicache_dropped_per_s", 0.0, bounded_float(0, 1e12, what="tokens per second")),),
    "HiCache tokens dropped for host pressure per second above this.", server_figures=True,
    keep_firing_s=KEEP_S)
PCIE = AlertDef(
    "pcie", "warning",
    "GPU N's PCIe receive, averaged over `pcie_window_s`, above `pcie_rx_pct` of what its "
    "link carries now (its generation times its width), with HiCache's load-back and the "
    "Engram estimate (the receive less the load-back) apart where HiCache reports it.",
    (Setting("pcie_rx_pct", 80.0, PCT), Setting("pcie_window_s", 5.0, WINDOW_S)),
    "Any GPU's PCIe receive, averaged over pcie_window_s seconds, above this share of its "
    "link (generation x width).", per_gpu=True)
RECORDING = AlertDef(
    "recording", "error",
    "the recording cannot be written (its path, a full disk); it stays until quit.",
    config_note="the recording cannot be written",
    clears_at_once=True, told_elsewhere=True)
XID = AlertDef(
    "xid", "error",
    "NVML delivered an XID critical error for GPU N (the last ones seen, with what the "
    "common ones mean); it stays while the dashboard runs, as the GPU may need a reset. Only "
    "XIDs after the dashboard started are seen.",
    config_note="a GPU reported an XID error through NVML", per_gpu=True)
ECC = AlertDef(
    "ecc", "error",
    "GPU N counts uncorrected ECC errors since its driver loaded (NVML's volatile count).",
    config_note="a GPU counts uncorrected ECC errors", per_gpu=True)

ALERTS: tuple[AlertDef, ...] = (HBM, KV, HOST_AVAILABLE, NUMA_AVAILABLE, SHM_LEFTOVER, SWAP_IN,
                                QUEUE_GROWTH, RETRACTIONS, SLO, HICACHE_DROPS, PCIE, NO_HUGE_PAGES,
                                SERVER_DIED, RESTART_LOOP, RANK_DIED, SERVER_GONE,
                                SERVER_SILENT, RECORDING, XID, ECC)
ALERT_NAMES: tuple[str, ...] = tuple(a.name for a in ALERTS)
BY_NAME: dict[str, AlertDef] = {a.name: a for a in ALERTS}
CLEARS_AT_ONCE = frozenset(a.name for a in ALERTS if a.clears_at_once)
TOLD_ELSEWHERE = frozenset(a.name for a in ALERTS if a.told_elsewhere)
SERVER_FIGURES = frozenset(a.name for a in ALERTS if a.server_figures)


def readme_list(width: int = 92) -> str:
    """The README's list of alerts, one item each, as the definitions say them."""
    items = []
    for a in ALERTS:
        shown = f"{a.name}:gpuN" if a.per_gpu else a.name
        text = f"`{shown}` ({a.severity}): {a.says}"
        if a.keep_firing_s:
            text += (f" It goes on firing {a.keep_firing_s:g} s after its condition is gone "
                     f"(`{a.key}_keep_firing_s`).")
        if a.for_s:
            text += f" It fires once its condition held {a.for_s:g} s (`{a.key}_for_s`)."
        if a.fleet is not None:
            text += f" The fleet shows it per node: `{a.fleet.label.replace('{:.0f}', 'N')}`."
        items.append(textwrap.fill(text, width, initial_indent="- ", subsequent_indent="  ",
                                   break_on_hyphens=False, break_long_words=False))
    return "\n".join(items) + "\n"
