"""The placement probe: its measurement on the GPU (torch) and probe.json's schema."""
