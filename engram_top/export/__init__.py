"""Exports: a snapshot folder and its charts.

Its face: what a package above reads of it (the app through nothing else; it imports this
when a snapshot is taken, not before: pandas and matplotlib come with it)."""

from engram_top.export.snapshot import Prepared, SnapshotError, prepare, write_folder

__all__ = ["Prepared", "SnapshotError", "prepare", "write_folder"]
