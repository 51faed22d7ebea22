"""Sources keyed by node: readings and series live under (node, source), so several servers
attached at once are each polled and kept apart, and a source of a type the store has no
panel for is kept (its numbers as series) rather than dropped."""

from __future__ import annotations

from dataclasses import dataclass

from helpers import API_KEY, Fleet, until

from collectors.readings import Reading, Status
from collectors.source import LOCAL, SourceKey
from engram_top.live.session import Session, SessionOptions
from engram_top.model.store import RunStore, SeriesKey


async def test_attached_servers_are_polled_at_once_each_as_its_own_node(fleet: Fleet) -> None:
    # Two shared servers no test stops; the key opens the one started with --api-key and
    # is ignored by the other.
    device, host = fleet.ready("device"), fleet.ready("apikey")
    session = Session(SessionOptions(attach=(device.url, host.url), api_key=API_KEY,
                                     load=None, poll_interval=0.2))
    store = session.store
    keys = SourceKey(device.url, "server"), SourceKey(host.url, "server")
    # Listed before the start, in the order it lists their runs (the first one last: it is
    # the one watched), and no longer once it has them.
    assert session.attaching == (host.url, device.url)
    await session.start()
    try:
        assert session.attaching == () and list(store.history) == [host.url, device.url]
        await until(None, lambda: all(k in store.good for k in keys), 15,
                    "a good reading from each attached server")
        # Each under its own node, with its own server's answer.
        assert [store.good[k].data.url for k in keys] == [device.url, host.url]
        assert all(store.good[k].data.max_total_num_tokens == 11_840_000 for k in keys)
        # The first listed is the one the panels show.
        assert store.run.scenario == device.url
        assert store.latest["server"].data.url == device.url
        assert list(store.latest) == ["gpu", "host", "server"]
        # Watching the other is at once: its readings and series were current all along.
        await until(None, lambda: store.series.get(
            SeriesKey(host.url, "server", "token_usage")) is not None, 15, "its series")
        await session.attach(host.url)
        assert store.latest["server"].data.url == host.url
        assert store.line("server", "token_usage") is store.series[
            SeriesKey(host.url, "server", "token_usage")]
        assert len(session.sources) == 4  # gpu, host, and one per attached server
    finally:
        await session.close()


def test_the_servers_to_attach_are_named_as_shown_once_each() -> None:
    session = Session(SessionOptions(attach=(
        "http://user:pw@10.0.0.7:30000", "http://10.0.0.8:30000", "http://user:pw@10.0.0.7:30000"),
        load=None))
    assert session.attaching == ("http://10.0.0.7:30000", "http://10.0.0.8:30000")


@dataclass(frozen=True)
class PrometheusTarget:
    """A reading type of a future source, unknown to the store and the panels."""

    up: int
    scrape_duration_s: float
    job: str = "sglang"


def test_a_reading_of_an_unknown_type_is_kept_with_its_numbers_as_series() -> None:
    store = RunStore()
    key = SourceKey("node-7", "prometheus")
    for t, up in ((1.0, 1), (2.0, 0)):
        store.add(key, Reading("prometheus", Status.OK, PrometheusTarget(up, 0.25), at=t))
    assert store.readings[key].data == PrometheusTarget(0, 0.25)
    assert store.series[SeriesKey("node-7", "prometheus", "up")].points() == [(1.0, 1.0),
                                                                              (2.0, 0.0)]
    assert SeriesKey("node-7", "prometheus", "up").name == "node-7/prometheus.up"
    # Another node's sources are not this node's: the panels' view leaves them out.
    assert "prometheus" not in store.latest and key.node != LOCAL
    assert SourceKey.parse(str(key)) == key
    assert SourceKey.parse("http://10.0.0.7:30000/server") == SourceKey(
        "http://10.0.0.7:30000", "server")


async def test_attach_reads_the_placement_from_the_servers_environment(fleet: Fleet) -> None:
    # A local server started with the V4.1 preview's Engram switches in its environment:
    # nothing over HTTP says where its tables are, its process does.
    server = fleet.ready("attach-env")
    session = Session(SessionOptions(attach=(server.url,), load=None, poll_interval=0.2))
    await session.start()
    try:
        run = session.store.run
        await until(None, lambda: run.placement != "?", 15, "the placement inferred")
        assert run.placement == "host-prefetch"
        assert run.engram is not None and run.engram.source == "environment"
        assert run.engram.layout == "shared" and run.engram.pinned is True
        # Asked for; what decides it (the GPU, the server args) is not all known here.
        assert run.engram.prefetch.startswith(("asked", "engaged", "would not"))
    finally:
        await session.close()
