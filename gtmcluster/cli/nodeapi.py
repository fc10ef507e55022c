"""Asking a running node's HTTP API from the command line, with its bearer token.

The token is the first found of: ``--token-file PATH``, the ``GTM_API_TOKEN`` environment
variable, the config's ``api.token`` (or ``api.token_file``), and the token the member made
in its state_dir (``STATE_DIR/api-token``, readable where the CLI runs on the node's host as
its user or root). It is sent with every request; a node that refuses for want of it, or
refuses it, gets an error saying where the token was taken from and where to give it.

With ``api: {tls: true}`` the node is asked over HTTPS, its certificate checked against the
group CA and the member's name, with a client certificate when one is given
(`gtmcluster.cli.nodetls`).
"""

from __future__ import annotations

import http.client
import json
import os
import ssl
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gtmcluster.api import token as api_token
from gtmcluster.cli import nodetls
from gtmcluster.config.load import load
from gtmcluster.config.model import Config, Member
from gtmcluster.config.problems import ConfigError

TIMEOUT = 5.0
ENV_TOKEN = "GTM_API_TOKEN"


class CliError(Exception):
    """A problem to print (one line, no traceback) before exiting with status 1."""


class Unreachable(CliError):
    """The node's API could not be reached now (not running, no route): worth trying again,
    or another member. (A TLS problem is a plain CliError: trying again does not fix it.)"""


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
    """The options of every command that talks to a node: its token, a client certificate."""
    parser.add_argument(
        "--token-file",
        metavar="PATH",
        help=f"the API's bearer token (else ${ENV_TOKEN}, the config's api.token or api.token_file, "
        "or the node's own STATE_DIR/api-token when run on its host)",
    )
    nodetls.add_arguments(parser)


@dataclass(frozen=True)
class Token:
    value: str
    #: where it was found, as the user would name it
    source: str


class Tokens:
    """Where the CLI finds each member's bearer token (see the module's docstring), and what
    it trusts and shows over HTTPS (`trust`)."""

    def __init__(
        self,
        config: Config,
        token_file: str | None = None,
        environ: Mapping[str, str] | None = None,
        client_cert: str | None = None,
        client_key: str | None = None,
    ):
        self.config = config
        environ = os.environ if environ is None else environ
        try:
            self.trust = nodetls.Trust(config, nodetls.client_cert(client_cert, client_key, environ))
        except nodetls.TLSProblem as e:
            raise CliError(str(e)) from None
        self.given: Token | None = None
        if token_file is not None:
            try:
                value = Path(token_file).read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as e:
                raise CliError(f"cannot read --token-file {token_file}: {getattr(e, 'strerror', None) or e}") from None
            if not value:
                raise CliError(f"--token-file {token_file} is empty")
            self.given = Token(value, f"--token-file {token_file}")
        elif (env := environ.get(ENV_TOKEN, "").strip()) != "":
            self.given = Token(env, ENV_TOKEN)
        elif config.api.token is not None:
            where = "the config's api.token_file" if config.api.token_file is not None else "the config's api.token"
            self.given = Token(config.api.token, where)
        #: why a member's own token file could not be read, by member
        self.unreadable: dict[str, str] = {}

    @classmethod
    def from_args(cls, config: Config, args: Any) -> Tokens:
        """From the options `add_token_argument` added."""
        return cls(
            config,
            args.token_file,
            client_cert=getattr(args, "client_cert", None),
            client_key=getattr(args, "client_key", None),
        )

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


def url_of(m: Member, path: str = "/", tls: bool = False) -> str:
    host = f"[{m.api.host}]" if m.api.host.version == 6 else str(m.api.host)
    return f"{'https' if tls else 'http'}://{host}:{m.api.port}{path}"


def request(
    m: Member,
    method: str,
    target: str,
    tokens: Tokens | None = None,
    headers: Mapping[str, str] | None = None,
    body: bytes | None = None,
    timeout: float = TIMEOUT,
    read_timeout: float | None = None,
) -> http.client.HTTPResponse:
    """Send one request to *m*'s API (over HTTPS, checked, when the config says api.tls),
    with its token when *tokens* finds one; the response, whatever its status, to read and
    close. *target*: path and query. *timeout* bounds connecting (and the TLS handshake) and,
    unless *read_timeout* is given, each read of the answer. Raises `Unreachable` when the
    node cannot be reached, `CliError` for a TLS problem (each says what to do)."""
    tls = tokens is not None and tokens.config.api.tls
    url = url_of(m, target, tls)
    # one request per connection: the socket goes when the response is closed
    sent = {"Connection": "close", **(headers or {})}
    token = tokens.for_member(m) if tokens is not None else None
    if token is not None:
        sent["Authorization"] = f"Bearer {token.value}"
    connection: http.client.HTTPConnection | None = None
    try:
        if tokens is not None and tls:
            connection = tokens.trust.connection(m, timeout)
        else:
            connection = http.client.HTTPConnection(str(m.api.host), m.api.port, timeout=timeout)
        connection.request(method, target, body=body, headers=sent)
        if read_timeout is not None and connection.sock is not None:
            connection.sock.settimeout(read_timeout)
        return connection.getresponse()
    except nodetls.TLSProblem as e:
        raise CliError(str(e)) from None
    except ssl.SSLError as e:
        if connection is not None:
            connection.close()
        assert tokens is not None  # TLS only with tokens
        raise CliError(tokens.trust.problem(m, url, e)) from None
    except (http.client.RemoteDisconnected, http.client.BadStatusLine) as e:
        if connection is not None:
            connection.close()
        hint = _no_client_cert(m, tokens) if tls else ""
        hint = hint or ("" if tls else ": does it serve HTTPS (api.tls: true) while this config says plain HTTP?")
        raise Unreachable(f"{m.name}'s API at {url} closed the connection without an HTTP answer{hint} ({e})") from None
    except (OSError, http.client.HTTPException) as e:
        if connection is not None:
            connection.close()
        reason = getattr(e, "strerror", None) or e
        hint = _no_client_cert(m, tokens) if tls else ""
        raise Unreachable(f"cannot reach {m.name}'s API at {url}: {reason} (is the node running?){hint}") from None


def _no_client_cert(m: Member, tokens: Tokens | None) -> str:
    """A hint for a connection that broke off, when the config requires client certificates
    and none was shown (TLS 1.3 may tell of the refusal only by closing)."""
    if tokens is None or tokens.trust.client_for(m) is not None or not tokens.config.api.client_certificates_required:
        return ""
    return f"; the config requires a client certificate from the group CA: {nodetls.CLIENT_HELP}"


def get(m: Member, path: str, params: dict[str, str] | None = None, tokens: Tokens | None = None) -> Any:
    """GET the node's JSON resource at *path* (with its token, when *tokens* finds one);
    clear errors when it cannot be reached or refuses."""
    target = path + ("?" + urllib.parse.urlencode(params) if params else "")
    return _json_answer(m, target, request(m, "GET", target, tokens, {"Accept": "application/json"}), tokens)


def post(m: Member, path: str, body: Any, tokens: Tokens | None = None) -> Any:
    """POST *body* as JSON to the node's *path* (with its token); its JSON answer, or a
    clear error (a refused token says where to give one)."""
    headers = {"Accept": "application/json", "Content-Type": "application/json"}
    data = json.dumps(body).encode()
    return _json_answer(m, path, request(m, "POST", path, tokens, headers, data), tokens)


def post_raw(m: Member, path: str, data: bytes, tokens: Tokens | None = None, timeout: float = 300.0) -> Any:
    """POST *data* (JSON already: a config bundle) to the node's *path*; its JSON answer.
    *timeout*: a publication answers once the node has checked and run it."""
    headers = {"Accept": "application/json", "Content-Type": "application/json"}
    return _json_answer(m, path, request(m, "POST", path, tokens, headers, data, read_timeout=timeout), tokens)


def raw(m: Member, path: str, tokens: Tokens | None = None) -> bytes:
    """GET the node's *path* and its body as it is (a config bundle)."""
    response = request(m, "GET", path, tokens, {"Accept": "application/json"})
    if response.status != 200:
        _json_answer(m, path, response, tokens)  # raises, saying why
    try:
        return response.read()
    except (OSError, http.client.HTTPException) as e:
        raise CliError(f"{m.name}'s API broke off its answer: {e}") from None
    finally:
        response.close()


def _json_answer(m: Member, target: str, response: http.client.HTTPResponse, tokens: Tokens | None) -> Any:
    try:
        data = response.read()
    except (OSError, http.client.HTTPException) as e:
        raise CliError(f"{m.name}'s API broke off its answer: {e}") from None
    finally:
        response.close()
    try:
        answer = json.loads(data)
    except ValueError:
        answer = None
    if response.status == 200:
        if answer is None:
            raise CliError(f"{m.name}'s API answered {target} with something that is not JSON")
        return answer
    message = answer.get("error", response.reason) if isinstance(answer, dict) else response.reason
    if response.status in (401, 403) and tokens is not None and "token" in str(message):
        raise CliError(_token_problem(m, response.status, tokens.for_member(m), tokens)) from None
    raise CliError(f"{m.name}: {message}")


def _token_problem(m: Member, code: int, token: Token | None, tokens: Tokens) -> str:
    if code == 401 or token is None:
        why = tokens.unreadable.get(m.name)
        found = f" ({why})" if why else ""
        return f"{m.name}: its API needs the bearer token and none was found{found}: {tokens.where(m)}"
    return f"{m.name} refused the bearer token from {token.source} (not its token): {tokens.where(m)}"


def open_stream(
    m: Member,
    path: str,
    params: dict[str, str],
    tokens: Tokens | None,
    timeout: float = TIMEOUT,
    read_timeout: float | None = None,
) -> Any:
    """GET *path* of the node and return the open response, to be read line by line (the
    log, followed): connected within *timeout*, each read within *read_timeout* (default:
    *timeout*). Unreachable when it cannot be reached or answers 5xx; CliError for a
    refusal (a token problem says where to give the token)."""
    target = path + ("?" + urllib.parse.urlencode(params) if params else "")
    headers = {"Accept": "application/x-ndjson"}
    response = request(m, "GET", target, tokens, headers, timeout=timeout, read_timeout=read_timeout)
    if response.status == 200:
        return response
    try:
        answer = json.loads(response.read())
    except (ValueError, OSError, http.client.HTTPException):
        answer = None
    finally:
        response.close()
    message = answer.get("error", response.reason) if isinstance(answer, dict) else response.reason
    if response.status in (401, 403) and tokens is not None and "token" in str(message):
        raise CliError(_token_problem(m, response.status, tokens.for_member(m), tokens))
    if response.status >= 500:
        raise Unreachable(f"{m.name}: {message}")
    raise CliError(f"{m.name}: {message}")
