"""The dashboards' default recordings folder kept within a retention: whole sessions removed
oldest first past an age, a size or a count, never the one being written, as a dashboard
starts and hourly while it runs, and said on the events line; a --record folder untouched."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from engram_top.model.store import RunStore
from engram_top.record.recorder import KEEP_RECORDINGS, TRIM_S, Recorder
from engram_top.record.retention import DASHBOARD, Retention, trim
from engram_top.settings.user_config import ConfigError, parse_config

DAY = 86400.0
NOW = 2_000_000_000.0


def old(folder: Path, name: str, size: int, age_s: float, now: float = NOW) -> Path:
    """A session of ``size`` bytes (sparse: no disk taken) last written ``age_s`` ago."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    with path.open("wb") as f:
        f.truncate(size)
    os.utime(path, (now - age_s, now - age_s))
    return path


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_trim_removes_the_oldest_past_the_age_the_size_or_the_count(tmp_path: Path) -> None:
    for i, age in enumerate((9, 8, 3, 2, 1)):
        old(tmp_path, f"s{i}.jsonl", 100, age * DAY)
    (tmp_path / "notes.txt").write_text("not a recording")
    gone = trim(tmp_path, "*.jsonl", Retention(7 * DAY, None), now=NOW)
    assert [(p.name, b) for p, b in gone] == [("s0.jsonl", 100), ("s1.jsonl", 100)]
    gone = trim(tmp_path, "*.jsonl", Retention(None, 250), now=NOW)  # 300 bytes: one goes
    assert [p.name for p, _ in gone] == ["s2.jsonl"]
    gone = trim(tmp_path, "*.jsonl", Retention(None, None), max_files=1, now=NOW)
    assert [p.name for p, _ in gone] == ["s3.jsonl"]
    assert names(tmp_path) == ["notes.txt", "s4.jsonl"]


def test_the_session_being_written_is_never_removed(tmp_path: Path) -> None:
    writing = old(tmp_path, "now.jsonl", 5000, 30 * DAY)  # old and large: still kept
    old(tmp_path, "before.jsonl", 10, 1 * DAY)
    gone = trim(tmp_path, "*.jsonl", Retention(7 * DAY, 100), writing=writing, now=NOW)
    assert [p.name for p, _ in gone] == ["before.jsonl"]
    assert names(tmp_path) == ["now.jsonl"]


def test_a_dashboard_starting_removes_the_old_sessions_and_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's line, word for word, from a default folder under the user's home."""
    monkeypatch.setenv("HOME", str(tmp_path))
    folder = tmp_path / ".local" / "state" / "engram-top" / "recordings"
    now = time.time()
    for i in range(3):  # a week and a day old: past the default's age
        old(folder, f"2026112{i}-000000-1.jsonl", 137_500_000, 8 * DAY, now)
    kept = old(folder, "20261201-000000-1.jsonl", 1000, 1 * DAY, now)
    store = RunStore()
    recorder = Recorder(store, folder / "20261205-000000-1.jsonl", keep=DASHBOARD,
                        keep_files=KEEP_RECORDINGS).start()
    recorder.close()
    assert names(folder) == [kept.name, "20261205-000000-1.jsonl"]
    said = ("recordings: removed 3 older sessions (412.5 MB) from "
            "~/.local/state/engram-top/recordings, past the retention 7d,3GB ([recordings] "
            "retain in the config file)")
    assert [e.text for e in store.events] == [said]
    assert said in (folder / "20261205-000000-1.jsonl").read_text()  # recorded with it


def test_a_long_session_trims_hourly_and_a_record_path_is_never_touched(
        tmp_path: Path) -> None:
    clock = [100.0]
    default, chosen = tmp_path / "default", tmp_path / "chosen"
    store = RunStore()
    kept = Recorder(store, default / "live.jsonl", clock=lambda: clock[0],
                    keep=Retention(None, 1000), keep_files=KEEP_RECORDINGS).start()
    mine = Recorder(RunStore(), chosen / "mine.jsonl", clock=lambda: clock[0]).start()
    try:
        old(default, "a.jsonl", 800, 1.0)
        old(default, "b.jsonl", 800, 0.5)
        old(chosen, "a.jsonl", 800, 1.0)
        kept._on_tick()  # within the hour: not looked at again
        assert names(default) == ["a.jsonl", "b.jsonl", "live.jsonl"]
        clock[0] += TRIM_S
        kept._on_tick()
        mine._on_tick()
        assert names(default) == ["b.jsonl", "live.jsonl"]
        assert names(chosen) == ["a.jsonl", "mine.jsonl"]
        assert store.events[-1].text.startswith("recordings: removed 1 older session (0.0 MB)")
    finally:
        kept.close()
        mine.close()


def test_the_default_folder_keeps_fifty_sessions_at_most(tmp_path: Path) -> None:
    for i in range(60):
        old(tmp_path, f"s{i:02}.jsonl", 10, 60 - i)
    Recorder(RunStore(), tmp_path / "t.jsonl", keep=DASHBOARD,
             keep_files=KEEP_RECORDINGS).start().close()
    assert len(names(tmp_path)) == KEEP_RECORDINGS and "s10.jsonl" not in names(tmp_path)


@pytest.mark.parametrize("text", ["7d,3GB", "90m", "2GiB", "36h,500MB", "1234b", "5.5s"])
def test_a_retention_is_written_as_it_is_read(text: str) -> None:
    assert Retention.parse(str(Retention.parse(text))) == Retention.parse(text)
    assert str(DASHBOARD) == "7d,3GB"


def test_the_config_file_sets_the_retention(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[recordings]\nretain = "2d,500MB"\n')
    assert parse_config(path).recordings == Retention(2 * DAY, 500 * 10**6)
    path.write_text("[recordings]\n")
    assert parse_config(path).recordings == DASHBOARD


@pytest.mark.parametrize(("body", "message"), [
    ('retain = "7 days"', "config.toml:2: recordings.retain: '7 days' is no age (30m, 12h, 7d) "
                          "or size (500MB, 2GiB)"),
    ('retain = "0d"', "config.toml:2: recordings.retain: '0d': must be more than 0"),
    ('retain = "36500d"', "config.toml:2: recordings.retain: '36500d': at most 3650d"),
    (f'retain = "{"9" * 400}GB"', f"config.toml:2: recordings.retain: '{'9' * 400}GB': at "
                                  "most 1000TB"),
    ("retain = 7", 'config.toml:2: recordings.retain: should be an age, a size or both as a '
                   'string ("7d", "3GB", "7d,3GB"), got int 7'),
    ('retian = "7d"', "config.toml:2: recordings.retian: unknown key (did you mean 'retain'?) "
                      "(known: retain)"),
])
def test_a_bad_retention_is_refused_by_line_and_key(tmp_path: Path, body: str,
                                                    message: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(f"[recordings]\n{body}\n")
    with pytest.raises(ConfigError) as err:
        parse_config(path)
    assert [p.replace(str(tmp_path) + "/", "") for p in err.value.problems] == [message]
