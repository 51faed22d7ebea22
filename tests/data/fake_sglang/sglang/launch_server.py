"""A misbehaving stand-in for `python -m sglang.launch_server`, for supervisor tests.

FAKE_IGNORE_TERM=1: ignore SIGTERM (a stop must escalate to SIGKILL).
FAKE_CHILD=1: start a child in the same process group that also ignores SIGTERM.
It prints SGLang-like start-up lines and then never becomes ready.
"""

import os
import signal
import subprocess
import sys
import time

if os.environ.get("FAKE_IGNORE_TERM") == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.environ.get("FAKE_CHILD") == "1":
    subprocess.Popen([sys.executable, "-c",
                      "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                      "time.sleep(3600)"])
print(f"server_args=ServerArgs(argv={sys.argv[1:]})", flush=True)
print("[2026-01-01 00:00:00 TP0] Load weight begin. avail mem=10.00 GB", flush=True)
while True:
    time.sleep(1)
