"""Readers of the node (GPUs, host memory, servers, Prometheus) into typed readings.

Its face, for what shows what they read: the units (bytes, GiB, durations, rates, written
one way everywhere), safe text (a server's, a file's or a label's text made visible,
never acting on the terminal), an XID's meaning, and the grid polls are taken on (for
their readers to come just after). Constants and pure functions, no I/O (a contract in
pyproject.toml holds it so); the readers themselves are their modules'."""

from collectors.nvml_codes import xid_text
from collectors.poll_grid import AFTER_POLLS_S, until_next
from collectors.safetext import table_cell, unsafe_in, visible
from collectors.units import (
    DASH,
    GB,
    GIB,
    KB,
    KIB,
    MB,
    MIB,
    NA,
    byte_rate,
    decimal_bytes,
    gib,
    gib_change,
    gib_text,
    latency,
    latency_bucket,
    ms_text,
    pct_change,
    percent,
    rate,
    seconds,
    sglang_gb,
    tokens,
    weights_gb,
)

__all__ = ["AFTER_POLLS_S", "DASH", "GB", "GIB", "KB", "KIB", "MB", "MIB", "NA", "byte_rate",
           "decimal_bytes", "gib", "gib_change", "gib_text", "latency", "latency_bucket", "ms_text",
           "pct_change", "percent", "rate", "seconds", "sglang_gb", "table_cell", "tokens",
           "unsafe_in", "until_next", "visible", "weights_gb", "xid_text"]
