"""Attached servers: someone else's server watched by a session, with no process or
lifetime of ours. The session's part that reads their engine (told up front, or by their
first page), their environment (a server on this machine: its engine's switches, its
process tree's share of the host) and, for a simulated server, its node's folder."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collectors.host import HostCollector
from collectors.nvml import GpuCollector
from collectors.pages import split_userinfo
from collectors.readings import Status
from collectors.server_process import might_serve, output_file, server_environ, url_port
from collectors.shared import SharedSampler
from collectors.source import NodeSource, SourceName
from engram_top.live.attach_node import named_node_dir
from engram_top.live.engine_detect import DetectingCollector
from engram_top.model.store import RunFacts, RunStore, StoreTopic
from engram_top.sim.backends import SimGpuBackend, SimHostBackend
from scenarios import engines
from scenarios.engines.base import Engine, ServerCollector
from scenarios.runstate import RunState

# The host reading after the server's process is found: a poll or two, on a slow node.
TREE_DEADLINE_S = 5.0
KEEP_DEATHS = 32  # an attached server's earlier deaths kept on its facts (the latest)
# An answering server whose process is not known is looked for again after a second, then
# twice as long each time it is not found, up to a minute (a walk of the host's sockets).
LOOK_FIRST_S, LOOK_MOST_S = 1.0, 60.0

if TYPE_CHECKING:
    from engram_top.live.options import SessionOptions
    from engram_top.seed.reference import Reference


def to_attach(urls: Sequence[str]) -> tuple[str, ...]:
    """The servers a start attaches, as shown (no password), in the order it attaches them
    (the first listed last: it is the one watched)."""
    return tuple(dict.fromkeys(split_userinfo(url)[0] for url in reversed(urls)))


class AttachedServers:
    """Mixed into Session: what it holds that these methods read and write."""

    store: RunStore
    options: SessionOptions
    sources: dict[str, Any]
    node_dir: Path | None
    ref: Reference
    host: HostCollector
    gpu: GpuCollector
    _gpus: SharedSampler[Any]
    _host_backend: Any
    _tasks: list[asyncio.Task[Any]]
    _attached_env: dict[str, dict[str, str]]
    _looked_at: float
    _look_every: float
    _attached_engine: dict[str, Engine]
    _answered: set[str]  # attached servers' URLs that answered once (a death before: start-up)
    attaching: tuple[str, ...]  # those the start has yet to attach, as shown (no password)

    announce: Callable[[str], None]
    add_source: Callable[..., None]  # Session.add_source(source, interval=None)

    async def attach(self, url: str) -> None:
        """Watch a server someone else started: no process of ours, no lifetime to own.
        Every attached server is polled, each under its own node (its URL); the panels
        show the one watched, the others wait in the list with their readings current.

        A password in the URL (http://user:PASS@host) goes to the collector alone: the
        store, the screen, recordings and snapshots know the server by its URL without it."""
        shown, auth = split_userinfo(url)
        engine = self._attached_engine_of(shown)
        facts = self.store.facts_for(shown) or RunFacts(
            scenario=shown, placement="?", node=self.store.node, time_scale=1.0,
            launched_wall=time.time(), launched_at=time.monotonic(), state=RunState.ATTACHED,
            url=shown, owned=False, title="attached: its lifetime is not ours",
            own_polls=engine.own_polls, server_node=shown, engine=engine.speaks,
            engine_name=engine.display, words=dict(engine.words),
            finding_processes=shown not in self._attached_env)
        self.store.set_run(facts)
        self.attaching = tuple(u for u in self.attaching if u != shown)
        name = f"server {shown}"
        if shown not in self._attached_env:
            self._attached_env[shown] = {}
            # A task of the session's: cancelled and awaited by close.
            self._tasks.append(asyncio.create_task(self._read_environ(shown),
                                                   name=f"environ {shown}"))
        if name not in self.sources:  # watched again: its collector (and password) stays
            collector: ServerCollector = (
                engine.collector(shown, api_key=self.options.api_key, auth=auth)
                if self.options.engine else
                DetectingCollector(shown, api_key=self.options.api_key, auth=auth,
                                   on_engine=lambda e, note: self._attached_speaks(
                                       shown, e, note)))
            self.add_source(NodeSource(name, collector.poll, collector.close, node=shown,
                                       kind=SourceName.SERVER))

    async def _read_environ(self, url: str) -> None:
        # psutil walks every socket of the machine: off the event loop.
        # Every engine's variables: the engine may be told only by a later page.
        prefixes = tuple(p for kind in engines.kinds() for p in engines.get(kind).env_prefixes)
        try:
            pid, env = await asyncio.to_thread(server_environ, url, prefixes)
            if pid is not None or not self._attached_env.get(url):  # none found: keep the last
                self._attached_env[url] = env
            facts = self.store.facts_for(url)
            if pid is not None and facts is not None:
                # Where its output goes to a file, that is its log: a death reads its end.
                facts.log_path = await asyncio.to_thread(output_file, pid) or facts.log_path
            self._looked_at = time.monotonic()
            self._look_every = LOOK_FIRST_S if pid is not None else \
                min(LOOK_MOST_S, 2 * self._look_every)
            if pid is not None and self._watched(url):
                self.host.root_pid = pid  # the watched server's tree: its share of the host
                # Found: its processes are told apart from the next host reading on.
                deadline = time.monotonic() + TREE_DEADLINE_S
                while time.monotonic() < deadline and not self._tree_read():
                    await asyncio.sleep(0.1)
        finally:
            if (facts := self.store.facts_for(url)) is not None:
                facts.finding_processes = False

    def _came_back(self, facts: RunFacts) -> None:
        """An attached server whose death was classified answers again on its URL: it was
        restarted (systemd, a container's restart policy, a person). Its death joins the
        earlier ones (the restart-loop alert counts them), its new process is looked for
        (the ledgers and the next death follow it), and the events say so."""
        death = facts.death
        if facts.owned or death is None or not facts.url:
            return
        latest = self.store.latest.get(SourceName.SERVER)
        if latest is None or not latest.ok or death.at is None or latest.wall <= death.at:
            return
        facts.earlier_deaths = (*facts.earlier_deaths, death)[-KEEP_DEATHS:]
        facts.death = None
        # A new launch for the forensics: its next death is classified on its own.
        facts.launched_at, facts.launched_wall = time.monotonic(), time.time()
        self.store.bump(StoreTopic.RUN)
        self.store.event("warning", f"{facts.url} answers again after it died "
                                    f"({death.title}): restarted; deaths seen: "
                                    f"{len(facts.earlier_deaths)}")
        if self._watched(facts.url):
            self.host.root_pid = None  # looked for again once it answers (_look_again)
            self._look_every = LOOK_FIRST_S
            facts.finding_processes = True

    def _look_again(self, facts: RunFacts) -> None:
        """The watched attached server's process is not known: it was not started yet
        when attach looked (an agent started before its server, at boot), or it was
        restarted. Looked for again (LOOK_FIRST_S, then less often) while it answers, and
        while it has never answered (a process started to serve on its port, loading its
        weights, is found: its share of the host and a death in start-up are read)."""
        if facts.owned or not facts.url or self.host.root_pid is not None \
                or not self._watched(facts.url) \
                or time.monotonic() - self._looked_at < self._look_every:
            return
        latest = self.store.latest.get(SourceName.SERVER)
        if latest is None or (not latest.ok and facts.url in self._answered):
            return  # a server that answered and stopped: looked for once it answers again
        self._looked_at = time.monotonic()
        self._tasks.append(asyncio.create_task(self._read_environ(facts.url),
                                               name=f"environ {facts.url}"))

    def _answers(self, facts: RunFacts) -> bool:
        """Whether the attached server ``facts`` has ever served (its /health 200, now
        included): a death before that is a death in start-up (or its warm-up)."""
        latest = self.store.latest.get(SourceName.SERVER)
        if facts.url and latest is not None and latest.status is Status.OK:
            self._answered.add(facts.url)
        return facts.url in self._answered

    def _watched(self, url: str) -> bool:
        """Whether ``url`` is the attached server whose tree the host collector follows."""
        return bool(self.options.attach) and url == split_userinfo(self.options.attach[0])[0]

    def _tree_read(self) -> bool:
        host = self.store.data(SourceName.HOST)
        return host is not None and host.server_tree is not None

    def _on_node(self, node_dir: Path) -> None:
        self.node_dir = node_dir
        self.store.node = f"simulated {self.ref.gpus}x {self.ref.gpu_name}"

    def _follow_node(self, facts: RunFacts) -> None:
        """An attached server that names its simulated node (attach_node): from now on the
        node's GPUs and host are read from its folder, not this machine's."""
        if self.node_dir is not None or facts.owned or not facts.url:
            return
        server = self.store.data(SourceName.SERVER)
        node_dir = named_node_dir(facts.url, server.simulated) if server is not None else None
        if node_dir is None:
            return
        self._on_node(node_dir)
        facts.node = self.store.node
        self.store.bump(StoreTopic.RUN)
        self._gpus = SharedSampler(SimGpuBackend(node_dir))
        self._host_backend = SimHostBackend(node_dir)
        self.gpu = GpuCollector(self._gpus)
        root, self.host = self.host.root_pid, HostCollector(self._host_backend)
        self.host.root_pid = root
        self.add_source(NodeSource(SourceName.GPU, self.gpu.poll, self.gpu.close))
        self.add_source(NodeSource(SourceName.HOST, self.host.poll))
        self.store.event("info", f"{facts.url} is a simulated server: its node's GPUs and "
                         f"host are read from {node_dir}")

    def nobody_serves(self, refused_for_s: float = 2.0) -> str | None:
        """Why waiting for the watched attached server is pointless, or None: its URL is on
        this host, its polls have been refused for ``refused_for_s``, and no process here
        listens on its port or was started to (a server loading its weights would be one:
        it listens only once they are loaded). A URL on another host: always None."""
        facts = self.store.run
        failed = self.store.latest.get(SourceName.SERVER)
        if facts is None or facts.owned or not facts.url or failed is None or failed.ok \
                or failed.failing_since is None \
                or failed.at - failed.failing_since < refused_for_s:
            return None
        url = split_userinfo(facts.url)[0]
        if might_serve(url) is not False:
            return None
        return (f"nothing listens at {url} and no process on this node was started to serve "
                f"on port {url_port(url)} ({failed.message})")

    def _attached_engine_of(self, url: str) -> Engine:
        """The engine an attached server runs: what its page said, else --engine's."""
        return self._attached_engine.get(url) or engines.get(self.options.engine
                                                             or engines.DEFAULT)

    def _attached_speaks(self, url: str, engine: Engine, note: str | None = None) -> None:
        """An attached server's page named its engine (no --engine given), or changed it
        (``note`` says how, and what a page of several engines' names was read as): its
        facts and the placement reading follow that engine from now on."""
        self._attached_engine[url] = engine
        facts = self.store.facts_for(url)
        if facts is not None:
            facts.engine, facts.engine_name = engine.speaks, engine.display
            facts.words = dict(engine.words)
            facts.own_polls = engine.own_polls
            self.store.bump(StoreTopic.RUN)
        self.announce(f"{url}: {note}" if note else
                      f"{url}: its /metrics page is {engine.speaks}'s, so it is read as "
                      f"{engine.speaks} (--engine {engine.kind} says so up front)")
