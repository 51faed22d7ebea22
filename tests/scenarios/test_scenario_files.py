"""Scenario files as an engineer edits them: every problem at once, each as FILE:LINE: KEY:
what is wrong; the shipped files load and give the argv and environment SGLang needs; and
the commands that take a file refuse a broken one with that message, not a traceback."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import installed_script

from scenarios import scenario_file
from scenarios.scenario_file import Scenario, ScenarioError

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "scenarios"
ENGRAM_TOP = installed_script()

HOST_TABLE = "SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE"
LAYOUT = "SGLANG_DSV41_ENGRAM_HOST_TABLE_LAYOUT"
PIN = "SGLANG_DSV41_ENGRAM_HOST_TABLE_PIN"
PREFETCH = "SGLANG_ENABLE_DSV41_ENGRAM_KV_PREFETCH"

# A valid simulated scenario file the tests below break one line at a time.
HEAD = """\
[plan]
name = "t"

[defaults]
kind = "simulated"
time_scale = 0.1
"""


def write(tmp_path: Path, text: str, name: str = "plan.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def line_of(path: Path, needle: str) -> int:
    """1-based number of the (only) line of the file that contains ``needle``."""
    hits = [n for n, line in enumerate(path.read_text().splitlines(), 1) if needle in line]
    assert len(hits) == 1, f"{needle!r} on lines {hits}"
    return hits[0]


def problems(path: Path) -> list[str]:
    with pytest.raises(ScenarioError) as info:
        scenario_file.load(path)
    assert str(info.value) == "\n".join(info.value.problems)
    return info.value.problems


def only_problem(path: Path) -> str:
    found = problems(path)
    assert len(found) == 1, found
    return found[0]


# --------------------------------------------------------------------------- unknown keys


def test_unknown_key_in_a_scenario_names_file_line_key_and_the_close_one(tmp_path: Path) -> None:
    path = write(tmp_path, HEAD + """
[scenarios.device]
placement = "device"
prot = 30000
""")
    assert only_problem(path) == (f"{path}:{line_of(path, 'prot =')}: scenarios.device.prot: "
                                  "unknown key (did you mean 'port'?)")


def test_unknown_key_in_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, HEAD + """timescale = 0.5

[scenarios.device]
placement = "device"
port = 30000
""")
    msg = only_problem(path)
    assert msg == (f"{path}:{line_of(path, 'timescale =')}: defaults.timescale: unknown key "
                   "(did you mean 'time_scale'?)")


def test_an_unknown_key_far_from_any_field_gets_no_hint(tmp_path: Path) -> None:
    path = write(tmp_path, HEAD + """
[scenarios.device]
placement = "device"
port = 30000
gpu_memory_utilization = 0.9
""")
    msg = only_problem(path)
    assert msg == (f"{path}:{line_of(path, 'gpu_memory')}: "
                   "scenarios.device.gpu_memory_utilization: unknown key")


def test_unknown_top_level_table(tmp_path: Path) -> None:
    path = write(tmp_path, HEAD + """
[scenarios.device]
placement = "device"
port = 30000

[scenario.host]
placement = "host"
port = 30001
""")
    msg = only_problem(path)
    assert msg.startswith(f"{path}:{line_of(path, '[scenario.host]')}: ")
    assert "unknown top-level key 'scenario'" in msg
    assert "expected defaults, plan, scenarios, slo" in msg


def test_unknown_plan_key(tmp_path: Path) -> None:
    path = write(tmp_path, HEAD.replace('name = "t"', 'name = "t"\nowner = "me"') + """
[scenarios.device]
placement = "device"
port = 30000
""")
    assert only_problem(path) == f"{path}:3: plan.owner: unknown key"


# --------------------------------------------------------------------------- wrong types


@pytest.mark.parametrize(("line", "key", "says"), [
    ('port = "30000"', "port", "should be a whole number from 1 to 65535, got str '30000'"),
    ("port = 30000.0", "port", "should be a whole number from 1 to 65535, got float 30000.0"),
    ("port = true", "port", "should be a whole number from 1 to 65535, got bool True"),
    ('args = "--x"', "args", "should be a list of strings (extra launch_server arguments), "
                             "got str '--x'"),
    ('args = ["--max-total-tokens", 8192]', "args", "every argument must be a string"),
    ("env = { SGLANG_X = 1 }", "env.SGLANG_X", "should be a string, got int 1 (quote it)"),
    ("time_scale = true", "time_scale", "should be a number from 0.001 to 100, got bool True"),
    ("stop_grace_s = false", "stop_grace_s", "should be a number of seconds from 0 to "
                                             "3600, got bool False"),
    ('tp = "4"', "tp", "should be a whole number from 1 to 1024, got str '4'"),
])
def test_wrong_type_says_what_it_should_be(tmp_path: Path, line: str, key: str,
                                           says: str) -> None:
    lines = ['placement = "device"', "port = 30000"]
    if line.startswith("port"):
        lines = ['placement = "device"']
    path = write(tmp_path, HEAD + "\n[scenarios.device]\n" + "\n".join([*lines, line]) + "\n")
    assert only_problem(path) == f"{path}:{line_of(path, line)}: scenarios.device.{key}: {says}"


def test_a_wrong_type_in_defaults_is_reported_once_without_a_crash(tmp_path: Path) -> None:
    # Each scenario inherits tp and time_scale: it must not be built (and compared) with them.
    path = write(tmp_path, HEAD.replace("time_scale = 0.1", 'time_scale = "fast"')
                 + 'tp = "4"\n' + """
[scenarios.device]
placement = "device"
port = 30000

[scenarios.host]
placement = "host"
port = 30001
""")
    assert problems(path) == [
        f"{path}:{line_of(path, 'time_scale')}: defaults.time_scale: should be a number from "
        "0.001 to 100, got str 'fast'",
        f"{path}:{line_of(path, 'tp =')}: defaults.tp: should be a whole number from 1 "
        "to 1024, got str '4'",
    ]


def test_a_scenario_that_overrides_a_bad_default_is_still_checked(tmp_path: Path) -> None:
    path = write(tmp_path, HEAD + 'tp = "4"\n' + """
[scenarios.device]
placement = "device"
tp = 4
port = 0
""")
    bad_tp = line_of(path, 'tp = "4"')
    assert problems(path) == [
        f"{path}:{bad_tp}: defaults.tp: should be a whole number from 1 to 1024, "
        "got str '4'",
        f"{path}:{line_of(path, 'port = 0')}: scenarios.device.port: 0 is out of range: "
        "should be a whole number from 1 to 65535",
    ]


# --------------------------------------------------------------------------- missing and ranges


def test_sglang_scenario_without_python_and_model_path(tmp_path: Path) -> None:
    path = write(tmp_path, """\
[scenarios.device]
kind = "sglang"
port = 30000
""")
    header = f"{path}:{line_of(path, '[scenarios.device]')}"
    assert problems(path) == [
        f"{header}: scenarios.device.python: missing: an SGLang scenario needs 'python'",
        f"{header}: scenarios.device.model_path: missing: an SGLang scenario needs 'model_path'",
    ]


def test_sglang_is_the_default_kind(tmp_path: Path) -> None:
    path = write(tmp_path, """\
[scenarios.device]
python = "/usr/bin/python3"
port = 30000
""")
    assert only_problem(path) == (f"{path}:1: scenarios.device.model_path: missing: "
                                  "an SGLang scenario needs 'model_path'")


def test_missing_port(tmp_path: Path) -> None:
    path = write(tmp_path, HEAD + """
[scenarios.device]
placement = "device"
""")
    assert only_problem(path) == (f"{path}:{line_of(path, '[scenarios.device]')}: "
                                  "scenarios.device.port: missing: every scenario needs a port")


@pytest.mark.parametrize("port", [0, 70000, 65536, -1])
def test_port_out_of_range(tmp_path: Path, port: int) -> None:
    path = write(tmp_path, HEAD + f"""
[scenarios.device]
placement = "device"
port = {port}
""")
    assert only_problem(path) == (f"{path}:{line_of(path, 'port =')}: scenarios.device.port: "
                                  f"{port} is out of range: should be a whole number from 1 "
                                  "to 65535")


@pytest.mark.parametrize("port", [1, 65535])
def test_port_range_ends_are_valid(tmp_path: Path, port: int) -> None:
    path = write(tmp_path, HEAD + f"""
[scenarios.device]
placement = "device"
port = {port}
""")
    assert scenario_file.load(path).get("device").port == port


def test_two_scenarios_on_one_port_names_both(tmp_path: Path) -> None:
    path = write(tmp_path, HEAD + """
[scenarios.device]
placement = "device"
port = 30000

[scenarios.host]
placement = "host"
port = 30000
""")
    lines = path.read_text().splitlines()
    second = max(n for n, line in enumerate(lines, 1) if line == "port = 30000")
    assert only_problem(path) == (f"{path}:{second}: scenarios.host.port: 30000 is also the port "
                                  "of 'device': give each scenario its own port")


def test_a_port_shared_through_defaults_is_caught(tmp_path: Path) -> None:
    path = write(tmp_path, HEAD + """port = 30000

[scenarios.device]
placement = "device"

[scenarios.host]
placement = "host"
""")
    msg = only_problem(path)
    assert "scenarios.host.port: 30000 is also the port of 'device'" in msg


def test_simulated_needs_a_known_placement(tmp_path: Path) -> None:
    path = write(tmp_path, HEAD + """
[scenarios.device]
placement = "gpu"
port = 30000
""")
    assert only_problem(path) == (
        f"{path}:{line_of(path, 'placement =')}: scenarios.device.placement: a simulated "
        "scenario needs one of device, host, host-prefetch")


def test_no_scenarios(tmp_path: Path) -> None:
    path = write(tmp_path, HEAD)
    assert only_problem(path) == f"{path}: no scenarios: add at least one [scenarios.NAME]"


# --------------------------------------------------------------------------- unreadable files


def test_invalid_toml_names_the_file_and_the_position(tmp_path: Path) -> None:
    path = write(tmp_path, HEAD + """
[scenarios.device]
placement = "device"
port 30000
""")
    msg = only_problem(path)
    assert msg.startswith(f"{path}: not valid TOML: ")
    assert f"(at line {line_of(path, 'port 30000')}, column" in msg


def test_a_duplicate_key_is_invalid_toml(tmp_path: Path) -> None:
    path = write(tmp_path, HEAD + """
[scenarios.device]
placement = "device"
port = 30000
port = 30001
""")
    msg = only_problem(path)
    assert msg.startswith(f"{path}: not valid TOML: ")
    assert f"line {line_of(path, 'port = 30001')}" in msg


def test_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    assert only_problem(path) == f"{path}: cannot read: No such file or directory"


def test_a_folder_is_not_a_file(tmp_path: Path) -> None:
    assert only_problem(tmp_path).startswith(f"{tmp_path}: cannot read: ")


def test_no_scenario_of_that_name(tmp_path: Path) -> None:
    sf = scenario_file.load(SHIPPED / "demo.toml")
    with pytest.raises(ScenarioError) as info:
        sf.get("gpu")
    assert str(info.value) == (f"{SHIPPED / 'demo.toml'}: no scenario named 'gpu' "
                               "(known: device, host, host-prefetch)")


# --------------------------------------------------------------------------- all at once

MANY = """\
[plan]
name = "many"

[defaults]
kind = "simulated"
timescale = 0.1

[scenarios.a]
placement = "device"
prot = 30000

[scenarios.b]
placement = "device"
port = "30001"
args = "--x"
env = { A = 1 }
serve_scale = true

[scenarios.c]
kind = "sglang"
port = 0

[scenarios.d]
placement = "host"
port = 70000

[scenarios.e]
placement = "host"

[scenarios.f]
placement = "device"
port = 30005

[scenarios.g]
placement = "host-prefetch"
port = 30005

[extra]
x = 1
"""


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    path = write(tmp_path, MANY)
    found = problems(path)

    def at(needle: str, after: str = "") -> str:
        lines = MANY.splitlines()
        start = lines.index(after) if after else 0
        n = next(i for i, line in enumerate(lines[start:], start + 1) if needle in line)
        return f"{path}:{n}: "

    assert found == [
        at("[extra]") + "unknown top-level key 'extra' (expected defaults, plan, scenarios, slo)",
        at("timescale") + "defaults.timescale: unknown key (did you mean 'time_scale'?)",
        at("prot =") + "scenarios.a.prot: unknown key (did you mean 'port'?)",
        at('port = "30001"') + "scenarios.b.port: should be a whole number from 1 to 65535, "
                               "got str '30001'",
        at('args = "--x"') + "scenarios.b.args: should be a list of strings (extra "
                             "launch_server arguments), got str '--x'",
        at("env = {") + "scenarios.b.env.A: should be a string, got int 1 (quote it)",
        at("serve_scale") + "scenarios.b.serve_scale: should be a number from 0.001 to 100, got "
                             "bool True",
        at("port = 0") + "scenarios.c.port: 0 is out of range: should be a whole number from "
                         "1 to 65535",
        at("[scenarios.c]") + "scenarios.c.python: missing: an SGLang scenario needs 'python'",
        at("[scenarios.c]") + "scenarios.c.model_path: missing: an SGLang scenario needs "
                              "'model_path'",
        at("port = 70000") + "scenarios.d.port: 70000 is out of range: should be a whole "
                             "number from 1 to 65535",
        at("[scenarios.e]") + "scenarios.e.port: missing: every scenario needs a port",
        at("port = 30005", "[scenarios.g]") + "scenarios.g.port: 30005 is also the port of "
                                              "'f': give each scenario its own port",
    ]
    assert len(found) == 13


# --------------------------------------------------------------------------- the shipped files


def test_demo_file() -> None:
    sf = scenario_file.load(SHIPPED / "demo.toml")
    assert sf.name == "demo"
    assert list(sf.scenarios) == ["device", "host", "host-prefetch"]
    assert [s.port for s in sf.scenarios.values()] == [30101, 30102, 30103]
    for name, s in sf.scenarios.items():
        assert s.kind == "simulated"
        assert s.placement == name
        assert s.time_scale == 0.1
        assert s.url == f"http://127.0.0.1:{s.port}"
        assert s.source == f"{SHIPPED / 'demo.toml'}:{line_of(sf.path, f'[scenarios.{name}]')}"
    entry = [sys.executable, "-m", "engram_top", "sim", "serve", "--node-dir", "/tmp/node"]
    assert sf.get("host-prefetch").argv(node_dir=Path("/tmp/node")) == [
        *entry, "--placement", "host-prefetch", "--host", "127.0.0.1", "--port", "30103",
        "--time-scale", "0.1", "--serve-scale", "1.0"]
    # The simulator takes its placement from --placement; its environment carries the V4.1
    # preview build's switches as a real launch would, so an attached reader finds them.
    assert sf.get("host").launch_env() == {"SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE": "1",
                                           "SGLANG_DSV41_ENGRAM_HOST_TABLE_LAYOUT": "shared",
                                           "SGLANG_DSV41_ENGRAM_HOST_TABLE_PIN": "1"}


def flag(argv: list[str], name: str) -> str:
    assert argv.count(name) == 1, argv
    return argv[argv.index(name) + 1]


def check_sglang_argv(s: Scenario) -> list[str]:
    argv = s.argv()
    assert argv[:3] == ["/opt/sglang-dsv41/bin/python", "-m", "sglang.launch_server"]
    assert flag(argv, "--model-path") == "/models/deepseek-ai/DeepSeek-V4.1-Flash"
    assert flag(argv, "--tp-size") == "4"
    assert flag(argv, "--host") == "127.0.0.1"
    assert flag(argv, "--port") == str(s.port)
    assert argv.count("--enable-metrics") == 1
    assert argv[-3:] == ["--trust-remote-code", "--attention-backend", "dsv4"]  # the file's args
    return argv


def test_dsv41_file_with_the_env_interface() -> None:
    sf = scenario_file.load(SHIPPED / "dsv41-flash-4xb200.toml")
    assert list(sf.scenarios) == ["device", "host", "host-prefetch"]
    assert [s.port for s in sf.scenarios.values()] == [30000, 30001, 30002]
    for s in sf.scenarios.values():
        assert s.kind == "sglang"
        assert s.tp == 4
        argv = check_sglang_argv(s)
        assert "--engram-config" not in argv
    assert sf.get("device").launch_env() == {HOST_TABLE: "0"}
    assert sf.get("host").launch_env() == {HOST_TABLE: "1", LAYOUT: "shared", PIN: "1"}
    assert sf.get("host-prefetch").launch_env() == {HOST_TABLE: "1", LAYOUT: "shared",
                                                    PIN: "1", PREFETCH: "1"}


def test_dsv41_file_with_the_config_interface(tmp_path: Path) -> None:
    text = (SHIPPED / "dsv41-flash-4xb200.toml").read_text()
    text, n = re.subn(r'^engram_interface = "env"', 'engram_interface = "config"', text,
                      flags=re.MULTILINE)
    assert n == 1
    path = write(tmp_path, text)
    sf = scenario_file.load(path)
    engram = {name: json.loads(flag(check_sglang_argv(s), "--engram-config"))
              for name, s in sf.scenarios.items()}
    assert engram == {"device": {"placement": "gpu"},
                      "host": {"placement": "cpu", "replication": "per_node"},
                      "host-prefetch": {"placement": "cpu", "replication": "per_node"}}
    # Prefetch has no documented key in --engram-config: the env switch stays.
    assert sf.get("device").launch_env() == {}
    assert sf.get("host").launch_env() == {}
    assert sf.get("host-prefetch").launch_env() == {PREFETCH: "1"}


def test_a_scenarios_env_wins_and_enable_metrics_is_not_doubled(tmp_path: Path) -> None:
    path = write(tmp_path, """\
[defaults]
python = "/opt/sglang/bin/python"
model_path = "deepseek-ai/DeepSeek-V4.1-Flash"
engram_interface = "env"
env = { HF_HOME = "/data/hf", SGLANG_DSV41_ENGRAM_HOST_TABLE_PIN = "1" }

[scenarios.host]
placement = "host"
port = 30001
args = ["--enable-metrics", "--log-level", "info"]
env = { SGLANG_DSV41_ENGRAM_HOST_TABLE_PIN = "0" }
""")
    s = scenario_file.load(path).get("host")
    assert s.model_path == "deepseek-ai/DeepSeek-V4.1-Flash"  # a hub id is kept as it is
    assert s.launch_env() == {HOST_TABLE: "1", LAYOUT: "shared", PIN: "0",
                              "HF_HOME": "/data/hf"}
    argv = s.argv()
    assert argv.count("--enable-metrics") == 1
    assert argv[-3:] == ["--enable-metrics", "--log-level", "info"]


def test_tiny_cpu_file_resolves_paths_against_its_folder() -> None:
    sf = scenario_file.load(SHIPPED / "tiny-cpu.toml")
    assert list(sf.scenarios) == ["tiny-8k", "tiny-16k"]
    tokens = {}
    for name, s in sf.scenarios.items():
        assert s.python == str(REPO / ".venv-sglang" / "bin" / "python")
        assert s.model_path == str(REPO / ".venv-sglang" / "tiny-llama")
        argv = s.argv()
        assert argv[:3] == [s.python, "-m", "sglang.launch_server"]
        assert flag(argv, "--model-path") == s.model_path
        assert flag(argv, "--device") == "cpu"
        assert s.launch_env() == {"SGLANG_USE_CPU_ENGINE": "1"}
        tokens[name] = flag(argv, "--max-total-tokens")
    assert tokens == {"tiny-8k": "8192", "tiny-16k": "16384"}


def test_a_venv_python_is_not_resolved_to_its_base_interpreter(tmp_path: Path) -> None:
    # A venv's bin/python is a symlink to the interpreter it was made from; following it
    # would launch SGLang outside the venv (No module named 'sglang').
    venv_python = tmp_path / "env" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.symlink_to(sys.executable)
    (tmp_path / "plans").mkdir()
    path = write(tmp_path / "plans", """\
[scenarios.tiny]
python = "../env/bin/python"
model_path = "./models/tiny"
port = 30201
""")
    s = scenario_file.load(path).get("tiny")
    assert s.python == str(venv_python)
    assert s.model_path == str(tmp_path / "plans" / "models" / "tiny")


# --------------------------------------------------------------------------- the commands

BROKEN = HEAD + """
[scenarios.device]
placement = "device"
prot = 30000
"""


def engram_top(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ENGRAM_TOP), *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60)


@pytest.mark.parametrize("command", ["run", "switch"])
@pytest.mark.slow
def test_commands_refuse_a_broken_file_with_its_message(tmp_path: Path, command: str) -> None:
    path = write(tmp_path, BROKEN)
    extra = ["--to", "device"] if command == "switch" else []
    done = engram_top(command, str(path), *extra, "--state-dir", str(tmp_path / "state"))
    assert done.returncode == 2
    assert done.stderr == (f"engram-top: {path}:{line_of(path, 'prot =')}: scenarios.device.prot:"
                           " unknown key (did you mean 'port'?)\n")
    assert done.stdout == ""  # `run` stopped before any terminal UI started
    assert not (tmp_path / "state").exists()  # and before any state was written


@pytest.mark.slow
def test_run_refuses_a_bad_default_without_a_traceback(tmp_path: Path) -> None:
    path = write(tmp_path, HEAD + 'tp = "4"\n' + """
[scenarios.device]
placement = "device"
port = 30000
""")
    done = engram_top("run", str(path), "--state-dir", str(tmp_path / "state"))
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr == (f"engram-top: {path}:{line_of(path, 'tp =')}: defaults.tp: should be "
                           "a whole number from 1 to 1024, got str '4'\n")
    assert done.stdout == ""


@pytest.mark.slow
def test_switch_refuses_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    done = engram_top("switch", str(path), "--to", "device")
    assert done.returncode == 2
    assert done.stderr == f"engram-top: {path}: cannot read: No such file or directory\n"


# --------------------------------------------------------------------------- [slo]

ONE = HEAD + """
[scenarios.device]
placement = "device"
port = 30000
"""


def test_a_scenario_file_holds_its_load_to_its_own_slo(tmp_path: Path) -> None:
    path = write(tmp_path, ONE + """
[slo]
ttft = { percentile = 99, max_ms = 1000 }
tpot = { max_ms = 150 }
""")
    slos = scenario_file.load(path).slos
    assert [(s.metric, s.percentile, s.max_s) for s in slos] == [
        ("ttft", 99.0, 1.0), ("tpot", 99.0, 0.15)]
    assert scenario_file.load(write(tmp_path, ONE, "none.toml")).slos == ()
    # The demo's own: its load (8 streams) meets it at every placement.
    demo = scenario_file.load(SHIPPED / "demo.toml").slos
    assert [s.label for s in demo] == ["p99 TTFT <= 1000 ms", "p99 TPOT <= 150 ms"]


def test_a_typo_in_the_slo_names_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, ONE + """
[slo]
tpot = { percentile = 99, max_ms = "fast" }
itl = { max_ms = 50 }
""")
    found = problems(path)
    where = f"{path}:{line_of(path, '[slo]')}: slo."
    assert len(found) == 2, found
    assert found[0].startswith(where + "tpot.max_ms: "), found
    assert found[1] == where + "itl: unknown metric (one of ttft, tpot, e2e)", found
