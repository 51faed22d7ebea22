"""The demo and run loads' lengths (--prompt-tokens, --output-tokens): parsed with their
ranges, carried into the load, and sent to a simulated server as a length, not as text."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from engram_top.cli.parser import build_parser
from engram_top.cli.sessions import demo_options
from engram_top.live.demo import demo_file
from engram_top.live.load import LoadSpec, driver
from scenarios import scenario_file


def test_the_lengths_reach_the_demo_load() -> None:
    args = build_parser().parse_args(["demo", "--concurrency", "32", "--prompt-tokens",
                                      "1048576", "--output-tokens", "4096"])
    load = demo_options(args).load
    assert (load.concurrency, load.input_len, load.output_len) == (32, 1048576, 4096)
    plain = demo_options(build_parser().parse_args(["demo"])).load
    assert (plain.input_len, plain.output_len) == (LoadSpec.input_len, LoadSpec.output_len)


def test_long_is_a_load_whose_given_figures_stand() -> None:
    def options(*argv: str) -> tuple[int, int, int, float, int | None]:
        o = demo_options(build_parser().parse_args(["demo", *argv]))
        assert o.load is not None
        return (o.load.concurrency, o.load.input_len, o.load.output_len, o.serve_scale,
                o.stream_interval)
    assert options() == (8, 512, 128, 1.0, None)
    assert options("--long") == (32, 524288, 2048, 0.02, 64)
    # What the command line gives stands over --long's (and the chat load's) figures, the
    # chat load's own value included.
    assert options("--long", "--concurrency", "8", "--serve-scale", "1") == (8, 524288, 2048,
                                                                           1.0, 64)
    assert options("--long", "--output-tokens", "128") == (32, 524288, 128, 0.02, 64)
    assert options("--prompt-tokens", "4096") == (8, 4096, 128, 1.0, None)
    # The chat load's figures are the load spec's own defaults.
    assert options()[:3] == (LoadSpec.concurrency, LoadSpec.input_len, LoadSpec.output_len)
    # 32 prompts of 256K-512K tokens ask more than device's pool, a third of host-prefetch's.
    assert 32 * 524288 * 0.75 > 11_840_000 and 32 * (524288 + 2048) < 42_700_000


def test_long_demos_servers_send_a_chunk_per_64_tokens() -> None:
    """The demo's scenarios launch with SGLang's --stream-interval 64 under --long; a
    scenario that sets its own keeps it."""
    sf = scenario_file.load(demo_file())
    device = sf.scenarios["device"]
    tuned = device.engine.tune(device, None, None, 64)
    assert tuned.args[-2:] == ("--stream-interval", "64")
    assert "--stream-interval" in device.engine.argv(tuned, None, Path("node"))
    assert device.engine.tune(device, None, None, None).args == device.args
    own = dataclasses.replace(device, args=("--stream-interval", "8"))
    assert device.engine.tune(own, None, None, 64).args == ("--stream-interval", "8")


@pytest.mark.parametrize(("option", "value"), [
    ("--prompt-tokens", "0"), ("--prompt-tokens", "1048577"), ("--prompt-tokens", "1e3"),
    ("--output-tokens", "0"), ("--output-tokens", "nan"),
])
def test_lengths_out_of_range_are_refused(option: str, value: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("demo", "run"):
        argv = [command, *(["scenarios/demo.toml"] if command == "run" else []), option, value]
        with pytest.raises(SystemExit) as exc:
            build_parser().parse_args(argv)
        assert exc.value.code == 2
        assert f"argument {option}" in capsys.readouterr().err


def test_a_simulated_server_is_sent_the_prompts_length() -> None:
    sc = scenario_file.load(demo_file()).get("device")
    load, said = driver(sc, LoadSpec(concurrency=32, input_len=65536, output_len=2048),
                        1048576, ())
    assert "--count-prompt" in load.argv
    assert load.argv[load.argv.index("--input-len") + 1] == "65536"
    assert said == ("load started: 32 streams, closed loop, prompts up to 65536 and outputs "
                    "up to 2048 tokens")
    real = dataclasses.replace(sc, kind="sglang")
    load, _ = driver(real, LoadSpec(), None, ())
    assert "--count-prompt" not in load.argv
