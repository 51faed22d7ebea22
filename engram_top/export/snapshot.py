"""Snapshot folders: what the dashboard saw, for a colleague who was not there.

write_folder() builds screen.svg, snapshot.json, timeseries.parquet/.csv and summary.md in a
temporary sibling folder and renames it into place, so a full disk or an unwritable folder
leaves nothing half-written (prepare() takes what it needs from the store; Prepared.write()
writes it, on a worker thread in the dashboard). Everything goes through engram_top.model.redact:
structured data by key, then every file's text by the secret values seen in it.

build()/write() (snapshot.json alone) and check_writable() remain for their callers.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import errno
import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collectors.figure_bounds import index
from collectors.safetext import visible
from collectors.source import LOCAL, SourceName
from collectors.units import GIB
from engram_top.compare.comparison import Comparison, to_json
from engram_top.compare.markdown import to_markdown
from engram_top.compare.run_result import RunResult
from engram_top.compare.runs import comparison
from engram_top.compare.verdict import verdict
from engram_top.export.summary import summary_markdown
from engram_top.model import facts, ledger
from engram_top.model.hicache import engram_rx_estimate
from engram_top.model.redact import REDACTED, redact, redact_text
from engram_top.model.store import GPU_LABEL, RunFacts, RunStore, SeriesKey, SeriesName
from engram_top.seed.reference import Reference
from scenarios.runstate import SERVING

if TYPE_CHECKING:
    import pandas as pd

SNAPSHOT_VERSION = 1
# Unit of each series, by the last part of its metric (store._record_series names them).
UNITS = {"used": "bytes", "util": "%", "pcie_rx": "bytes/s", "pcie_tx": "bytes/s",
         "token_usage": "fraction", "num_running_reqs": "requests",
         "num_queue_reqs": "requests", "output_tokens_per_s": "tokens/s", "p50": "s",
         # The bucket a coarse p50 lies in (collectors.windowed.coarse): its bounds.
         "p50_lo": "s", "p50_hi": "s",
         "swap_in": "bytes (cumulative)", "energy": "mJ (cumulative)"}
# What replaces a secret in each file's text: valid XML in the SVG, and no HTML-like tag for a
# Markdown viewer to swallow.
PLACEHOLDERS = {".svg": "&lt;redacted&gt;", ".md": "[redacted]"}
TIMESERIES_COLUMNS = ["series", "source", "gpu", "metric", "unit", "tier", "t_s", "wall_utc",
                      "value"]


class SnapshotError(Exception):
    """The snapshot could not be written; the message names the path and the reason."""


def build(store: RunStore, ref: Reference) -> dict[str, Any]:
    now = store.clock()  # a replay's clock when the store is a replay's
    run = store.run
    readings = {}
    for kind in store.latest:
        good = store.last_ok.get(kind)
        readings[kind] = {**facts.plain(facts.source_status(store, kind, now)),
                          "data": facts.plain(good.data) if good else None}
    placement = run.placement if run else None
    # The views as JSON data here: redact() and summary.md read plain dicts, and a view's
    # to_json (a key present only sometimes) must hold in the file.
    return {
        "snapshot_version": SNAPSHOT_VERSION,
        "taken_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "run": facts.plain(facts.run_facts(store)),
        "gpus": facts.plain(facts.gpu_facts(store)),
        "host": facts.plain(facts.host_facts(store)),
        "host_ledger": _host_ledger(store),
        "hbm_ledger": [g.to_json() for g in ledger.hbm_ledger(store)],
        "kv": facts.plain(facts.kv_facts(store)),
        "stack_page": facts.plain(facts.stack_page(store)),  # a router's or a cache's page
        "engram": _engram(store),
        "hicache": _hicache(store),
        "latency": facts.plain(facts.latency_facts(store)),
        "load": dict(store.load),
        "readings": readings,
        "events": [{"wall": e.wall, "level": e.level, "text": e.text} for e in store.events],
        "reference": {
            "file": ref.path.name,
            "placement": (ref.figures()["placements"].get(placement) if placement else None),
            "deltas": {k: v.to_dict() for k, v in ref.deltas(placement).items()}
            if placement else {},
        },
    }


def _host_ledger(store: RunStore) -> dict[str, Any] | None:
    """The host ledger, with the run's host delta as the server's share and the rest of the
    node's growth beside it."""
    book = ledger.host_ledger(store)
    if book is None:
        return None
    return {**book.to_json(),
            "server_delta_bytes": ledger.run_server_delta_bytes(store, store.run),
            "others_delta_bytes": ledger.others_delta_bytes(store)}


def _hicache(store: RunStore) -> dict[str, Any] | None:
    """HiCache's host tier, and each GPU's PCIe receive less its rank's load-back: the
    Engram rows' traffic, estimated (null where either figure is unknown)."""
    view = facts.hicache_facts(store)
    if view is None:
        return None
    rx = {g.index: g.pcie_rx_bytes_per_s for g in facts.gpu_facts(store)}
    return {**facts.plain(view), "engram_rx_estimate_bytes_per_s": facts.plain(
        engram_rx_estimate(rx, view) if view.load_back_by_rank else {})}


def _engram(store: RunStore) -> dict[str, Any] | None:
    view = facts.engram_facts(store)
    return None if view is None else {**facts.plain(view), "verdict": view.verdict}


def check_writable(out_dir: Path) -> None:
    """Create the folder and prove a file can be written there; SnapshotError if not."""
    probe = out_dir / f".engram-top-probe.{os.getpid()}"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise SnapshotError(f"cannot write into {out_dir}: {_reason(exc)}") from exc


def write(out_dir: Path, snapshot: dict[str, Any]) -> Path:
    """Write DIR/snapshot.json atomically: a temporary file, then a rename."""
    target = out_dir / "snapshot.json"
    tmp = out_dir / f".snapshot.json.{os.getpid()}.tmp"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        found: set[str] = set()
        text = _json(redact(snapshot, found))
        _put(tmp, redact_text(text, found).encode())
        os.replace(tmp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise SnapshotError(f"cannot write {target}: {_reason(exc)}") from exc
    return target


# ----------------------------------------------------------------------------- the folder

def write_folder(parent: Path, store: RunStore, ref: Reference, *, svg: str | None,
                 compare_with: Sequence[RunResult] = (),
                 price_per_gpu_hour: float | None = None, extra: dict[str, Any] | None = None,
                 name: str | None = None, secrets: Iterable[str] = ()) -> Path:
    """Write a snapshot folder under `parent` and return its path: prepare(...).write()."""
    return prepare(parent, store, ref, svg=svg, compare_with=compare_with,
                   price_per_gpu_hour=price_per_gpu_hour, extra=extra, name=name,
                   secrets=secrets).write()


def prepare(parent: Path, store: RunStore, ref: Reference, *, svg: str | None,
            compare_with: Sequence[RunResult] = (), price_per_gpu_hour: float | None = None,
            extra: dict[str, Any] | None = None, name: str | None = None,
            secrets: Iterable[str] = ()) -> Prepared:
    """Take everything a snapshot needs from the store, as of now; write nothing.

    `svg` is the screen as rendered (None: no screen.svg). The store's runs, with
    `compare_with` (runs loaded from files) at `price_per_gpu_hour`, make one comparison,
    which snapshot.json and summary.md both hold. `extra` keys are added to snapshot.json's
    top level. `secrets` are values known to be secret that the structured data may not show
    (an attach --api-key); they are scrubbed from every file too.
    """
    base = name or f"engram-top-{time.strftime('%Y%m%d-%H%M%S')}"
    if "/" in base or base.startswith(".") or not base.strip():
        raise SnapshotError(f"snapshot name {base!r}: a plain folder name is needed")
    found = {s for s in secrets if s}
    compared = comparison(_runs(store), baseline=store.baseline, extra=compare_with,
                          reference=ref, price_per_gpu_hour=price_per_gpu_hour)
    data = redact(snapshot_data(store, ref, compared, extra), found)
    summary = summary_markdown(store, data, _comparison_md(compared))
    texts = {"snapshot.json": _json(data), "summary.md": summary}
    if svg is not None:
        texts["screen.svg"] = svg
    return Prepared(parent, base, texts, _series_points(store), found)


@dataclasses.dataclass
class Prepared:
    """A snapshot as taken: its texts and copies of the series' points. write() reads nothing
    else, so it can run on a worker thread while the store goes on changing (the dashboard
    stays live through the pandas, Parquet and fsync work)."""

    parent: Path
    base: str
    texts: dict[str, str]
    series: SeriesPoints
    secrets: set[str]

    def write(self) -> Path:
        """Write the folder atomically and return its path; SnapshotError if it cannot."""
        frame = _frame(self.series)
        # The series' only free text is their names: scrubbed once each, the frame needs no
        # scan of its own (a megabyte of numbers through every pattern took a third of a
        # second).
        # Made visible too: a name holds labels a server or Prometheus chose.
        names = {n: visible(redact_text(n, self.secrets)) for n in frame["series"].unique()}
        frame["series"] = frame["series"].map(names)
        parent = self.parent
        _make_parent(parent)
        tmp: Path | None = None
        try:
            # A name of its own: two snapshots of the same second may be written at once.
            tmp = Path(tempfile.mkdtemp(prefix=f".{self.base}.tmp-", dir=parent))
            for file, text in self.texts.items():
                placeholder = PLACEHOLDERS.get(Path(file).suffix, REDACTED)
                # No control in any file: summary.md, screen.svg and snapshot.json are read
                # with cat and less too (their lines and their own escapes are kept).
                text = visible(redact_text(text, self.secrets, placeholder), "\n")
                _put(tmp / file, text.encode())
            _put(tmp / "timeseries.csv", frame.to_csv(index=False).encode())
            _write_parquet(tmp / "timeseries.parquet", frame)
            _history_png(tmp / "history.png", self.series)
            _fsync_dir(tmp)
            final = _rename_free(tmp, parent, self.base)
        except OSError as exc:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            raise SnapshotError(f"cannot write a snapshot into {parent}: {_reason(exc)}"
                                f"{self._where(exc, tmp)}") from exc
        except BaseException:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            raise
        with contextlib.suppress(OSError):  # the folder is complete; this only hastens durability
            _fsync_dir(parent)
        return final

    def _where(self, exc: OSError, tmp: Path | None) -> str:
        """The file that failed, by its name; nothing for the folders the message names."""
        if not exc.filename:
            return ""
        failed = Path(exc.filename)
        if tmp is not None and failed.parent == tmp:
            return f" ({failed.name})"
        if failed.parent == self.parent and failed.name.startswith(f".{self.base}.tmp-"):
            return ""  # the temporary folder itself: a name the user never sees
        return "" if failed == self.parent else f" ({failed})"


def snapshot_data(store: RunStore, ref: Reference, comparison: Comparison | None,
                  extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """snapshot.json before redaction: build() plus runs, scenarios, comparison, alerts."""
    data = build(store, ref)
    data["runs"] = [run_plain(r) for r in _runs(store)]
    data["scenarios"] = scenario_definitions(store.scenarios)
    data["comparison"] = None if comparison is None else to_json(comparison)
    data["verdict"] = None if comparison is None else verdict(
        comparison, warming=comparison.warming).to_json()
    alerts = getattr(store, "alerts", None)  # the alerts engine may not exist yet
    if alerts is not None:
        data["alerts"] = facts.plain(list(alerts.values()) if isinstance(alerts, dict)
                                     else list(alerts))
    data.update(extra or {})
    return data


def run_plain(run: RunFacts) -> dict[str, Any]:
    """A run's facts as JSON data; the log lines stay in the run's log file."""
    out = {f.name: facts.plain(getattr(run, f.name)) for f in dataclasses.fields(run)
           if f.name != "log_lines"}
    out["ready_s"] = run.ready_s
    return out


def scenario_definitions(scenario_file: Any) -> dict[str, Any] | None:
    """The scenario file as loaded, with each scenario's full launch environment."""
    if scenario_file is None:
        return None
    if isinstance(getattr(scenario_file, "data", None), dict):
        return copy.deepcopy(scenario_file.data)  # a replay's: plain data, as recorded
    out = facts.plain(scenario_file)
    for name, sc in scenario_file.scenarios.items():
        out["scenarios"][name]["launch_env"] = sc.launch_env()
    return out


def _runs(store: RunStore) -> list[RunFacts]:
    """Every run the store keeps; the live one with its figures as of now (the session
    refreshes them once a second, so they may lag the readings this snapshot shows)."""
    runs = getattr(store, "runs", None) or list(store.history.values())
    live = store.run
    if live is None or live.state not in SERVING:
        return list(runs)
    now = dataclasses.replace(live, results=live.results.merged(facts.summary(store)))
    return [now if r is live else r for r in runs]


def _comparison_md(comparison: Comparison | None) -> str:
    if comparison is None:
        return "No finished runs yet: no run has reached ready and reported figures.\n"
    # The verdict first: what the table below says, axis by axis.
    found = verdict(comparison, warming=comparison.warming)
    return found.markdown(level=3) + "\n" + to_markdown(comparison)


# ----------------------------------------------------------------------------- time series

@dataclasses.dataclass
class SeriesPoints:
    """Every stored series' points, copied, with the times that place them."""

    points: dict[SeriesKey, tuple[float, list[tuple[float, float]]]]  # (fine start, points)
    origin: float  # monotonic time of t_s = 0
    now_mono: float
    now_wall: float


def _series_points(store: RunStore) -> SeriesPoints:
    now_mono = store.clock()  # a replay's clock for a replayed store
    points = {key: (s.fine[0][0] if s.fine else float("inf"), s.points())
              for key, s in store.series.items()}
    firsts = [p[0][0] for _, p in points.values() if p]
    origin = store.run.launched_at if store.run else min(firsts, default=now_mono)
    return SeriesPoints(points, origin, now_mono, facts.wall_at(store, now_mono))


def timeseries_frame(store: RunStore) -> pd.DataFrame:
    """Every stored series in long format: one row per point. t_s is seconds since the run's
    launch (negative: before it), or since the first point when there is no run; tier says
    whether a point is a raw sample ("fine") or an average of older ones ("coarse")."""
    return _frame(_series_points(store))


def _frame(taken: SeriesPoints) -> pd.DataFrame:
    import pandas as pd  # a second's import; only exports need it

    rows = []
    for key in sorted(taken.points, key=lambda k: k.name):
        fine_start, points = taken.points[key]
        label = key.label(GPU_LABEL)
        gpu = None if label is None else index(label)
        unit = UNITS.get(key.metric.rpartition(".")[2], "")
        for t, value in points:
            rows.append((key.name, str(key.source), gpu, str(key.metric), unit,
                         "coarse" if t < fine_start else "fine", t - taken.origin,
                         taken.now_wall - (taken.now_mono - t), value))
    frame = pd.DataFrame(rows, columns=TIMESERIES_COLUMNS)
    frame["gpu"] = frame["gpu"].astype("Int64")
    frame["t_s"] = frame["t_s"].astype("float64")
    # Naive UTC: fastparquet writes tz-aware columns through an API pandas 3 deprecates.
    frame["wall_utc"] = pd.to_datetime(frame["wall_utc"].astype("float64"), unit="s")
    frame["value"] = frame["value"].astype("float64")
    return frame


# The history PNG's charts: (source, metric) -> (title, y label, scale).
HISTORY: dict[tuple[str, str], tuple[str, str, float]] = {
    (SourceName.GPU, SeriesName.USED): ("HBM used per GPU", "GiB", 1 / GIB),
    (SourceName.SERVER, SeriesName.TOKEN_USAGE): ("KV cache usage", "%", 100.0),
    (SourceName.HOST, SeriesName.USED): ("Host RAM used", "GiB", 1 / GIB),
    (SourceName.SERVER, SeriesName.TTFT_P50): ("TTFT p50, interpolated", "ms", 1000.0),
}


def _history_png(path: Path, taken: SeriesPoints) -> None:
    """The history charts as one PNG beside screen.svg (the series' last hour at most)."""
    from engram_top.export import plots  # matplotlib only when there is something to draw
    panels: dict[str, tuple[str, dict[str, list[tuple[float, float]]]]] = {
        title: (unit, {}) for title, unit, _ in HISTORY.values()}
    for key, (_, points) in sorted(taken.points.items(), key=lambda kv: kv[0].name):
        spec = HISTORY.get((key.source, key.metric))
        if spec is None:
            continue
        title, _, scale = spec
        # An attached server's series are under its URL: a line of its own, by number (a
        # picture cannot be scrubbed of a secret in a URL, so it never holds one).
        lines = panels[title][1]
        name = f"GPU {key.label(GPU_LABEL)}" if key.label(GPU_LABEL) is not None else \
            key.source if key.node == LOCAL else f"{key.source} {len(lines) + 1}"
        pts = [(t - taken.now_mono, v * scale) for t, v in points
               if taken.now_mono - t <= 3600]
        lines[name] = pts
    if any(pts for _, lines in panels.values() for pts in lines.values()):
        plots.history_png(path, panels)  # a fleet's snapshot has no such series: no picture


def _write_parquet(path: Path, frame: pd.DataFrame) -> None:
    # fastparquet's own writer: pandas 3 deprecates its fastparquet engine, and pyarrow is a
    # 55 MB wheel for one file.
    with warnings.catch_warnings():  # its import asks pandas 3 about a deprecated option
        warnings.simplefilter("ignore", DeprecationWarning)
        import fastparquet

    fastparquet.write(str(path), frame, compression="SNAPPY", write_index=False)
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


# ----------------------------------------------------------------------------- files

def _json(data: dict[str, Any]) -> str:
    return json.dumps(facts.finite_json(data), indent=2, default=str, allow_nan=False) + "\n"


def _put(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _make_parent(parent: Path) -> None:
    if parent.exists() and not parent.is_dir():
        raise SnapshotError(f"cannot write into {parent}: not a folder")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SnapshotError(f"cannot write into {parent}: {_reason(exc)}") from exc


def _rename_free(tmp: Path, parent: Path, base: str) -> Path:
    """Rename into the first free name: base, base-2, base-3... never over a snapshot."""
    for n in range(1, 1000):
        final = parent / (base if n == 1 else f"{base}-{n}")
        if final.exists() or final.is_symlink():
            continue
        try:
            os.rename(tmp, final)  # an existing non-empty folder refuses: ENOTEMPTY/EEXIST
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                continue
            raise
        return final
    raise OSError(errno.EEXIST, "no free snapshot name", str(parent / base))


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)
