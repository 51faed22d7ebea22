"""vLLM's dialect: its start-up log (the real CPU log and the GPU lines of its eras), its
/metrics page (the real one, and the variants a real node or pipeline produces), and the
collector over real HTTP with the faults a node produces."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import pytest

from collectors import promtext
from collectors.sglang.collector import SglangCollector
from collectors.startup_facts import PHASES, StartupFacts
from collectors.vllm import collector as v
from collectors.vllm.startup_log import VllmLogParser
from scenarios import engines
from scenarios.scenario_file import ScenarioError, load

DATA = Path(__file__).parents[1] / "data" / "vllm-cpu"
ERAS = Path(__file__).parents[1] / "data" / "vllm-eras"  # GPU lines as those versions print them
IDLE = (DATA / "metrics-idle.txt").read_text()
AFTER = (DATA / "metrics-after-4-requests.txt").read_text()


# --------------------------------------------------------------------------- the log


def test_the_real_cpu_log_reads_into_phases_and_the_kv_cache_in_tokens() -> None:
    p = VllmLogParser()
    events = p.feed_text((DATA / "startup.log").read_text())
    f = p.facts()
    assert f.kv_capacity_tokens == 65536 and f.max_total_num_tokens == 65536
    assert f.ranks[0].kv_tokens == 65536 and f.ranks[0].kv_total_gb == pytest.approx(0.03)
    assert f.context_len == 512
    assert f.scheduler_extra["version"] == "0.32.0" and f.scheduler_extra["kv_device"] == "CPU"
    assert f.server_args is not None and f.server_args.model_path.endswith("tiny-llama")
    assert f.server_args.raw["kv_cache_memory_bytes"] == 33554432
    assert f.startup_timings_s == {"init_engine": 18.16}
    assert f.uvicorn_url == "http://127.0.0.1:30301" and f.ready
    phases = [s.phase for s in f.timeline]
    assert phases == ["distributed_init", "weights", "graphs", "kv_pool", "http", "ready",
                      "stopping", "stopped"]
    assert f.phase_durations()["total"] == 33.0  # 12:24:44 -> 12:25:17
    assert f.phase_durations()["graphs"] == 18.0  # the CPU's compile warm-up
    assert "ready" in events and "http_running" in events and f.errors == ()
    assert f.launches == 1 and not f.log_starts_after_launch


GPU_V1 = (ERAS / "gpu-v1-0.9.log").read_text()


def test_a_gpu_log_of_the_v1_engine_gives_weights_kv_and_graphs_per_rank() -> None:
    p = VllmLogParser()
    p.feed_text(GPU_V1)
    f = p.facts()
    assert f.ranks[0].weights_gb == pytest.approx(60.1118)
    assert f.ranks[1].weights_gb == pytest.approx(60.1120)  # rank=1's own line
    assert f.ranks[0].weights_elapsed_s == pytest.approx(29.50)
    assert f.ranks[0].kv_total_gb == pytest.approx(52.67)
    assert f.ranks[0].graph_mem_usage_gb == pytest.approx(1.25)
    assert f.ranks[0].graph_elapsed_s == 18.0
    assert f.kv_capacity_tokens == 1_380_672
    assert f.startup_timings_s == {"compile": 25.31, "init_engine": 60.71}
    assert f.scheduler_extra["version"] == "0.9.1"
    assert f.server_args.tp_size == 2 and f.server_args.context_length == 32768
    assert f.server_args.engram_config == {"cpu_offload": False}
    assert f.server_args.raw["api_key"] == "<redacted>"  # never kept
    assert f.ready and f.phase == "ready"
    assert f.decode is not None and f.decode.running_reqs == 8 and f.decode.queue_reqs == 2
    assert f.decode.token_usage == pytest.approx(0.375)
    assert f.decode.gen_throughput == pytest.approx(812.3)
    phases = [s.phase for s in f.timeline]
    # compile before the KV cache is sized, capture after it: the graphs phase comes back.
    assert phases == ["distributed_init", "weights", "graphs", "kv_pool", "graphs", "http",
                      "ready"]


V0 = (ERAS / "gpu-v0-0.6.log").read_text()


def test_a_v0_log_without_a_token_count_takes_the_capacity_from_its_concurrency() -> None:
    p = VllmLogParser()
    p.feed_text(V0)
    f = p.facts()
    assert f.kv_capacity_tokens == round(8192 * 54.52)
    assert any("concurrency" in n for n in f.notes)  # said how it was derived
    assert f.scheduler_extra["num_gpu_blocks"] == "27913"
    assert f.scheduler_extra["version"] == "0.6.3"
    assert f.ready and f.uvicorn_pid == 7


def test_a_failed_start_says_where_it_failed_and_why() -> None:
    p = VllmLogParser()
    before = GPU_V1.split("Available KV cache memory")[0].rsplit("\n", 1)[0]
    events = p.feed_text(before + "\n" + (ERAS / "failed-kv.log").read_text())
    f = p.facts()
    # The log was compiling when the engine gave up; the words that follow say the KV cache
    # did not fit, and that is the cause, not the generic first line.
    assert "failed" in events and f.phase == "failed" and f.failed_in == "kv_pool"
    assert f.errors[0].fatal and "EngineCore failed to start" in f.errors[0].text
    assert f.failure_cause.startswith("ValueError: No available memory for the cache blocks.")
    assert not f.ready


def test_an_out_of_memory_start_is_an_oom() -> None:
    p = VllmLogParser()
    p.feed_text("(Worker_TP0 pid=9) INFO 06-01 10:00:10 [gpu_model_runner.py:1] Starting to load "
                "model m...\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 "
                "GiB. GPU 0 has a total capacity of 79.19 GiB\n")
    f = p.facts()
    assert f.phase == "failed" and f.failed_in == "weights" and f.errors[0].kind == "oom"


def test_a_relaunch_in_one_log_counts_the_latest() -> None:
    p = VllmLogParser()
    log = (DATA / "startup.log").read_text()
    p.feed_text(log + log.replace("33554432", "67108864").replace("65,536", "131,072"))
    f = p.facts()
    assert f.launches == 2 and f.kv_capacity_tokens == 131072


def test_the_log_pane_keeps_the_time_and_process_of_a_vllm_line() -> None:
    from engram_top.app.server_log import log_line
    line = ("(EngineCore pid=3561) WARNING 12-02 12:25:16 [vllm.py:725] Model Runner V2 "
            "requires Triton")
    assert log_line(line).plain == "12:25:16 EngineCore WARNING Model Runner V2 requires Triton"


def test_strange_lines_never_raise() -> None:
    p = VllmLogParser()
    for line in ("", "\x00\xff", "(x pid=1) INFO 99-99 99:99:99 [a.py:1] KV cache size: x tokens",
                 "non-default args: {" * 1000, "INFO:     " + "a" * 100000):
        p.feed(line)
    assert p.current_phase() in PHASES
    assert p.facts().kv_capacity_tokens is None


# --------------------------------------------------------------------------- the page


def figures(text: str) -> dict:
    return v.page_figures(v.canonical(promtext.parse(text)))


def test_the_real_page_gives_capacity_usage_and_requests() -> None:
    out = figures(AFTER)
    assert out["max_total_num_tokens"] == 65536 and out["kv_cache_gb"] == pytest.approx(1 / 32)
    assert out["num_running_reqs"] == 0.0 and out["token_usage"] == 0.0
    assert out["extra"]["capacity_from"] == "kv_cache_size_tokens"
    assert out["extra"]["cache_config"]["block_size"] == "128"
    assert set(out["not_reported"]) == {"weight_gb", "graph_gb", "num_used_tokens"}
    fams = v.canonical(promtext.parse(AFTER))
    assert v.counter_figure(v.find(fams, v.COUNTERS["requests"])) == 4.0  # every reason
    assert v.merged_histogram(v.find(fams, v.HISTOGRAMS["itl"])).count == 124.0


def test_a_pipeline_that_renamed_vllm_colon_still_reads() -> None:
    out = figures(AFTER.replace("vllm:", "vllm_"))
    assert out["max_total_num_tokens"] == 65536


def test_two_engines_add_their_requests_and_take_the_fuller_cache() -> None:
    two = IDLE + "\n".join(
        line.replace('engine="0"', 'engine="1"') for line in IDLE.splitlines()
        if line.startswith(("vllm:kv_cache_usage_perc", "vllm:num_requests_running",
                            "vllm:cache_config_info")))
    lines = []
    for line in two.splitlines():
        if line.startswith("vllm:kv_cache_usage_perc") and 'engine="1"' in line:
            line = line.rsplit(" ", 1)[0] + " 0.75"
        if line.startswith("vllm:num_requests_running"):
            line = line.rsplit(" ", 1)[0] + " 3.0"
        lines.append(line)
    out = figures("\n".join(lines) + "\n")
    assert out["token_usage"] == 0.75 and out["num_running_reqs"] == 6.0
    assert out["max_total_num_tokens"] == 2 * 65536 and out["extra"]["engines"] == 2


def test_a_nan_usage_is_a_reason_not_a_number() -> None:
    page = "\n".join(line.rsplit(" ", 1)[0] + " NaN" if line.startswith("vllm:kv_cache_usage")
                     else line for line in IDLE.splitlines())
    out = figures(page)
    assert out["token_usage"] is None and out["unavailable"]["token_usage"].startswith("n/a: NaN")


def test_an_older_page_counts_blocks_and_reads_the_v0_names() -> None:
    page = ('# TYPE vllm:cache_config_info gauge\n'
            'vllm:cache_config_info{block_size="16",num_gpu_blocks="27913",'
            'cache_dtype="auto"} 1.0\n'
            '# TYPE vllm:gpu_cache_usage_perc gauge\n'
            'vllm:gpu_cache_usage_perc{model_name="m"} 0.25\n'
            '# TYPE vllm:gpu_prefix_cache_hit_rate gauge\n'
            'vllm:gpu_prefix_cache_hit_rate{model_name="m"} 0.5\n')
    out = figures(page)
    assert out["max_total_num_tokens"] == 27913 * 16
    assert out["extra"]["capacity_from"] == "num_gpu_blocks x block_size"
    assert out["token_usage"] == 0.25 and out["cache_hit_rate"] == 0.5


def test_inspect_metrics_reads_a_vllm_page_and_the_sglang_reader_points_to_it() -> None:
    out = engines.get("vllm").inspect_metrics(AFTER)
    assert out["capacity_tokens"] == 65536
    assert out["histograms"]["ttft"]["count"] == 4.0
    assert out["histograms"]["tpot"]["family"] == "vllm:request_time_per_output_token_seconds"
    other = engines.get("sglang").inspect_metrics(AFTER)
    assert other["page"] == "vllm" and "--engine vllm" in other["hint"]
    # And the other way round: the vLLM reader says an SGLang page is SGLang's.
    back = engines.get("vllm").inspect_metrics("# TYPE sglang:token_usage gauge\n"
                                               "sglang:token_usage 0.1\n")
    assert back["page"] == "sglang" and back["vllm"] is False
    assert "--engine sglang" in str(back["hint"])


# --------------------------------------------------------------------------- over HTTP


class Page:
    """A vLLM-shaped server on 127.0.0.1: /health, /version, /v1/models, /metrics; its
    /metrics can stall after its first byte (only the whole answer's deadline ends it) or
    carry NaN."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.server.wait_closed(), 2)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode()
                path = head.split(" ", 2)[1]
                body = {"/health": "", "/version": '{"version":"0.32.0"}',
                        "/v1/models": '{"data":[{"id":"m","root":"/models/m"}]}',
                        "/metrics": AFTER}.get(path)
                if body is None:
                    writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                    continue
                if path == "/metrics" and self.mode == "nan":
                    body = body.replace('vllm:num_requests_running{engine="0",model_name='
                                        '"/work/main/.venv-vllm/tiny-llama"} 0.0',
                                        'vllm:num_requests_running{engine="0",model_name='
                                        '"/work/main/.venv-vllm/tiny-llama"} NaN')
                data = body.encode()
                writer.write(f"HTTP/1.1 200 OK\r\ncontent-length: {len(data)}\r\n\r\n".encode())
                if path == "/metrics" and self.mode == "drip":
                    writer.write(data[:1])  # a byte, then nothing until the client gives up
                    await writer.drain()
                    await asyncio.Event().wait()
                writer.write(data)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            writer.close()


async def test_the_collector_over_http_reads_the_page_and_survives_its_faults() -> None:
    server = Page()
    async with server as url:
        c = v.VllmCollector(url, deadline_s=2.0)
        try:
            first = await c.poll()
            assert first.ok, first.message
            d = first.data
            assert d.healthy and d.max_total_num_tokens == 65536 and d.version == "0.32.0"
            assert d.model_path == "/models/m" and d.extra["engine"] == "vllm"
            server.mode = "nan"
            nan = await c.poll()
            assert nan.ok and nan.data.num_running_reqs is None
            assert "num_running_reqs" in nan.data.unavailable
            server.mode = "drip"
            c.deadline_s = 0.2  # the page's whole answer within this, however it drips
            started = time.monotonic()
            dripping = await c.poll()
            assert not dripping.ok and "no whole page within 0.2 s" in dripping.message
            assert time.monotonic() - started < 5
            server.mode, c.deadline_s = "ok", 2.0
            assert (await c.poll()).ok  # and it recovers
        finally:
            await c.close()
        sglang = SglangCollector(url, deadline_s=2.0)
        try:
            wrong = await sglang.poll()
            assert "vLLM server's page" in wrong.message and "--engine vllm" in wrong.message
        finally:
            await sglang.close()


# --------------------------------------------------------------------------- scenarios


def test_vllm_scenarios_launch_as_the_engine_wants(tmp_path: Path) -> None:
    sf = load(Path(__file__).parents[2] / "scenarios" / "dsv41-flash-4xb200-vllm.toml")
    device, prefetch = sf.scenarios["vllm-device"], sf.scenarios["vllm-host-prefetch"]
    assert device.argv()[-3:-1] == ["--engram-config.cpu_offload", "false"]
    assert "--engram-config.cpu_offload" not in prefetch.argv()  # vLLM's default
    assert "--tensor-parallel-size" in device.argv()
    env = device.launch_env()
    assert env["VLLM_HOST_IP"] == "127.0.0.1" and env["VLLM_NO_USAGE_STATS"] == "1"
    assert env["HF_HUB_OFFLINE"] == "1"  # a local checkpoint folder: no hub
    e = engines.get("vllm")
    nothing = StartupFacts()
    assert e.engram(device, env={}, args={}, startup=nothing, gpu_name=None).placement \
        == "device"
    logged = StartupFacts(engram_config={"placement": "cpu", "replication": "per_rank"})
    got = e.engram(prefetch, env={}, args={}, startup=logged, gpu_name=None)
    assert got.placement == "host-prefetch" and got.prefetch.startswith("engaged")
    bad = tmp_path / "bad.toml"
    bad.write_text('[defaults]\nkind = "vllm"\npython = "/p"\nmodel_path = "/m"\n'
                   '[scenarios.h]\nplacement = "host"\nport = 1234\n')
    with pytest.raises(ScenarioError, match="vLLM has no host placement without prefetch"):
        load(bad)
    keyed = tmp_path / "keyed.toml"
    keyed.write_text('[defaults]\nkind = "vllm"\npython = "/p"\nmodel_path = "org/model"\n'
                     '[scenarios.k]\nport = 1234\napi_key = "sk-x"\n')
    k = load(keyed).scenarios["k"]
    assert "sk-x" not in " ".join(k.argv()) and k.launch_env()["VLLM_API_KEY"] == "sk-x"
    assert k.exposed_secrets() == [] and "HF_HUB_OFFLINE" not in k.launch_env()


def test_the_demo_load_fits_a_model_whose_context_is_short() -> None:
    from engram_top.live.load import fit_context
    assert fit_context(512, 128, None) == (512, 128)  # nothing known: as asked
    assert fit_context(512, 128, 4096) == (512, 128)  # it fits
    assert fit_context(512, 128, 512) == (384, 128)  # the tiny vLLM's 512: a quarter out
    assert fit_context(24, 600, 512) == (384, 128)
    assert fit_context(8, 8, 2) == (1, 1)


def test_a_quantile_in_a_wide_bucket_reads_as_the_buckets_bounds() -> None:
    """The panel's figure is Prometheus's histogram_quantile where its bucket is narrow
    enough to resolve it; in the lowest bucket (from 0), in one wider than half the figure,
    and in the +Inf bucket it is the bucket's bounds, not the interpolation. q.p50 stays the
    interpolated figure (the history's charts plot it)."""
    from collectors.promtext import Histogram
    from collectors.windowed import WindowedHistogram, histogram_quantile
    from engram_top.app.panels.drawing import quantile
    bounds = (0.1, 0.25, 0.5, 0.55, float("inf"))
    # cumulative counts, the p50 and p99 as the panel shows them
    cases = [((40, 40, 40, 40, 40), "<= 100 ms", "<= 100 ms"),  # all in the lowest bucket
             ((10, 40, 40, 40, 40), "100-250 ms", "100-250 ms"),  # 150 ms: a 150 ms bucket
             ((0, 0, 100, 100, 100), "250-500 ms", "250-500 ms"),
             ((0, 0, 0, 100, 100), "525.0 ms", "549.5 ms"),  # a 50 ms bucket resolves them
             ((0, 0, 0, 0, 10), "> 550 ms", "> 550 ms")]  # the +Inf bucket: a bound
    for counts, p50, p99 in cases:
        w = WindowedHistogram(30.0)
        w.add(0.0, Histogram(tuple((b, 0.0) for b in bounds), 0.0, 0.0))
        w.add(1.0, Histogram(tuple(zip(bounds, map(float, counts), strict=True)), 1.0,
                             float(counts[-1])))
        q = w.quantiles(1.0)
        buckets = tuple(zip(bounds, map(float, counts), strict=True))
        assert quantile(q, "p50") == p50 and quantile(q, "p99") == p99, counts
        assert q.p50 == pytest.approx(histogram_quantile(0.5, buckets))
