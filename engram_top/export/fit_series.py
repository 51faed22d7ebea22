"""The fit check of each scenario of an agent's `--scenarios` file against the node as it is
now, as Prometheus series: would it fit in place of the server the agent watches (whose
memory counts as free, as for a switch), and how much room each place it looks at would
have left. The fleet reads them to say, per node, which placements it could take.

Labels stay bounded: the scenario and its placement, and where (`GPU 2`, `host`, `NUMA node
1`); the lines' words, with their figures, stay in the fit check's own report.
"""

from __future__ import annotations

from collections.abc import Sequence

from collectors.source import SourceName
from engram_top.export.prometheus_text import Family
from engram_top.model.facts import gpu_facts, server_pids
from engram_top.model.store import RunStore
from scenarios.fit import REFUSE, WARN, node_free, predict
from scenarios.scenario_file import Scenario

LEVELS = {WARN: 1, REFUSE: 2}  # ok and unknown: 0


def fit_families(store: RunStore, scenarios: Sequence[Scenario]) -> list[Family]:
    """Each scenario's verdict and headroom per place, from the store's last GPU and host
    readings; a part not read is left out (the check says unknown), never written as 0."""
    level = Family("fit_level", "Would the scenario fit on this node now, in place of the "
                   "watched server: 0 fits, 1 only in part (a smaller KV pool, a spill to "
                   "another NUMA node, little host RAM left), 2 does not fit.")
    headroom = Family("fit_headroom_bytes", "What the scenario would leave free at each place "
                      "the fit check looks (each GPU, the host, each NUMA node): free less "
                      "needed, negative where it is short.")
    run = store.run
    if not scenarios or (run is not None and run.finding_processes):
        # The server's own memory would count as another tenant's: every scenario would
        # read short by as much. No figure rather than a wrong one, for that second.
        return [level, headroom]
    # The server's processes as the ledgers tell them (its tree; on a GPU, where the
    # dashboard sees another PID namespace, the pids NVML lists for its ranks).
    mine = server_pids(store) | {p.pid for view in gpu_facts(store) for p in view.processes
                                 if p.server}
    node = node_free(store.data(SourceName.GPU), store.data(SourceName.HOST),
                     server_pids=mine)
    for sc in scenarios:
        verdict = predict(sc, node)
        placement = sc.placement or ""
        level.add(LEVELS.get(verdict.level, 0), scenario=sc.name, placement=placement)
        for line in verdict.lines:
            if line.need_bytes is not None and line.free_bytes is not None:
                headroom.add(line.free_bytes - line.need_bytes, scenario=sc.name,
                             placement=placement, where=line.where)
    return [level, headroom]
