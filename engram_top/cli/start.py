"""The program's entry (the engram-top script, python -m engram_top): the command line, run
with the cyclic garbage collector off while a dashboard starts."""

from __future__ import annotations

import gc


def main() -> int:
    # A start makes objects that live as long as the process: the modules, their classes,
    # the widgets and their styles. The collector's passes over them while they are made
    # free almost nothing (about 160 passes before a dashboard's first frame, a whole one
    # among them: 55-60 ms of its 0.7 s here). A dashboard turns it back on at its first
    # frame (app.process_end), any other command once its arguments are read (commands).
    gc.disable()
    try:
        from engram_top.cli.commands import main as run
        return run()
    finally:
        gc.enable()  # (an exit's own collections, and a caller's that imported this)
