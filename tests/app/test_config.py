"""The user config file: defaults, a full file, every refusal with its FILE:LINE, the lookup;
hostile numbers and key bindings refused by name, and no remap that leaves quit without a key."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest
from helpers import StaticSession, quit_app, until
from scene import scene_store

from engram_top.alerts.thresholds import Thresholds
from engram_top.app.compare_screen import CompareScreen
from engram_top.app.dialogs import HelpScreen
from engram_top.app.main import EngramTopApp
from engram_top.settings.user_config import (
    ALERT_FIELDS,
    ConfigError,
    UserConfig,
    config_path,
    default_config_text,
    load_config,
    parse_config,
    parse_config_text,
)
from scenarios.bounds import Range


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def refusal(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse_config(path)
    return err.value.problems


def test_a_missing_file_means_every_default(tmp_path: Path) -> None:
    config, error = load_config(tmp_path / "nowhere.toml")
    assert error is None
    assert config == UserConfig()
    t = config.alerts
    assert (t.hbm_used_pct, t.kv_usage_pct, t.host_available_pct) == (95.0, 90.0, 10.0)
    assert (t.swap_in_mib_per_s, t.queue_growth_window_s, t.server_silent_s) == (1.0, 30.0, 10.0)
    assert t.enabled is True and t.disabled == ()
    assert config.keys == {} and config.theme is None


def test_the_default_file_text_parses_to_the_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, default_config_text())
    config, error = load_config(path)
    assert error is None
    assert config == UserConfig(path=path)
    # It documents every [alerts] setting, with its default value.
    for name, value in vars(Thresholds()).items():
        if name != "disabled":
            shown = str(value).lower() if isinstance(value, bool) else f"{value:g}"
            assert f"\n{name} = {shown}\n" in default_config_text()


def test_a_full_file(tmp_path: Path) -> None:
    path = write(tmp_path, """\
theme = "gruvbox"

[alerts]
enabled = true
disabled = ["swap-in", "queue-growth"]
hbm_used_pct = 97.5
kv_usage_pct = 80
host_available_pct = 5
swap_in_mib_per_s = 0
swap_window_s = 10
queue_growth_window_s = 60
server_silent_s = 4.5
hysteresis_pct = 1
clear_after_s = 0

[keys]
quit = "q, ctrl+q"
help = "f1"
scenario-1 = "f5"
""")
    config, error = load_config(path)
    assert error is None
    assert config.theme == "gruvbox"
    assert config.path == path
    assert config.keys == {"quit": "q,ctrl+q", "help": "f1", "scenario-1": "f5"}
    assert config.alerts == Thresholds(
        enabled=True, disabled=("swap-in", "queue-growth"), hbm_used_pct=97.5,
        kv_usage_pct=80.0, host_available_pct=5.0, swap_in_mib_per_s=0.0, swap_window_s=10.0,
        queue_growth_window_s=60.0, server_silent_s=4.5, hysteresis_pct=1.0, clear_after_s=0.0)
    assert config.alerts.on("hbm") and not config.alerts.on("swap-in")


def test_alerts_switched_off_altogether(tmp_path: Path) -> None:
    config, _ = load_config(write(tmp_path, "[alerts]\nenabled = false\n"))
    assert not config.alerts.on("hbm") and not config.alerts.on("server-died")


def test_a_misspelt_alert_key_gets_its_line_and_a_did_you_mean(tmp_path: Path) -> None:
    path = write(tmp_path, "[alerts]\nhbm_used_pct = 90\nkv_usage_pc = 80\n")
    assert refusal(path) == [
        f"{path}:3: alerts.kv_usage_pc: unknown key (did you mean 'kv_usage_pct'?)"]


def test_a_misspelt_section_gets_a_did_you_mean(tmp_path: Path) -> None:
    path = write(tmp_path, "# mine\n\n[alert]\nhbm_used_pct = 90\n")
    assert refusal(path) == [
        f"{path}:3: alert: unknown key (did you mean 'alerts'?) (known: alerts, keys, theme, "
        "slo, recordings)"]


def test_an_unknown_key_far_from_any_field_gets_no_hint(tmp_path: Path) -> None:
    path = write(tmp_path, "[alerts]\ncolour = 'red'\n")
    assert refusal(path) == [f"{path}:2: alerts.colour: unknown key"]


@pytest.mark.parametrize(("line", "message"), [
    ("hbm_used_pct = '95'",
     "alerts.hbm_used_pct: should be a percentage from 0 to 100, got str '95'"),
    ("hbm_used_pct = true",
     "alerts.hbm_used_pct: should be a percentage from 0 to 100, got bool True"),
    ("enabled = 1", "alerts.enabled: should be true or false, got int 1"),
    ("disabled = 'kv'", "alerts.disabled: should be a list of alert names (hbm, kv, "
     "host-available, numa-available, shm-leftover, swap-in, queue-growth, retractions, slo, "
     "hicache-drops, pcie, no-huge-pages, server-died, restart-loop, rank-died, server-gone, "
     "server-silent, recording, xid, ecc), got str 'kv'"),
    ("disabled = ['kv', 'swapin']", "alerts.disabled: 'swapin' is not an alert name (did you "
     "mean 'swap-in'?) (known: hbm, kv, host-available, numa-available, shm-leftover, swap-in, "
     "queue-growth, retractions, slo, hicache-drops, pcie, no-huge-pages, server-died, "
     "restart-loop, rank-died, server-gone, server-silent, recording, xid, ecc)"),
])
def test_wrong_types_say_what_they_should_be(tmp_path: Path, line: str, message: str) -> None:
    path = write(tmp_path, f"[alerts]\n{line}\n")
    assert refusal(path) == [f"{path}:2: {message}"]


@pytest.mark.parametrize(("line", "message"), [
    ("hbm_used_pct = 101", "alerts.hbm_used_pct: 101 is out of range: should be a percentage "
     "from 0 to 100"),
    ("host_available_pct = -1", "alerts.host_available_pct: -1 is out of range: should be a "
     "percentage from 0 to 100"),
    ("queue_growth_window_s = 0", "alerts.queue_growth_window_s: 0 is out of range: should be "
     "a number of seconds from 1 to 86400"),
    ("server_silent_s = -2.5", "alerts.server_silent_s: -2.5 is out of range: should be a "
     "number of seconds from 1 to 86400"),
    ("swap_in_mib_per_s = -1", "alerts.swap_in_mib_per_s: -1 is out of range: should be a "
     "rate in MiB/s from 0 to 1000000"),
])
def test_out_of_range_values(tmp_path: Path, line: str, message: str) -> None:
    path = write(tmp_path, f"[alerts]\n\n{line}\n")
    assert refusal(path) == [f"{path}:3: {message}"]


def test_bad_keys_and_theme(tmp_path: Path) -> None:
    path = write(tmp_path, """\
theme = 3
[keys]
quit = 7
help = "f1,,f2"
stop = "ctrl x"
start = "s"
""")
    assert refusal(path) == [
        f"{path}:1: theme: should be a theme name (a string), got int 3",
        f'{path}:3: keys.quit: should be a key or keys as a string (e.g. "f1" or "f1,ctrl+q"), '
        "got int 7",
        f"{path}:4: keys.help: 'f1,,f2' has an empty key: separate keys with commas "
        '(e.g. "f1" or "f1,ctrl+q")',
        f"{path}:5: keys.stop: 'ctrl x' is not a key name: no spaces "
        '(e.g. "f1" or "f1,ctrl+q", "space")',
    ]


def test_a_section_that_is_not_a_table(tmp_path: Path) -> None:
    path = write(tmp_path, 'keys = "q"\n')
    assert refusal(path) == [f"{path}:1: keys: should be a table [keys], got str 'q'"]


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    path = write(tmp_path, "[alerts]\nhbm_used_pct = 200\nkv_usage_pct = 'x'\n[kyes]\n")
    problems = refusal(path)
    assert [p.split(": ")[0] for p in problems] == [f"{path}:4", f"{path}:2", f"{path}:3"]


def test_invalid_toml_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "[alerts]\nhbm_used_pct = 95\nkv_usage_pct 90\n")
    (problem,) = refusal(path)
    assert problem.startswith(f"{path}:3: not valid TOML: ")


def test_a_broken_file_gives_the_defaults_and_the_error(tmp_path: Path) -> None:
    path = write(tmp_path, "[alerts]\nhbm_used_pct = 50\nkv_usage_pct = 900\n")
    config, error = load_config(path)
    # Nothing half-applied: the good line is not taken either.
    assert config == UserConfig()
    assert error == (f"{path}:3: alerts.kv_usage_pct: 900 is out of range: should be a "
                     "percentage from 0 to 100")


def test_an_unreadable_path_is_an_error_not_a_crash(tmp_path: Path) -> None:
    folder = tmp_path / "config.toml"
    folder.mkdir()
    config, error = load_config(folder)
    assert config == UserConfig()
    assert error is not None and error.startswith(f"{folder}: cannot read: ")


def test_config_path_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ENGRAM_TOP_CONFIG", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    assert config_path() == tmp_path / "home" / ".config" / "engram-top" / "config.toml"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert config_path() == tmp_path / "xdg" / "engram-top" / "config.toml"
    monkeypatch.setenv("ENGRAM_TOP_CONFIG", str(tmp_path / "mine.toml"))
    assert config_path() == tmp_path / "mine.toml"


def test_load_config_reads_the_file_the_environment_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    xdg = tmp_path / "xdg" / "engram-top"
    xdg.mkdir(parents=True)
    (xdg / "config.toml").write_text("[alerts]\nkv_usage_pct = 70\n")
    mine = write(tmp_path, "[alerts]\nkv_usage_pct = 60\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("ENGRAM_TOP_CONFIG", raising=False)
    assert load_config()[0].alerts.kv_usage_pct == 70.0
    monkeypatch.setenv("ENGRAM_TOP_CONFIG", str(mine))
    config, error = load_config()
    assert error is None and config.alerts.kv_usage_pct == 60.0 and config.path == mine


def test_the_readme_shows_the_default_file() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "## Configuration" in readme
    assert f"```toml\n{default_config_text()}```" in readme
    # The overview names the default thresholds too.
    t = Thresholds()
    assert (f"HBM above {t.hbm_used_pct:g}%, KV usage above {t.kv_usage_pct:g}%, host memory "
            f"available below {t.host_available_pct:g}%") in " ".join(readme.split())


# --------------------------------------------------------------------------- hostile numbers

HUGE = "9" * 400  # an integer no float can hold: it raised OverflowError at start-up


@pytest.mark.parametrize("key", [f.name for f in fields(Thresholds)
                                 if isinstance(f.metadata["kind"], Range)])
@pytest.mark.parametrize("value", [HUGE, f"-{HUGE}", "1e400", "-1e400", "nan", "inf", "-inf",
                                   "1e300", "-1", "true", '"5"'])
def test_every_alert_number_is_bounded(tmp_path: Path, key: str, value: str) -> None:
    path = write(tmp_path, f"[alerts]\n{key} = {value}\n")
    config, error = load_config(path)
    assert config == UserConfig() and error is not None
    what = ALERT_FIELDS[key][1]
    assert error.startswith(f"{path}:2: alerts.{key}: ") and f"should be {what}" in error
    assert " from " in what and " to " in what  # the range is said
    assert HUGE not in error and len(error) < 300  # said short, never echoed whole


@pytest.mark.parametrize(("spec", "field"), [
    (f"{{ percentile = 99, max_ms = {HUGE} }}", "max_ms"),
    (f"{{ percentile = {HUGE}, max_ms = 50 }}", "percentile"),
    ("{ percentile = nan, max_ms = 50 }", "percentile"),
    ("{ percentile = 99, max_ms = inf }", "max_ms"),
    ("{ percentile = 99, max_ms = 0 }", "max_ms"),
    ("{ percentile = 0, max_ms = 50 }", "percentile"),
])
def test_every_slo_number_is_bounded(tmp_path: Path, spec: str, field: str) -> None:
    path = write(tmp_path, f"[slo]\nttft = {spec}\n")
    config, error = load_config(path)
    assert config == UserConfig() and error is not None
    assert f"slo.ttft.{field}: " in error and " from " in error and " to " in error
    assert HUGE not in error


def test_a_number_too_long_for_python_is_a_toml_error_with_its_line(tmp_path: Path) -> None:
    # Past 4,300 digits Python will not read an int at all; tomllib then raised a bare
    # ValueError that no loader caught.
    path = write(tmp_path, "[alerts]\nhbm_used_pct = 50\nkv_usage_pct = " + "9" * 5000 + "\n")
    (problem,) = refusal(path)
    assert problem.startswith(f"{path}:3: not valid TOML: A number too long to read")


@pytest.mark.parametrize(("value", "says"), [
    ('"' + "x" * 100_000 + '"', "is not a key"),
    ('"q' + "q" * 300 + '"', "is not a key"),
    ('"\\u001b]0;x\\u0007"', "is not a key name"),
    ('"ctrl+\\u0000"', "is not a key name"),
    ('"f1,f2,f3,f4,f5,f6,f7,f8,f9"', "9 keys: an action takes at most 8"),
    ('"ctrl+shift+alt+meta+super+q"', "is not a key name"),
    ('"' + "a" * 40 + '"', "is not a key name"),
    ('"q!"', "is not a key name"),
])
def test_a_binding_that_no_key_can_press_is_refused_by_name(tmp_path: Path, value: str,
                                                            says: str) -> None:
    path = write(tmp_path, f"[keys]\nquit = {value}\n")
    (problem,) = refusal(path)
    assert problem.startswith(f"{path}:2: keys.quit: ") and says in problem, problem
    assert len(problem) < 400 and "\x1b" not in problem and "\x00" not in problem


def test_key_names_textual_knows_are_taken(tmp_path: Path) -> None:
    path = write(tmp_path, '[keys]\nquit = "q,ctrl+q"\nhelp = "f1,question_mark,?"\n'
                           'stop = "ctrl+shift+x,X"\nscenario-1 = "f12"\n')
    config, error = load_config(path)
    assert error is None
    assert config.keys == {"quit": "q,ctrl+q", "help": "f1,question_mark,?",
                           "stop": "ctrl+shift+x,X", "scenario-1": "f12"}


async def test_a_remap_that_would_take_quits_only_key_is_not_applied(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    config = parse_config_text('[keys]\nhelp = "q"\ncompare = "k"\n', path)
    session = StaticSession(scene_store())
    app = EngramTopApp(session, config=config)
    async with app.run_test(size=(120, 36)) as pilot:
        await until(pilot, lambda: any("keys.help" in e.text for e in session.store.events),
                    what="the refused remap told")
        (told,) = [e.text for e in session.store.events if "keys.help" in e.text]
        assert f"{path}: keys.help: 'q' is quit's key, and quit would have no other" in told
        await pilot.press("k")  # the other remap applies
        await until(pilot, lambda: isinstance(app.screen, CompareScreen), what="the comparison")
        await pilot.press("escape")
        await quit_app(app, pilot)  # q still quits


async def test_quit_may_move_and_its_old_key_go_to_another_action(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    config = parse_config_text('[keys]\nquit = "ctrl+x"\nhelp = "q"\n', path)
    session = StaticSession(scene_store())
    app = EngramTopApp(session, config=config)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("q")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), what="help on q")
        await pilot.press("escape")
        await pilot.press("ctrl+x")
        await until(pilot, lambda: not app.is_running, what="ctrl+x to quit")
    assert not any("keys." in e.text for e in session.store.events)
