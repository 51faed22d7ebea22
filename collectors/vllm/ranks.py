"""Which rank a vLLM line is of, in every parallel dimension its prefix or its text gives.

The process tag names the place: ``EngineCore_DP1`` (``EngineCore_1`` before 0.10) a data-
parallel engine; ``Worker_DP1_PP0_TP3_EP3`` a worker by each dimension there is more than
one of; ``VllmWorker rank=3`` a worker by its rank in the engine; torch's ``[rank3]:`` the
same. A worker that logged before it was named (``Worker pid=9``, V0's ``VllmWorkerProcess
pid=9``, Ray's ``RayWorkerWrapper pid=9``) is known by its pid once one of its lines says
where it is: ``rank 3 in world size 8 is assigned as DP rank 0, PP rank 0, TP rank 3, EP
rank 3``, ``world_size=8 rank=3 local_rank=3 distributed_init_method=..``, ``.. on PP Rank 1
TP Rank 0``. A raw line (a traceback, a wrapped message) is the line before's.

The ranks dict's key is the GPU-wide rank: ``dp x (pp_size x tp_size) + pp x tp_size + tp``,
the sizes being the launch's where it states them, else the largest index seen plus one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from collectors.figure_bounds import index
from collectors.vllm.line_prefix import VllmLine

_NAME_DIMS = re.compile(r"_(DP|PP|TP|EP)(\d+)")
_OLD_ENGINE = re.compile(r"^EngineCore_(\d+)$")
_ASSIGNED = re.compile(r"rank (\d+) in world size (\d+) is assigned as (.*)")
_ASSIGNED_DIM = re.compile(r"\b(DP|PP|TP|EP) rank (\d+)")
_WORLD = re.compile(r"world_size=(\d+) rank=(\d+)")
_PP_TP = re.compile(r"on PP Rank (\d+) TP Rank (\d+)")
# Where a parallel size came from, in the words SGLang's reader uses.
ARGS_SOURCE, COMMAND_SOURCE, PREFIX_SOURCE = "server_args", "launch command", "rank prefixes"
MAX_PIDS = 4096  # pids remembered; a log with more is not one node's start-up
MAX_INDEX = 1 << 16  # a rank index past this is not a rank


@dataclass(frozen=True, slots=True)
class Place:
    dp: int | None = None
    pp: int | None = None
    tp: int | None = None
    g: int | None = None  # a rank in the engine (or the world) with no dimension said
    # A worker process whose lines never said where it is (V0's VllmWorkerProcess, Ray's
    # RayWorkerWrapper): known by its pid until RankBook.resolve places it.
    pid: str | None = None

    def index(self, tp_size: int, pp_size: int) -> int:
        per_engine = tp_size * pp_size
        if self.tp is not None or self.pp is not None:
            local = (self.pp or 0) * tp_size + (self.tp or 0)
        elif self.g is not None:
            if self.g >= per_engine:  # a world rank: already GPU-wide
                return self.g
            local = self.g
        else:
            local = 0
        return (self.dp or 0) * per_engine + local


ENGINE = Place()  # a line of the engine itself (the API server's, a single-GPU engine's)
# Processes that are workers beside the driver (the driver, rank 0, logs untagged or as the
# engine): V0's multiprocessing workers and Ray's, each a rank of its own.
WORKER_NAMES = frozenset({"VllmWorkerProcess", "RayWorkerWrapper", "Worker"})


class RankBook:
    def __init__(self) -> None:
        self.by_pid: dict[str, dict[str, int]] = {}
        self.last = ENGINE
        self.ep: dict[Place, int] = {}
        self.world_size: int | None = None
        self.largest: dict[str, int] = {}  # dimension -> largest index seen

    def place(self, line: VllmLine) -> Place:
        if line.level is None and not line.tags and line.torch_rank is None:
            return self.last  # a raw line goes on from the line before
        pid = line.attrs.get("pid", "")
        c: dict[str, int] = dict(self.by_pid.get(pid, {}))
        name = line.proc or ""
        for dim, n in _NAME_DIMS.findall(name):
            c[dim.lower()] = int(n)
        if (m := _OLD_ENGINE.match(name)) is not None:
            c["dp"] = int(m.group(1))
        rank = index(line.attrs.get("rank", ""))
        if rank is not None:
            c["g"] = rank
        if line.torch_rank is not None:
            c.setdefault("g", line.torch_rank)
        learned = self._learn(line.msg)
        c.update(learned)
        c = {k: v for k, v in c.items() if v < MAX_INDEX}
        if learned and pid and (pid in self.by_pid or len(self.by_pid) < MAX_PIDS):
            self.by_pid.setdefault(pid, {}).update(learned)
        for dim in ("dp", "pp", "tp", "ep", "g"):
            if dim in c:
                self.largest[dim] = max(self.largest.get(dim, 0), c[dim])
        if not c and pid and name in WORKER_NAMES and len(self.by_pid) < MAX_PIDS:
            self.by_pid.setdefault(pid, {})
            self.last = Place(pid=pid)
            return self.last
        place = Place(c.get("dp"), c.get("pp"), c.get("tp"), c.get("g"))
        if "ep" in c:
            self.ep[place] = c["ep"]
        self.last = place
        return place

    def unplaced(self) -> list[str]:
        """Worker pids no line placed, in pid order: V0 and Ray start their workers one
        rank after another, so their pids rise with their ranks (1, 2, ..: the driver is 0)."""
        return sorted((p for p, c in self.by_pid.items() if not c),
                      key=lambda p: (len(p), p))

    def resolve(self, place: Place) -> Place:
        """A pid's place: where a later line of it said, else its rank among the unplaced
        workers (derived: see unplaced)."""
        if place.pid is None:
            return place
        c = self.by_pid.get(place.pid) or {}
        if c:
            return Place(c.get("dp"), c.get("pp"), c.get("tp"), c.get("g"))
        unplaced = self.unplaced()
        return Place(g=1 + unplaced.index(place.pid)) if place.pid in unplaced else ENGINE

    def _learn(self, msg: str) -> dict[str, int]:
        if "rank" not in msg and "Rank" not in msg:
            return {}
        if (m := _ASSIGNED.search(msg)) is not None:
            self.world_size = int(m.group(2))
            out = {"g": int(m.group(1))}
            out.update({d.lower(): int(n) for d, n in _ASSIGNED_DIM.findall(m.group(3))})
            return out
        if (m := _WORLD.search(msg)) is not None:
            self.world_size = self.world_size or int(m.group(1))
            return {"g": int(m.group(2))}
        if (m := _PP_TP.search(msg)) is not None:
            return {"pp": int(m.group(1)), "tp": int(m.group(2))}
        return {}

    def sizes(self, stated: dict[str, int], command: dict[str, int] | None = None,
              ) -> tuple[dict[str, int], dict[str, str], dict[str, str]]:
        """(tp, pp, dp, ep -> size; where each came from, as SGLang's reader names its
        sources; how each one not stated was worked out)."""
        out: dict[str, int] = {}
        source: dict[str, str] = {}
        how: dict[str, str] = {}
        for dim in ("tp", "pp", "dp", "ep"):
            if stated.get(dim):
                out[dim], source[dim] = stated[dim], ARGS_SOURCE
            elif command and command.get(dim):
                out[dim], source[dim] = command[dim], COMMAND_SOURCE
            elif dim in self.largest:
                out[dim], source[dim] = self.largest[dim] + 1, PREFIX_SOURCE
                how[dim] = (f"derived, at least: the highest {dim.upper()} rank the log's "
                            f"prefixes and rank lines show ({dim.upper()}{self.largest[dim]}), "
                            "plus one (a rank that logged nothing is not seen)")
        if "tp" not in out and "pp" not in out and self.world_size and "g" in self.largest:
            out["tp"] = max(1, self.world_size // out.get("dp", 1))
            source["tp"] = PREFIX_SOURCE
            how["tp"] = (f"derived: the world size the log states ({self.world_size}) over the "
                         "DP size")
        workers = len(self.unplaced())
        if "tp" not in out and "pp" not in out and workers:
            out["tp"], source["tp"] = workers + 1, PREFIX_SOURCE
            how["tp"] = (f"derived, at least: the driver and the {workers} worker process(es) "
                         "the log shows, no rank stated (V0's or Ray's workers)")
        return out, source, how


def coords(place: Place, ep: int | None, tp_size: int, pp_size: int) -> dict[str, int]:
    """The place by each dimension, as SGLang's reader keys them ({"PP": 1, "TP": 0}); a rank
    known by its number alone is split by the sizes."""
    tp, pp = place.tp, place.pp
    if tp is None and pp is None and place.g is not None and place.g < tp_size * pp_size:
        tp, pp = place.g % tp_size, (place.g // tp_size if pp_size > 1 else None)
    out = {name: value for name, value in (("DP", place.dp), ("PP", pp), ("TP", tp),
                                           ("EP", ep)) if value is not None}
    return out


def label(c: dict[str, int]) -> str:
    return " ".join(f"{name}{value}" for name, value in c.items())
