"""The fit check over the simulated node's real readings (its GPU and host backends over a
node folder): what fits, what does not fit on the host, what does not fit in HBM (another
tenant holding it, named), the layouts' copies, HiCache per rank, a switch's own memory
counted free, a model without figures. No process starts: the other tenant is this test's
own process, holding virtual HBM in the node's state as any process there does."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from fit_nodes import demo, free_of, line, make_node, tenant
from helpers import DEMO, GIB

from collectors.readings import GpuProcess
from collectors.units import GB
from engram_top.sim.backends import SimGpuBackend
from scenarios import fit, scenario_file
from scenarios.fit import REFUSE, WARN, node_free, predict

TINY = DEMO.with_name("tiny-cpu.toml")


def test_every_placement_fits_an_empty_node(tmp_path: Path) -> None:
    node = free_of(make_node(tmp_path))
    for name in ("device", "host", "host-prefetch"):
        verdict = predict(demo(name), node)
        assert verdict.level == fit.OK, verdict.report()
        assert [ln.where for ln in verdict.lines] == ["GPU 0", "GPU 1", "GPU 2", "GPU 3", "host",
                                                     "NUMA node 0", "NUMA node 1"]
    device = predict(demo("device"), node)
    assert "weights 119.0" in line(device, "GPU 0").text
    assert "KV 20.5" in line(device, "GPU 0").text  # the seed's 11.84M tokens and SWA pool
    host = predict(demo("host"), node)
    assert "weights 72.2" in line(host, "GPU 2").text
    assert line(host, "host").need_bytes == pytest.approx(195.4 * GIB, rel=1e-3)
    assert "Engram tables (shared) 187.4" in line(host, "host").text
    # The shared copy is faulted in by rank 0: on GPU 0's NUMA node, as the simulator has it.
    assert "Engram tables" in line(host, "NUMA node 0").text
    assert "Engram tables" not in line(host, "NUMA node 1").text


def test_a_host_placement_that_does_not_fit_in_host_ram_is_refused(tmp_path: Path) -> None:
    node = free_of(make_node(tmp_path, host_total_bytes=256 * GIB,
                             host_baseline_used_bytes=80 * GIB))
    verdict = predict(demo("host"), node)
    assert verdict.refused
    host = line(verdict, "host")
    assert host.level == REFUSE
    assert host.free_bytes == 176 * GIB  # MemAvailable: 256 - 80
    assert "host: needs 195.4 GiB" in host.text and "free 176.0 GiB of 256.0 GiB" in host.text
    assert "short of 19.4 GiB" in host.text
    assert verdict.report()[0] == "'host' does not fit on this node:"
    # The tables' node is short too, but a shared copy may spill: a warning there.
    assert line(verdict, "NUMA node 0").level == WARN
    assert predict(demo("device"), node).level == fit.OK  # 6.5 GiB of server processes


def test_little_host_memory_left_warns(tmp_path: Path) -> None:
    node = free_of(make_node(tmp_path, host_total_bytes=1024 * GIB,
                             host_baseline_used_bytes=790 * GIB))
    verdict = predict(demo("host-prefetch"), node)
    assert verdict.level == WARN, verdict.report()
    assert "only 32.4 GiB would be left" in line(verdict, "host").text


def test_hbm_another_process_holds_refuses_and_names_it(tmp_path: Path) -> None:
    node_dir = make_node(tmp_path)
    pid = tenant(node_dir, 30, gpus=(1,))
    node = free_of(node_dir)
    verdict = predict(demo("device"), node)
    assert verdict.refused
    assert [ln.where for ln in verdict.lines if ln.level == REFUSE] == ["GPU 1"]
    gpu1 = line(verdict, "GPU 1")
    assert f"other processes hold noisy-neighbour (pid {pid}) 30.0 GiB" in gpu1.text
    assert "free 148.6 GiB" in gpu1.text
    assert "short of 9.5 GiB before any KV pool" in gpu1.text
    # Host placement: the weights fit, the KV pool shrinks by the tenant's 30 GiB.
    host = predict(demo("host"), node)
    assert host.level == WARN
    assert "the KV pool would be 37.3 GiB instead of 67.3 GiB (-45%)" in line(host, "GPU 1").text
    assert line(host, "GPU 0").level == fit.OK


def test_a_pid_of_another_pid_namespace_is_named_so(tmp_path: Path) -> None:
    # The driver's host pid, which a dashboard in a container cannot see: said so (it may
    # be the server itself; --force overrides), never "pid (pid N)".
    gpus = SimGpuBackend(make_node(tmp_path)).sample()
    dev = dataclasses.replace(gpus.devices[0], processes=(
        GpuProcess(900_000, 30 * GIB, "", seen=False),))
    node = node_free(dataclasses.replace(gpus, devices=(dev, *gpus.devices[1:])), None)
    assert node.gpus[0].others == (("another PID namespace (pid 900000)", 30 * GIB),)


def test_a_switch_counts_the_stopping_servers_memory_as_free(tmp_path: Path) -> None:
    node_dir = make_node(tmp_path)
    pid = tenant(node_dir, 150, name="sglang::scheduler_TP0")
    assert predict(demo("host"), free_of(node_dir)).refused
    after = free_of(node_dir, server_pids=(pid,))
    assert after.gpus[0].free_bytes == pytest.approx(178.5615234375 * GIB)
    assert after.gpus[0].others == ()
    assert predict(demo("host"), after).level == fit.OK


def test_layouts_copies_hicache_and_the_mem_fraction_from_the_arguments(tmp_path: Path) -> None:
    node = free_of(make_node(tmp_path))
    per_rank = predict(demo("host", "--engram-layout", "per-rank"), node)
    assert "Engram tables (per-rank) 749.5 (4 x 187.4)" in line(per_rank, "host").text
    assert "Engram tables (per-rank) 374.7 (2 x 187.4)" in line(per_rank, "NUMA node 1").text
    replicated = predict(demo("host", "--engram-layout=numa-replicated"), node)
    assert "Engram tables (numa-replicated) 374.7 (2 x 187.4)" in line(replicated, "host").text
    hicache = predict(demo("host", "--hicache-size", "32"), node)
    assert line(hicache, "host").need_bytes == pytest.approx(195.4 * GIB + 4 * 32 * GB, rel=1e-4)
    assert "HiCache host pools 119.2 (4 x 29.8)" in line(hicache, "host").text
    small = predict(demo("device", "--mem-fraction-static", "0.6"), node)
    assert small.refused
    assert "mem fraction 0.6 leaves no KV pool" in line(small, "GPU 0").text
    # Nonsense is not a figure: the automatic fraction stands.
    for bad in ("nan", "inf", "-1", "x", "7"):
        assert predict(demo("device", "--mem-fraction-static", bad), node).level == fit.OK


def test_hicache_by_ratio_and_as_sglang_sizes_it_without_one(tmp_path: Path) -> None:
    """--hicache-ratio: times the rank's device KV pool. Neither ratio nor size (SGLang since
    PR 40135): the default ratio's pool (2x), lowered until the ranks' pools fit 0.8 of what
    the rest of the server leaves of MemAvailable, less a 10 GiB reserve."""
    kv = fit.seed_figures().kv_bytes["host"]  # each rank's device KV pool
    def pools(node: fit.NodeFree, *args: str) -> float:
        """The host need beyond the placement's own (its tables, processes, staging)."""
        return (line(predict(demo("host", *args), node), "host").need_bytes
                - line(predict(demo("host"), node), "host").need_bytes)

    roomy = free_of(make_node(tmp_path / "roomy"))
    assert pools(roomy, "--enable-hierarchical-cache", "--hicache-ratio", "0.5") == \
        pytest.approx(4 * int(0.5 * kv), rel=1e-3)
    # A roomy host: the default ratio's pool, 2x the KV pool per rank, is the most it takes.
    auto = predict(demo("host", "--enable-hierarchical-cache"), roomy)
    assert pools(roomy, "--enable-hierarchical-cache") == pytest.approx(4 * 2 * kv, rel=1e-3)
    assert f"HiCache host pools (auto) {4 * 2 * kv / GIB:.1f} (4 x {2 * kv / GIB:.1f})" in \
        line(auto, "host").text
    assert auto.level == fit.OK
    # A smaller host: the pools take 0.8 of what is left after the rest and the reserve.
    small = free_of(make_node(tmp_path / "small", host_total_bytes=768 * GIB,
                              host_baseline_used_bytes=80 * GIB))
    left = 688 * GIB - line(predict(demo("host"), small), "host").need_bytes - 10 * GIB
    assert pools(small, "--enable-hierarchical-cache") == pytest.approx(0.8 * left, rel=1e-3)
    assert pools(small, "--enable-hierarchical-cache", "--hicache-host-memory-fraction",
                 "0.5") == pytest.approx(0.5 * left, rel=1e-3)
    # Sized to fit the host, it fits the host; but it is sized by the host's memory, not by
    # its ranks' NUMA nodes: with the shared tables on node 0, node 0's ranks spill.
    sized = predict(demo("host", "--enable-hierarchical-cache"), small)
    assert line(sized, "host").level == fit.OK
    assert line(sized, "NUMA node 0").level == WARN
    assert "HiCache host pools (auto) 193.0 (2 x 96.5)" in line(sized, "NUMA node 0").text
    # Without --enable-hierarchical-cache a ratio alone is SGLang's default, not a pool; a
    # size (0 meaning unset) wins over a ratio.
    assert pools(roomy, "--hicache-ratio", "0.5") == 0
    assert pools(roomy, "--hicache-ratio", "0.5", "--hicache-size", "0",
                 "--enable-hierarchical-cache") == pytest.approx(4 * int(0.5 * kv), rel=1e-3)
    assert pools(roomy, "--enable-hierarchical-cache", "--hicache-ratio", "0.5",
                 "--hicache-size", "10") == pytest.approx(4 * 10 * GB, rel=1e-3)


def test_a_numa_replicated_copy_that_does_not_fit_its_node_is_refused(tmp_path: Path) -> None:
    node = free_of(make_node(tmp_path, host_total_bytes=360 * GIB,
                             host_baseline_used_bytes=0))
    verdict = predict(demo("host", "--engram-layout", "numa-replicated"), node)
    assert verdict.refused
    numa = line(verdict, "NUMA node 1")
    assert numa.level == REFUSE and "a NUMA-replicated copy must sit on its own node" in numa.text
    assert "NUMA node 1: needs 191.4 GiB" in numa.text and "free 180.0 GiB" in numa.text
    # One shared copy: its node is short, the host is not; the rest spills (a warning).
    shared = predict(demo("host"), node)
    assert shared.level == WARN
    assert line(shared, "host").level == fit.OK
    assert "11.4 GiB would spill to another node" in line(shared, "NUMA node 0").text


def test_a_model_without_figures_is_not_predicted(tmp_path: Path) -> None:
    node = free_of(make_node(tmp_path))
    tiny = next(iter(scenario_file.load(TINY).scenarios.values()))
    verdict = predict(tiny, node)
    assert verdict.level == fit.OK
    assert verdict.lines[0].level == fit.UNKNOWN
    assert "need is not predicted" in verdict.lines[0].text


def test_no_readings_leave_the_check_to_what_was_read() -> None:
    verdict = predict(demo("host"), node_free(None, None, gpu_problem="no NVIDIA driver"))
    assert verdict.level == fit.OK
    assert [ln.text for ln in verdict.lines] == [
        "HBM not checked: no NVIDIA driver", "host RAM not checked: no host reading"]


def test_cuda_visible_devices_is_read_as_gpu_indices_only_when_it_is_them(tmp_path: Path) -> None:
    """"²" is a digit to str.isdigit() but not to int() (it raised ValueError in the fit);
    UUIDs and MIG names are no indices either: the check then reads no GPU list."""
    node = free_of(make_node(tmp_path))
    figures = fit.seed_figures()
    for visible, indices in (("²", None), ("0,²", None), ("GPU-8d2f1c3a", None),
                             ("99999999999999999999", None), ("2,3", (2, 3))):
        sc = dataclasses.replace(demo("device"), env={"CUDA_VISIBLE_DEVICES": visible})
        need = fit.need_of(sc, figures)
        assert need is not None and need.gpu_indices == indices, visible
        predict(sc, node)  # no exception, whatever the list
