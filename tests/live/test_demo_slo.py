"""The demo's load and its slo alert are held to its scenario file's [slo] (which its own
load meets at every placement), and a user's config [slo] stands over it where the config
has one: a config without one leaves the file's."""

from __future__ import annotations

from pathlib import Path

from engram_top.app.main import EngramTopApp
from engram_top.compare.slo import DEFAULT, Slo
from engram_top.live.demo import DemoSession
from engram_top.live.session import Session, SessionOptions
from engram_top.settings.user_config import load_config

DEMO = ["p99 TTFT <= 1000 ms", "p99 TPOT <= 150 ms"]


def labels(slos: tuple[Slo, ...]) -> list[str]:
    return [s.label for s in slos]


def test_the_demo_is_held_to_its_own_slo_unless_the_config_says_one(tmp_path: Path) -> None:
    session = DemoSession()
    assert labels(session.slos) == DEMO
    assert labels(session.alerts.slos) == DEMO
    silent = tmp_path / "silent.toml"
    silent.write_text("[alerts]\nhysteresis_pct = 3\n")
    config, error = load_config(silent)
    assert error is None and config is not None and not config.slos_given
    EngramTopApp(session, config=config)
    assert labels(session.slos) == DEMO and labels(session.alerts.slos) == DEMO
    said = tmp_path / "said.toml"
    said.write_text("[slo]\ntpot = { percentile = 99, max_ms = 40 }\n")
    config, error = load_config(said)
    assert error is None and config is not None and config.slos_given
    EngramTopApp(session, config=config)
    assert labels(session.slos) == ["p99 TPOT <= 40 ms"]
    assert labels(session.alerts.slos) == ["p99 TPOT <= 40 ms"]


def test_a_scenario_file_without_slo_keeps_the_defaults(tmp_path: Path) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text('[defaults]\nkind = "simulated"\n\n[scenarios.device]\n'
                    'placement = "device"\nport = 30000\n')
    session = Session(SessionOptions(scenario_file=plan, load=None, state_dir=tmp_path / "s"))
    assert session.slos == DEFAULT and session.alerts.slos == DEFAULT
