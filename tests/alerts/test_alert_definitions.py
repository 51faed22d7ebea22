"""Each alert is defined once (engram_top.alerts.definitions): its names list, the config
file's keys, the fleet's rules, the store's conditions and the README's list all follow
from the definitions, so none can drift from another."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from engram_top.alerts.definitions import ALERT_NAMES, ALERTS, RECORDING, readme_list
from engram_top.alerts.monitor import AlertMonitor
from engram_top.alerts.thresholds import SETTINGS, Thresholds, fleet_alerts
from engram_top.fleet.session import FleetRow
from engram_top.model.store import RunStore

GIB = 1024**3


def _words(text: str) -> str:
    return " ".join(text.split())


def test_the_readme_lists_the_alerts_as_defined() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    listed = readme_list()
    assert _words(listed) in _words(readme), (
        "README.md's list of alerts differs from their definitions; it should read:\n"
        + listed)


def test_every_alert_is_named_once_and_said() -> None:
    assert len(set(ALERT_NAMES)) == len(ALERTS) == 20
    for a in ALERTS:
        assert a.severity in ("warning", "error") and a.says and a.config_note, a.name


def test_the_thresholds_are_the_definitions_settings() -> None:
    keys = [f.name for f in dataclasses.fields(Thresholds)]
    assert keys == [s.key for s in SETTINGS] and len(set(keys)) == len(keys)
    t = Thresholds()
    for a in ALERTS:
        for s in a.settings:
            assert getattr(t, s.key) == s.default
    assert Thresholds(kv_usage_pct=50).kv_usage_pct == 50
    with pytest.raises(TypeError):
        Thresholds(no_such_key=1)


def test_every_fleet_rule_reads_a_figure_of_the_row_and_a_threshold() -> None:
    figures = {f.name for f in dataclasses.fields(FleetRow)} | {
        name for name, v in vars(FleetRow).items() if isinstance(v, property)}
    rules = [a for a in ALERTS if a.fleet is not None]
    assert [a.name for a in rules] == ["hbm", "kv", "host-available", "server-silent"]
    for a in rules:
        assert a.fleet is not None
        assert a.fleet.figure in figures and a.fleet.setting in {s.key for s in a.settings}


def _row(**changes: object) -> FleetRow:
    base = dict(node="n1", placement="device", placement_inferred=False, state="serving",
                gpus=8, hbm_min=90 * GIB, hbm_max=97 * GIB, hbm_total=100 * GIB,
                kv_usage=0.95, kv_full=None, kv_swa=None, kv_tokens=None, weights_gb=None,
                host_used=95 * GIB, host_available=5 * GIB, host_total=100 * GIB,
                ttft_p50=None, ttft_p99=None, tpot_p50=None, tpot_p99=None,
                output_tok_s=None, running=1.0, alerts=(), missing=(), age_s=0.0)
    base.update(changes)
    return FleetRow(**base)  # type: ignore[arg-type]


def test_the_fleet_applies_the_dashboards_thresholds() -> None:
    assert fleet_alerts(_row(), Thresholds()) == ("hbm 97%", "kv 95%", "host 5% free")
    stale = _row(state="stale", age_s=30.0)
    assert fleet_alerts(stale, Thresholds())[-1] == "server silent"
    assert "server silent" not in fleet_alerts(stale, Thresholds(server_silent_s=60))
    assert fleet_alerts(_row(), Thresholds(disabled=("kv",))) == ("hbm 97%", "host 5% free")
    assert fleet_alerts(_row(), Thresholds(hbm_used_pct=98, kv_usage_pct=96,
                                           host_available_pct=4)) == ()
    assert fleet_alerts(stale, Thresholds(enabled=False)) == ()
    # A figure the node lacks raises nothing.
    assert fleet_alerts(_row(hbm_max=None, kv_usage=None, host_available=None),
                        Thresholds()) == ()


def test_a_standing_condition_is_its_alerts_severity() -> None:
    store = RunStore()
    store.conditions[RECORDING.name] = "recording stopped: /x: No space left on device"
    changes = AlertMonitor().evaluate(store, 0.0)
    assert [(c.change, c.alert.id, c.alert.severity) for c in changes] == [
        ("raised", "recording", "error")]
    assert store.alerts["recording"].message.endswith("No space left on device")
