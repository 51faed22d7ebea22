"""A vLLM launch's settings, wherever its log states them: V1's ``non-default args: {..}``
(a dict literal), V0's ``args: Namespace(..)``, the engine's ``Initializing an LLM engine
(v0.6.3) with config: model='m', tensor_parallel_size=2, ..``, and a launch command pasted
into the log (``vllm serve M --tensor-parallel-size 8 -dp 2``, ``python -m
vllm.entrypoints.openai.api_server --model M ..``). Values are taken as written; one that is
not a Python literal is kept as its text (a config line prints objects by their repr)."""

from __future__ import annotations

import ast
import re
import shlex

MAX_TEXT = 256 * 1024  # a longer dump is not one line of a launch
_ARGS = re.compile(r"non-default args: (\{.*\})\s*$")
_NAMESPACE = re.compile(r"\bargs: (Namespace\(.*\))\s*$")
_CONFIG = re.compile(r"Initializing an? (?:V1 )?LLM engine \(v?[\w.+-]+\) with config: (.*)$")
_PAIR = re.compile(r"(\w+)=('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^,\s][^,]*?)(?=,\s*\w+=|$)")
# Where a pasted command starts: ``vllm serve``, or the module a ``python -m`` runs.
_COMMAND_STARTS = ("vllm serve ", "-m vllm.entrypoints.")
# Flags of a command, with their short forms, by the name vLLM's args dump uses.
FLAGS = {"-tp": "tensor_parallel_size", "-pp": "pipeline_parallel_size",
         "-dp": "data_parallel_size", "-ep": "enable_expert_parallel",
         "--tp": "tensor_parallel_size", "--pp": "pipeline_parallel_size",
         "--dp": "data_parallel_size"}
SWITCHES = ("enable_expert_parallel", "enforce_eager", "trust_remote_code",
            "enable_prefix_caching", "enable_chunked_prefill")


def non_default(msg: str) -> dict[str, object] | None:
    m = _ARGS.search(msg[:MAX_TEXT])
    return _literal_dict(m.group(1)) if m else None


def namespace(msg: str) -> dict[str, object] | None:
    m = _NAMESPACE.search(msg[:MAX_TEXT])
    if m is None:
        return None
    try:
        call = ast.parse(m.group(1), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    if not isinstance(call, ast.Call):
        return {}
    out: dict[str, object] = {}
    for kw in call.keywords:
        if kw.arg is None:
            continue
        try:
            out[kw.arg] = ast.literal_eval(kw.value)
        except (ValueError, SyntaxError, RecursionError, TypeError):
            out[kw.arg] = ast.unparse(kw.value)[:200]
    return out


def engine_config(msg: str) -> dict[str, object] | None:
    m = _CONFIG.search(msg[:MAX_TEXT])
    if m is None:
        return None
    out: dict[str, object] = {}
    for key, text in _PAIR.findall(m.group(1)):
        out.setdefault(key, _value(text.strip()))
    return out


def command(msg: str) -> dict[str, object] | None:
    """A pasted launch command's flags, by the args dump's names; None for no command."""
    text = msg[:MAX_TEXT]
    start = min((i for i in (text.find(w) for w in _COMMAND_STARTS) if i >= 0), default=-1)
    if start < 0:
        return None
    try:
        words = shlex.split(text[start:].replace("\\\n", " "), posix=True)
    except ValueError:  # an unclosed quote: the words as they stand
        words = text[start:].split()
    out: dict[str, object] = {}
    if "serve" in words:
        after = words[words.index("serve") + 1:]
        if after and not after[0].startswith("-"):
            out["model"] = after[0]
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("-") or word in ("-m",):
            continue
        flag, eq, inline = word.partition("=")
        name = FLAGS.get(flag) or flag.lstrip("-").replace("-", "_").replace(".", "_")
        if name in SWITCHES and not eq:
            out[name] = True
            continue
        if eq:
            value = inline
        elif i < len(words) and not (words[i].startswith("-") and not _number(words[i])):
            value = words[i]
            i += 1
        else:
            out[name] = True
            continue
        out[name] = _value(value)
    return out


def _literal_dict(text: str) -> dict[str, object]:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, RecursionError, MemoryError, TypeError):
        return {}
    return {str(k): v for k, v in value.items()} if isinstance(value, dict) else {}


def _value(text: str) -> object:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, RecursionError, MemoryError, TypeError):
        return text[:200]


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
