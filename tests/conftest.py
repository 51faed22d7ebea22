"""Shared fixtures: simulated SGLang servers running as real processes on 127.0.0.1.

Starting a simulated server costs its start-up phases (seconds even at --time-scale 0.02),
and this machine has two cores. So the servers the live tests need are launched together,
once per session, the first time any of them is asked for (`fleet`): their start-ups overlap
and the tests that only read share one. Tests that stop or kill a server get one of their own
from the same launch. Every server keeps its node state and log under the session's tmp dir.
The servers themselves (SimServer, Fleet) are in helpers.py; this file only makes fixtures.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import httpx
import pytest
import signal_ends
from helpers import Fleet, SimServer
from quick_tier import is_slow, mark_server_tests, no_processes

# Where the environment says PYTHONDONTWRITEBYTECODE (some sandboxes and containers do),
# every pytest process would rewrite each test module's asserts anew (about 10 s of a core a
# collection, and the suite runs pytest again inside some tests) and every process a test
# starts would compile our modules from source. The suite writes its own tree's bytecode:
# __pycache__ is ignored by git, and Python checks a .pyc against its source before use.
sys.dont_write_bytecode = False

# The modules that take minutes (real servers on the CPU, whole benches) start first: the
# workers each take a module at a time in collection order, so the longest ones begin at
# once and the short ones fill in around them, instead of one long module ending the run
# (pyproject's --no-loadscope-reorder keeps xdist to this order).
FIRST = ("test_real_vllm.py", "test_real_sglang.py", "test_first_command.py", "test_oncall.py",
         "test_long_demo.py",
         "test_benches.py", "test_bench.py", "test_sweep.py", "test_sim_vllm.py",
         "test_fleet.py", "test_app_control.py", "test_hangs.py")


def pytest_configure(config: pytest.Config) -> None:
    signal_ends.install(config)  # SIGTERM and SIGHUP tear down as Ctrl-C does
    _font_list()


def _font_list() -> None:
    """matplotlib's font list, made here where none is kept yet (a fresh machine): making it
    runs fc-list, a process, which a quick-tier test that draws a chart must not start."""
    import glob
    import os

    import matplotlib
    if not glob.glob(os.path.join(matplotlib.get_cachedir(), "fontlist-*.json")):
        import matplotlib.font_manager  # noqa: F401  (made and kept on import)


# First, so that the slow marks it adds are there when `-m "not slow"` deselects.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_server_tests(items)

    def order(item: pytest.Item) -> int:
        name = item.path.name
        return FIRST.index(name) if name in FIRST else len(FIRST)
    items.sort(key=order)  # stable: a module's tests keep their order


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    """Outside the slow tier no process starts (quick_tier.py): setup, call and teardown."""
    # Again for each test: a command run in-process leaves SIGTERM and SIGHUP at Python's
    # default as it ends (asyncio's remove_signal_handler).
    signal_ends.install(item.config)
    if is_slow(item):
        return (yield)
    with no_processes():
        return (yield)


@pytest.fixture(autouse=True)
def _own_state_folder(tmp_path_factory: pytest.TempPathFactory,
                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test (and every command it runs) keeps its state folders, locks and
    recordings to itself, never in the user's ~/.local/state."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("xdg-state")))


@pytest.fixture(scope="session")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    f = Fleet(tmp_path_factory.mktemp("fleet"))
    try:
        yield f
    finally:
        f.close()


@pytest.fixture(scope="session")
def sim_device(fleet: Fleet) -> SimServer:
    """The shared device-placement server (--time-scale 0.03). Read it; do not stop it."""
    return fleet.ready("device")


@pytest.fixture(scope="session")
def sim_apikey(fleet: Fleet) -> SimServer:
    """A shared device-placement server started with --api-key. Read it; do not stop it."""
    return fleet.ready("apikey")


@pytest.fixture(scope="session")
def device_metrics_page(sim_device: SimServer) -> str:
    return httpx.get(f"{sim_device.url}/metrics", timeout=5.0).raise_for_status().text
