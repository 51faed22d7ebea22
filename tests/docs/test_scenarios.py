"""The README's scenario commands, as written: the real node's file run unedited (it names
the line to edit and starts nothing), a dashboard ended by SIGTERM over a server an earlier
command left running (it leaves it, and says so in the words the README quotes), and the
on-call neighbour in the dashboard (`run ... --start neighbour`: its KV pool as the snapshot
said)."""

from __future__ import annotations

import re
import signal

import pytest
from docskit import Docs
from readme import assert_quoted, block_at, covers

pytestmark = [pytest.mark.docs, pytest.mark.slow]

REAL_NODE = "engram-top run scenarios/dsv41-flash-4xb200.toml --start device"
LEFT = ("engram-top: left running: host-prefetch (pid 48213) on 127.0.0.1:30103, adopted; "
        "stop it with `engram-top stop scenarios/demo.toml`")
NEIGHBOUR_RUN = "engram-top run scenarios/oncall.toml --start neighbour"


def _toast(screen: str) -> str:
    """The text of the toasts on a screen, their wrapped lines joined."""
    parts = (line.split("▌", 1)[1] for line in screen.splitlines() if "▌" in line)
    return " ".join(re.sub(r"[\s│─╮╯…]+$", "", part).strip() for part in parts)


@pytest.mark.timeout(120)
@covers(REAL_NODE)
def test_the_real_nodes_file_unedited_names_the_line_to_edit(docs: Docs) -> None:
    term = docs.screen(REAL_NODE, size=(30, 100))
    said = re.compile(r"dsv41-flash-4xb200\.toml:\d+: python '/opt/sglang-dsv41/bin/python' "
                      r"does not exist: set it to your SGLang environment's interpreter")
    term.wait_for(lambda t: said.search(_toast(t)), 60, "the line to edit, said")
    assert not any("sglang" in cmd for p, cmd in docs.command_lines()
                   if p.pid != term.proc.pid and "engram-top" not in cmd)
    term.press("q")
    assert term.wait(60) == 0, term.output[-2000:]
    assert "Traceback" not in term.output


@pytest.mark.timeout(240)
@covers(LEFT)
def test_a_dashboard_ended_by_sigterm_names_the_server_it_leaves(docs: Docs) -> None:
    switched = docs.sh("engram-top switch scenarios/demo.toml --to host-prefetch --wait-ready",
                       timeout=120)
    try:
        assert switched.returncode == 0, switched.stdout + switched.stderr
        term = docs.screen("engram-top run scenarios/demo.toml", size=(40, 120))
        term.wait_for(lambda t: "host-prefetch" in t and "72.201" in t, 90,
                      "the adopted host-prefetch server on screen")
        term.proc.send_signal(signal.SIGTERM)
        assert term.wait(60) == 128 + signal.SIGTERM, term.output[-2000:]
        said = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", term.output)
        assert_quoted(block_at("engram-top: left running:").lines,
                      [" ".join(line.split()) for line in said.splitlines()],
                      where="the dashboard's last lines")
        # Read as listed: the dashboard's own children end around now (one was seen a
        # zombie between the listing and its command line's read).
        alive = [p for p, cmd in docs.command_lines() if "sim serve" in cmd]
        assert alive, "the adopted server was stopped"
    finally:
        stopped = docs.sh("engram-top stop scenarios/demo.toml", timeout=60)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr


@pytest.mark.timeout(240)
@covers(NEIGHBOUR_RUN)
def test_the_neighbour_in_the_dashboard_shows_its_small_kv_pool(docs: Docs) -> None:
    term = docs.screen(NEIGHBOUR_RUN, size=(40, 120))
    # The KV capacity the on-call snapshot quotes: 1,298,688 tokens, 1.30M.
    term.wait_for(lambda t: "1.30M" in t and "119.043" in t, 120,
                  "the neighbour's KV capacity and the weights")
    term.press("q")
    assert term.wait(60) == 0, term.output[-2000:]
