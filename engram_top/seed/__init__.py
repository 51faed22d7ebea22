"""The seed's figures and the simulated node's calibration, read from seeds/.

Its face: what a package above reads of it (the app through nothing else)."""

from engram_top.seed.reference import Reference
from engram_top.seed.reference import default as default_reference

__all__ = ["Reference", "default_reference"]
