"""What the commands build their sessions from: a demo's options, a scenario file's
(a bench plan standing for its file), the user's alert thresholds, a --probe file."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engram_top.cli.lifetime import (
    say,
)

if TYPE_CHECKING:  # each imported where it is needed: a command loads only its own
    from engram_top.alerts.thresholds import Thresholds
    from engram_top.live.demo import DemoOptions
    from engram_top.live.session import Session, SessionOptions
    from engram_top.probe.report import ProbeReport


def demo_options(args: argparse.Namespace) -> DemoOptions:
    from engram_top.cli.parser import LONG_STREAM_INTERVAL, settle_demo_load
    from engram_top.live.demo import DemoOptions
    from engram_top.live.load import LoadSpec
    settle_demo_load(args)  # a Namespace not from the command line (a test's) too
    load = None if args.no_load else LoadSpec(concurrency=args.concurrency,
                                              input_len=args.prompt_tokens,
                                              output_len=args.output_tokens)
    return DemoOptions(placement=args.placement, time_scale=args.time_scale,
                       serve_scale=args.serve_scale, load=load,
                       stream_interval=LONG_STREAM_INTERVAL if getattr(args, "long", False)
                       else None, force=bool(getattr(args, "force", False)))


def user_thresholds() -> Thresholds:
    """The alert thresholds of the user's config file, for a command without a dashboard
    (which reads it itself and shows a broken one as an event); a broken file is said."""
    from engram_top.settings.user_config import load_config
    config, error = load_config()
    if error:
        say(f"engram-top: warning: alerts use the default thresholds: {error}")
    return config.alerts


def session_options(args: argparse.Namespace, *, headless: bool = False,
                    **extra: Any) -> SessionOptions | None:
    """Options for a session over a scenario file; a bad file ends here with its message.
    A bench plan stands for its scenario file (`stop PLAN` stops what its bench left)."""
    from engram_top.live.load import LoadSpec
    from engram_top.live.session import SessionOptions
    from engram_top.settings.paths import default_state_dir
    from scenarios import scenario_file as config
    path = _scenario_file_of(args.scenario_file)
    try:
        sf = config.load(path)
    except config.ScenarioError as exc:
        print(f"engram-top: {exc}", file=sys.stderr)
        return None
    if headless:  # a dashboard shows them as events instead, and reads its own config
        for warning in sf.warnings:
            say(f"engram-top: warning: {warning}")
        extra["thresholds"] = user_thresholds()
    state_dir = args.state_dir or default_state_dir(path)
    load = None if getattr(args, "no_load", True) else LoadSpec(
        concurrency=getattr(args, "concurrency", 8),
        input_len=getattr(args, "prompt_tokens", LoadSpec.input_len),
        output_len=getattr(args, "output_tokens", LoadSpec.output_len))
    extra.setdefault("force", bool(getattr(args, "force", False)))
    return SessionOptions(scenario_file=path, state_dir=state_dir, load=load, **extra)


def _scenario_file_of(path: Path) -> Path:
    """A bench plan's scenarios_file; any other file as it is (the loader judges it)."""
    import tomllib

    from scenarios.bounds import read_toml
    try:
        raw = read_toml(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError):
        return path
    bench = raw.get("bench")
    if isinstance(bench, dict) and isinstance(bench.get("scenarios_file"), str) \
            and "scenarios" in bench and "workload" in raw:
        return (path.parent / bench["scenarios_file"]).resolve()
    return path


def say_which_credential(session: Session, urls: Iterable[str], key: str | None) -> None:
    """An attached URL with user:password@ and an API key: the events line says the key is
    what is sent."""
    from engram_top.cli.credentials import attach_note
    for url in urls:
        if (note := attach_note(url, key)) is not None:
            session.store.event("warning", note)


def load_probe(path: Path | None) -> ProbeReport | None:
    """The --probe file's predictions; None without one. Raises ProbeFileError."""
    from engram_top.probe.report import load_probe
    return None if path is None else load_probe(path)



def history_behind(session: Session, urls: Iterable[str], folder: Path | None = None) -> None:
    """Put an agent's recordings of these servers behind the session's live data (its
    charts and history then go back as far as the agent kept), and say since when. Before
    the session starts: nothing it reads live is touched."""
    import time

    from engram_top.record import history
    from engram_top.settings.paths import state_base
    folder = folder or state_base() / "agent"
    if not folder.is_dir():
        return
    since = history.put_behind(session.store, history.recorded(folder, list(urls)))
    if since is not None:
        session.store.event("info", "history from the agent's recording since "
                            f"{time.strftime('%H:%M:%S', time.localtime(since))} ({folder})")
