"""`engram-top diff A B` over two real recordings of the simulated node whose servers differ
by one flag (HiCache's host pool): the fingerprint says which flag first, then the memory,
KV pool and latency; a side that is no recording is refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import sim_scenario_file, until

from collectors.source import SourceName
from engram_top.cli.commands import main
from engram_top.export.snapshot import write_folder
from engram_top.live.session import Session, SessionOptions
from engram_top.record.recorder import Recorder
from engram_top.seed import reference
from scenarios.runstate import RunState

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)


async def recorded(tmp_path: Path, name: str, *args: str) -> tuple[Path, Path]:
    """A session that starts the scenario, records it until it serves with its fingerprint
    taken, takes a snapshot, then stops it: the recording and the snapshot folder."""
    folder = tmp_path / name
    folder.mkdir()
    session = Session(SessionOptions(scenario_file=sim_scenario_file(folder, name, "device", *args),
                                     start=name, state_dir=folder / "state", free_ports=True,
                                     load=None, poll_interval=0.5))
    record = folder / f"{name}.jsonl"
    try:
        await session.start()
        recorder = Recorder(session.store, record).start()
        store = session.store
        def fingerprinted() -> bool:  # taken once the server said its version
            server = store.data(SourceName.SERVER)
            fp = store.run.fingerprint if store.run is not None else None
            return store.run is not None and store.run.state == RunState.READY \
                and fp is not None and server is not None and bool(server.version) \
                and server.version in fp.engine

        await until(None, fingerprinted, 90, "ready, a good reading, its fingerprint taken")
        snap = write_folder(folder, store, reference.default(), svg=None, name="snapshot")
        await session.close()
        recorder.close()
    finally:
        await session.close()
    return record, snap


@pytest.mark.timeout(240)
async def test_two_recordings_that_differ_by_one_flag(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    (a, snap_a), (b, _) = (await recorded(tmp_path, "plain"),
                           await recorded(tmp_path, "hicache", "--hicache-size", "0.01"))
    code = main(["diff", str(a), str(b)])
    out = capsys.readouterr()
    assert code == 0, out.err
    text = out.out
    assert text.startswith("# engram-top diff\n")
    ran = text.split("## What it ran as")[1].split("## HBM")[0]
    rows = [line for line in ran.splitlines() if line.startswith("| ") and "what" not in line]
    # The flag, and what it set: nothing else about what ran (ports and names are left out).
    assert any(r.startswith("| server_args.hicache_size | ") for r in rows), ran
    assert all("hicache" in r or "hierarchical" in r for r in rows), ran
    assert "| hicache_host_bytes | n/a | 0.04 GiB |" in ran  # 0.01 GB on each of 4 ranks
    # The same node and model: the KV pool's capacity is the seed's on both.
    assert "| KV capacity (tokens) | 11,840,000 | 11,840,000 | +0.00% |" in text
    data = json.loads((main(["diff", str(a), str(b), "--json"]), capsys.readouterr().out)[1])
    assert any(c[0] == "server_args.hicache_size" for c in data["fingerprint_changes"])
    assert data["a"]["figures"]["KV capacity (tokens)"] == 11_840_000
    # A side that is no recording: exit 2, named.
    code = main(["diff", str(a), str(tmp_path / "plain" / "deaths.toml")])
    assert code == 2 and "deaths.toml: neither a recording, a snapshot nor a bench report" \
        in capsys.readouterr().err
    # A snapshot against the other's recording: the same flag; against its own recording,
    # the same run (the recording is read where its server last served: the same figures).
    code = main(["diff", str(snap_a), str(b)])
    text = capsys.readouterr().out
    assert code == 0 and "| server_args.hicache_size | " in text, text
    code = main(["diff", str(snap_a), str(a)])
    text = capsys.readouterr().out
    assert code == 0 and "The same: engine and version, arguments, switches" in text, text
    assert "| KV capacity (tokens) | 11,840,000 | 11,840,000 | +0.00% |" in text
