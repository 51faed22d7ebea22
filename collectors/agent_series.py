"""What the fleet reads of the nodes' engram-top agents through Prometheus: per node, its
free memory per NUMA node, the HBM nobody explains, whether each scenario of the agent's
`--scenarios` would fit there now (and the host memory it would leave), the watched server's
placement as the agent reads it, and the alerts the agent has active. One expression,
whatever the fleet's size; a node without an agent has none of these series and reads as it
did (dcgm-exporter, node-exporter and its engine's series).

An agent's own `placement` label meets the scrape config's where both are set: Prometheus
keeps the config's and renames the agent's `exported_placement`, so the agent's is that one
where present.
"""

from __future__ import annotations

from dataclasses import dataclass

from collectors.prom_answer import Labels, small_index

PREFIX = "engram_top_"
GROUP = "node, Hostname, hostname, instance, placement, exported_placement"
SERIES = ("hbm_unexplained_bytes", "fit_level", "alert_active", "server_info")
# The `figure` label of the host memory a scenario would leave: the host's or its tightest
# NUMA node's. A GPU's is left out: its need counts the KV pool, which takes what is free,
# so it reads 0 wherever the scenario fits (its level says where it does not).
FIT_ROOM = "fit_host_room"


def query(match: str = "") -> str:
    """The agents' part of a refresh. ``match``: label matchers narrowing it to a node."""
    extra = f", {match}" if match else ""
    names = "|".join(SERIES)
    return (f'{PREFIX}host_ledger_numa_bytes{{line="free"{extra}}}'
            f' or {{__name__=~"{PREFIX}({names})"{extra}}}'
            f' or label_replace(min by (scenario, {GROUP}) ({PREFIX}fit_headroom_bytes'
            f'{{where!~"GPU.*"{extra}}}), "figure", "{FIT_ROOM}", "", "")')


@dataclass(frozen=True, slots=True)
class FitFigure:
    scenario: str
    placement: str
    level: int | None  # 0 fits, 1 in part, 2 does not (the agent's fit check)
    # The host memory it would leave: the host's or its tightest NUMA node's (negative:
    # short by as much); None where the agent's check read no host memory.
    room_bytes: float | None


@dataclass(frozen=True, slots=True)
class AgentFigures:
    numa_free: tuple[tuple[str, float], ...] = ()  # (NUMA node, MemFree bytes), by node
    hbm_unexplained: tuple[tuple[str, float], ...] = ()  # (GPU, bytes), by GPU
    fits: tuple[FitFigure, ...] = ()
    alerts: tuple[tuple[str, str], ...] = ()  # (id, severity), by id
    placement: str = ""  # the watched server's, as the agent reads it ("" where it has none)
    scenario: str = ""
    state: str = ""

    @property
    def numa_free_min(self) -> float | None:
        return min((b for _, b in self.numa_free), default=None)

    @property
    def unexplained_max(self) -> float | None:
        return max((b for _, b in self.hbm_unexplained), default=None)


def _own(labels: Labels, name: str) -> str:
    """The agent's own label ``name``: renamed `exported_…` where the config set one too."""
    return labels.get(f"exported_{name}") or labels.get(name) or ""


class AgentReader:
    """One refresh's agent samples gathered per node, then AgentFigures for each."""

    def __init__(self) -> None:
        self._numa: dict[str, dict[str, float]] = {}
        self._unexplained: dict[str, dict[str, float]] = {}
        self._levels: dict[str, dict[str, tuple[str, int]]] = {}
        self._rooms: dict[str, dict[str, float]] = {}
        self._alerts: dict[str, dict[str, str]] = {}
        self._info: dict[str, tuple[str, str, str]] = {}

    def add(self, node: str, labels: Labels, value: float) -> None:
        name = labels.get("__name__", "").removeprefix(PREFIX)
        if labels.get("figure") == FIT_ROOM and "__name__" not in labels:
            self._rooms.setdefault(node, {})[labels.get("scenario", "?")] = value
        elif name == "host_ledger_numa_bytes":
            self._numa.setdefault(node, {})[labels.get("numa_node", "?")] = value
        elif name == "hbm_unexplained_bytes":
            self._unexplained.setdefault(node, {})[labels.get("gpu", "?")] = value
        elif name == "fit_level" and value in (0, 1, 2):
            self._levels.setdefault(node, {})[labels.get("scenario", "?")] = (
                _own(labels, "placement"), int(value))
        elif name == "alert_active" and value == 1:
            self._alerts.setdefault(node, {})[labels.get("id") or labels.get("alert", "?")] = \
                labels.get("severity", "")
        elif name == "server_info":
            self._info[node] = (_own(labels, "placement"), labels.get("scenario", ""),
                                labels.get("state", ""))

    def nodes(self) -> set[str]:
        return (set(self._numa) | set(self._unexplained) | set(self._levels) | set(self._rooms)
                | set(self._alerts) | set(self._info))

    def figures(self, node: str) -> AgentFigures | None:
        if node not in self.nodes():
            return None
        levels, rooms = self._levels.get(node, {}), self._rooms.get(node, {})
        fits = tuple(FitFigure(sc, levels.get(sc, ("", None))[0], levels.get(sc, ("", None))[1],
                               rooms.get(sc)) for sc in sorted(set(levels) | set(rooms)))
        placement, scenario, state = self._info.get(node, ("", "", ""))
        return AgentFigures(
            numa_free=tuple(sorted(self._numa.get(node, {}).items(), key=_by_index)),
            hbm_unexplained=tuple(sorted(self._unexplained.get(node, {}).items(),
                                         key=_by_index)),
            fits=fits, alerts=tuple(sorted(self._alerts.get(node, {}).items())),
            placement=placement, scenario=scenario, state=state)


def _by_index(item: tuple[str, float]) -> tuple[int, str]:
    """GPUs and NUMA nodes in number order ("2" before "10"); a label that is no small index
    ("²" is a digit to str.isdigit, not to int) after them, by its text."""
    i = small_index(item[0])
    return (i, "") if i is not None else (1 << 30, item[0])
