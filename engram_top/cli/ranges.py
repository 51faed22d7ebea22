"""The range of every numeric command-line option, and why its ends are where they are. A
value outside is refused before anything starts: exit 2, the option and its range named
(scenarios.bounds)."""

from __future__ import annotations

import argparse

from scenarios.bounds import PromDuration, bounded_float, bounded_int

# A start-up at x0.001 is the seed's 125 s in an eighth of a second, quicker than a poll can
# see its phases; x100 is three and a half hours. The same for request service times.
TIME_SCALE = bounded_float(0.001, 100)
SERVE_SCALE = bounded_float(0.001, 100)
# Streams in flight from one load process: past a thousand it measures its own event loop.
CONCURRENCY = bounded_int(1, 1024)
# A load's prompt and output lengths: up to the model's context (DeepSeek-V4.1: 1M tokens);
# the load cuts them to a smaller model's context itself.
PROMPT_TOKENS = bounded_int(1, 1_048_576)
OUTPUT_TOKENS = bounded_int(1, 262_144)
# Simulated fleet nodes: they share one process and a port each (cli/fleet.py checks it too).
NODES = bounded_int(1, 512)
DAY_S = 86400.0
# Waits are bounded by a day: longer is a command that never ends for its user.
AFTER_S = bounded_float(0, DAY_S, unit="seconds")
READY_TIMEOUT_S = bounded_float(1, DAY_S, unit="seconds")
# A moment of a recording, up to a year in; snapshot then checks it against the file's length.
AT_S = bounded_float(0, 366 * DAY_S, unit="seconds")
SESSION = bounded_int(1, 1_000_000)
# Prometheus holds one sample per scrape, and scrape intervals are a second or more: a faster
# refresh re-reads the same samples and only loads it (and a tiny one spun a core). A day is
# as slow as a live view can mean.
INTERVAL_S = bounded_float(1, DAY_S, unit="seconds")
WINDOW = PromDuration(1, DAY_S)  # the rate window; written into every query
# US dollars per GPU-hour: a few in practice; ten thousand is beyond any price.
PRICE = bounded_float(0, 10_000)
GPUS = bounded_int(1, 1024)  # the GPUs of one bench_serving run, for its cost
SPEED = bounded_float(0.25, 16)  # replay: slower or faster than that and nothing reads


AGENT_ADDRESS = "127.0.0.1:9478"  # where the agent listens unless told, and `health` looks


def listen_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6): where the agent serves /metrics."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isascii() or not port.isdigit() \
            or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is no HOST:PORT ({AGENT_ADDRESS})")
    return host, int(port)


def retention(text: str) -> object:
    """``7d``, ``2GB`` or ``7d,2GB``: how much of its recordings the agent keeps."""
    from engram_top.record.rotation import Retention  # when the agent's options are read
    try:
        return Retention.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
