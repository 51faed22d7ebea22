"""A launch's parallel layout as its log shows it: each rank's place by every dimension its
line prefix names (``DP1 PP0 TP3 EP3``), the GPU order those places take, the sizes they
imply, and the sizes a pasted launch command states (``python -m sglang.launch_server ..
--tp 8 --dp 8``). Pure.

Sizes by what states them, the first that gives one: the ServerArgs dump (the server's own
word), a launch command in the log (the user's), else the rank prefixes (derived: the
highest index seen plus one, so a rank that printed nothing is not counted).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from collectors.sglang.line_prefix import DIMS, RankKey

_AT = {name: i for i, name in enumerate(DIMS)}
# The sizes a launch command can give, by SGLang's flags (short, long and older names).
_FLAG_SIZES = {
    "tp": "tp_size", "tp-size": "tp_size", "tensor-parallel-size": "tp_size",
    "dp": "dp_size", "dp-size": "dp_size", "data-parallel-size": "dp_size",
    "pp": "pp_size", "pp-size": "pp_size", "pipeline-parallel-size": "pp_size",
    "ep": "ep_size", "ep-size": "ep_size", "expert-parallel-size": "ep_size",
    "moe-ep-size": "ep_size", "nnodes": "nnodes",
}
_FLAG = re.compile(
    r"(?<![\w-])--(" + "|".join(sorted((re.escape(f) for f in _FLAG_SIZES), key=len,
                                       reverse=True))
    + r")(?:\s*=\s*|\s+)['\"]?(\d{1,6})['\"]?(?![\w.])"
)
FLAG_WORD = re.compile(r"(?<![\w-])--[a-z][\w-]*")  # any "--flag": a command, not a mention
_DP_ATTENTION = re.compile(r"(?<![\w-])--enable-dp-attention\b")
# A line that shows SGLang being launched: the module, the CLI, or the engine's entry.
COMMAND_WORDS = ("sglang.launch_server", "sglang serve", "launch_server.py")
PREFIX_SOURCE = "rank prefixes"
COMMAND_SOURCE = "launch command"
ARGS_SOURCE = "server_args"
DERIVED_FROM_PREFIXES = ("derived, at least: the highest rank its line prefixes show, plus one (a "
                         "rank that logged nothing is not seen)")


def command_sizes(text: str) -> dict[str, int | bool]:
    """The parallel sizes a command line's flags give (``tp_size``, ``dp_size``, ``pp_size``,
    ``ep_size``, ``nnodes``) and ``enable_dp_attention`` where the switch is there."""
    out: dict[str, int | bool] = {}
    for flag, value in _FLAG.findall(text):
        out.setdefault(_FLAG_SIZES[flag], int(value))
    if _DP_ATTENTION.search(text):
        out["enable_dp_attention"] = True
    return out


def prefix_sizes(keys: Iterable[RankKey], named: Iterable[str]) -> dict[str, int]:
    """The sizes the rank prefixes imply: each named dimension's highest index plus one."""
    keys = list(keys)
    out: dict[str, int] = {}
    for dim in named:
        if dim in _AT and keys:
            out[f"{dim.lower()}_size"] = max(k[_AT[dim]] for k in keys) + 1
    return out


def dp_replicates(keys: Iterable[RankKey], dp_attention: bool | None) -> bool:
    """Whether DP ranks are replicas with TP groups of their own (each its own GPUs), rather
    than DP attention's ranks inside one TP group (whose TP ranks differ already). The
    ServerArgs' switch says; without it, a (PP, TP) place that two DP ranks share."""
    if dp_attention is not None:
        return not dp_attention
    seen: dict[tuple[int, int], int] = {}
    for k in keys:
        place = (k[_AT["PP"]], k[_AT["TP"]])
        if seen.setdefault(place, k[_AT["DP"]]) != k[_AT["DP"]]:
            return True
    return False


def rank_indices(keys: Iterable[RankKey], sizes: Mapping[str, int],
                 dp_attention: bool | None) -> dict[RankKey, int]:
    """Each rank's index in GPU order (SGLang places PP stage p's TP rank t on GPU
    p * tp_size + t, DP replica d after the d replicas before it): a log of TP ranks alone
    keeps its TP ranks. Where other dimensions (ATTN_CP, MOE_DP) tell ranks apart that
    these do not, the ranks are numbered in their sorted order instead."""
    keys = sorted(set(keys))
    if not keys:
        return {}
    tp = max([sizes.get("tp_size", 1)] + [k[_AT["TP"]] + 1 for k in keys])
    pp = max([sizes.get("pp_size", 1)] + [k[_AT["PP"]] + 1 for k in keys])
    replicas = dp_replicates(keys, dp_attention)
    out: dict[RankKey, int] = {}
    for k in keys:
        dp = k[_AT["DP"]] if replicas else 0
        out[k] = (dp * pp + k[_AT["PP"]]) * tp + k[_AT["TP"]]
    if len(set(out.values())) < len(out):
        out = {k: i for i, k in enumerate(keys)}
    return out


def sizes_and_sources(stated: Mapping[str, int | None], command: Mapping[str, int | bool],
                      prefixes: Mapping[str, int]) -> tuple[dict[str, int], dict[str, str]]:
    """Each size from the first source that gives it (ServerArgs, the command, the
    prefixes), and the source it came from."""
    sizes: dict[str, int] = {}
    sources: dict[str, str] = {}
    for source, given in ((ARGS_SOURCE, stated), (COMMAND_SOURCE, command),
                          (PREFIX_SOURCE, prefixes)):
        for name, value in given.items():
            if name.endswith("_size") and isinstance(value, int) \
                    and not isinstance(value, bool) and value > 0 and name not in sizes:
                sizes[name] = value
                sources[name] = source
    return sizes, sources
