"""The README's long-context demo, as written and at a presenter's 100x30: on device the KV
pool fills and requests queue; on host-prefetch its 3.6x pool holds them, and the verdict
says TTFT wins there, the reason to move the tables that the chat load never shows."""

from __future__ import annotations

import re

import pytest
from docskit import Docs, answered
from readme import assert_quoted, covers

pytestmark = [pytest.mark.docs, pytest.mark.slow]

LONG = "engram-top demo --long"
TTFT_WIN = "TTFT: host-prefetch -83.1% [-89.1%, -66.3%] ▲"


@pytest.mark.timeout(600)  # a backstop: its waits have their own deadlines (720 s in all)
@covers(LONG, TTFT_WIN)
def test_long_contexts_fill_the_device_pool_and_host_prefetch_wins_ttft(docs: Docs) -> None:
    term = docs.screen(LONG, size=(30, 100))
    # On device: the 11.84M-token pool full, requests queued behind it.
    term.wait_for(lambda t: re.search(r"full pool 9\d\.\d%", t) and re.search(
        r"[1-9]\d* queued", t), 120, "the device placement's KV pool full, requests queued")
    # A 30 s window of answered requests on device before it stops: the verdict's baseline.
    term.wait_for(lambda t: answered(t) >= 40, 150, "40 requests answered on device")
    term.press("3")
    ready = term.wait_for(lambda t: "42.70M" in t and "READY" in t and "host-prefetch" in t,
                          120, "host-prefetch ready with its 42.70M-token pool")
    # The 32 streams reach the new server at once as it comes up: its first window holds
    # that burst's prefill queue. Two windows' worth of answers later (the README's "about a
    # minute"), the window is the steady load's.
    before = answered(ready)
    term.wait_for(lambda t: answered(t) >= before + 70, 180,
                  "70 more requests answered on host-prefetch")
    term.press("c")
    # Not measured (no answer yet), then warming up (a window filling), then a figure.
    screen = term.wait_for(lambda t: re.search(r"TTFT: host-prefetch [-+][\d.]+% \[", t), 150,
                           "the TTFT verdict of a full window")
    # The win, its figure within half the README's (the load's requests are random).
    assert_quoted([TTFT_WIN], [line.strip("│ ") for line in screen.splitlines()],
                  tolerance=0.5, where="the compare screen")
    # TPOT and throughput with their intervals from the load's own requests.
    for axis in ("TPOT", "throughput"):
        assert re.search(rf"{axis}: host-prefetch [-+][\d.]+% \[[-+][\d.]+%, [-+][\d.]+%\] "
                         "[▲▼≈]", screen), screen
    term.press("c")
    term.wait_for(lambda t: "KV pool" in t and "Verdict against" not in t, 30,
                  "the panels again")
    term.press("q")
    assert term.wait(60) == 0, term.output[-2000:]
