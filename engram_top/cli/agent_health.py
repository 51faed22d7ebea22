"""The agent's /health page and `engram-top health`, which reads it for a script, a systemd
timer or a container's health check: exit 0 (no alert at or above --fail-on), 3 (a warning
or worse active), 4 (an error active), as `snapshot --fail-on`; 1 where no agent answers; 2
where what answers is no agent.

The page answers HTTP 200 whatever the alerts say: the agent is healthy while it watches a
node in trouble, and a liveness probe that restarted it for the node's alerts would lose
the recording of the trouble. Its first line is the verdict ("engram-top agent: warning"),
then what it watches and records, then one line per active alert, the worst first."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Iterable

from collectors.base import TooLarge
from collectors.pages import PageClient, PageError
from collectors.safetext import visible
from engram_top.alerts.monitor import Alert
from engram_top.cli.snapshot import ALERT_CODES

HEAD = "engram-top agent: "
DEADLINE_S = 5.0  # the whole answer: an agent is local and its page small
LIMIT_BYTES = 256 * 1024  # a page of every alert's line is a few kB
RANK = {"ok": 0, "warning": 1, "error": 2}


def health_text(alerts: Iterable[Alert], *, watching: str, recording: str) -> str:
    """The /health page of an agent with these alerts active."""
    shown = sorted(alerts, key=lambda a: (-RANK.get(a.severity, 0), a.id))
    worst = max(("ok", *(a.severity for a in shown if a.severity in RANK)), key=RANK.__getitem__)
    lines = [HEAD + worst, f"watching: {watching}", f"recording: {recording}"]
    lines += [f"{a.severity}: {a.id}: {visible(a.message)}" for a in shown]
    return "\n".join(lines) + "\n"


def verdict(text: str) -> str | None:
    """The page's verdict, or None where the text is no agent's /health."""
    first = text.split("\n", 1)[0]
    word = first.removeprefix(HEAD)
    return word if first.startswith(HEAD) and word in RANK else None


async def read_health(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    client = PageClient(f"http://{shown}:{port}")
    try:
        page = await client.get("/health", deadline_s=DEADLINE_S, limit_bytes=LIMIT_BYTES)
        return page.raise_for_status().text
    finally:
        await client.aclose()


def health(args: argparse.Namespace) -> int:
    host, port = args.agent
    try:
        text = asyncio.run(read_health(host, port))
    except TooLarge:
        print(f"engram-top health: {host}:{port}/health is over {LIMIT_BYTES // 1024} kB: "
              "not an engram-top agent", file=sys.stderr)
        return 2
    except (PageError, TimeoutError, OSError) as exc:
        why = str(exc) or f"no whole answer in {DEADLINE_S:g} s"
        print(f"engram-top health: no agent answering on {host}:{port} ({why})",
              file=sys.stderr)
        return 1
    found = verdict(text)
    if found is None:
        print(f"engram-top health: {host}:{port}/health is not an engram-top agent's (it "
              f"begins {text[:60]!r})", file=sys.stderr)
        return 2
    sys.stdout.write(visible(text, keep="\n"))  # what a server said, never acting on a terminal
    code = ALERT_CODES.get(found, 0)
    return code if code >= ALERT_CODES[args.fail_on] else 0
