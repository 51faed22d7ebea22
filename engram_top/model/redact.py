"""Keep secrets out of exports: API keys, tokens and passwords in structured data, and any
secret value seen there wherever it turns up again in free text (a log line, the screen).

SGLang's /server_info echoes api_key and admin_api_key, and scenario environments may carry
HF_TOKEN or OPENAI_API_KEY; a snapshot folder is meant to be handed to a colleague.
"""

from __future__ import annotations

import dataclasses
import html
import json
import re
from collections.abc import Iterable
from typing import Any

REDACTED = "<redacted>"

# Key names that hold secrets. "token" must not catch SGLang's counts and metrics
# (max_total_num_tokens, token_usage, swa_token_usage: their values are figures, or why a
# figure is missing, "n/a: NaN from rank 0") nor tokenizer_path.
_SECRET_NAME = (r"api[_-]?key|token(?!s|iz|_usage|_ratio)|secret|passw(?:or)?d|authorization"
                r"|private[_-]?key|credential")
SECRET_KEY = re.compile(_SECRET_NAME, re.IGNORECASE)
# A command-line flag naming a secret: --api-key, --admin-api-key, --hf-token.
_SECRET_FLAG = re.compile(rf"^--?[\w-]*(?:{_SECRET_NAME})[\w-]*$", re.IGNORECASE)
# Whitespace and quotes as they appear in text, and in an SVG (Textual writes &#160;).
_SP = r"(?:\s|&\#160;)"
_QUOTE = r"([\"']|&\#x27;|&\#39;|&quot;)?"
_VALUE = r"([^\s\"',)}\]<&]+)"
# The same flag inside one command-line string: "--api-key VALUE" or "--api-key=VALUE".
_FLAG_IN_TEXT = re.compile(
    rf"(?<![\w-])(--?[\w-]*(?:{_SECRET_NAME})[\w-]*)(={_QUOTE}|{_SP}+{_QUOTE})(?!-){_VALUE}",
    re.IGNORECASE)
# key=value, key: value, key='value', "key": "value" in free text (SGLang's
# server_args=ServerArgs(api_key='...') line, env dumps, JSON echoed into a log).
_ASSIGN_IN_TEXT = re.compile(
    rf"(\b[\w-]*(?:{_SECRET_NAME})[\w-]*(?:[\"']|&\#x27;|&\#39;|&quot;)?{_SP}*[=:]{_SP}*)"
    rf"{_QUOTE}{_VALUE}", re.IGNORECASE)
_BEARER = re.compile(rf"(\b(?:Bearer|Basic){_SP}+){_VALUE}", re.IGNORECASE)
# The userinfo of a URL (http://user:PASSWORD@host/): the whole of it goes.
_URL_USERINFO = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)([^/\s@<>\"']+)@")
_SCHEMES = {"bearer", "basic"}  # "Authorization: Bearer KEY": _BEARER takes the KEY
_NUMBER_OR_EMPTY = re.compile(
    r"^(?:[-+]?\d*\.?\d+(?:[eE][-+]?\d+)?|None|null|true|false|True|False)?$")
# Shorter values are not scrubbed from free text: "1" under HF_HUB_DISABLE_IMPLICIT_TOKEN
# would otherwise wipe every digit of the screen. The structured field is still redacted.
MIN_TEXT_SECRET = 6


def is_secret_key(key: object) -> bool:
    return isinstance(key, str) and SECRET_KEY.search(key) is not None


def redact(obj: Any, found: set[str] | None = None) -> Any:
    """A deep copy of obj (dicts, lists, tuples, dataclasses) with secrets replaced by
    "<redacted>". Secret values removed are added to `found`, for redact_text."""
    found = set() if found is None else found
    return _redact(obj, found)


def _redact(obj: Any, found: set[str]) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {k: _secret(v, found) if is_secret_key(k) else _redact(v, found)
                for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return _redact_args([_redact(v, found) for v in obj], found)
    if isinstance(obj, str):
        return _redact_command_line(obj, found)
    return obj


def _secret(value: Any, found: set[str]) -> Any:
    """The value under a secret key. Numbers are measurements (token_usage), None and
    booleans say nothing; strings go, and so do the strings inside a container."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str | bytes):
        text = value.decode(errors="replace") if isinstance(value, bytes) else value
        if text:
            found.add(text)
            scheme, _, credential = text.partition(" ")  # "Bearer KEY": the key alone too
            if credential and scheme.lower() in (*_SCHEMES, "token"):
                found.add(credential.strip())
        return REDACTED
    if isinstance(value, dict):
        return {k: _secret(v, found) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_secret(v, found) for v in value]
    return REDACTED


def _redact_args(items: list[Any], found: set[str]) -> list[Any]:
    """An argv list: the element after a secret flag is its value."""
    out = list(items)
    for i, item in enumerate(out[:-1]):
        nxt = out[i + 1]
        if isinstance(item, str) and _SECRET_FLAG.match(item) and isinstance(nxt, str) \
                and not nxt.startswith("-") and nxt != REDACTED:
            found.add(nxt)
            out[i + 1] = REDACTED
    return out


def _redact_command_line(text: str, found: set[str]) -> str:
    if "://" in text and "@" in text:
        text = _redact_userinfo(text, found)
    if "-" not in text:
        return text

    def sub(m: re.Match[str]) -> str:
        if m.group(5) == REDACTED:
            return m.group(0)
        found.add(m.group(5))
        return f"{m.group(1)}{m.group(2)}{REDACTED}"

    return _FLAG_IN_TEXT.sub(sub, text)


def _redact_userinfo(text: str, found: set[str], placeholder: str = REDACTED) -> str:
    def sub(m: re.Match[str]) -> str:
        userinfo = m.group(2)
        if userinfo in (REDACTED, placeholder):
            return m.group(0)
        found.add(userinfo)
        _, _, password = userinfo.partition(":")
        if password:
            found.add(password)
        return f"{m.group(1)}{placeholder}@"
    return _URL_USERINFO.sub(sub, text)


def text_variants(secret: str) -> set[str]:
    """How a value may be spelt in an output file: as is, JSON-escaped, XML-escaped (SVG,
    where Textual writes spaces as &#160;)."""
    escaped = html.escape(secret, quote=False)
    return {secret, json.dumps(secret)[1:-1], escaped, html.escape(secret),
            escaped.replace(" ", "&#160;")}


def redact_text(text: str, secrets: Iterable[str] = (), placeholder: str = REDACTED) -> str:
    """Free text with every known secret value removed, and secret-looking assignments,
    flags and bearer tokens redacted even when their value was never seen elsewhere.

    `placeholder` suits the format: "&lt;redacted&gt;" keeps an SVG valid, "[redacted]"
    is not swallowed as an HTML tag by a Markdown viewer."""
    variants = {v for s in secrets if len(s) >= MIN_TEXT_SECRET for v in text_variants(s)}
    for value in sorted(variants, key=len, reverse=True):  # longest first: no partial leftovers
        text = text.replace(value, placeholder)

    def keep(value: str) -> bool:  # token_usage=0.42, api_key=None, already redacted
        return value in (REDACTED, placeholder) or value.lower() in _SCHEMES \
            or _NUMBER_OR_EMPTY.match(value) is not None

    def assign(m: re.Match[str]) -> str:
        if keep(m.group(3)):
            return m.group(0)
        return f"{m.group(1)}{m.group(2) or ''}{placeholder}"

    def flag(m: re.Match[str]) -> str:
        return m.group(0) if keep(m.group(5)) else f"{m.group(1)}{m.group(2)}{placeholder}"

    if "://" in text:
        text = _redact_userinfo(text, set(), placeholder)
    text = _ASSIGN_IN_TEXT.sub(assign, text)
    text = _FLAG_IN_TEXT.sub(flag, text)
    return _BEARER.sub(lambda m: m.group(0) if keep(m.group(2)) else m.group(1) + placeholder,
                       text)
