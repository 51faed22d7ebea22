"""The placement probe: its measurement on the GPU (torch) and probe.json's schema.

Its face: probe.json's schema, what a package above reads of it (the app through nothing
else); the measurement (probe.gpu) is the probe command's alone."""

from engram_top.probe.report import HOST_MODES, ProbeFileError, ProbeReport, load_probe

__all__ = ["HOST_MODES", "ProbeFileError", "ProbeReport", "load_probe"]
