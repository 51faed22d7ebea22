"""SGLang's own readers: its HTTP pages and metrics, its start-up log; and what the rest of
engram-top knows of SGLang, declared here once (the engine in scenarios/engines reads it)."""

from collectors.fleet_dialect import FleetDialect

SPEAKS = "SGLang"  # how people name it, and whose dialect a server speaks
PAGE_PREFIXES = ("sglang:", "sglang_")  # its /metrics names; a gateway may spell : as _
# Its words, where they are not the dashboard's own: SGLang's are.
WORDS: dict[str, str] = {}
# Its series in a fleet's Prometheus: its gauges are the fleet's fields under their own names.
FLEET = FleetDialect(
    name=SPEAKS, name_re="sglang[:_]",
    server={n: n for n in ("token_usage", "full_token_usage", "swa_token_usage",
                           "num_running_reqs", "num_queue_reqs", "max_total_num_tokens",
                           "gen_throughput", "weight_memory_usage_gb", "num_used_tokens")},
    latency={"ttft": "time_to_first_token_seconds", "tpot": "inter_token_latency_seconds"},
    output_tokens="generation_tokens_total", words=WORDS)
