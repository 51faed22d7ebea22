"""StartupLogParser on failed start-ups: each is marked failed, with the phase its text (its
stack frames included) names and its cause in one line. SGLang 0.5.18's SIGQUIT wording,
NCCL watchdog timeouts behind a Kubernetes prefix, "no kernel image" in graph capture, and
an out-of-memory traceback without timestamps; each in several prefix styles and wordings."""

from __future__ import annotations

import pytest
from sglang_logs import STYLES, dress

from collectors.sglang.startup_log import StartupLogParser, parse_startup_log
from collectors.startup_facts import FAILED

START = [
    ("TP0", "Init torch distributed begin."),
    ("TP0", "Init torch distributed ends. elapsed=1.20 s, mem usage=0.50 GB"),
    ("TP0", "Load weight begin. avail mem=78.50 GB"),
    ("TP0", "Load weight end. elapsed=30.00 s, type=Qwen3ForCausalLM, dtype=torch.bfloat16, "
            "avail mem=62.00 GB, mem usage=16.50 GB."),
    ("TP0", "KV Cache is allocated. #tokens: 400000, K size: 20.00 GB, V size: 20.00 GB"),
    ("TP0", "Memory pool end. avail mem=21.00 GB"),
]
CAPTURE = [("TP0", "Capture cuda graph begin. This can take up to several minutes. "
                   "avail mem=21.00 GB")]

# ------------------------------------------------------------------ a child that failed


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("line", [
    "SIGQUIT received. signum=3, frame=<frame at 0x7f00, file '/sgl/tokenizer_manager.py', "
    "line 4074, code running_phase_sigquit_handler>. It usually means one child failed.",
    "SIGQUIT received. signum=<Signals.SIGQUIT: 3>, frame=None. It usually means one child "
    "failed.",
    "Received sigquit from a child process. It usually means the child failed.",
    "Rank 0 scheduler died during initialization (exit code: -9). If exit code is -9 (SIGKILL), "
    "a common cause is the OS OOM killer.",
    "Subprocess scheduler_0 (pid=4242) crashed with exit code 1",
])
def test_a_child_failure_fails_the_start_up(style: str, line: str) -> None:
    f = parse_startup_log(dress([*START, ("", line)], style))
    assert f.phase == FAILED and f.failed_in == "graphs"  # the pool ended: capture was next
    assert f.errors[-1].kind == "child_failed" and f.errors[-1].fatal
    assert f.failure_cause is not None and "\n" not in f.failure_cause
    assert f.failure_cause.split()[0] in line


def test_sigquit_words_that_are_no_failure() -> None:
    f = parse_startup_log(dress([*START, ("", "Registered SIGQUIT handler for the scheduler")],
                                "datetime"))
    assert f.errors == () and f.phase == "kv_pool"


def test_the_childs_own_error_is_the_cause_over_the_sigquit() -> None:
    # The tokenizer's SIGQUIT line can come first; the scheduler's traceback says why.
    tb = ("Scheduler hit an exception: Traceback (most recent call last):\n"
          '  File "/sgl/srt/managers/scheduler.py", line 2500, in run_scheduler_process\n'
          "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank)\n"
          '  File "/sgl/srt/model_executor/model_runner.py", line 330, in initialize\n'
          "    self.load_model()\n"
          '  File "/sgl/srt/model_executor/model_runner.py", line 700, in load_model\n'
          "    self.model = get_model(...)\n"
          "safetensors_rust.SafetensorError: Error while deserializing header: "
          "HeaderTooLarge")
    lines = [*START[:3], ("", "SIGQUIT received. signum=3, frame=None. It usually means one "
                              "child failed."), ("TP0", tb)]
    for style in ("datetime", "docker", "json_docker", "none"):
        f = parse_startup_log(dress(lines, style))
        assert f.phase == FAILED and f.failed_in == "weights", style
        assert f.failure_cause.startswith("safetensors_rust.SafetensorError: Error while"), style


def test_a_child_failure_after_ready_is_recorded_not_fatal() -> None:
    lines = [*START, ("", "The server is fired up and ready to roll!"),
             ("", "SIGQUIT received. signum=3, frame=None. It usually means one child failed.")]
    f = parse_startup_log(dress(lines, "datetime"))
    assert f.ready and f.failed_at is None and f.failure_cause is None
    assert [(e.kind, e.fatal) for e in f.errors] == [("child_failed", False)]

# ------------------------------------------------------------------ NCCL watchdog


NCCL = [
    "[E227 10:11:12.386573795 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
    "Timeout(ms)=600000) ran for 600025 milliseconds before timing out.",
    "[E227 10:11:12.386904551 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank 3] "
    "Timeout at NCCL work: 2, last enqueued NCCL work: 2, last completed NCCL work: 1.",
    "[F1105 03:04:05.000001 ProcessGroupNCCL.cpp:1575] [PG ID 0 PG GUID 0(default_pg) Rank 3] "
    "[PG ID 0 PG GUID 0(default_pg) Rank 3] Process group watchdog thread terminated with "
    "exception: [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9)",
]


@pytest.mark.parametrize("text", NCCL)
@pytest.mark.parametrize("head", [
    "2026-03-14T10:00:{s:02d}.386573795Z [rank3]:",  # kubectl logs --timestamps
    "2026-03-14 10:00:{s:02d} [rank3]:",
    "sglang-1  | [rank3]:",
    "[rank3]:",
])
def test_nccl_watchdog_timeout_fails_the_start_up(text: str, head: str) -> None:
    parser = StartupLogParser()
    parser.feed_text(dress([*START, *CAPTURE], "kubernetes"))
    parser.feed(head.format(s=30) + text)
    f = parser.facts()
    assert f.phase == FAILED and f.failed_in == "graphs"
    err = f.errors[-1]
    assert err.kind == "nccl_timeout" and err.fatal and err.rank == 3
    assert f.failure_cause.startswith("NCCL on rank 3: ")  # the C++ log's heads are off
    assert "[" not in f.failure_cause[:30]
    assert ("Watchdog" in f.failure_cause) or ("Timeout at NCCL work" in f.failure_cause)
    # Its time: the shipper's where it wrote one (10:00:30), else the line before's.
    day = f.launch_at - 36000  # the log opens at 10:00:00
    if "10:00" in head:
        frac = 0.386573795 if "T10" in head else 0.0
        assert f.failed_at == pytest.approx(day + 36030 + frac, abs=1e-6)
    else:  # SGLang's own "[.. 10:00:06 TP0]" prefix on the capture line, not kubectl's
        assert f.failed_at == pytest.approx(day + 36006, abs=1e-6)

# ------------------------------------------------------------------ no kernel image


NO_KERNEL = "CUDA error: no kernel image is available for execution on the device"


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("failure", [
    f"Capture cuda graph failed: {NO_KERNEL}\nPossible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
    f"Exception: Capture cuda graph failed: {NO_KERNEL}",
    f"RuntimeError: {NO_KERNEL}\nCUDA kernel errors might be asynchronously reported at some "
    "other API call, so the stacktrace below might be incorrect.",
    f"torch.AcceleratorError: {NO_KERNEL}",
    "Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/sgl/srt/model_executor/model_runner.py", line 1170, in init_cuda_graphs\n'
    "    self.graph_runner = CudaGraphRunner(self)\n"
    '  File "/sgl/srt/model_executor/cuda_graph_runner.py", line 380, in __init__\n'
    "    self.capture()\n"
    f"Exception: Capture cuda graph failed: {NO_KERNEL}",
])
def test_no_kernel_image_in_graph_capture_fails_it(style: str, failure: str) -> None:
    f = parse_startup_log(dress([*START, *CAPTURE, ("TP0", failure)], style))
    assert f.phase == FAILED and f.failed_in == "graphs"
    assert "no kernel image is available" in f.failure_cause
    assert any(e.kind == "cuda" and e.fatal for e in f.errors)


def test_no_kernel_image_without_a_capture_begin_is_the_text_s_phase() -> None:
    lines = [*START[:4], ("TP0", f"Capture cuda graph failed: {NO_KERNEL}")]
    f = parse_startup_log(dress(lines, "time_only"))
    assert f.phase == FAILED and f.failed_in == "graphs"

# ------------------------------------------------------------------ OOM without timestamps


FRAMES = [
    '  File "/usr/lib/python3.10/multiprocessing/process.py", line 314, in _bootstrap',
    "    self.run()",
    '  File "/sgl/srt/managers/scheduler.py", line 2500, in run_scheduler_process',
    "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank)",
    '  File "/sgl/srt/managers/tp_worker.py", line 84, in __init__',
    "    self.model_runner = ModelRunner(",
    '  File "/sgl/srt/model_executor/model_runner.py", line 330, in initialize',
    "    self.init_memory_pool(",
    '  File "/sgl/srt/model_executor/model_runner.py", line 1300, in init_memory_pool',
    "    self.token_to_kv_pool = MLATokenToKVPool(",
    '  File "/sgl/srt/mem_cache/memory_pool.py", line 650, in __init__',
    "    self._create_buffers()",
    '  File "/sgl/srt/mem_cache/memory_pool.py", line 700, in _create_buffers',
    "    torch.zeros(",
]
OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
       "total capacity of 79.10 GiB of which 1.02 GiB is free.")


@pytest.mark.parametrize("shape", ["plain", "elastic", "no_header", "cut", "docker", "json",
                                   "after_weights", "newer_build"])
def test_oom_traceback_without_timestamps_is_the_kv_pools(shape: str) -> None:
    frames = list(FRAMES)
    if shape == "newer_build":  # the pool built by the KV configurator, not init_memory_pool
        frames[6:10] = [
            '  File "/sgl/srt/model_executor/model_runner.py", line 650, in '
            "init_kv_cache_configurator",
            "    configurator.build()",
            '  File "/sgl/srt/model_executor/kv_cache_configurator.py", line 540, in build',
            "    pool = SWAKVPool(",
        ]
    tb = ["Process SpawnProcess-1:", "Traceback (most recent call last):", *frames, OOM]
    head: list[str] = []
    if shape == "elastic":
        tb = [f"[rank0]: {line}" for line in tb]
    elif shape == "no_header":
        tb = tb[2:]
    elif shape == "cut":
        tb = tb[:-1]
    elif shape == "docker":
        tb = [f"sglang-1  | {line}" for line in tb]
    elif shape == "json":
        from json import dumps
        tb = [dumps({"log": "\n".join(tb) + "\n", "stream": "stderr"})]
    elif shape == "after_weights":
        head = ["Load weight begin. avail mem=78.50 GB",
                "Load weight end. elapsed=30.00 s, type=X, avail mem=62.00 GB, mem usage=16.5 GB."]
    f = parse_startup_log("\n".join(head + tb) + "\n")
    assert f.phase == FAILED and f.failed_in == "kv_pool", shape
    if shape == "cut":
        assert f.failure_cause.startswith("a traceback without its exception line")
    else:
        assert f.failure_cause == OOM and f.errors[0].kind == "oom"
    assert f.launch_at is None and f.failed_at is None  # no time anywhere


def test_frames_without_an_error_after_them_are_forgotten() -> None:
    lines = [*FRAMES, "some other line", "RuntimeError: boom"]
    f = parse_startup_log("\n".join(lines) + "\n")
    assert f.phase == FAILED and f.failed_in == "launching"  # the frames were not its


@pytest.mark.parametrize("cut", [False, True])
def test_an_oom_while_the_weights_are_made_is_the_weights_phase(cut: bool) -> None:
    # The parameters are made (create_weights) before any is loaded, and before the log's
    # weights phase may have begun: the OOM is the weights', not "launching". Cut: a paste
    # that kept only the innermost frames.
    frames = [
        '  File "/sgl/srt/model_executor/model_runner.py", line 300, in initialize',
        "    self.load_model()",
        '  File "/sgl/srt/model_loader/loader.py", line 410, in load_model',
        "    model = _initialize_model(model_config, self.load_config)",
        '  File "/sgl/srt/models/deepseek_v2.py", line 1800, in __init__',
        "    self.model = DeepseekV2Model(config, quant_config)",
        '  File "/sgl/srt/layers/quantization/fp8.py", line 300, in create_weights',
        "    weight = ModelWeightParameter(data=torch.empty(",
    ]
    if cut:
        frames = frames[4:]
    tb = ["Traceback (most recent call last):", *frames, OOM]
    f = parse_startup_log("\n".join(["server_args=ServerArgs(model_path='m', tp_size=1)", *tb])
                          + "\n")
    assert f.phase == FAILED and f.failed_in == "weights"
    assert f.failure_cause == OOM
