"""Where a DeepSeek-V4.1 server keeps its Engram tables, and whether its KV prefetch engages,
read from what the server was given and what it says: its environment (the env-var
switches of the V4.1 preview builds), its argv or server args (``--engram-config`` on later
builds, the parallel layout, the attention backend, speculative decoding), its start-up log
(the host-table lines) and the GPU it runs on.

SGLang's asynchronous Engram prefetch (``SGLANG_ENABLE_DSV41_ENGRAM_KV_PREFETCH=1``) moves
the layer-14 lookup to a side stream only when every condition below holds; otherwise the
lookup runs inline, synchronously, with nothing said in the log. A user who asked for it
and does not get it sees host placement's cost without its remedy, so the dashboard says
which condition fails:
  - the host table is in host memory with the shared layout (one memfd every rank maps);
  - DP attention is off;
  - pipeline parallel size is 1;
  - the WKV projection runs on the supported backend: the DSV4 attention backend (or the
    automatic choice, which picks it), on a Blackwell GPU (its MXFP8 kernels);
  - a decode step is one token per request: speculative decoding's verify steps take the
    synchronous path, so with a draft model the decode steps never prefetch.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from collectors.engram_setting import EngramSetting as EngramSetting  # where engines find it
from collectors.startup_facts import StartupFacts

HOST_TABLE = "SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE"
LAYOUT = "SGLANG_DSV41_ENGRAM_HOST_TABLE_LAYOUT"
PIN = "SGLANG_DSV41_ENGRAM_HOST_TABLE_PIN"
KV_PREFETCH = "SGLANG_ENABLE_DSV41_ENGRAM_KV_PREFETCH"
ENV_KEYS = (HOST_TABLE, LAYOUT, PIN, KV_PREFETCH)

# Backends whose WKV path has the prefetch kernels; None is SGLang's automatic choice,
# which for DeepSeek-V4 models is the DSV4 backend.
PREFETCH_BACKENDS = frozenset({"dsv4"})
# NVML device names of Blackwell parts (B100/B200/B300, GB200/GB300, RTX PRO Blackwell).
_BLACKWELL = re.compile(r"\bG?B[123]00\b|Blackwell", re.IGNORECASE)
_TRUE = frozenset({"1", "true", "yes", "on"})


def _flag(value: object) -> bool | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    return None


def argv_args(argv: Sequence[str]) -> dict[str, Any]:
    """The server args an SGLang argv sets, by their server_args names (``--tp-size 4`` ->
    tp_size=4, ``--enable-dp-attention`` -> True); the ones the verdict reads, and
    ``engram_config``. Later flags win, as argparse has it."""
    out: dict[str, Any] = {}
    names = {"--tp-size": "tp_size", "--tp": "tp_size", "--pp-size": "pp_size",
             "--pp": "pp_size", "--dp-size": "dp_size", "--dp": "dp_size",
             "--attention-backend": "attention_backend",
             "--decode-attention-backend": "decode_attention_backend",
             "--speculative-algorithm": "speculative_algorithm",
             "--engram-config": "engram_config", "--model-path": "model_path"}
    flags = {"--enable-dp-attention": "enable_dp_attention"}
    items = list(argv)
    for i, item in enumerate(items):
        key, _, inline = item.partition("=")
        if key in flags:
            out[flags[key]] = True
        elif key in names:
            value = inline if inline else (items[i + 1] if i + 1 < len(items) else None)
            if value is not None:
                out[names[key]] = value
    return out


def _config(value: object) -> dict[str, Any] | None:
    """--engram-config as a dict: given as JSON text (argv) or as a dict (server_info)."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str) and value.strip():
        try:
            parsed = json.loads(value)
        except ValueError:
            return None
        return parsed if isinstance(parsed, dict) else None
    return None


def _int(value: object) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def infer(env: Mapping[str, str], args: Mapping[str, Any], startup: StartupFacts,
          *, placement: str | None = None, gpu_name: str | None = None) -> EngramSetting:
    """The server's Engram setting. ``env``: its environment (or the launch env a scenario
    gives); ``args``: its server args (merged: argv, the log's server_args, /server_info);
    ``startup``: the log parser's facts; ``placement``: the scenario's own
    placement, when it names one of ours; ``gpu_name``: NVML's name for its GPUs."""
    layout = env.get(LAYOUT)
    pinned = _flag(env.get(PIN))
    host = _flag(env.get(HOST_TABLE))
    prefetch_asked = bool(_flag(env.get(KV_PREFETCH)))
    source = "environment" if any(k in env for k in ENV_KEYS) else ""
    config = _config(args.get("engram_config"))
    if config:
        where = str(config.get("placement", "gpu")).lower()
        host = where in ("cpu", "host")
        if host and layout is None:
            layout = "shared" if config.get("replication") == "per_node" else "private"
        source = source or "engram-config"
    tables = startup.engram_tables
    if tables:  # the log says where the rows are, whatever was asked
        host = True
        layout = tables[0].layout or layout
        pinned = tables[0].pinned
        source = source or "log"
    logged = _config(startup.engram_config)
    if logged and host is None:
        host = str(logged.get("placement", "")).lower() in ("cpu", "host")
        source = source or "log"
    if placement is not None and host is None:
        host = placement != "device"
        prefetch_asked = prefetch_asked or placement == "host-prefetch"
        source = source or "scenario"
    if host is None and _loaded_dsv4(startup):
        host, source = False, "log"  # a V4 model loaded with no host table: rows in HBM
    if host is None:
        return EngramSetting(None, None, None, source or "nothing", "n/a")
    if not host:
        return EngramSetting("device", None, None, source, "n/a")
    layout = layout or "shared"  # SGLang's default layout
    name = "host-prefetch" if prefetch_asked else "host"
    if not prefetch_asked:
        return EngramSetting(name, layout, pinned, source, "off")
    reasons, unknown = _blockers(layout, args, gpu_name)
    if reasons:
        verdict = "would not engage: " + "; ".join(reasons)
    elif unknown:
        verdict = "asked, not yet confirmed: " + ", ".join(unknown) + " unknown"
    else:
        verdict = "engaged"
    return EngramSetting(name, layout, pinned, source, verdict, tuple(reasons))


def _loaded_dsv4(startup: StartupFacts) -> bool:
    first = next(iter(startup.ranks.values()), None)
    if first is None:
        return False
    return "DeepseekV4" in (first.weights_type or "") and first.weights_gb is not None


def _blockers(layout: str, args: Mapping[str, Any],
              gpu_name: str | None) -> tuple[list[str], list[str]]:
    """(conditions that fail, conditions nothing has told yet)."""
    reasons: list[str] = []
    unknown: list[str] = []
    if layout != "shared":
        reasons.append(f"the host table's layout is {layout}, not shared")
    dp_attention = _flag(args.get("enable_dp_attention"))
    if dp_attention:
        reasons.append("DP attention is on")
    pp = _int(args.get("pp_size"))
    if pp is not None and pp != 1:
        reasons.append(f"pipeline parallel size is {pp}, not 1")
    backend = args.get("decode_attention_backend") or args.get("attention_backend")
    if backend not in (None, "None") and str(backend).lower() not in PREFETCH_BACKENDS:
        reasons.append(f"attention backend {backend} has no prefetch path (needs dsv4)")
    if gpu_name is None:
        unknown.append("the GPU")
    elif not _BLACKWELL.search(gpu_name):
        reasons.append(f"{gpu_name} is not a Blackwell GPU (the prefetch needs its MXFP8 "
                       "kernels)")
    spec = args.get("speculative_algorithm")
    if spec not in (None, "None", ""):
        reasons.append(f"speculative decoding ({spec}) verifies several tokens a step: "
                       "those steps read synchronously")
    if "enable_dp_attention" not in args and "pp_size" not in args:
        unknown.append("the server args")
    return reasons, unknown
