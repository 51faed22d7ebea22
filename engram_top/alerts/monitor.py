"""Alerts: thresholds over what the store holds, raised and cleared as the readings move.

Pure logic over a RunStore (no I/O, no Textual): the session's AlertWatch calls
AlertMonitor.evaluate twice a second and tells its listeners (the app toasts what is
raised). Active alerts live on
``store.alerts`` (id -> Alert) so panels and exports read the same thing; each start and
clear is also a store event.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from collectors import xid_text
from collectors.poll_grid import AFTER_POLLS_S, until_next
from collectors.source import SourceName
from collectors.units import MIB, gib_text
from engram_top.alerts import pressure, restarts
from engram_top.alerts.definitions import (
    BY_NAME,
    CLEARS_AT_ONCE,
    ECC,
    HBM,
    HOST_AVAILABLE,
    KV,
    NO_HUGE_PAGES,
    QUEUE_GROWTH,
    RANK_DIED,
    SERVER_DIED,
    SERVER_FIGURES,
    SERVER_GONE,
    SERVER_SILENT,
    SLO,
    SWAP_IN,
    TOLD_ELSEWHERE,
    XID,
)
from engram_top.alerts.finding import Finding as Finding  # re-exported
from engram_top.alerts.pressure import SloBound, server_down
from engram_top.alerts.thresholds import Thresholds
from engram_top.model.facts import gpu_facts, host_facts, kv_facts, wall_at
from engram_top.model.ledger import host_ledger
from engram_top.model.store import RunFacts, RunStore, SeriesName
from scenarios.runstate import ENDED, LIVE, SERVING, UNASKED_END


@dataclass
class Alert:
    id: str  # "hbm:gpu2", "kv", "host-available", "swap-in", ... (name before any ':')
    severity: str  # "warning" or "error"
    message: str  # with the figure and the threshold: "GPU 2 HBM 96.3% used (> 95%)"
    since: float  # wall-clock time it started
    started_at: float  # monotonic

    @property
    def name(self) -> str:
        return self.id.split(":", 1)[0]


@dataclass(frozen=True)
class AlertChange:
    change: str  # "raised" or "cleared"
    alert: Alert


class AlertMonitor:
    def __init__(self, thresholds: Thresholds | None = None, *, announce: bool = True,
                 slos: Sequence[SloBound] = ()) -> None:
        self.t = thresholds or Thresholds()
        # False for a replay: the recording already holds the events the live run wrote.
        self.announce = announce
        self.slos = tuple(slos)  # the config file's [slo]: what the slo alert holds to
        self._clear_since: dict[str, float] = {}  # id -> monotonic time it was first seen clear
        self._pending: dict[str, float] = {}  # id -> when its condition began, before its hold
        # The queue's length where the growth of the active queue-growth alert began: it
        # clears once the queue is back there, not when it merely stops growing.
        self._queue_from: float | None = None
        # The host ledger as first seen with the watched run on the host read now, and when:
        # the line that grew since is what a host memory alert names. The host is part of
        # the key: attach reads this machine until it learns the server's node, and a line
        # "grew" by the difference between two machines is no growth.
        self._ledger_run: object = None
        self._ledger_host: tuple[str, int] | None = None  # its backend and total
        self._ledger_first: dict[str, float] = {}
        self._ledger_since = ""

    def evaluate(self, store: RunStore, now: float | None = None) -> list[AlertChange]:
        """Raise and clear alerts on ``store.alerts``; return what started or ended."""
        now = time.monotonic() if now is None else now
        found = {f.id: f for f in self.findings(store, now)}
        active: dict[str, Alert] = store.alerts
        changes: list[AlertChange] = []
        touched = False
        for f in found.values():
            self._clear_since.pop(f.id, None)
            alert = active.get(f.id)
            if alert is not None:
                # Inside the band the old message stays: its figure is the one that crossed.
                if f.firing and (alert.message, alert.severity) != (f.message, f.severity):
                    alert.message, alert.severity = f.message, f.severity
                    touched = True
            elif not f.firing:
                self._pending.pop(f.id, None)
            elif now - self._pending.setdefault(f.id, now) >= self.t.hold(_name(f.id), "for_s"):
                self._pending.pop(f.id, None)
                alert = Alert(f.id, f.severity, f.message, since=wall_at(store, now),
                              started_at=now)
                active[f.id] = alert
                if self.announce and alert.name not in TOLD_ELSEWHERE:
                    store.event(f.severity, f.message)
                changes.append(AlertChange("raised", alert))
        for pending in [i for i in self._pending if i not in found]:
            del self._pending[pending]  # gone before its hold: never fired
        stale = _stale(store)
        for alert_id in [i for i in active if i not in found]:
            alert = active[alert_id]
            # A figure of a server that stopped answering is no figure: its alert ends now.
            ends = alert.name in SERVER_FIGURES and stale
            if alert.name == SLO.name and not ends and pressure.queued_without_first_token(store):
                self._clear_since.pop(alert_id, None)  # no first token to measure: not met
                continue
            hold = 0.0 if alert.name in CLEARS_AT_ONCE or ends else max(
                self.t.clear_after_s, self.t.hold(alert.name, "keep_firing_s"))
            if now - self._clear_since.setdefault(alert_id, now) >= hold:
                del active[alert_id]
                self._clear_since.pop(alert_id, None)
                if alert.name == QUEUE_GROWTH.name:
                    self._queue_from = None
                if self.announce and alert.name not in TOLD_ELSEWHERE:
                    store.event("info", f"ended ({stale}): {alert.message}" if ends
                                else f"cleared: {alert.message}")
                changes.append(AlertChange("cleared", alert))
        if changes or touched:
            store.bump("alerts")
        return changes

    def findings(self, store: RunStore, now: float) -> list[Finding]:
        """Every condition that holds now, switched-off alerts left out."""
        checks = (self._hbm, self._host, self._swap, self._pcie, self._huge_pages,
                  self._died, self._restarts, self._rank_died, self._gone, self._silent,
                  self._conditions, self._gpu_errors)
        out = [f for check in checks for f in check(store, now)]
        if not _stale(store):  # the server's figures: only while they are current
            out += [f for check in (self._kv, self._queue, self._serving)
                    for f in check(store, now)]
        out = [f for f in out if self.t.on(f.id.split(":", 1)[0])]
        if any(f.id == SERVER_GONE.name for f in out):  # it says the same, sooner
            out = [f for f in out if f.id != SERVER_SILENT.name]
        return out

    # ------------------------------------------------------------------ the checks
    def _hbm(self, store: RunStore, now: float) -> Iterator[Finding]:
        limit = self.t.hbm_used_pct
        holders: dict[int, str] | None = None
        for gpu in gpu_facts(store):
            if not gpu.total_bytes:
                continue
            pct = 100.0 * gpu.used_bytes / gpu.total_bytes
            if pct > limit - self.t.hysteresis_pct:
                holders = holders or pressure.hbm_cause(store)
                yield Finding(HBM.id(gpu.index), HBM.severity,
                              f"GPU {gpu.index} HBM {pct:.1f}% used (> {limit:g}%): "
                              f"{holders.get(gpu.index)}; look at `h` (who holds each GPU)",
                              firing=pct > limit)

    def _pcie(self, store: RunStore, now: float) -> Iterator[Finding]:
        yield from pressure.pcie(store, now, self.t.pcie_rx_pct, self.t.pcie_window_s,
                                 self.t.hysteresis_pct)

    def _serving(self, store: RunStore, now: float) -> Iterator[Finding]:
        """The server's figures of pressure: retractions, the SLOs, HiCache's drops."""
        if not _live(store.run):
            return
        yield from pressure.retractions(store, self.t.retractions_per_s)
        yield from pressure.slo_breaches(store, self.slos)
        host = host_facts(store)
        yield from pressure.hicache_drops(store, self.t.hicache_dropped_per_s,
                                          host.available_bytes if host is not None else None)

    def _gpu_errors(self, store: RunStore, now: float) -> Iterator[Finding]:
        """What a GPU reports as gone wrong: XID errors, uncorrected ECC errors. Each stands
        while the reading holds it (the collector keeps the last XIDs; the volatile ECC
        count lasts until the driver reloads): a fault to look at, not a passing figure."""
        for gpu in gpu_facts(store):
            if gpu.xids:
                seen = ", ".join(xid_text(x) for x in dict.fromkeys(gpu.xids[-3:]))
                yield Finding(XID.id(gpu.index), XID.severity, f"GPU {gpu.index} {seen}")
            if gpu.ecc_uncorrected:
                n = gpu.ecc_uncorrected
                yield Finding(ECC.id(gpu.index), ECC.severity,
                              f"GPU {gpu.index} {n} uncorrected ECC error{'s' * (n != 1)} "
                              "since the driver loaded")

    def _kv(self, store: RunStore, now: float) -> Iterator[Finding]:
        kv = kv_facts(store) if _live(store.run) else None
        if kv is None or kv.token_usage is None:
            return
        pct, limit = 100.0 * kv.token_usage, self.t.kv_usage_pct
        if pct > limit - self.t.hysteresis_pct:
            tokens = ""
            if kv.used_tokens is not None and kv.capacity_tokens:
                tokens = f": {kv.used_tokens:,} of {kv.capacity_tokens:,} tokens"
            yield Finding(KV.name, KV.severity,
                          f"KV pool {pct:.1f}% used (> {limit:g}%){tokens}; look at "
                          "the KV panel (retracted/s, queue)",
                          firing=pct > limit)

    def _host(self, store: RunStore, now: float) -> Iterator[Finding]:
        host = host_facts(store)
        if host is None or not host.total_bytes:
            return
        pct = 100.0 * host.available_bytes / host.total_bytes
        limit = self.t.host_available_pct
        book = host_ledger(store)
        lines = pressure.ledger_figures(book)
        raw = store.data(SourceName.HOST)
        seen_on = (raw.backend, raw.total_bytes) if raw is not None else None
        if store.run is not self._ledger_run or seen_on != self._ledger_host \
                or not self._ledger_first:
            self._ledger_run, self._ledger_host, self._ledger_first = store.run, seen_on, lines
            self._ledger_since = time.strftime("%H:%M:%S", time.localtime(wall_at(store, now)))
        yield from pressure.numa_nodes(store, book, self.t.numa_available_pct,
                                       self.t.hysteresis_pct)
        yield from pressure.shm_leftovers(store, self.t.shm_leftover_gib)
        if pct < limit + self.t.hysteresis_pct:
            cause = pressure.host_cause(lines, self._ledger_first, self._ledger_since)
            who = pressure.largest_others(store.data(SourceName.HOST))
            yield Finding(HOST_AVAILABLE.name, HOST_AVAILABLE.severity,
                          f"host memory {pct:.1f}% available (< {limit:g}%): "
                          f"{gib_text(host.available_bytes)} of "
                          f"{gib_text(host.total_bytes)} GiB; {cause}{who}; look at the Host "
                          "RAM panel's ledger", firing=pct < limit)

    def _swap(self, store: RunStore, now: float) -> Iterator[Finding]:
        series = store.line(SourceName.HOST, SeriesName.SWAP_IN)
        window = self.t.swap_window_s
        points = series.fine_since(now - window) if series else []
        if len(points) < 2 or points[-1][0] <= points[0][0]:
            return
        (t0, v0), (t1, v1) = points[0], points[-1]
        # A negative delta is a counter that restarted (a new host), not swap-out.
        rate = max(0.0, v1 - v0) / (t1 - t0) / MIB
        if rate > self.t.swap_in_mib_per_s:
            yield Finding(SWAP_IN.name, SWAP_IN.severity,
                          f"swap-in {rate:.1f} MiB/s over {t1 - t0:.0f} s "
                          f"(> {self.t.swap_in_mib_per_s:g} MiB/s); look at the Host RAM "
                          "panel's ledger (who grew)")

    def _queue(self, store: RunStore, now: float) -> Iterator[Finding]:
        series = store.line(SourceName.SERVER, SeriesName.QUEUED)
        if series is None or not _live(store.run):
            return
        window = self.t.queue_growth_window_s
        before, after = series.around(now - window)
        if not after:
            return
        size = after[-1][1]
        values = [before[1]] + [v for _, v in after] if before else []
        growing = bool(values) and values[-1] > values[0] and all(
            b >= a for a, b in zip(values, values[1:], strict=False))
        if growing and (self._queue_from is None or QUEUE_GROWTH.name not in store.alerts):
            self._queue_from = values[0]
        start = self._queue_from
        if start is None or (not growing and size <= start):
            return  # never grew for a window, or drained back to where it began
        how = (f"grew from {values[0]:.0f} over {window:g} s without shrinking" if growing
               else f"not drained back to {start:.0f} yet")
        yield Finding(QUEUE_GROWTH.name, QUEUE_GROWTH.severity,
                      f"request queue at {size:,.0f} ({how}); look at the KV panel (usage, "
                      "retracted/s) and TTFT: the server takes requests slower than they "
                      "come")

    def _huge_pages(self, store: RunStore, now: float) -> Iterator[Finding]:
        run = store.run
        if run is None or run.state in ENDED:
            return
        tables = [t for t in run.startup.engram_tables if t.no_huge_pages_warning]
        if not tables:
            return
        where = ", ".join(f"{t.label} (TP{t.rank})" for t in tables)
        noun = "table" if len(tables) == 1 else "tables"
        yield Finding(NO_HUGE_PAGES.name, NO_HUGE_PAGES.severity,
                      f"Engram host {noun} {where}: {tables[0].no_huge_pages_warning}")

    def _died(self, store: RunStore, now: float) -> Iterator[Finding]:
        run = store.run
        # "stopped" is a stop we asked for: no alert.
        if run is None or run.state not in UNASKED_END:
            return
        text = f"server {run.scenario} {run.state}"
        if run.failure:
            text += f": {run.failure}"
        if run.exit_code is not None and f"code {run.exit_code}" not in text:
            text += f" (exit code {run.exit_code})"
        if run.death is not None:  # classified: what killed it, and what to do, in the alert
            text += f": {run.death.title}; next: {run.death.action}"
        yield Finding(SERVER_DIED.name, SERVER_DIED.severity, text)

    def _restarts(self, store: RunStore, now: float) -> Iterator[Finding]:
        yield from restarts.restart_loop(store, wall_at(store, now), self.t.restart_loop_count,
                                         self.t.restart_loop_window_s)

    def _rank_died(self, store: RunStore, now: float) -> Iterator[Finding]:
        run = store.run
        if run is not None and run.degraded and run.state in LIVE:
            yield Finding(RANK_DIED.name, RANK_DIED.severity,
                          f"server {run.scenario} degraded: {run.degraded}")

    def _conditions(self, store: RunStore, now: float) -> Iterator[Finding]:
        """What a part of the session reports as standing (the recorder that could not
        write): an alert for as long as it stands, not one events line soon scrolled off."""
        for name, message in store.conditions.items():
            yield Finding(name, BY_NAME[name].severity, message)

    def _gone(self, store: RunStore, now: float) -> Iterator[Finding]:
        latest = server_down(store)
        run = store.run
        if latest is None or run is None:
            return
        since = time.strftime("%H:%M:%S", time.localtime(
            wall_at(store, latest.failing_since or latest.at)))
        yield Finding(SERVER_GONE.name, SERVER_GONE.severity,
                      f"server {run.scenario} not answering since {since}: {latest.message}; "
                      "its figures are stale: look at its process and its log")

    def _silent(self, store: RunStore, now: float) -> Iterator[Finding]:
        run = store.run
        if run is None or run.state not in SERVING:
            return
        good = store.last_ok.get(SourceName.SERVER)
        since = run.ready_at if run.ready_at is not None else run.launched_at
        if good is not None:
            since = max(since, good.at)
        silent = now - since
        if silent <= self.t.server_silent_s:
            return
        latest = store.latest.get(SourceName.SERVER)
        why = f" ({latest.message})" if latest is not None and latest.message else ""
        yield Finding(SERVER_SILENT.name, SERVER_SILENT.severity,
                      f"server {run.scenario} gave no good /metrics answer for {silent:.0f} s "
                      f"(> {self.t.server_silent_s:g} s){why}")


def _name(alert_id: str) -> str:
    """An alert's name from its id ("hbm:gpu2" is hbm's)."""
    return alert_id.split(":", 1)[0]


def _live(run: RunFacts | None) -> bool:
    """Server figures count while a server runs; after it ends they are only its last word."""
    return run is None or run.state in LIVE


def _stale(store: RunStore) -> str:
    """Why the watched server's figures no longer describe it ("" while they do)."""
    if not _live(store.run):
        return "its server ended"
    if server_down(store) is not None:
        return "its server is not answering"
    return ""


# As often as the sources are polled (1 s by default): an alert is never staler than the
# reading that raised it; evaluating between readings finds nothing new.
CHECK_EVERY_S = 1.0


class AlertWatch:
    """Alerts evaluated where the data is, in the session, with the user's thresholds: the
    dashboard, a headless switch or bench, a snapshot and a recording all carry the same
    ones. Whoever shows them (the app's toasts) listens; nobody else evaluates."""

    def __init__(self, store: RunStore, thresholds: Thresholds | None = None, *,
                 announce: bool = True, slos: Sequence[SloBound] = ()) -> None:
        self.store = store
        self.thresholds = thresholds or Thresholds()
        self.announce = announce  # False for a replay: its recording holds the events
        self.slos = tuple(slos)
        self.monitor = AlertMonitor(self.thresholds, announce=announce, slos=self.slos)
        self.listeners: list[Callable[[AlertChange], None]] = []

    def check(self, now: float | None = None) -> list[AlertChange]:
        changes = self.monitor.evaluate(self.store, self.store.clock() if now is None else now)
        for change in changes:
            for listener in self.listeners:
                listener(change)
        return changes

    def configure(self, thresholds: Thresholds, slos: Sequence[SloBound] | None = None) -> None:
        """The user's thresholds and [slo], once their config is read (before the session
        starts)."""
        self.thresholds = thresholds
        if slos is not None:
            self.slos = tuple(slos)
        self.reset()

    def reset(self) -> None:
        """Forget what was raised (a replay rebuilt from its start)."""
        self.monitor = AlertMonitor(self.thresholds, announce=self.announce, slos=self.slos)

    async def run(self, every_s: float = CHECK_EVERY_S) -> None:
        while True:
            self.check()
            # Just after each round of polls (collectors.poll_grid): the facts the checks
            # read are then derived once for them, the panels and the headline figures.
            await asyncio.sleep(until_next(every_s, AFTER_POLLS_S, at_least=every_s / 2))
