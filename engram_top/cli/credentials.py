"""Which credential goes to a server, where it came from, and what the user is told about it.

Prometheus: basic auth from the URL's user:password@ (the password may come from
$ENGRAM_TOP_PROMETHEUS_PASSWORD instead, kept out of `ps`), or a bearer token from
$ENGRAM_TOP_PROMETHEUS_TOKEN or the first line of --prometheus-token-file. An SGLang or vLLM
server: its API key (--api-key, $ENGRAM_TOP_API_KEY) as a bearer key.

One rule for both: a request carries one Authorization header, so a bearer key or token wins
over a URL's user:password, and the header or the events line says so (a keyed server given
Basic instead answers 401, and nobody would know why). The URL shown anywhere is the one
without its user:password (collectors.pages.split_userinfo). Every key and token is checked
as a header value first: a CR or LF in it would add headers of its own.
"""

from __future__ import annotations

import argparse
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from collectors.pages import header_value_problem, split_userinfo, url_problem
from collectors.safetext import visible

API_KEY_ENV = "ENGRAM_TOP_API_KEY"
PROMETHEUS_TOKEN_ENV = "ENGRAM_TOP_PROMETHEUS_TOKEN"
PROMETHEUS_PASSWORD_ENV = "ENGRAM_TOP_PROMETHEUS_PASSWORD"
MAX_TOKEN_FILE = 64 * 1024  # a token is a line; a file this long is not a token file


class CredentialError(ValueError):
    """A credential that cannot be used, said in one line naming where it came from."""


@dataclass(frozen=True)
class PromCredentials:
    url: str  # without its user:password@: what is shown
    headers: dict[str, str]
    auth: tuple[str, str] | None
    described: str  # "basic auth as alice", "bearer token from $ENGRAM_TOP_...", ""
    warnings: tuple[str, ...] = ()


def api_key(given: str | None, environ: dict[str, str] | os._Environ[str] = os.environ
            ) -> str | None:
    """The API key of --api-key (``given``), else $ENGRAM_TOP_API_KEY, else None; checked."""
    where = "--api-key"
    if given is None:
        given, where = environ.get(API_KEY_ENV) or None, f"${API_KEY_ENV}"
    if given is not None and (problem := header_value_problem(given)) is not None:
        raise CredentialError(f"{where}: the API key {problem}")
    return given


def check_url(url: str, what: str) -> str:
    """The URL, or CredentialError saying why it cannot be used (never quoting a password)."""
    problem = url_problem(url)
    if problem is not None:
        raise CredentialError(f"{what}: {problem}: {visible(split_userinfo(url)[0])}")
    return url


def attach_note(url: str, key: str | None) -> str | None:
    """What an attached server's events line says when its URL carries a user name and an
    API key is given too: which of the two is sent."""
    shown, userinfo = split_userinfo(url)
    if key is None or userinfo is None:
        return None
    return (f"{shown}: using the API key (Bearer); the URL's user name "
            f"'{visible(userinfo[0])}' and password are not sent (one Authorization header)")


def read_token_file(path: Path) -> tuple[str, tuple[str, ...]]:
    """The token on the file's first line, and warnings (a file other users can read)."""
    where = f"--prometheus-token-file {path}"
    try:
        with path.open("rb") as f:
            data = f.read(MAX_TOKEN_FILE + 1)
            mode = os.fstat(f.fileno()).st_mode
    except OSError as exc:
        raise CredentialError(f"{where}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_TOKEN_FILE:
        raise CredentialError(f"{where}: over {MAX_TOKEN_FILE // 1024} KiB: not a token file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CredentialError(f"{where}: not UTF-8 text") from None
    token = text.split("\n", 1)[0].removesuffix("\r")
    problem = header_value_problem(token)
    if problem is not None:
        raise CredentialError(f"{where}: the token on its first line {problem}")
    warnings: tuple[str, ...] = ()
    if mode & stat.S_IROTH:
        warnings = (f"{where}: every user of this machine can read it (mode "
                    f"{stat.S_IMODE(mode):o}): chmod 600 it",)
    return token, warnings


def prometheus(url: str, token_file: Path | None,
               environ: dict[str, str] | os._Environ[str] = os.environ) -> PromCredentials:
    """How to ask the Prometheus at ``url``, and what the header says of it."""
    check_url(url, "--prometheus")
    shown, userinfo = split_userinfo(url)
    warnings: tuple[str, ...] = ()
    token, source = None, ""
    if token_file is not None:
        token, warnings = read_token_file(token_file)
        source = str(token_file)
    elif environ.get(PROMETHEUS_TOKEN_ENV):
        token, source = environ[PROMETHEUS_TOKEN_ENV], f"${PROMETHEUS_TOKEN_ENV}"
        problem = header_value_problem(token)
        if problem is not None:
            raise CredentialError(f"{source}: the token {problem}")
    if token is not None:
        described = f"bearer token from {visible(source)}"
        if userinfo is not None:
            described += f"; the URL's user name '{visible(userinfo[0])}' is not sent"
        return PromCredentials(shown, {"Authorization": f"Bearer {token}"}, None, described,
                               warnings)
    if userinfo is None:
        return PromCredentials(shown, {}, None, "")
    user, password = userinfo
    if not password and environ.get(PROMETHEUS_PASSWORD_ENV):
        password = environ[PROMETHEUS_PASSWORD_ENV]
    return PromCredentials(shown, {}, (user, password), f"basic auth as {visible(user)}")


def check_args(args: argparse.Namespace) -> str | None:
    """The API key (--api-key, else $ENGRAM_TOP_API_KEY) and the URLs, checked before
    anything starts: what is wrong with them, or None. args.api_key becomes the key used."""
    try:
        if args.command in ("attach", "snapshot"):
            args.api_key = api_key(args.api_key)
        for url in getattr(args, "urls", None) or ():
            check_url(url, "URL")
        if getattr(args, "attach", None):
            check_url(args.attach, "--attach")
        if args.command == "fleet" and args.prometheus is not None:
            check_url(args.prometheus, "--prometheus")
    except CredentialError as exc:
        return str(exc)
    return None
