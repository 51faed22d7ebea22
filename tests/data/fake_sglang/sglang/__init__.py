"""A stand-in `sglang` package for supervisor tests of misbehaving servers (never imported
by the product). Only `python -m sglang.launch_server` is provided."""
