"""A stand-in `sglang` package: `python -m sglang.launch_server` runs the fault tests' bad
server (tests/faults/badserver.py) in its place."""
