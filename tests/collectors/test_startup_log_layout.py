"""StartupLogParser on a launch's layout and order: ranks keyed by every parallel dimension
their prefix names (DP, PP, TP, EP; PP0 TP0 and PP1 TP0 are two ranks), the parallel sizes
from the ServerArgs, a pasted launch command or the prefixes (derived, and said so); a
teardown after a run is no launch; lines out of order never run the timeline backwards."""

from __future__ import annotations

import random

import pytest
from sglang_logs import RANKED_STYLES, STYLES, dress

from collectors.sglang.startup_log import StartupLogParser, parse_startup_log
from collectors.startup_facts import STOPPED


def _rank_lines(tags: str, weights_gb: float) -> list[tuple[str, str]]:
    return [
        (tags, "Load weight begin. avail mem=139.00 GB"),
        (tags, f"Load weight end. elapsed=10.00 s, type=DeepseekV3ForCausalLM, "
               f"avail mem={139 - weights_gb:.2f} GB, mem usage={weights_gb:.2f} GB."),
    ]


def _layout(tags: list[str], style: str, extra: list[tuple[str, str]] | None = None):  # type: ignore[no-untyped-def]
    lines = list(extra or [])
    for i, t in enumerate(tags):
        lines += _rank_lines(t, 10.0 + i)  # each rank its own figure: none may overwrite another
    return parse_startup_log(dress(lines, style))


@pytest.mark.parametrize("style", RANKED_STYLES)
def test_pipeline_stages_are_ranks_of_their_own(style: str) -> None:
    tags = [f"PP{p} TP{t}" for p in range(2) for t in range(4)]
    f = _layout(tags, style)
    assert sorted(f.ranks) == list(range(8))  # GPU p * tp_size + t
    assert f.ranks[4].coords == {"PP": 1, "TP": 0} and f.ranks[4].label == "PP1 TP0"
    assert [f.ranks[i].weights_gb for i in range(8)] == [10.0 + i for i in range(8)]
    assert f.parallel == {"pp_size": 2, "tp_size": 4}
    assert f.parallel_from == {"pp_size": "rank prefixes", "tp_size": "rank prefixes"}
    assert f.derived["parallel.pp_size"].startswith("derived")


@pytest.mark.parametrize("style", RANKED_STYLES)
def test_pipeline_stages_without_tensor_parallelism(style: str) -> None:
    f = _layout(["PP0", "PP1", "PP2"], style)
    assert {r: rf.label for r, rf in f.ranks.items()} == {0: "PP0", 1: "PP1", 2: "PP2"}
    assert f.parallel == {"pp_size": 3}


@pytest.mark.parametrize("style", RANKED_STYLES)
def test_dp_attention_ranks_share_one_tp_group(style: str) -> None:
    f = _layout([f"DP{i} TP{i} EP{i}" for i in range(8)], style)
    assert sorted(f.ranks) == list(range(8))
    assert f.ranks[5].coords == {"DP": 5, "TP": 5, "EP": 5}
    assert f.parallel == {"dp_size": 8, "tp_size": 8, "ep_size": 8}


@pytest.mark.parametrize("style", RANKED_STYLES)
def test_dp_replicas_each_with_their_own_tp_group(style: str) -> None:
    f = _layout([f"DP{d} TP{t}" for d in range(3) for t in range(2)], style)
    assert sorted(f.ranks) == list(range(6))  # replica d's TP rank t on GPU d * 2 + t
    assert f.ranks[2].label == "DP1 TP0" and f.ranks[5].label == "DP2 TP1"
    assert [f.ranks[i].weights_gb for i in range(6)] == [10.0 + i for i in range(6)]
    assert f.parallel == {"dp_size": 3, "tp_size": 2}


def test_other_dimensions_that_tell_ranks_apart_keep_them_apart() -> None:
    f = _layout(["ATTN_CP0 TP0", "ATTN_CP1 TP0", "MOE_DP1 TP0"], "datetime")
    assert len(f.ranks) == 3 and {rf.label for rf in f.ranks.values()} == {
        "ATTN_CP0 TP0", "ATTN_CP1 TP0", "MOE_DP1 TP0"}


ARGS = ("server_args=ServerArgs(model_path='deepseek-ai/DeepSeek-V3', tp_size=8, dp_size=8, "
        "pp_size=1, ep_size=8, enable_dp_attention=True, api_key='sk-secret')")


def test_server_args_sizes_are_stated_and_win() -> None:
    f = _layout(["DP0 TP0 EP0", "DP1 TP1 EP1"], "datetime", [("", ARGS)])
    assert f.parallel == {"tp_size": 8, "dp_size": 8, "pp_size": 1, "ep_size": 8}
    assert set(f.parallel_from.values()) == {"server_args"}
    assert not any(k.startswith("parallel.") for k in f.derived)


COMMANDS = [
    ("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 --dp 8 "
     "--enable-dp-attention --trust-remote-code", {"tp_size": 8, "dp_size": 8}),
    ("$ python3 -m sglang.launch_server --model deepseek-ai/DeepSeek-R1 --tp-size=4 "
     "--pp-size 2 --port 30000", {"tp_size": 4, "pp_size": 2}),
    ("+ python -m sglang.launch_server --model-path /models/q --tensor-parallel-size 2 "
     "--data-parallel-size 4 --expert-parallel-size 2", {"tp_size": 2, "dp_size": 4,
                                                         "ep_size": 2}),
    ("python3 -m sglang.launch_server \\\n  --model-path Qwen/Qwen3-235B \\\n  --tp 4 \\\n"
     "  --dp-size 2 --ep-size 4 \\\n  --api-key sk-never-kept", {"tp_size": 4, "dp_size": 2,
                                                                 "ep_size": 4}),
    ("command: sglang serve --model-path m --tp=2 --pp=2", {"tp_size": 2, "pp_size": 2}),
]


@pytest.mark.parametrize("style", ["none", "datetime", "docker", "kubectl_bare"])
@pytest.mark.parametrize(("command", "sizes"), COMMANDS)
def test_a_pasted_launch_command_gives_the_sizes(style: str, command: str,
                                                 sizes: dict[str, int]) -> None:
    # A multi-line command is printed as its own lines (no prefix on the continuations).
    head, *rest = command.split("\n")
    text = dress([("", head)], style) + "".join(line + "\n" for line in rest)
    text += dress(_rank_lines("TP0", 5.0), style, start_s=10)
    f = parse_startup_log(text)
    for name, value in sizes.items():
        assert f.parallel[name] == value and f.parallel_from[name] == "launch command"
    assert "sk-never-kept" not in repr(f.to_dict())
    assert f.ranks[0].weights_gb == 5.0 and f.launches == 1


def test_the_command_s_dp_attention_switch_lays_the_ranks_out() -> None:
    text = dress([("", "python -m sglang.launch_server --tp 4 --dp 4 --enable-dp-attention")],
                 "datetime")
    lines = [line for i in range(4) for line in _rank_lines(f"DP{i} TP{i}", 1.0 + i)]
    f = parse_startup_log(text + dress(lines, "datetime", start_s=5))
    assert sorted(f.ranks) == [0, 1, 2, 3]
    assert f.parallel == {"tp_size": 4, "dp_size": 4}

# ------------------------------------------------------------------ teardown


READY = [
    ("TP0", "Load weight begin. avail mem=78.00 GB"),
    ("TP0", "Load weight end. elapsed=3.00 s, type=LlamaForCausalLM, avail mem=62.00 GB, "
            "mem usage=16.00 GB."),
    ("TP0", "KV Cache is allocated. #tokens: 300000, K size: 18.00 GB, V size: 18.00 GB"),
    ("", "Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)"),
    ("", "The server is fired up and ready to roll!"),
    ("TP0", "Decode batch. #running-req: 3, #token: 900, token usage: 0.01, gen throughput "
            "(token/s): 120.00, #queue-req: 0"),
]
TEARDOWN = [
    ("", "SIGTERM received. signum=None frame=None. Draining requests and shutting down..."),
    ("", "Gracefully exiting... Remaining number of requests 0."),
    ("", "Shutting down"),
    ("", "Waiting for application shutdown."),
    ("", "Application shutdown complete."),
    ("", "Finished server process [4242]"),
    ("TP0", "Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "/sgl/srt/managers/scheduler.py", line 900, in event_loop_overlap\n'
            "    recv_reqs = self.recv_requests()\n"
            "KeyboardInterrupt"),
    ("", "Scheduler or DataParallelController 4300 terminated with -15"),
    ("", "Received sigquit from a child process. It usually means the child failed."),
    ("", "/usr/lib/python3.10/multiprocessing/resource_tracker.py:254: UserWarning: "
         "resource_tracker: There appear to be 1 leaked shared_memory objects to clean up"),
    ("", "Killed"),
]


@pytest.mark.parametrize("style", STYLES)
def test_teardown_after_a_run_is_no_new_launch(style: str) -> None:
    parser = StartupLogParser()
    events = parser.feed_text(dress(READY + TEARDOWN, style))
    f = parser.facts()
    assert f.launches == 1 and "relaunch" not in events
    assert f.ready and f.phase == STOPPED and f.failed_at is None and f.failure_cause is None
    assert not any(e.fatal for e in f.errors)
    assert f.ranks[0].weights_gb == 16.0  # the run's figures stay


@pytest.mark.parametrize("style", STYLES)
def test_a_log_of_a_teardown_alone_began_after_its_launch(style: str) -> None:
    f = parse_startup_log(dress(TEARDOWN, style))
    assert f.log_starts_after_launch and f.launch_at is None and f.launches == 1
    assert f.phase == STOPPED and not any(e.fatal for e in f.errors)


def test_a_real_restart_after_the_teardown_is_one() -> None:
    again = [("", ARGS), *READY[:2]]
    f = parse_startup_log(dress(READY + TEARDOWN + again, "datetime"))
    assert f.launches == 2 and f.phase == "weights" and f.ready is False

# ------------------------------------------------------------------ out of order


FULL = [
    ("", ARGS),
    ("TP0", "Init torch distributed begin."),
    ("TP1", "Init torch distributed begin."),
    ("TP0", "Init torch distributed ends. elapsed=2.00 s, mem usage=0.30 GB"),
    ("TP1", "Init torch distributed ends. elapsed=2.10 s, mem usage=0.30 GB"),
    *_rank_lines("TP0", 30.0), *_rank_lines("TP1", 30.0),
    ("TP0", "KV Cache is allocated. #tokens: 500000, KV size: 40.00 GB"),
    ("TP1", "KV Cache is allocated. #tokens: 500000, KV size: 40.00 GB"),
    ("TP0", "Memory pool end. avail mem=60.00 GB"),
    ("TP1", "Memory pool end. avail mem=60.00 GB"),
    ("TP0", "Capture cuda graph begin. This can take up to several minutes. avail mem=60.00 GB"),
    ("TP1", "Capture cuda graph begin. This can take up to several minutes. avail mem=60.00 GB"),
    ("TP0", "Capture cuda graph end. Time elapsed: 8.00 s. mem usage=1.00 GB. avail mem=59 GB."),
    ("TP1", "Capture cuda graph end. Time elapsed: 8.00 s. mem usage=1.00 GB. avail mem=59 GB."),
    ("TP0", "max_total_num_tokens=500000, chunked_prefill_size=8192, max_prefill_tokens=16384, "
            "max_running_requests=256, context_len=32768, available_gpu_mem=59.00 GB"),
    ("", "Started server process [777]"),
    ("", "Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)"),
    ("", "The server is fired up and ready to roll!"),
]


def _shuffled(text: str, how: str, seed: int) -> str:
    lines = text.splitlines()
    rng = random.Random(seed)
    if how == "adjacent":  # two streams merged: neighbours swap
        for i in range(0, len(lines) - 1, 2):
            if rng.random() < 0.6:
                lines[i], lines[i + 1] = lines[i + 1], lines[i]
    elif how == "by_rank":  # each rank's lines flushed together: TP1's after TP0's
        lines = sorted(lines, key=lambda ln: "TP1]" in ln)
    elif how == "block":
        a = rng.randrange(len(lines) - 4)
        lines[a:a + 4] = reversed(lines[a:a + 4])
    elif how == "any":
        rng.shuffle(lines)
    return "\n".join(lines) + "\n"


def _never_backwards(f) -> None:  # type: ignore[no-untyped-def]
    starts = [s.start for s in f.timeline if s.start is not None]
    assert starts == sorted(starts)
    for span in f.timeline:
        if span.start is not None and span.end is not None:
            assert span.end >= span.start, span
    assert all(v >= 0 for v in f.phase_durations().values())
    if f.launch_at is not None:
        assert all(s >= f.launch_at for s in starts)
        if f.ready_at is not None:
            assert f.ready_at >= f.launch_at


@pytest.mark.parametrize("style", ["datetime", "time_only", "kubernetes", "json_docker"])
@pytest.mark.parametrize(("how", "seed"), [("adjacent", 1), ("adjacent", 2), ("by_rank", 0),
                                           ("block", 3), ("block", 4)])
def test_lines_out_of_order_keep_one_launch_and_a_forward_timeline(style: str, how: str,
                                                                    seed: int) -> None:
    in_order = parse_startup_log(dress(FULL, style))
    f = parse_startup_log(_shuffled(dress(FULL, style), how, seed))
    _never_backwards(f)
    assert f.launches == 1 and f.ready
    assert f.launch_at == in_order.launch_at  # the earliest time, wherever its line stands
    assert f.ready_at == in_order.ready_at
    assert f.phase_durations()["total"] == in_order.phase_durations()["total"]
    assert {r: rf.weights_gb for r, rf in f.ranks.items()} == {0: 30.0, 1: 30.0}
    assert [len(rf.weight_loads) for rf in f.ranks.values()] == [1, 1]


@pytest.mark.parametrize("seed", range(12))
def test_any_order_never_runs_the_timeline_backwards(seed: int) -> None:
    f = parse_startup_log(_shuffled(dress(FULL + TEARDOWN, "datetime"), "any", seed))
    _never_backwards(f)


@pytest.mark.parametrize("style", ["json_docker", "json_message"])
def test_a_json_log_reads_as_the_printed_one(style: str) -> None:
    printed = parse_startup_log(dress(FULL, "datetime"))
    f = parse_startup_log(dress(FULL, style))
    # The record's own time where the text has none (json_message: ",250" ms past it).
    assert f.ready and f.ready_at == printed.ready_at + (0.25 if style == "json_message" else 0)
    assert f.kv_capacity_tokens == 500000 and f.parallel["tp_size"] == 8
    if style == "json_docker":  # the rank rides in SGLang's prefix inside the record
        assert sorted(f.ranks) == [0, 1]


@pytest.mark.parametrize("line", [
    '{"log": 5}', '{"log": "x", "time": 1e999}', '{"message": "' + "[" * 50 + '"}',
    "{" * 5000 + "}" * 5000, '{"time": "2026-03-14T10:00:00Z"}', "{not json}",
    '{"log": "Load weight begin. avail mem=1 GB\\n", "time": "garbage"}',
    '{"ts": 1773482400123, "msg": "Init torch distributed begin."}',
])
def test_odd_json_records_never_raise(line: str) -> None:
    parser = StartupLogParser()
    parser.feed(line)
    parser.facts().to_dict()


def test_a_message_that_names_the_module_is_no_launch() -> None:
    lines = [*READY, ("", "'python -m sglang.launch_server' is still supported; see sglang serve")]
    parser = StartupLogParser()
    events = parser.feed_text(dress(lines, "datetime"))
    f = parser.facts()
    assert f.launches == 1 and "relaunch" not in events and f.ready and f.parallel == {
        "tp_size": 1}


def test_a_command_echoed_after_a_run_is_the_next_launch() -> None:
    lines = [*READY, ("", "python -m sglang.launch_server --model-path m --tp 2")]
    f = parse_startup_log(dress(lines, "datetime"))
    assert f.launches == 2 and not f.ready and f.parallel == {"tp_size": 2}
    assert f.parallel_from == {"tp_size": "launch command"}
