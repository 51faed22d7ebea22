"""NVML's codes as names: clock-event (throttle) reasons and XID errors.

The bit values are NVML's (nvmlClocksEventReason*, the same bits as the older
nvmlClocksThrottleReason*), spelt out so that decoding needs no driver and reads the same
whatever pynvml a machine has; and no pynvml at all, so that what shows an XID (the
alerts) imports where nvidia-ml-py is not installed (the SGLang probe's environment).
"""

from __future__ import annotations

# Bits that say the clocks are held down, in NVML's order.
THROTTLE_BITS: tuple[tuple[int, str], ...] = (
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake"),
    (0x100, "display_clock_setting"),
)
# An idle GPU clocks down, and applications clocks are a setting someone chose: neither
# costs a serving GPU anything, so neither counts as throttling.
NOT_THROTTLING = 0x1 | 0x2


def throttle_names(mask: int) -> tuple[str, ...]:
    """The throttling reasons in an NVML clock-event bitmask; a bit NVML adds later is
    shown by its value rather than dropped."""
    mask &= ~NOT_THROTTLING
    names = [name for bit, name in THROTTLE_BITS if mask & bit]
    known = sum(bit for bit, _ in THROTTLE_BITS)
    rest = mask & ~known
    bit = 1
    while rest:
        if rest & bit:
            names.append(f"0x{bit:x}")
            rest &= ~bit
        bit <<= 1
    return tuple(names)


# What the common XIDs mean (NVIDIA's XID catalogue), for the alert's text.
XID_MEANINGS = {
    13: "graphics engine exception", 31: "GPU memory page fault",
    43: "GPU stopped processing", 45: "preemptive cleanup", 48: "double-bit ECC error",
    63: "ECC page retirement or row remapping", 64: "ECC row remapping failure",
    74: "NVLink error", 79: "GPU has fallen off the bus", 92: "high single-bit ECC rate",
    94: "contained ECC error", 95: "uncontained ECC error", 119: "GSP RPC timeout",
    120: "GSP error",
}


def xid_text(xid: int) -> str:
    meaning = XID_MEANINGS.get(xid)
    return f"XID {xid}" + (f" ({meaning})" if meaning else "")
