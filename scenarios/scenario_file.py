"""Scenario files: TOML, one table per scenario under [scenarios.NAME], defaults in [defaults].

Validated on load. Every problem is reported at once, each as FILE:LINE: KEY: what is wrong,
so a typo in a file an engineer edited by hand is found without reading a traceback.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from collectors.pages import header_value_problem
from scenarios import engines
from scenarios.bounds import Range, bounded_float, bounded_int, read_toml
from scenarios.engines import PLACEMENTS
from scenarios.slo import Slo
from scenarios.slo import parse as parse_slo

INTERFACES = ("env", "config", "none")


class _At(Protocol):
    """Where in the file a key is: "FILE:LINE" for a dotted path of keys."""

    def __call__(self, *keys: str) -> str: ...

# key -> (accepted types, description for messages)
FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    "title": ((str,), "a string"),
    "kind": ((str,), "an engine's kind (sglang, vllm, simulated, ...)"),
    "placement": ((str,), f"one of {', '.join(PLACEMENTS)}, or a label of your own"),
    "python": ((str,), "the interpreter of the engine's environment (a path)"),
    "model_path": ((str,), "a path or model id"),
    "host": ((str,), "an address to bind, e.g. 127.0.0.1"),
    "port": ((int,), "an integer 1-65535"),
    "tp": ((int,), "an integer >= 1"),
    "args": ((list,), "a list of strings (extra launch_server arguments)"),
    "env": ((dict,), "a table of string values"),
    "engram_interface": ((str,), f"one of {', '.join(INTERFACES)}"),
    "api_key": ((str,), "a string"),
    "time_scale": ((int, float), "a number > 0"),
    "serve_scale": ((int, float), "a number > 0"),
    "readiness_timeout_s": ((int, float), "a number of seconds > 0"),
    "stop_grace_s": ((int, float), "a number of seconds >= 0"),
    "hbm_release_timeout_s": ((int, float), "a number of seconds >= 0"),
    "hbm_release_slack_gib": ((int, float), "a number of GiB >= 0"),
}
DAY_S = 86400
# The range of every number, and why (a value outside is refused with the range named).
RANGES: dict[str, Range] = {
    "port": bounded_int(1, 65535),
    "tp": bounded_int(1, 1024),  # tensor-parallel ranks: the GPUs of one server
    # x0.001: the seed's 125 s start-up in an eighth of a second; x100: three and a half hours.
    "time_scale": bounded_float(0.001, 100),
    "serve_scale": bounded_float(0.001, 100),
    # A real start-up of a large model can take an hour; past a day it is a wait without end.
    "readiness_timeout_s": bounded_float(0.1, DAY_S, unit="seconds"),
    "stop_grace_s": bounded_float(0, 3600, unit="seconds"),
    "hbm_release_timeout_s": bounded_float(0, DAY_S, unit="seconds"),
    "hbm_release_slack_gib": bounded_float(0, 4096, unit="GiB"),  # beyond any GPU's HBM
}
# The launch arguments whose numbers engram-top reads itself (the fit check, the HiCache
# pools): bounded as the file's own numbers are, by the same rule (ranks as `tp`).
_RANKS = bounded_int(1, 1024, unit="ranks")
ARG_RANGES: dict[str, Range] = {
    "--tp-size": _RANKS, "--tp": _RANKS, "--tensor-parallel-size": _RANKS,
    "--dp-size": _RANKS, "--dp": _RANKS, "--pp-size": _RANKS, "--ep-size": _RANKS,
    "--hicache-size": bounded_float(0, 1e6, unit="GB a rank"),
    "--mem-fraction-static": bounded_float(0, 1),
    "--page-size": bounded_int(1, 1 << 20, unit="tokens"),
}
DEFAULTS: dict[str, Any] = {
    "kind": engines.DEFAULT, "host": "127.0.0.1", "tp": 1, "args": [], "env": {},
    "engram_interface": "none", "time_scale": 1.0, "serve_scale": 1.0,
    "readiness_timeout_s": 600.0, "stop_grace_s": 30.0, "hbm_release_timeout_s": 120.0,
    "hbm_release_slack_gib": 2.0,
}
# Launch flags whose value is a secret, and what to do instead.
SECRET_FLAGS = {
    "--api-key": "set api_key instead (it travels in a 0600 file)",
    "--admin-api-key": "put it in a --config YAML file of mode 0600 instead",
}
TOP_LEVEL = {"plan", "defaults", "scenarios", "slo"}
PLAN_KEYS = {"name", "description"}


class ScenarioError(ValueError):
    """All the problems of one scenario file; str() lists them, one per line."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    kind: str
    placement: str | None
    host: str
    port: int
    python: str | None
    model_path: str | None
    tp: int
    args: tuple[str, ...]
    env: dict[str, str]
    engram_interface: str
    api_key: str | None
    time_scale: float
    serve_scale: float
    readiness_timeout_s: float
    stop_grace_s: float
    hbm_release_timeout_s: float
    hbm_release_slack_gib: float
    source: str = ""  # FILE:LINE of its table, for messages

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}"

    @property
    def engine(self) -> engines.Engine:
        return engines.get(self.kind)

    def launch_env(self) -> dict[str, str]:
        """The environment the server gets on top of ours: its engine's switches for the
        placement, then the file's."""
        return self.engine.launch_env(self)

    @property
    def key_by_file(self) -> bool:
        """Whether the API key travels in a file (0600) rather than the argv every local
        user sees in `ps`."""
        return self.key_file_text() is not None

    def key_file_text(self) -> str | None:
        """What the key file holds, when the key travels in one."""
        return self.engine.key_file_text(self) if self.api_key else None

    def argv(self, key_file: Path | None = None, node_dir: Path | None = None) -> list[str]:
        """The launch argv: never a shell string. ``key_file``: where the supervisor wrote
        key_file_text(), when the key travels in a file; ``node_dir``: the simulated node's
        folder, for engines whose servers run on it."""
        return self.engine.argv(self, key_file, node_dir)

    def exposed_secrets(self) -> list[str]:
        """Why this scenario's launch shows a secret to every local user (through `ps`)."""
        out = []
        flags = [a.split("=", 1)[0] for a in self.args if a.startswith("--")]
        for flag in flags:
            if flag in SECRET_FLAGS:
                out.append(f"args holds {flag}: its value is visible to every local user "
                           f"(ps); {SECRET_FLAGS[flag]}")
        if self.api_key and not self.key_by_file and not self.engine.key_in_env:
            out.append("api_key: its own --config in args leaves no file for the key, so it "
                       "goes on the command line, visible to every local user (ps)")
        return out


@dataclass(frozen=True)
class ScenarioFile:
    path: Path
    name: str
    description: str
    scenarios: dict[str, Scenario] = field(default_factory=dict)
    # What loads but deserves a word (FILE:LINE: scenarios.NAME: ...): a secret on the
    # command line. Said once, where the file is loaded.
    warnings: tuple[str, ...] = ()
    # Its [slo]: what a load's requests against its servers are held to, and the slo alert
    # (the user's config [slo] wins where it has one); () where the file has none.
    slos: tuple[Slo, ...] = ()

    def get(self, name: str) -> Scenario:
        try:
            return self.scenarios[name]
        except KeyError:
            known = ", ".join(self.scenarios) or "none"
            raise ScenarioError([f"{self.path}: no scenario named '{name}' (known: {known})"]) \
                from None


# --------------------------------------------------------------------------- line numbers

_HEADER = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(#.*)?$")
_KEY = re.compile(r"^\s*([A-Za-z0-9_\-]+|\"[^\"]*\")\s*=")


def locate(text: str) -> dict[tuple[str, ...], int]:
    """Line numbers (1-based) of a TOML text's table headers and keys, by dotted path:
    {("alerts",): 3, ("alerts", "hbm_used_pct"): 4}. tomllib gives no positions, so every
    TOML file engram-top reads (scenario files, the user's config) reports FILE:LINE by it."""
    where: dict[tuple[str, ...], int] = {}
    section: tuple[str, ...] = ()
    for n, line in enumerate(text.splitlines(), 1):
        m = _HEADER.match(line)
        if m:
            section = tuple(p.strip().strip('"') for p in m.group(1).split("."))
            for i in range(1, len(section) + 1):  # [a.b] also places a table a
                where.setdefault(section[:i], n)
            continue
        m = _KEY.match(line)
        if m:
            where.setdefault((*section, m.group(1).strip('"')), n)
    return where


# --------------------------------------------------------------------------- loading


def load(path: Path) -> ScenarioFile:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ScenarioError([f"{path}: cannot read: {exc.strerror or exc}"]) from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ScenarioError([f"{path}:{line}: not UTF-8 text (byte {exc.start}: "
                             f"{data[exc.start:exc.start + 1]!r}): save the file as UTF-8"]) \
            from None
    try:
        raw = read_toml(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError([f"{path}: not valid TOML: {exc}"]) from exc
    except RecursionError:
        raise ScenarioError([f"{path}: not a scenario file (nested too deeply to read)"]) \
            from None
    where = locate(text)
    problems: list[str] = []

    def at(*keys: str) -> str:
        for i in range(len(keys), 0, -1):
            line = where.get(tuple(keys[:i]))
            if line is not None:
                return f"{path}:{line}"
        return str(path)

    for key in raw:
        if key not in TOP_LEVEL:
            problems.append(f"{at(key)}: unknown top-level key '{key}' "
                            f"(expected {', '.join(sorted(TOP_LEVEL))})")
    plan = raw.get("plan", {})
    if not isinstance(plan, dict):
        problems.append(f"{at('plan')}: 'plan' must be a table")
        plan = {}
    for key in plan:
        if key not in PLAN_KEYS:
            problems.append(f"{at('plan', key)}: plan.{key}: unknown key")
    defaults = raw.get("defaults", {})
    if not isinstance(defaults, dict):
        problems.append(f"{at('defaults')}: 'defaults' must be a table")
        defaults = {}
    problems += _check_fields(defaults, ("defaults",), at)
    # Known defaults of the wrong type, reported once above: a scenario that inherits one is
    # not built (its checks would compare a string with a number).
    bad_defaults = {k for k, v in defaults.items() if k in FIELDS and _check_fields({k: v}, (), at)}
    tables = raw.get("scenarios")
    if not isinstance(tables, dict) or not tables:
        problems.append(f"{at('scenarios')}: no scenarios: add at least one [scenarios.NAME]")
        tables = {}
    scenarios: dict[str, Scenario] = {}
    ports: dict[int, str] = {}
    for name, table in tables.items():
        if not isinstance(table, dict):
            problems.append(f"{at('scenarios', name)}: scenarios.{name} must be a table")
            continue
        found = _check_fields(table, ("scenarios", name), at)
        problems += found
        merged = {**DEFAULTS, **defaults, **table}
        envs = (defaults.get("env", {}), table.get("env", {}))
        merged["env"] = {**envs[0], **envs[1]} if all(isinstance(e, dict) for e in envs) else {}
        # A number out of range still lets the other checks speak (every problem at once);
        # a value of another kind does not (they would compare a string with a number).
        wrong_numbers = _wrong_numbers(merged)
        if len(found) > len(_wrong_numbers(table)) or bad_defaults - table.keys():
            continue
        for key in ("python", "model_path"):
            if isinstance(merged.get(key), str):
                merged[key] = _resolve(merged[key], path.parent)
        scenario, more = _build(name, merged, at, build=not wrong_numbers)
        problems += more
        if scenario is None:
            continue
        if scenario.port in ports:
            problems.append(f"{at('scenarios', name, 'port')}: scenarios.{name}.port: "
                            f"{scenario.port} is also the port of '{ports[scenario.port]}': "
                            "give each scenario its own port")
        ports.setdefault(scenario.port, name)
        scenarios[name] = scenario
    slos = parse_slo(at("slo"), raw.get("slo"), problems)
    if problems:
        raise ScenarioError(problems)
    warnings = tuple(f"{sc.source}: scenarios.{sc.name}: {text}"
                     for sc in scenarios.values() for text in sc.exposed_secrets())
    return ScenarioFile(path, str(plan.get("name", path.stem)), str(plan.get("description", "")),
                        scenarios, warnings, slos)


def _check_fields(table: dict[str, Any], where: tuple[str, ...], at: _At) -> list[str]:
    problems = []
    dotted = ".".join(where)
    for key, value in table.items():
        if key not in FIELDS:
            close = [k for k in FIELDS if similar(k, key)]
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            problems.append(f"{at(*where, key)}: {dotted}.{key}: unknown key{hint}")
            continue
        if key in RANGES:
            problem = RANGES[key].problem(value)
            if problem is not None:
                problems.append(f"{at(*where, key)}: {dotted}.{key}: {problem}")
            continue
        types, what = FIELDS[key]
        if isinstance(value, bool) or not isinstance(value, types):
            problems.append(f"{at(*where, key)}: {dotted}.{key}: should be {what}, "
                            f"got {type(value).__name__} {value!r}")
            continue
        if isinstance(value, float) and not math.isfinite(value):  # TOML has inf and nan
            problems.append(f"{at(*where, key)}: {dotted}.{key}: should be {what}, "
                            f"got {value}")
            continue
        # FIELDS says what each is: str, list, dict.
        if key == "api_key" and isinstance(value, str) \
                and (problem := header_value_problem(value)) is not None:
            # Never quoted: it is a secret. A CR or LF would add headers of its own.
            problems.append(f"{at(*where, key)}: {dotted}.api_key: {problem}")
        if key == "args" and isinstance(value, list) \
                and not all(isinstance(a, str) for a in value):
            problems.append(f"{at(*where, key)}: {dotted}.args: every argument must be a string")
        elif key == "args" and isinstance(value, list) and any("\0" in a for a in value):
            problems.append(f"{at(*where, key)}: {dotted}.args: an argument holds a NUL "
                            "character, which no command line can carry")
        elif key == "args" and isinstance(value, list):
            problems += [f"{at(*where, key)}: {dotted}.args: {p}" for p in arg_problems(value)]
        if key == "env" and isinstance(value, dict):
            for k, v in value.items():
                if not isinstance(v, str):
                    problems.append(f"{at(*where, key)}: {dotted}.env.{k}: should be a string, "
                                    f"got {type(v).__name__} {v!r} (quote it)")
                elif "\0" in v or "\0" in k or "=" in k or not k:
                    problems.append(f"{at(*where, key)}: {dotted}.env: {k!r}: an environment "
                                    "variable's name is not empty and holds no = or NUL, "
                                    "nor its value a NUL")
    return problems


def arg_problems(args: list[str]) -> list[str]:
    """What is wrong with the numbers of ARG_RANGES' arguments (``--x v`` or ``--x=v``)."""
    out = []
    for i, item in enumerate(args):
        flag, eq, inline = item.partition("=")
        bound = ARG_RANGES.get(flag)
        if bound is None:
            continue
        text = inline if eq else (args[i + 1] if i + 1 < len(args) else None)
        if text is None:
            out.append(f"{flag}: no value follows it")
            continue
        try:
            bound.parse(text)
        except ValueError as exc:
            out.append(f"{flag}: {exc}")
    return out


def _wrong_numbers(table: dict[str, Any]) -> set[str]:
    """The numeric keys whose value is not a number in its range."""
    return {k for k, r in RANGES.items() if k in table and r.problem(table[k]) is not None}


def _build(name: str, m: dict[str, Any], at: _At, *,
           build: bool = True) -> tuple[Scenario | None, list[str]]:
    problems = []
    here = ("scenarios", name)

    def bad(key: str, text: str) -> None:
        problems.append(f"{at(*here, key)}: scenarios.{name}.{key}: {text}")

    engine = engines.get(m["kind"]) if m["kind"] in engines.kinds() else None
    if engine is None:
        bad("kind", f"'{m['kind']}' is not one of {', '.join(engines.kinds())}"
            + "".join(f"; {p}" for p in engines.plugin_problems))
    if "port" not in m:  # its range, and every number's, is checked with the types
        bad("port", "missing: every scenario needs a port")
    if m["engram_interface"] not in INTERFACES:
        bad("engram_interface", f"'{m['engram_interface']}' is not one of {', '.join(INTERFACES)}")
    if engine is not None:
        for key in engine.required:
            if not m.get(key):
                bad(key, f"missing: {engine.article} {engine.label} scenario needs '{key}'")
        for key, text in engine.problems(m):
            bad(key, text)
    if m["engram_interface"] != "none" and m.get("placement") not in PLACEMENTS:
        bad("placement", f"engram_interface '{m['engram_interface']}' needs a placement of "
            f"{', '.join(PLACEMENTS)}")
    if problems or not build:
        return None, problems
    return Scenario(
        name=name, title=m.get("title", name), kind=m["kind"], placement=m.get("placement"),
        host=m["host"], port=m["port"], python=m.get("python"), model_path=m.get("model_path"),
        tp=m["tp"], args=tuple(m["args"]), env=dict(m["env"]),
        engram_interface=m["engram_interface"], api_key=m.get("api_key"),
        time_scale=float(m["time_scale"]), serve_scale=float(m["serve_scale"]),
        readiness_timeout_s=float(m["readiness_timeout_s"]),
        stop_grace_s=float(m["stop_grace_s"]),
        hbm_release_timeout_s=float(m["hbm_release_timeout_s"]),
        hbm_release_slack_gib=float(m["hbm_release_slack_gib"]),
        source=at(*here),
    ), []


def _resolve(value: str, base: Path) -> str:
    """$VARS and ~ expanded; ./ and ../ taken from the scenario file's folder. Other values
    (absolute paths, model ids such as deepseek-ai/DeepSeek-V4.1-Flash) are kept as they are."""
    value = os.path.expanduser(os.path.expandvars(value))
    if value.startswith(("./", "../")):
        # abspath, not resolve(): a venv's bin/python is a symlink to the base interpreter,
        # and following it would launch outside the venv.
        return os.path.abspath(base / value)
    return value


def similar(a: str, b: str) -> bool:
    """A cheap 'did you mean', for every TOML file engram-top reads: at most two edits
    (insertions, deletions, substitutions) apart."""
    if abs(len(a) - len(b)) > 2:
        return False
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1] <= 2
