"""The README held to the docs tier, in-process (quick): every command it gives to run is
run by a registered test of the tier, every quoted block is checked by one, every option a
synopsis names exists, every TOML excerpt reads, and the layout names what is there.

A new command or quoted output in README.md without a test fails here, naming its line."""

from __future__ import annotations

import argparse
import functools
import importlib.util
import re
from pathlib import Path

import pytest
import readme

from engram_top.bench.plan import load_plan
from engram_top.cli.parser import build_parser
from scenarios import scenario_file

pytestmark = pytest.mark.docs

HERE = Path(__file__).parent


def _registered() -> dict[str, str]:
    """README text -> the test that covers it, from every module of the tier."""
    functions: list[object] = []
    for path in sorted(HERE.glob("test_*.py")):
        if path.name == Path(__file__).name:
            continue
        spec = importlib.util.spec_from_file_location(f"docs_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        functions += [v for k, v in vars(module).items() if k.startswith("test_")]
    return readme.covered_by(functions)


@functools.cache
def registered() -> dict[str, str]:
    """Every module's registrations, this one's included."""
    own = [v for k, v in globals().items() if k.startswith("test_")]
    return {**_registered(), **readme.covered_by(own)}


def test_every_command_to_run_is_run_by_a_test() -> None:
    missing = [f"README.md:{c.line}: {c.text}" for c in readme.commands()
               if c.concrete and c.text not in registered()]
    assert not missing, "commands the docs tier does not run:\n" + "\n".join(missing)


def test_every_quoted_block_is_checked_by_a_test() -> None:
    missing = [f"README.md:{b.line}: {b.lines[0]}" for b in readme.quotes()
               if b.lines[0] not in registered()]
    assert not missing, "quoted blocks the docs tier does not check:\n" + "\n".join(missing)


def test_nothing_registered_is_gone_from_the_readme() -> None:
    present = {c.text for c in readme.commands()} | {b.lines[0] for b in readme.blocks()
                                                        if b.lines} | \
        {s.text for s in readme.spans()}
    stale = sorted(text for text in registered() if text not in present)
    assert not stale, "tests cover README text that is no longer there:\n" + "\n".join(stale)


# Output the README quotes inline, checked by a test outside this tier: the span, the test
# file, and the part of the span (placeholders aside) that test asserts.
ELSEWHERE = {
    "GPU1 tenant (pid N) 20.0 · ? 1.6": ("tests/model/test_ledger.py", "20.0 · ? 1.6"),
    "Δ server +195.4 GiB · others +300.0": ("tests/model/test_ledger.py",
                                             "Δ server +195.4 GiB · others +300.0"),
    "TTFT p50 <= 100 ms, p99 <= 100 ms, mean 3.6 ms": (
        "tests/compare/test_quantile_buckets.py", "TTFT p50 <= 100 ms, p99 <= 100 ms, mean 3.6 ms"),
    "a histogram bucket that holds the [slo] bound of 2,000 ms: not resolved": (
        "tests/alerts/test_alerts_pressure.py", "a histogram bucket that holds the [slo] "),
    '"p50": 0.05, "p50_bucket": [0.0, 0.1], "p50_coarse": true': (
        "tests/compare/test_quantile_buckets.py", '["p50_bucket"] == [0.0, 0.1]'),
    '"ttft_p50_bucket_ms": [0.0, 100.0]': ("tests/compare/test_quantile_buckets.py",
                                           '["ttft_p50_bucket_ms"] == [0.0, 100.0]'),
    "metrics page: 2 lines skipped: line 3: invalid metric name: '...'": (
        "tests/collectors/test_metrics_dialect.py",
        "metrics page: 2 lines skipped: line 3: invalid metric name: '...'"),
    "k8s pod 7d1c0e2a, containerd 3f2a1b4c5d6e": (
        "tests/collectors/test_cgroup.py", '"k8s pod 7d1c0e2a, containerd 3f2a1b4c5d6e"'),
    "python3 (pid 4242, docker 3f2a1b4c5d6e)": (
        "tests/collectors/test_cgroup.py", '"python3 (pid 4242, docker 3f2a1b4c5d6e)"'),
    "recordings: removed 3 older sessions (412.5 MB) from ~/.local/state/engram-top/recordings, "
    "past the retention 7d,3GB ([recordings] retain in the config file)": (
        "tests/record/test_retention.py", '"recordings: removed 3 older sessions (412.5 MB) from '),
    "server: 1 of 3 processes not readable by this user (pid 102): their memory is not in "
    "the server's share": ("tests/collectors/test_host_refusals.py",
                           "1 of 3 processes not readable by this user (pid 102)"),
    # The interval follows the machine's parse speed (30 s here); the test reads it back.
    "metrics page (8 MiB) is slow to parse: read every 30 s": (
        "tests/faults/test_large_pages.py", '"metrics page (8 MiB) is slow to parse"'),
}
# Code spans with figures that are no output: what the parsers read, names of files and
# switches, and synopses.
NOT_OUTPUT = ("SGLANG_ENABLE_DSV41_ENGRAM", "scenarios/", "Initialize DeepSeekV4TokenToKVPool",
              "tpot = { percentile = 99,",
              "[rank3]:[E227", "(EngineCore_DP0 pid=N)", "engram-top switch: left running: "
              "host-prefetch (pid 48213) on 127.0.0.1:30103; stop it with ...")


def _output_like(span: readme.Span) -> bool:
    return len(span.text) > 30 and bool(re.search(r"\d", span.text)) and \
        not readme.COMMAND_START.match(span.text)


def test_every_output_quoted_inline_is_checked() -> None:
    """Alerts and panel rows quoted in prose, as the blocks are."""
    missing = [f"README.md:{s.line}: {s.text}" for s in readme.spans() if _output_like(s)
               and s.text not in registered() and s.text not in ELSEWHERE
               and not s.text.startswith(NOT_OUTPUT)]
    assert not missing, "output quoted inline that no test checks:\n" + "\n".join(missing)
    for span, (path, part) in ELSEWHERE.items():
        assert span in {s.text for s in readme.spans()}, f"no longer in the README: {span}"
        assert part in (readme.ROOT / path).read_text(), f"{path} does not check {part!r}"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse has no public way to list a parser's commands
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(command: str) -> tuple[str, set[str]]:
    """The subcommand a synopsis names and the options its parser takes."""
    words = command.split()
    parser = build_parser()
    name = "demo"
    rest = words[1:]
    if rest and not rest[0].startswith(("-", "(")):
        name, rest = rest[0], rest[1:]
    sub = _subparsers(parser)
    assert name in sub, f"no such command: engram-top {name}"
    found = sub[name]
    if name == "sim":
        inner = _subparsers(found)
        assert rest and rest[0] in inner, f"no such command: engram-top sim {rest[:1]}"
        found, name = inner[rest[0]], f"sim {rest[0]}"
    return name, {s for a in found._actions for s in a.option_strings}


def test_every_option_a_synopsis_names_exists() -> None:
    """The Commands block and every synopsis in prose (`--out DIR`, `[--force]`)."""
    wrong = []
    for c in readme.commands():
        if not c.text.startswith("engram-top"):
            continue
        for part in re.split(r"\s\|\s(?=--)", c.text.split(" # ")[0]):
            name, options = _options(part if part.startswith("engram-top") else c.text)
            for option in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", part):
                if option not in options:
                    wrong.append(f"README.md:{c.line}: engram-top {name} has no {option}")
    assert not wrong, "\n".join(wrong)


def test_the_readme_names_every_command_the_parser_has() -> None:
    synopsis = " ".join(c.text for c in readme.commands() if c.in_block)
    missing = [n for n in _subparsers(build_parser()) if f"engram-top {n}" not in synopsis]
    assert not missing, f"commands the README's Commands block leaves out: {missing}"


def _toml_blocks() -> dict[str, readme.Block]:
    return {b.lines[0]: b for b in readme.blocks() if b.lang == "toml"}


@pytest.mark.parametrize("first", ["[stop]", "[slo]", "[sweep]"])
def test_each_plan_excerpt_reads_as_part_of_a_plan(tmp_path: Path, first: str) -> None:
    block = _toml_blocks()[first]
    base = (f'[bench]\nscenarios_file = "{readme.ROOT / "scenarios" / "demo.toml"}"\n'
            'scenarios = ["device", "host"]\nbaseline = "device"\ntrials = 3\n')
    if first != "[sweep]":
        base += "[workload]\nlevels = [{ concurrency = 1, requests = 2 }]\n"
    plan = tmp_path / "plan.toml"
    plan.write_text(base + block.text + "\n")
    loaded = load_plan(plan)
    if first == "[stop]":
        assert loaded.stop is not None and loaded.stop.min_rounds == 3
    elif first == "[slo]":
        assert {s.metric for s in loaded.slos} == {"ttft", "tpot", "e2e"}
    else:
        assert loaded.sweep is not None and loaded.sweep.kind == "rate"
        assert [lv.rate for lv in loaded.workload.levels] == [0.01, 0.02]


@readme.covers("collectors/   reads the node; no product code, no UI. Engine-neutral: readings "
               "(typed")
def test_the_layout_names_what_is_there() -> None:
    """Each top-level folder and each package of engram_top the Layout block lists."""
    block = readme.block_at("collectors/")
    folders = [m.group(1) for line in block.lines
               if (m := re.match(r"^(\S+)/\s", line))]
    packages = [m.group(1) for line in block.lines
                if (m := re.match(r"^  (\w+)/\s", line))]
    assert {"collectors", "scenarios", "engram_top", "seeds", "benchmarks", "tests",
            "snapshots"} <= set(folders)
    for folder in folders:
        assert (readme.ROOT / folder).is_dir(), folder
    engram = [p.name for p in (readme.ROOT / "engram_top").iterdir()
              if (p / "__init__.py").exists()]
    listed = {p for p in packages if (readme.ROOT / "engram_top" / p).is_dir()}
    assert set(engram) <= listed | {"__pycache__"}, set(engram) - listed


@pytest.mark.parametrize("name", sorted(p.name for p in (readme.ROOT / "scenarios").glob("*.toml")))
def test_every_file_under_scenarios_loads(name: str) -> None:
    """As the plan or the scenario file it is; a plan's scenario file and scenarios too."""
    path = readme.ROOT / "scenarios" / name
    if "[bench]" in path.read_text():
        plan = load_plan(path)
        assert plan.baseline in plan.scenarios and plan.workload.levels
    else:
        loaded = scenario_file.load(path)
        assert loaded.scenarios, name
