"""SGLang start-up logs the parser's tests share: LOGDOC, a real sequence, and the ways they
feed it."""

from __future__ import annotations

import json

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


# --------------------------------------------------------------------------- prefix styles
# The same lines as different builds and shippers print them: SGLang's own prefix with a
# date or the time only, docker compose's "name  | ", Kubernetes' RFC 3339 time in front,
# docker's json-file records and a structured logger's JSON. Ranks ride in SGLang's prefix
# ("DP1 TP0"); the styles without one ("none", "json_message") lose them.
STYLES = ("none", "datetime", "time_only", "docker", "kubernetes", "kubectl_bare", "json_docker",
          "json_message")
RANKED_STYLES = ("datetime", "time_only", "docker", "kubernetes", "json_docker")
DAY = "2026-03-14"


def dress(lines: list[tuple[str, str]], style: str, start_s: int = 0) -> str:
    """``(tags, message)`` pairs as one log in ``style``, line i at 10:00:00 + start_s + i
    seconds ("" tags: a line with no rank). A message may hold newlines (a traceback
    logged as one record): JSON styles keep them in one record, the others print them."""
    out = []
    for i, (tags, msg) in enumerate(lines):
        s = start_s + i
        clock = f"{10 + s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}"
        head = f"{clock} {tags}".strip()
        own = f"[{DAY} {head}] {msg}"
        if style == "none":
            out.append(msg)
        elif style == "datetime":
            out.append(own)
        elif style == "time_only":
            out.append(f"[{head}] {msg}")
        elif style == "docker":
            out.append("\n".join(f"sglang-1  | {part}" for part in own.split("\n")))
        elif style == "kubernetes":
            out.append("\n".join(f"{DAY}T{clock}.{123456789 + i}Z {part}"
                                 for part in own.split("\n")))
        elif style == "kubectl_bare":  # the shipper's time alone, no SGLang prefix
            out.append("\n".join(f"{DAY}T{clock}.5Z {part}" for part in msg.split("\n")))
        elif style == "json_docker":
            out.append(json.dumps({"log": own + "\n", "stream": "stderr",
                                   "time": f"{DAY}T{clock}.000000001Z"}))
        elif style == "json_message":
            out.append(json.dumps({"timestamp": f"{DAY} {clock},250", "level": "INFO",
                                   "message": msg}))
        else:
            raise ValueError(style)
    return "\n".join(out) + "\n"


def timed(style: str) -> bool:
    """Whether lines in ``style`` carry a time the parser reads."""
    return style != "none"
