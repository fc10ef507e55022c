"""Asking a running node's HTTP API from the command line, with its bearer token.

The token is the first found of: ``--token-file PATH``, the ``GTM_API_TOKEN`` environment
variable, the config's ``api.token`` (or ``api.token_file``), and the token the member made
in its state_dir (``STATE_DIR/api-token``, readable where the CLI runs on the node's host as
its user or root). It is sent with every request; a node that refuses for want of it, or
refuses it, gets an error saying where the token was taken from and where to give it.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gtmcluster.api import token as api_token
from gtmcluster.config.load import load
from gtmcluster.config.model import Config, Member
from gtmcluster.config.problems import ConfigError

TIMEOUT = 5.0
ENV_TOKEN = "GTM_API_TOKEN"


class CliError(Exception):
    """A problem to print (one line, no traceback) before exiting with status 1."""


def load_config(path: str) -> Config:
    try:
        return load(path)
    except ConfigError as e:
        raise CliError(f"the config has problems:\n{e}") from None


def member(config: Config, name: str | None) -> Member:
    if name is None:
        if len(config.sync_group.members) == 1:
            return config.sync_group.members[0]
        names = ", ".join(m.name for m in config.sync_group.members)
        raise CliError(f"--node NAME is required; members: {names}")
    try:
        return config.member(name)
    except KeyError as e:
        raise CliError(str(e.args[0])) from None


def add_token_argument(parser: Any) -> None:
    parser.add_argument(
        "--token-file",
        metavar="PATH",
        help=f"the API's bearer token (else ${ENV_TOKEN}, the config's api.token or api.token_file, "
        "or the node's own STATE_DIR/api-token when run on its host)",
    )


@dataclass(frozen=True)
class Token:
    value: str
    #: where it was found, as the user would name it
    source: str


class Tokens:
    """Where the CLI finds each member's bearer token (see the module's docstring)."""

    def __init__(self, config: Config, token_file: str | None = None, environ: Mapping[str, str] | None = None):
        self.config = config
        self.given: Token | None = None
        if token_file is not None:
            try:
                value = Path(token_file).read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as e:
                raise CliError(f"cannot read --token-file {token_file}: {getattr(e, 'strerror', None) or e}") from None
            if not value:
                raise CliError(f"--token-file {token_file} is empty")
            self.given = Token(value, f"--token-file {token_file}")
        elif (env := (os.environ if environ is None else environ).get(ENV_TOKEN, "").strip()) != "":
            self.given = Token(env, ENV_TOKEN)
        elif config.api.token is not None:
            where = "the config's api.token_file" if config.api.token_file is not None else "the config's api.token"
            self.given = Token(config.api.token, where)
        #: why a member's own token file could not be read, by member
        self.unreadable: dict[str, str] = {}

    def for_member(self, m: Member) -> Token | None:
        if self.given is not None:
            return self.given
        state_dir = self.config.state_dir_for(m.name)
        try:
            value = api_token.read(state_dir)
        except api_token.TokenFileError as e:
            self.unreadable[m.name] = str(e)
            return None
        return None if value is None else Token(value, str(api_token.path_in(state_dir)))

    def where(self, m: Member) -> str:
        """The ways to give *m*'s token, for an error message."""
        path = api_token.path_in(self.config.state_dir_for(m.name))
        return (
            f"give it with --token-file PATH or {ENV_TOKEN}, set api.token or api.token_file in the config, "
            f"or run this on {m.name}'s host as a user who can read {path}"
        )


def url_of(m: Member, path: str = "/") -> str:
    host = f"[{m.api.host}]" if m.api.host.version == 6 else str(m.api.host)
    return f"http://{host}:{m.api.port}{path}"


def get(m: Member, path: str, params: dict[str, str] | None = None, tokens: Tokens | None = None) -> Any:
    """GET the node's JSON resource at *path* (with its token, when *tokens* finds one);
    clear errors when it cannot be reached or refuses."""
    url = url_of(m, path)
    if params:
        url += "?" + urllib.parse.urlencode(params)
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    token = tokens.for_member(m) if tokens is not None else None
    if token is not None:
        request.add_header("Authorization", f"Bearer {token.value}")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return json.load(response)
    except urllib.error.HTTPError as e:
        try:
            message = json.load(e).get("error", e.reason)
        except (ValueError, AttributeError):
            message = e.reason
        if e.code in (401, 403) and tokens is not None and "token" in str(message):
            raise CliError(_token_problem(m, e.code, token, tokens)) from None
        raise CliError(f"{m.name}: {message}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise CliError(f"cannot reach {m.name}'s API at {url}: {reason} (is the node running?)") from None


def post(m: Member, path: str, body: dict[str, Any], tokens: Tokens) -> Any:
    """POST *body* as JSON to the node's *path* with its token; the answer's JSON, or a
    clear error (as `get`)."""
    url = url_of(m, path)
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Accept": "application/json", "Content-Type": "application/json"},
    )
    token = tokens.for_member(m)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token.value}")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return json.load(response)
    except urllib.error.HTTPError as e:
        try:
            message = json.load(e).get("error", e.reason)
        except (ValueError, AttributeError):
            message = e.reason
        if e.code in (401, 403) and "token" in str(message):
            raise CliError(_token_problem(m, e.code, token, tokens)) from None
        raise CliError(f"{m.name}: {message}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise Unreachable(f"cannot reach {m.name}'s API at {url}: {reason} (is the node running?)") from None


class Unreachable(CliError):
    """The node could not be asked now (not running, no route, busy): another member may
    answer, or this one later."""


def _token_problem(m: Member, code: int, token: Token | None, tokens: Tokens) -> str:
    if code == 401 or token is None:
        why = tokens.unreadable.get(m.name)
        found = f" ({why})" if why else ""
        return f"{m.name}: its API needs the bearer token and none was found{found}: {tokens.where(m)}"
    return f"{m.name} refused the bearer token from {token.source} (not its token): {tokens.where(m)}"


def open_stream(m: Member, path: str, params: dict[str, str], tokens: Tokens | None, timeout: float = TIMEOUT) -> Any:
    """GET *path* of the node and return the open response, to be read line by line (the
    log, followed). Unreachable when it cannot be reached or answers 5xx; CliError for a
    refusal (a token problem says where to give the token)."""
    url = url_of(m, path) + ("?" + urllib.parse.urlencode(params) if params else "")
    request = urllib.request.Request(url, headers={"Accept": "application/x-ndjson"})
    token = tokens.for_member(m) if tokens is not None else None
    if token is not None:
        request.add_header("Authorization", f"Bearer {token.value}")
    try:
        return urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as e:
        try:
            message = json.load(e).get("error", e.reason)
        except (ValueError, AttributeError):
            message = e.reason
        if e.code in (401, 403) and tokens is not None and "token" in str(message):
            raise CliError(_token_problem(m, e.code, token, tokens)) from None
        if e.code >= 500:
            raise Unreachable(f"{m.name}: {message}") from None
        raise CliError(f"{m.name}: {message}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise Unreachable(f"cannot reach {m.name}'s API at {url}: {reason} (is the node running?)") from None
