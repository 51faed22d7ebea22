"""An attached server's engine, read off its /metrics page when `attach` is not told: a page
that holds both SGLang's and vLLM's names is read by the most and the events line says so;
a server restarted on the same port as the other engine is read again, said, and its
panels follow. Real servers on 127.0.0.1: the simulated node in each engine's dialect,
stopped and started on one port, and a page of the test's own."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from drive import SIZE
from faultkit import TAG, Cli
from helpers import PageServer, free_port, quit_app, screen_text, until

from engram_top.app.main import EngramTopApp
from engram_top.live import engine_detect
from engram_top.live.session import Session, SessionOptions
from scenarios.process import LaunchSpec, ManagedProcess

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)


@asynccontextmanager
async def sim_server(cli: Cli, port: int, dialect: str) -> AsyncIterator[ManagedProcess]:
    """`engram_top sim serve` on ``port`` in an engine's dialect, tagged as the fault
    matrix's processes are (the cli fixture checks nothing of it outlives the test)."""
    folder = cli.tmp / f"{dialect}-{port}-{len(list(cli.tmp.glob('*-node')))}-node"
    folder.mkdir()
    argv = [sys.executable, "-m", "engram_top", "sim", "serve", "--placement", "device",
            "--port", str(port), "--time-scale", "0.02", "--node-dir", str(folder),
            "--dialect", dialect]
    proc = ManagedProcess.start(LaunchSpec(argv, folder / "server.log", env={TAG: cli.tag}))
    try:
        yield proc
    finally:
        result = await proc.stop(10)
        assert not result.survivors, result


def engine_events(session: Session) -> list[str]:
    return [e.text for e in session.store.events if "/metrics page" in e.text]


async def test_a_server_restarted_as_the_other_engine_is_read_again(cli: Cli) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    session = Session(SessionOptions(attach=(url,), load=None, poll_interval=0.3,
                                     state_dir=cli.tmp / "state"))
    app = EngramTopApp(session)

    def engine() -> str | None:
        run = session.store.run
        return run.engine if run is not None else None

    def serving(kind: str) -> bool:
        reading = session.store.latest.get("server")
        data = session.store.data("server")
        return reading is not None and reading.ok and data is not None \
            and (data.extra.get("engine") == "vllm") == (kind == "vllm")

    async with app.run_test(size=SIZE) as pilot:
        async with sim_server(cli, port, "sglang"):
            await until(pilot, lambda: serving("sglang"), 60, "the SGLang server read")
            assert engine() == "SGLang" and engine_events(session) == []
        async with sim_server(cli, port, "vllm"):  # the same port, the other engine
            await until(pilot, lambda: engine() == "vLLM" and serving("vllm"), 60,
                        lambda: f"read as vLLM (events: {engine_events(session)})")
            said = (f"{url}: its /metrics page is now vLLM's, where it was SGLang's "
                    "(restarted as another engine?): read as vLLM from now on")
            assert engine_events(session) == [said]
            # The panels read vLLM's page: no longer SGLang's reader saying it is not its own.
            await until(pilot, lambda: "vLLM server's page" not in screen_text(app)
                        and "11.84M" in screen_text(app), 20, "vLLM's figures on screen")
        async with sim_server(cli, port, "sglang"):  # and back
            await until(pilot, lambda: engine() == "SGLang" and serving("sglang"), 60,
                        lambda: f"read as SGLang again (events: {engine_events(session)})")
            assert engine_events(session)[-1].startswith(
                f"{url}: its /metrics page is now SGLang's, where it was vLLM's")
        await quit_app(app, pilot)


async def test_a_page_of_both_engines_names_is_read_by_the_most_and_said(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_detect, "RECHECK_S", 0.5)  # a page read well: asked again
    sglang = "".join(f"sglang:gauge_{i} {i}\n" for i in range(2))
    vllm = "".join(f"vllm:gauge_{i} {i}\n" for i in range(5))
    with PageServer(sglang + vllm) as server:
        session = Session(SessionOptions(attach=(server.url,), load=None, poll_interval=0.3,
                                         state_dir=tmp_path / "state"))
        app = EngramTopApp(session)
        async with app.run_test(size=(160, 40)) as pilot:
            said = (f"{server.url}: its /metrics page holds vLLM's (5 families) and SGLang's "
                    "(2 families) names: read as vLLM, whose names are the most")
            await until(pilot, lambda: any(e.startswith(said) for e in engine_events(session)),
                        20, lambda: f"the mixed page said (events: {engine_events(session)})")
            assert session.store.run is not None and session.store.run.engine == "vLLM"
            await until(pilot, lambda: said[:60] in screen_text(app), 20,
                        "the events line saying it")
            server.page = "".join(f"sglang:gauge_{i} {i}\n" for i in range(3)) + \
                "vllm:gauge_0 0\nvllm:gauge_1 1\nvllm:gauge_2 2\n"
            # As many of each now: read as it was, and said.
            await until(pilot, lambda: any("as many of each" in e
                                           for e in engine_events(session)), 20,
                        lambda: f"the tie said (events: {engine_events(session)})")
            assert session.store.run.engine == "vLLM"
            await quit_app(app, pilot)
