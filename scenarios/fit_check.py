"""The fit check as the supervisor runs it before a start or a switch: the node's readings
through its owner (off the event loop), the stopping server's share counted as free, then
scenarios.fit.predict. A reading that fails leaves its part unchecked, said on its line: a
start is never refused for want of a figure."""

from __future__ import annotations

import asyncio

from collectors.base import SourceUnavailable, describe
from collectors.readings import GpuData, HostData
from scenarios.fit import FitVerdict, node_free, predict
from scenarios.owner import SupervisorOwner
from scenarios.scenario_file import Scenario
from scenarios.server_run import Run


def _read(owner: SupervisorOwner, stopping: Run | None) -> tuple[
        GpuData | None, HostData | None, str, str, set[int]]:
    pids: set[int] = set()
    if stopping is not None:
        pids = {stopping.pid, *stopping.proc.group_members(), *stopping.members}
    gpu = host = None
    gpu_problem = host_problem = ""
    try:
        gpu = owner.gpu_sample()
    except SourceUnavailable as exc:
        gpu_problem = str(exc)
    except Exception as exc:  # a driver that failed: this part unchecked, the start goes on
        gpu_problem = describe(exc)
    try:
        host = owner.host_sample(stopping.pid if stopping is not None else None)
    except Exception as exc:
        host_problem = describe(exc)
    return gpu, host, gpu_problem, host_problem, pids


async def check_fit(owner: SupervisorOwner, scenario: Scenario,
                    stopping: Run | None = None) -> FitVerdict:
    """Will ``scenario`` fit once ``stopping`` (the server a switch replaces) is gone."""
    gpu, host, gpu_problem, host_problem, pids = await asyncio.to_thread(_read, owner, stopping)
    node = node_free(gpu, host, server_pids=pids, gpu_problem=gpu_problem,
                     host_problem=host_problem)
    return predict(scenario, node)
