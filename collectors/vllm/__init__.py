"""vLLM's own readers: its HTTP pages and metrics, its start-up log; and what the rest of
engram-top knows of vLLM, declared here once (the engine in scenarios/engines reads it)."""

from collectors.fleet_dialect import FleetDialect

SPEAKS = "vLLM"  # how people name it, and whose dialect a server speaks
SOURCE = "vllm"  # what its collector names its readings by ("vllm http://host:port")
PAGE_PREFIXES = ("vllm:", "vllm_")  # its /metrics names; a pipeline may spell : as _
# Its words where they differ from the dashboard's (SGLang's): the key is the dashboard's.
WORDS: dict[str, str] = {
    "retracted": "preempted",  # the same pressure on the KV cache, in vLLM's word
    "weights": "from its log: its metrics give no weights",
}
# Its series in a fleet's Prometheus. The KV cache's size is in the labels of an info
# gauge (cache_config_info), which no fleet query turns into a number: not read.
FLEET = FleetDialect(
    name=SPEAKS, name_re="vllm[:_]",
    server={"kv_cache_usage_perc": "token_usage", "gpu_cache_usage_perc": "token_usage",
            "num_requests_running": "num_running_reqs",
            "num_requests_waiting": "num_queue_reqs"},
    latency={"ttft": "time_to_first_token_seconds", "tpot": "inter_token_latency_seconds"},
    output_tokens="generation_tokens_total", words=WORDS)
