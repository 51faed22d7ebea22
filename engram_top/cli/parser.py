"""The command line's grammar: every command, its options and their help (checked
when parsed; what they mean is the commands' own)."""

from __future__ import annotations

import argparse
from pathlib import Path

from engram_top.cli.ranges import (
    AFTER_S,
    AGENT_ADDRESS,
    AT_S,
    CONCURRENCY,
    GPUS,
    INTERVAL_S,
    NODES,
    OUTPUT_TOKENS,
    PRICE,
    PROMPT_TOKENS,
    READY_TIMEOUT_S,
    SERVE_SCALE,
    SESSION,
    SPEED,
    TIME_SCALE,
    WINDOW,
    listen_address,
    retention,
)
from engram_top.seed import reference

DEFAULT_TIME_SCALE = 0.1  # the device placement is ready in 12.5 s instead of 125 s


def _demo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--placement", choices=reference.PLACEMENTS, default="device",
                   help="where the Engram tables live (default: device)")
    p.add_argument("--time-scale", type=TIME_SCALE, default=DEFAULT_TIME_SCALE,
                   help=f"scale of the start-up phases (default {DEFAULT_TIME_SCALE}: 10x faster)")
    # The load's options default to None here: settle_demo_load fills them from --long's
    # load or the chat load, so that a figure given stands over either.
    p.add_argument("--serve-scale", type=SERVE_SCALE, default=None,
                   help="scale of request service times (default 1: node time; 0.02 with "
                        "--long)")
    p.add_argument("--concurrency", type=CONCURRENCY, default=None,
                   help="demo load: streams in flight (1 to 1024; default 8, 32 with --long)")
    _load_lengths(p, demo=True)
    p.add_argument("--long", action="store_true",
                   help="the long-context load: 32 streams of 256K-512K-token prompts and "
                        "1K-2K-token answers, served 50x faster than the node and streamed a "
                        "chunk per 64 tokens; the device "
                        "placement's KV pool fills and requests queue, host-prefetch's does "
                        "not (options given stand over it)")
    p.add_argument("--no-load", action="store_true", help="start no synthetic load")
    _force_argument(p)


# The demo's loads, by option: the chat load, and --long's: 32 prompts of 256K-512K tokens
# ask about 12.6M KV tokens, more than the device placement's 11.84M and a third of
# host-prefetch's 42.70M. Answers of 1K-2K tokens at serve scale 0.02 end in about 12 s: the
# requests then finish as fast as their prompts are prefilled (each alone, under a second),
# about 40 in a 30 s window, past the 30 the latency verdict needs. (4K-8K-token answers ran
# 35 s and held the device placement's 29 slots: 22-30 a window, and one that never held 30
# left the verdict warming up for good once device stopped.)
CHAT_LOAD = {"concurrency": 8, "prompt_tokens": 512, "output_tokens": 128, "serve_scale": 1.0}
LONG_LOAD = {"concurrency": 32, "prompt_tokens": 524288, "output_tokens": 2048,
             "serve_scale": 0.02}
# --long's servers send a chunk per 64 tokens, as SGLang's --stream-interval 64 does: 32
# streams decoding 50x faster than the node are 6,000 tokens a second, and a chunk each kept
# the simulated server busy writing them (86% of its time) and slowed by a loaded machine.
LONG_STREAM_INTERVAL = 64


def settle_demo_load(args: argparse.Namespace) -> None:
    """A demo's load options the command line left out, from --long's load or the chat one."""
    if not hasattr(args, "long"):
        return
    load = LONG_LOAD if args.long else CHAT_LOAD
    for name, value in load.items():
        if getattr(args, name) is None:
            setattr(args, name, value)


def _force_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true",
                   help="start (and switch) even where the fit check finds the scenario does "
                        "not fit the node's free HBM or host RAM (it warns instead)")


def _node_dir_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--node-dir", type=Path, default=None, metavar="DIR",
                   help="with an attached simulated server: its node's folder, whose GPUs and "
                        "host are shown (default: the folder the server names, when it "
                        "serves on this machine's loopback)")


def _load_lengths(p: argparse.ArgumentParser, demo: bool = False) -> None:
    # Long prompts by many streams fill the KV pool: 512 streams of up to 65536 tokens ask
    # for more than the device placement's 11.84M, so requests queue and are retracted.
    long = ", 524288 with --long" if demo else ""
    p.add_argument("--prompt-tokens", type=PROMPT_TOKENS, default=None if demo else 512,
                   metavar="N",
                   help=f"load: prompts of N/2 to N tokens (default 512{long}; a simulated "
                        "server is sent the length, not the text)")
    long = ", 2048 with --long" if demo else ""
    p.add_argument("--output-tokens", type=OUTPUT_TOKENS, default=None if demo else 128,
                   metavar="N", help=f"load: outputs of N/2 to N tokens (default 128{long})")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="engram-top",
        description="Where should DeepSeek-V4.1-Flash's Engram tables live? Watch HBM, the KV "
                    "pool, host RAM and latency of SGLang placements. With no command: the demo.")
    sub = parser.add_subparsers(dest="command")
    demo = sub.add_parser("demo", help="live dashboard of the simulated node (the default)")
    _demo_arguments(demo)
    _record_arguments(demo)
    _dashboard_arguments(demo)

    snap = sub.add_parser("snapshot", help="write a snapshot folder without a terminal: "
                                           "screen.svg, snapshot.json, timeseries, summary.md")
    # Where the readings come from: one of the three.
    source = snap.add_mutually_exclusive_group(required=True)
    source.add_argument("--demo", action="store_true",
                        help="take it from the simulated node")
    source.add_argument("--attach", metavar="URL", default=None,
                        help="take it from a running SGLang server (never stopped)")
    source.add_argument("--recording", type=Path, metavar="PATH", default=None,
                        help="take it from a recording, at --at seconds (default: its end)")
    source.add_argument("--fleet-demo", action="store_true",
                        help="take it from --nodes simulated nodes through a real Prometheus "
                             "(its snapshot.json has a `nodes` list)")
    snap.add_argument("--nodes", type=NODES, default=8, metavar="N",
                      help="with --fleet-demo: how many simulated nodes (default 8)")
    snap.add_argument("--at", type=AT_S, default=None, metavar="S",
                      help="with --recording: the moment, in seconds from its start")
    snap.add_argument("--session", type=SESSION, default=None, metavar="N",
                      help="with --recording: which session of the file (default: the last)")
    snap.add_argument("--api-key", default=None,
                      help="with --attach: the server's key (default: $ENGRAM_TOP_API_KEY)")
    _engine_argument(snap, "with --attach: the engine the server runs", detected=True)
    _node_dir_argument(snap)
    _demo_arguments(snap)
    snap.add_argument("--after", type=AFTER_S, default=5.0,
                      help="seconds to keep watching after the server is ready (default 5)")
    snap.add_argument("--ready-timeout", type=READY_TIMEOUT_S, default=None,
                      help="give up if not ready by then (default: 3x the expected start-up)")
    snap.add_argument("--out", type=Path, default=Path("snapshots"),
                      help="the snapshot folder is made under this one (default: ./snapshots)")
    snap.add_argument("--wait-alerts", action="store_true",
                      help="keep watching after ready until every alert has judged a whole "
                           "window (the server's 30 s, queue growth's, each hold), rather "
                           "than --after's seconds alone; with --fail-on, a cron job's check")
    snap.add_argument("--fail-on", choices=("warning", "error"), default=None,
                      help="exit 3 when a warning or worse is active in the snapshot, 4 when "
                           "an error is, from this severity up (default: exit 0 once written)")

    fl = sub.add_parser("fleet", help="many nodes through Prometheus: placement, HBM, KV, host "
                                      "RAM, latency and alerts, a row per node")
    where = fl.add_mutually_exclusive_group(required=True)
    where.add_argument("--prometheus", metavar="URL", default=None,
                       help="a Prometheus (or anything speaking its query API) that scrapes "
                            "dcgm-exporter, node-exporter and SGLang's /metrics")
    where.add_argument("--demo", action="store_true",
                       help="start --nodes simulated nodes and a real Prometheus scraping them")
    fl.add_argument("--nodes", type=NODES, default=8, metavar="N",
                    help="with --demo: how many simulated nodes (default 8)")
    fl.add_argument("--interval", type=INTERVAL_S, default=5.0, metavar="S",
                    help="seconds between refreshes, 1 to 86400 (default 5)")
    fl.add_argument("--window", type=WINDOW, default=None, metavar="RANGE",
                    help="PromQL range of the latency and throughput rates (default 1m; "
                         "with --demo 20s)")
    fl.add_argument("--prometheus-token-file", type=Path, default=None, metavar="PATH",
                    help="send the token on this file's first line as a bearer token "
                         "(default: $ENGRAM_TOP_PROMETHEUS_TOKEN; a URL's user:password@ is "
                         "basic auth, its password may come from "
                         "$ENGRAM_TOP_PROMETHEUS_PASSWORD)")
    fl.add_argument("--config", type=Path, default=None, metavar="PATH",
                    help="the config file whose [alerts] thresholds apply")
    fl.add_argument("--once", action="store_true",
                    help="with --prometheus: one refresh printed, a node a line, no screen "
                         "(exit 1 where Prometheus does not answer)")
    fl.add_argument("--json", action="store_true",
                    help="with --once: the nodes as JSON, as a snapshot's `nodes`")

    run = sub.add_parser("run", help="the dashboard over a scenario file: start, stop, switch")
    run.add_argument("scenario_file", type=Path)
    run.add_argument("--start", metavar="NAME", help="start this scenario right away")
    run.add_argument("--state-dir", type=Path, default=None, help=STATE_DIR_HELP)
    run.add_argument("--leave-running", action="store_true",
                     help="on quit, leave the server running (a later run or switch finds it)")
    _force_argument(run)
    run.add_argument("--no-load", action="store_true", help="start no synthetic load")
    run.add_argument("--concurrency", type=CONCURRENCY, default=8,
                     help="load: streams in flight (1 to 1024)")
    _load_lengths(run)
    _record_arguments(run)
    _dashboard_arguments(run)

    att = sub.add_parser("attach", help="watch servers someone else started (never stops them)")
    att.add_argument("urls", nargs="+", metavar="URL")
    _engine_argument(att, "the engine the servers run", detected=True)
    _node_dir_argument(att)
    att.add_argument("--api-key", default=None,
                     help="for servers started with --api-key (default: $ENGRAM_TOP_API_KEY, "
                          "which, unlike this option, `ps` does not show)")
    _record_arguments(att)
    _dashboard_arguments(att)

    ag = sub.add_parser("agent", help="headless and always on: watch this node's servers, "
                                      "record them, serve /metrics to Prometheus")
    ag.add_argument("urls", nargs="+", metavar="URL")
    _engine_argument(ag, "the engine the servers run", detected=True)
    _node_dir_argument(ag)
    ag.add_argument("--api-key", default=None,
                    help="for servers started with --api-key (default: $ENGRAM_TOP_API_KEY)")
    ag.add_argument("--listen", type=listen_address, default=AGENT_ADDRESS,
                    metavar="HOST:PORT", help="where /metrics is served (default "
                                              f"{AGENT_ADDRESS}; 0.0.0.0:9478 for a scraper "
                                              "on another host)")
    ag.add_argument("--record-dir", type=Path, default=None, metavar="DIR",
                    help="the recordings' folder (default: the state folder's agent/)")
    ag.add_argument("--retain", type=retention, default="7d,1GB", metavar="AGE,SIZE",
                    help="how much of the recordings to keep: an age, a size or both "
                         "(default 7d,1GB)")
    ag.add_argument("--no-record", action="store_true", help="serve /metrics only")
    ag.add_argument("--scenarios", type=Path, default=None, metavar="FILE",
                    help="a scenario file: serve whether each of its scenarios would fit on "
                         "this node now, in place of the watched server (fit_level, "
                         "fit_headroom_bytes)")

    he = sub.add_parser("health", help="an agent's verdict by its worst active alert, for a "
                                       "script: exit 0, 3 (a warning), 4 (an error); 1 where "
                                       "no agent answers")
    he.add_argument("agent", nargs="?", type=listen_address, default=AGENT_ADDRESS,
                    metavar="HOST:PORT", help="where the agent listens (default "
                                              f"{AGENT_ADDRESS})")
    he.add_argument("--fail-on", choices=("warning", "error"), default="warning",
                    help="the least severity that fails (default warning)")

    rp = sub.add_parser("replay", help="play a recording in the dashboard (play, pause, seek, "
                                       "speed); no node needed")
    rp.add_argument("path", type=Path, metavar="PATH")
    rp.add_argument("--speed", type=SPEED, default=1.0, help="0.25 to 16 (default 1)")
    rp.add_argument("--paused", action="store_true", help="open paused at the start")
    rp.add_argument("--session", type=SESSION, default=None, metavar="N",
                    help="for a file that holds several sessions: play the Nth "
                         "(default: the last)")
    _dashboard_arguments(rp)

    sw = sub.add_parser("switch", help="headless: stop the file's running server, wait for "
                                       "its HBM to return, start another (left running)")
    sw.add_argument("scenario_file", type=Path)
    sw.add_argument("--to", required=True, metavar="NAME",
                    help="the scenario (a [scenarios.NAME] table of the file) to start")
    sw.add_argument("--wait-ready", action="store_true",
                    help="wait until it is ready; exit 1 if it fails")
    _force_argument(sw)
    sw.add_argument("--state-dir", type=Path, default=None, help=STATE_DIR_HELP)

    bench = sub.add_parser("bench", help="headless: the controlled benchmark of a plan file; "
                                         "writes report.md, report.json, requests.csv")
    bench.add_argument("plan", type=Path)
    _force_argument(bench)
    bench.add_argument("--quick", action="store_true",
                       help="a short run (under a minute on the simulated node): two rounds "
                            "(A B, then B A), at most 4 requests a level, the simulated "
                            "node's service 4x faster (figures in node time); the report "
                            "says so")
    bench.add_argument("--out", type=Path, required=True,
                       help="folder for report.md, report.json and requests.csv (nothing "
                            "else goes there)")
    bench.add_argument("--state-dir", type=Path, default=None, help=STATE_DIR_HELP)

    cmp_ = sub.add_parser("compare", help="the seed-style comparison of runs from bench reports "
                                          "(report.json) and sglang.bench_serving files (.jsonl)")
    cmp_.add_argument("files", type=Path, nargs="+")
    cmp_.add_argument("--baseline", default=None,
                      help="the scenario the others are compared to (default: the first "
                           "scenario of the first file, said on stderr)")
    cmp_.add_argument("--price-per-gpu-hour", type=PRICE, default=None)
    cmp_.add_argument("--gpus", type=GPUS, default=None,
                      help="GPUs of the imported bench_serving runs (for the cost row)")
    cmp_.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    _probe_argument(cmp_)

    pr = sub.add_parser("probe", help="time what each Engram placement costs per decode step "
                                      "on this machine's GPU (needs torch); writes probe.json "
                                      "and probe.md")
    from engram_top.probe import gpu as probe
    probe.add_arguments(pr)

    stop = sub.add_parser("stop", help="headless: stop the server a scenario file's run or "
                                       "switch left running")
    stop.add_argument("scenario_file", type=Path)
    stop.add_argument("--state-dir", type=Path, default=None, help=STATE_DIR_HELP)

    df = sub.add_parser("diff", help="what changed between two recordings or snapshots (what "
                                     "the server ran as, then its memory, KV capacity and "
                                     "latency), or two bench reports (with intervals)")
    df.add_argument("a", type=Path, help="a recording, an agent's folder (its newest), a "
                                         "snapshot folder, or a bench report (its folder)")
    df.add_argument("b", type=Path, help="the other: a recording or snapshot beside a "
                                         "recording or snapshot, a bench report beside a "
                                         "bench report")
    df.add_argument("--json", action="store_true", help="print JSON instead of Markdown")

    wy = sub.add_parser("why", help="why the servers in a recording or snapshot died: each "
                                    "death's class, evidence and next action")
    wy.add_argument("path", type=Path, help="a recording (.jsonl), a folder of recordings "
                                            "(the agent's), or a snapshot folder")
    wy.add_argument("--json", action="store_true", help="print JSON instead of text")

    log = sub.add_parser("inspect-log", help="print what the startup-log parser extracts, as JSON")
    log.add_argument("file", type=Path)
    _engine_argument(log, "the engine whose log it is")
    met = sub.add_parser("inspect-metrics",
                         help="print what the metrics parser extracts from a page or URL, as JSON")
    met.add_argument("source", help="a file with a /metrics page, or an http:// URL")
    _engine_argument(met, "the engine whose page it is")

    sim = sub.add_parser("sim", help="the simulated node")
    simsub = sim.add_subparsers(dest="sim_command", required=True)
    from engram_top.sim import options
    options.add_arguments(simsub.add_parser(
        "serve", help="run one simulated server (SGLang's dialect, or vLLM's)"))
    return parser


def _dashboard_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--compare-with", type=Path, nargs="+", default=[], metavar="FILE",
                   help="runs for the comparison screen from recordings, bench reports "
                        "(report.json) or sglang.bench_serving files (.jsonl)")
    p.add_argument("--price-per-gpu-hour", type=PRICE, default=None, metavar="P",
                   help="adds cost per million output tokens to the comparison")
    p.add_argument("--config", type=Path, default=None, metavar="PATH",
                   help="the config file (default: $ENGRAM_TOP_CONFIG, else "
                        "~/.config/engram-top/config.toml)")
    p.add_argument("--snapshot-dir", type=Path, default=Path("snapshots"), metavar="DIR",
                   help="where the s key writes snapshot folders (default: ./snapshots)")
    _probe_argument(p)


def _probe_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--probe", type=Path, default=None, metavar="PROBE_JSON",
                   help="adds a column of the TPOT changes an `engram-top probe` predicted "
                        "(its probe.json) beside the measured runs")


STATE_DIR_HELP = ("the scenario file's state folder: server logs, start-up history, the "
                  "server left running, its lock (default: one per file, under "
                  "$XDG_STATE_HOME/engram-top, by default ~/.local/state/engram-top)")


def _record_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--record", type=Path, default=None, metavar="PATH",
                   help="record readings and events to this JSON-lines file (default: a new "
                        "file in recordings/ of the scenario file's state folder for run, of "
                        "$XDG_STATE_HOME/engram-top, by default ~/.local/state/engram-top, "
                        "for demo and attach; the newest 50 are kept)")
    p.add_argument("--no-record", action="store_true", help="record nothing")


def _engine_argument(parser: argparse.ArgumentParser, what: str, *,
                     detected: bool = False) -> None:
    # The kinds are checked once parsed (_main), not listed as choices here: listing them
    # would look up every installed package's entry points at each start, for every
    # command, a tenth of a second before a dashboard's first frame.
    from scenarios import engines
    default = (f"the one whose names the server's /metrics page has, else {engines.DEFAULT}"
               if detected else engines.DEFAULT)
    parser.add_argument("--engine", default=None if detected else engines.DEFAULT,
                        metavar="KIND",
                        help=f"{what} (default: {default}; built in: "
                             f"{', '.join(engines.BUILT_IN)}; plugins add theirs)")

