"""The user's config file: alert thresholds, key remaps, the theme and the SLOs (TOML).

Looked up at $ENGRAM_TOP_CONFIG, else $XDG_CONFIG_HOME/engram-top/config.toml, else
~/.config/engram-top/config.toml. A missing file means every default. A broken file is
refused whole (no half-applied settings): load_config() returns the defaults and the error,
so the dashboard still starts and can say what is wrong, as FILE:LINE: KEY: what is wrong.
"""

from __future__ import annotations

import functools
import os
import re
import textwrap
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from engram_top.alerts.definitions import ALERT_NAMES, ALERTS, Setting
from engram_top.alerts.thresholds import CLEAR_AFTER, DISABLED, ENABLED, HYSTERESIS, Thresholds
from engram_top.settings.retention import DASHBOARD, Retention

# The scenario loader's line finder and did-you-mean, so both files report problems alike.
from scenarios.bounds import Range, read_toml, shown, typed
from scenarios.scenario_file import locate, similar


@dataclass(frozen=True)
class UserConfig:
    alerts: Thresholds = field(default_factory=Thresholds)
    keys: dict[str, str] = field(default_factory=dict)  # binding id -> "key[,key]"
    theme: str | None = None  # a Textual theme name; the app checks it exists
    # The demo load's SLOs (goodput), as a bench plan's [slo]; slo.DEFAULT where silent.
    slos: tuple[Any, ...] = field(default_factory=lambda: _default_slos())
    # Whether the file says them: only then do they stand over a scenario file's [slo].
    slos_given: bool = False
    # How much of a dashboard's default recordings folder is kept ([recordings] retain).
    recordings: Retention = DASHBOARD
    path: Path | None = None  # the file it came from, None for built-in defaults


class ConfigError(ValueError):
    """All the problems of one config file; str() lists them, one per line."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def config_path() -> Path:
    explicit = os.environ.get("ENGRAM_TOP_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME")
    root = Path(base).expanduser() if base else Path.home() / ".config"
    return root / "engram-top" / "config.toml"


def _default_slos() -> tuple[Any, ...]:
    from engram_top.compare.slo import DEFAULT
    return DEFAULT


def load_config(path: Path | None = None) -> tuple[UserConfig, str | None]:
    """The config and None, or the defaults and the error text when the file is broken."""
    path = config_path() if path is None else Path(path)
    try:
        return parse_config(path), None
    except ConfigError as exc:
        return UserConfig(), str(exc)


def parse_config(path: Path) -> UserConfig:
    """The file's config (defaults where it is silent); ConfigError lists every problem."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return UserConfig()
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError([f"{path}: cannot read: {why}"]) from exc
    return parse_config_text(text, path)


# --------------------------------------------------------------------------- checking

# [alerts] key -> (kind, description), from Thresholds' fields (_setting says the kinds).
ALERT_FIELDS: dict[str, tuple[str | Range, str]] = {
    f.name: (f.metadata["kind"], f.metadata["what"]) for f in fields(Thresholds)}
TOP_LEVEL = ("alerts", "keys", "theme", "slo", "recordings")
_LINE = re.compile(r"at line (\d+)")


def parse_config_text(text: str, path: Path) -> UserConfig:
    try:
        raw = read_toml(text)
    except tomllib.TOMLDecodeError as exc:
        m = _LINE.search(str(exc))
        where = f"{path}:{m.group(1)}" if m else str(path)
        raise ConfigError([f"{where}: not valid TOML: {exc}"]) from exc
    except RecursionError:
        raise ConfigError([f"{path}: not a config file (nested too deeply to read)"]) from None
    lines = locate(text)
    problems: list[str] = []

    def bad(keys: tuple[str, ...], what: str) -> None:
        line = next((lines[keys[:i]] for i in range(len(keys), 0, -1) if keys[:i] in lines),
                    None)
        where = str(path) if line is None else f"{path}:{line}"
        problems.append(f"{where}: {'.'.join(keys)}: {what}")

    for key in raw:
        if key not in TOP_LEVEL:
            bad((key,), "unknown key" + _hint(key, TOP_LEVEL)
                + f" (known: {', '.join(TOP_LEVEL)})")
    theme = raw.get("theme")
    if theme is not None and (not isinstance(theme, str) or not theme.strip()):
        bad(("theme",), f"should be a theme name (a string), got {_show(theme)}")
    alerts = _table(raw, "alerts", bad)
    values: dict[str, Any] = {}
    for key, value in alerts.items():
        if key not in ALERT_FIELDS:
            bad(("alerts", key), "unknown key" + _hint(key, ALERT_FIELDS))
            continue
        checked = _check_alert(key, value, functools.partial(bad, ("alerts", key)))
        if checked is not None:
            values[key] = checked
    keys = _table(raw, "keys", bad)
    remaps: dict[str, str] = {}
    for action, value in keys.items():
        found, wrong = _check_keys(value)
        if wrong:
            bad(("keys", action), wrong)
        else:
            remaps[action] = found
    recordings = _recordings(_table(raw, "recordings", bad), bad)
    # Its arithmetic comes with it; a config needs only the check.
    from engram_top.compare import slo
    slo_problems: list[str] = []
    slos = slo.parse(str(path), raw.get("slo"), slo_problems)
    problems += slo_problems
    if problems:
        raise ConfigError(problems)
    return UserConfig(alerts=Thresholds(**values), keys=remaps, slos=slos or slo.DEFAULT,
                      slos_given=bool(slos), recordings=recordings,
                      theme=theme.strip() if isinstance(theme, str) else None, path=path)


def _table(raw: dict[str, Any], name: str,
           bad: Callable[[tuple[str, ...], str], None]) -> dict[str, Any]:
    table = raw.get(name, {})
    if not isinstance(table, dict):
        bad((name,), f"should be a table [{name}], got {_show(table)}")
        return {}
    return table


def _recordings(table: dict[str, Any], bad: Callable[[tuple[str, ...], str], None]
                ) -> Retention:
    """[recordings]: ``retain``, an age, a size or both ("7d,3GB")."""
    for key in table:
        if key != "retain":
            bad(("recordings", key), "unknown key" + _hint(key, ("retain",)) + " (known: retain)")
    value = table.get("retain")
    if value is None:
        return DASHBOARD
    if not isinstance(value, str):
        bad(("recordings", "retain"), f'should be an age, a size or both as a string ("7d", '
                                      f'"3GB", "7d,3GB"), got {_show(value)}')
        return DASHBOARD
    try:
        return Retention.parse(value)
    except ValueError as exc:
        bad(("recordings", "retain"), str(exc))
        return DASHBOARD


def _check_alert(key: str, value: Any,
                 bad: Callable[[str], None]) -> bool | tuple[str, ...] | float | None:
    """The value as Thresholds keeps it, or None after reporting what is wrong."""
    kind, what = ALERT_FIELDS[key]
    if kind == "bool":
        if isinstance(value, bool):
            return value
        bad(f"should be {what}, got {_show(value)}")
        return None
    if kind == "names":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            bad(f"should be {what}, got {_show(value)}")
            return None
        unknown = [v for v in value if v not in ALERT_NAMES]
        for name in unknown:
            bad(f"{shown(name)} is not an alert name{_hint(name, ALERT_NAMES)} "
                f"(known: {', '.join(ALERT_NAMES)})")
        return None if unknown else tuple(value)
    if isinstance(kind, Range):  # TOML's true, inf and nan, and a 400-digit int, refused
        problem = kind.problem(value)
        if problem is not None:
            bad(problem)
            return None
        return float(value)
    raise AssertionError(f"no check for {key}")  # a field added without one


# A key as Textual names it: modifiers, then a name (f1, question_mark, pageup) or one
# printable character. What is longer or holds anything else can never be pressed, and
# binding it only takes the action's own key away (a 100,000-character quit left none).
_KEY = re.compile(r"(?:(?:ctrl|shift|alt|meta|super|hyper)\+){0,4}(?:[a-z][a-z0-9_]{1,31}|\S)")
MAX_KEYS = 8  # keys one action takes
MAX_KEYS_TEXT = 200


def _check_keys(value: Any) -> tuple[str, str | None]:
    """The keys as Textual's keymap takes them ("f1,ctrl+q"), and what is wrong or None."""
    example = 'e.g. "f1" or "f1,ctrl+q"'
    if not isinstance(value, str):
        return "", f"should be a key or keys as a string ({example}), got {typed(value)}"
    if len(value) > MAX_KEYS_TEXT:
        return "", (f"{shown(value)} is not a key: at most {MAX_KEYS} keys of a modifier or "
                    f"two and a name ({example})")
    parts = [p.strip() for p in value.split(",")]
    if not all(parts):
        return "", f"{shown(value)} has an empty key: separate keys with commas ({example})"
    spaced = [p for p in parts if any(c.isspace() for c in p)]
    if spaced:
        return "", f"{shown(spaced[0])} is not a key name: no spaces ({example}, \"space\")"
    if len(parts) > MAX_KEYS:
        return "", f"{len(parts)} keys: an action takes at most {MAX_KEYS}"
    for part in parts:
        if not _KEY.fullmatch(part) or not part.isprintable():
            return "", (f"{shown(part)} is not a key name: modifiers (ctrl+, shift+, alt+) "
                        f"and a name such as f1, pageup or question_mark, or one character "
                        f"({example})")
    return ",".join(parts), None


def _hint(key: str, known: Iterable[str]) -> str:
    close = [k for k in known if similar(k, key)]
    return f" (did you mean '{close[0]}'?)" if close else ""


def _show(value: Any) -> str:
    return typed(value)  # cut short, with its control characters escaped


# --------------------------------------------------------------------------- the default file


def default_config_text() -> str:
    """The documented default file: every setting at its default, explained."""
    return f"""\
# engram-top's config file. Every value below is the default; delete what you do not change.

# A Textual theme for the dashboard (ctrl+p, then "Theme", lists them), e.g.:
# theme = "gruvbox"

[alerts]
{_alerts_section()}

[slo]
# What a load's requests are held to: goodput counts the requests within every bound,
# per second (the compare screen shows it), and so does the slo alert. Said here, it stands
# over a scenario file's own [slo] (the demo's: p99 TTFT 1 s, TPOT 150 ms); where it is
# not said, the file's holds, else these defaults (a chat target). A bench plan takes the
# same table.
# ttft = {{ percentile = 99, max_ms = 2000 }}
# tpot = {{ percentile = 99, max_ms = 50 }}
# e2e = {{ percentile = 99, max_ms = 60000 }}

[recordings]
# How much of the dashboards' default recordings folder is kept: an age, a size or both.
# The oldest sessions past either go as a dashboard starts and hourly while it runs (the one
# being written never does), and the events line says so; the newest 50 at most. A folder
# given with --record is never touched. A recording grows 15-45 MB an hour.
# retain = "7d,3GB"

[keys]
# Remap the dashboard's keys by binding id: id = "key" or "key,key". Ids: quit, start,
# stop, compare, help, snapshot, history, scenario-1 ... scenario-9. For example:
# quit = "q,ctrl+q"
# help = "f1"
"""


def _alerts_section() -> str:
    """[alerts]: the switches, each alert's thresholds under what they mean (from the
    alerts' definitions), the settings against flapping, then the alerts without one."""
    t = Thresholds()
    groups: list[tuple[str, tuple[Setting, ...]]] = [
        ("Alerts show in the events pane with their time, as toasts, and in snapshots.",
         (ENABLED,)),
        ('Alerts switched off one by one, e.g. disabled = ["swap-in", "queue-growth"]. '
         f"Names: {', '.join(ALERT_NAMES)}.", (DISABLED,))]
    groups += [(a.config_note, a.settings) for a in ALERTS if a.settings]
    groups.append(("Against flapping: a percentage alert clears only hysteresis_pct points "
                   "back on the safe side of its threshold, and any alert only after staying "
                   "clear for clear_after_s seconds.", (HYSTERESIS, CLEAR_AFTER)))
    groups.append(("Holds, as Prometheus' for and keep_firing_for: NAME_for_s, how long a "
                   "condition must hold before its alert fires (a brief spike pages no one); "
                   "NAME_keep_firing_s, how long it goes on firing after (at least "
                   "clear_after_s), so that one overload is one alert.",
                   tuple(s for a in ALERTS for s in a.hold_settings())))
    lines = []
    for comment, settings in groups:
        lines.append(_comment(comment))
        lines += [f"{s.key} = {_toml(getattr(t, s.key))}" for s in settings]
    bare = [f"{a.name} ({a.config_note})" for a in ALERTS if not a.settings]
    lines.append(_comment("With no threshold, on unless disabled: " + ", ".join(bare[:-1])
                          + f" and {bare[-1]}."))
    return "\n".join(lines)


def _comment(text: str) -> str:
    """TOML comment lines, wrapped as the rest of the file (an alert name is never split)."""
    return textwrap.fill(text, width=90, initial_indent="# ", subsequent_indent="# ",
                         break_on_hyphens=False, break_long_words=False)


def _toml(value: Any) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(f'"{v}"' for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(int(value)) if float(value).is_integer() else repr(value)

