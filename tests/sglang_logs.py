"""SGLang start-up logs the parser's tests share: LOGDOC, a real sequence, and the ways they
feed it."""

from __future__ import annotations

from collectors.sglang.startup_log import StartupLogParser

# (a) Verbatim from the notes: LOGDOC, Qwen2.5-0.5B, 1 GPU, 2026-02-04 (no prefixes there).
LOGDOC = """\
Init torch distributed begin.
Init torch distributed ends. elapsed=0.26 s, mem usage=0.09 GB
Load weight begin. avail mem=78.43 GB
Loading safetensors checkpoint shards: 100% Completed | 1/1 [...]
Loading weights took 0.20 seconds
Load weight end. elapsed=0.38 s, type=Qwen2ForCausalLM, dtype=torch.bfloat16, avail mem=77.45 GB, mem usage=0.98 GB.
Using KV cache dtype: torch.bfloat16
KV Cache is allocated. #tokens: 20480, K size: 0.12 GB, V size: 0.12 GB
Memory pool end. avail mem=77.12 GB
Init attention backend begin.
Init attention backend end. elapsed=0.03 s
Capture cuda graph begin. This can take up to several minutes. avail mem=77.02 GB
Capture cuda graph bs [1, 2, 4]
Capture cuda graph end. Time elapsed: 1.01 s. mem usage=0.07 GB. avail mem=76.95 GB.
max_total_num_tokens=20480, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=128, context_len=32768, available_gpu_mem=76.95 GB
INFO:     Started server process [1780921]
INFO:     Waiting for application startup.
INFO:     Application startup complete.
INFO:     Uvicorn running on http://127.0.0.1:33129 (Press CTRL+C to quit)
INFO:     127.0.0.1:55008 - "GET /model_info HTTP/1.1" 200 OK
Prefill batch, #new-seq: 1, #new-token: 6, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0, input throughput (token/s): 0.00, cuda graph: False
INFO:     127.0.0.1:55012 - "POST /generate HTTP/1.1" 200 OK
The server is fired up and ready to roll!
"""  # noqa: E501



def feed_with_at(parser: StartupLogParser, text: str, t0: float = 1000.0) -> list[list[str]]:
    """Feed line i at monotonic time t0 + i; return the events of every line."""
    return [parser.feed(line, at=t0 + i) for i, line in enumerate(text.splitlines())]


def phase_changes(events: list[list[str]]) -> list[str]:
    return [e for evs in events for e in evs if e.startswith("phase:")]
