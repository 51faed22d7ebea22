"""Loaded by Python at start-up when this folder is on PYTHONPATH (fault test 3): once the
file named by ENGRAM_TOP_TEST_CRASH_FILE exists, the dashboard's latency panel raises, as a
bug in a panel would. Nothing of it runs without that variable."""

import os

_trigger = os.environ.get("ENGRAM_TOP_TEST_CRASH_FILE")
if _trigger:
    from engram_top.app import panels

    _real = panels.latency_panel

    def _latency_panel(store, rows=None, cols=None):  # type: ignore[no-untyped-def]
        if os.path.exists(_trigger):
            raise RuntimeError("injected fault: the latency panel broke")
        return _real(store, rows, cols)

    panels.latency_panel = _latency_panel
