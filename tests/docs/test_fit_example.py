"""The README's "Will it fit" example, as the fit check prints it for a node of 256 GiB of
host RAM with 176.0 GiB available and its GPUs free: the refusal `switch` and `bench` print
and the dashboard asks about. In-process: the same function the commands print from."""

from __future__ import annotations

import dataclasses

import pytest
from readme import ROOT, assert_quoted, block_at, covers

from scenarios import fit, scenario_file
from scenarios.fit import GpuFree, NodeFree, predict

pytestmark = pytest.mark.docs

GIB = 1024**3


@covers("'host' does not fit on this node:")
def test_the_will_it_fit_example_is_what_the_check_prints() -> None:
    host = scenario_file.load(ROOT / "scenarios" / "demo.toml").get("host")
    gpus = tuple(GpuFree(index=i, total_bytes=int(179.1 * GIB), reserved_bytes=0,
                         free_bytes=int(179.1 * GIB), numa_node=None) for i in range(4))
    node = NodeFree(gpus=gpus, host_total_bytes=256 * GIB, host_available_bytes=176 * GIB,
                    source="the README's example")
    verdict = predict(dataclasses.replace(host), node)
    assert verdict.level == fit.REFUSE
    printed = verdict.report()
    quoted = block_at("'host' does not fit on this node:").lines
    # The README wraps the refusal's one line in two; each part is on it.
    assert_quoted(quoted, printed, where="the fit check's report")
    assert printed[0] == quoted[0]
