"""`engram-top agent`: one node, watched without a terminal for as long as it runs. It polls
as the dashboard does (the same collectors, store and alerts), never starts or stops a
server, records into a bounded folder of its own (engram_top.record.rotation), and serves
what it knows on /metrics in Prometheus' text format for the fleet and Grafana.

In the foreground by design (systemd, a container): it says what it does and each alert on
stderr, one line each, and ends within seconds on SIGTERM, SIGINT or SIGHUP, exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import signal
import sys
import time
from pathlib import Path

from engram_top.cli.lifetime import say
from engram_top.cli.sessions import say_which_credential, user_thresholds

CHECK_S = 5.0  # how often the recording is looked at (rotation, retention)
REQUEST_DEADLINE_S = 5.0  # a scraper that sends nothing whole in this is dropped
MAX_REQUEST = 8192  # bytes of a request's head: a scrape's is a few hundred
STOP_DEADLINE_S = 4.0  # the listener's close: within SIGTERM's 5 s with the rest
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"


async def run_agent(args: argparse.Namespace) -> int:
    from collectors.pages import split_userinfo
    from engram_top.cli.agent_health import health_text
    from engram_top.cli.snapshot import run_state
    from engram_top.export import prometheus_text
    from engram_top.export.fit_series import fit_families
    from engram_top.live.attach_node import node_dir_problem
    from engram_top.live.session import Session, SessionOptions
    from engram_top.record.rotation import RotatingRecording
    from engram_top.settings.paths import state_base
    from scenarios.scenario_file import ScenarioError, load
    if args.node_dir is not None and (problem := node_dir_problem(args.node_dir)):
        print(f"engram-top agent: --node-dir {problem}", file=sys.stderr)
        return 2
    try:
        fits = list(load(args.scenarios).scenarios.values()) if args.scenarios else []
    except ScenarioError as exc:
        print(f"engram-top agent: --scenarios: {exc}", file=sys.stderr)
        return 2
    host, port = args.listen
    session = Session(SessionOptions(attach=tuple(args.urls), api_key=args.api_key,
                                     engine=args.engine, load=None, node_dir=args.node_dir,
                                     thresholds=user_thresholds()))
    say_which_credential(session, args.urls, args.api_key)
    store = session.store
    folder: Path = args.record_dir or state_base() / "agent"
    recording = None if args.no_record else RotatingRecording(store, folder, args.retain)
    started = time.time()
    watched = ", ".join(split_userinfo(u)[0] for u in args.urls)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_DEADLINE_S)
            method, path, *_ = head[:MAX_REQUEST].split(b"\r\n", 1)[0].decode(
                "latin-1").split(" ") + ["", ""]
            if method != "GET":
                status, body, kind = "405 Method Not Allowed", b"GET only\n", "text/plain"
            elif path.split("?", 1)[0] == "/metrics":
                health = prometheus_text.AgentHealth(
                    recording=recording is not None and recording.active,
                    recording_bytes=recording.kept_bytes() if recording is not None else 0,
                    started_wall=started)
                text = prometheus_text.render(prometheus_text.node_families(
                    store, health, store.clock(), fit_families(store, fits)))
                status, body, kind = "200 OK", text.encode(), TEXT_FORMAT
            elif path.split("?", 1)[0] == "/health":  # 200 whatever it says (agent_health)
                kept = str(folder) if recording is not None and recording.active else "off"
                text = health_text(store.alerts.values(),
                                   watching=f"{watched} ({run_state(store)})", recording=kept)
                status, body, kind = "200 OK", text.encode(), "text/plain; charset=utf-8"
            elif path == "/":
                status, body, kind = "200 OK", b"engram-top agent: /metrics, /health\n", \
                    "text/plain"
            else:
                status, body, kind = "404 Not Found", b"not found: try /metrics\n", "text/plain"
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: "
                         f"{len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
            await asyncio.wait_for(writer.drain(), REQUEST_DEADLINE_S)
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ConnectionError):
            pass  # a scraper gone or too slow: nothing to answer
        except Exception as exc:  # never a traceback on the agent's stderr for one scrape
            say(f"engram-top agent: /metrics failed: {type(exc).__name__}: {exc}")
            with contextlib.suppress(Exception):
                writer.write(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n"
                             b"Connection: close\r\n\r\n")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    try:
        server = await asyncio.start_server(answer, host, port, limit=MAX_REQUEST)
    except OSError as exc:
        # asyncio's own words name the address again; the system's say why in three.
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        print(f"engram-top agent: cannot listen on {host}:{port}: {reason}", file=sys.stderr)
        return 2
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    caught: list[str] = []

    def on_signal(sig: signal.Signals) -> None:
        caught.append(sig.name)
        stop.set()

    for sig in SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)
    store.listeners.append(lambda what, payload: say(
        f"engram-top agent: {payload.level}: {payload.text}") if what == "event" and
        payload.level != "info" else None)
    session.alerts.listeners.append(lambda c: say(
        f"engram-top agent: alert {c.change}: {c.alert.message}"))
    try:
        await session.start()
        # Runs for days: what the start made is left out of every later full collection of
        # the garbage collector (each walked it all: 40-50 ms held), as the dashboard does.
        gc.freeze()
        if recording is not None:
            recording.start()
        say(f"engram-top agent: watching {watched}; serving http://{host}:{port}/metrics; "
            + (f"recording to {folder}" if recording is not None else "not recording"))
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), CHECK_S)
            if recording is not None:
                recording.check()
    finally:
        for sig in SIGNALS:
            loop.remove_signal_handler(sig)
        server.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(server.wait_closed(), STOP_DEADLINE_S)
        if recording is not None:
            recording.close()
        await session.close()
    say(f"engram-top agent: stopped by {caught[0]}" if caught else "engram-top agent: stopped")
    return 0
