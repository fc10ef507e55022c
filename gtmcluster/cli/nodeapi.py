"""Asking a running node's HTTP API from the command line, with its bearer token.

The token is the first found of: ``--token-file PATH``, the ``GTM_API_TOKEN`` environment
variable, the config's ``api.token`` (or ``api.token_file``), and the token the member made
in its state_dir (``STATE_DIR/api-token``, readable where the CLI runs on the node's host as
its user or root). It is sent with every request; a node that refuses for want of it, or
refuses it, gets an error saying where the token was taken from and where to give it. A
token of the users file (``api.users_file``, `gtmcluster users add`) is given the same way.
Where a client certificate is given (``--cert``, ``GTM_API_CLIENT_CERT``) and the config
names an operators' CA (``api.tls.client_ca``), the certificate is the identity: only a
token given as plainly (``--token-file``, ``GTM_API_TOKEN``) is sent beside it, never one
the CLI found in the config or the state_dir.

With ``api: {tls: true}`` the node is asked over HTTPS, its certificate checked against the
group CA and the member's name, with a client certificate when one is given
(`gtmcluster.cli.nodetls`).

What answers is read within limits (`gtmcluster.cli.bounded`), since it may not be the node:
each request within `DEADLINE` seconds in all (a config bundle's within `BUNDLE_DEADLINE`),
a JSON answer up to `MAX_JSON` bytes and no deeper than `bounded.MAX_DEPTH`, a bundle up to
`MAX_BUNDLE`, and a command's answer checked against the fields it reads
(`gtmcluster.cli.shape`). An answer that breaks a limit is `Unreachable`, named by node: one
line, as for a node that is down. Texts of the node's shown in errors are escaped
(`gtmcluster.cli.terminal`).
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
from gtmcluster.cli import nodetls, shape
from gtmcluster.cli.bounded import Answer, AnswerError, Deadline, decode_json
from gtmcluster.cli.terminal import escape
from gtmcluster.config.load import load
from gtmcluster.config.model import Config, Member
from gtmcluster.config.problems import ConfigError
from gtmcluster.groupconfig import bundle

#: seconds to connect, and for each read unless a request says otherwise
TIMEOUT = 5.0
ENV_TOKEN = "GTM_API_TOKEN"
#: seconds a whole request may take, from connecting to the last byte of the answer
DEADLINE = 30.0
#: ... one that sends or fetches a config bundle (a publication answers once the node ran it)
BUNDLE_DEADLINE = 300.0
#: the most bytes of a JSON answer (the largest a node gives: /api/v1/ldns at its 100,000
#: paths, some 10 MB)
MAX_JSON = 16 * 1024 * 1024
#: the most bytes of a config bundle as sent: a bundle at its limit, encoded (the API's
#: `api.groupconfig.MAX_PUSH`, not imported here: that would load twisted.web for every command)
MAX_BUNDLE = bundle.MAX_BYTES * 4 // 3 + 65536
#: the most bytes read of an error answer (beyond, its HTTP reason is shown)
MAX_ERROR = 64 * 1024


class CliError(Exception):
    """A problem to print (one line, no traceback) before exiting with status 1."""


class Unreachable(CliError):
    """The node's API could not be reached now (not running, no route), or what answers at
    its address gave no usable answer (too slow, too large, not JSON, not the fields a
    command reads): worth trying again, or another member. (A TLS problem is a plain
    CliError: trying again does not fix it.)"""


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
        elif self.trust.client is not None and config.api.client_ca is not None:
            #: the certificate given is the identity: no token found elsewhere is sent
            self.certificate_only = True
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

    #: a client certificate was given and no token as plainly: none is looked for
    certificate_only = False

    def for_member(self, m: Member) -> Token | None:
        if self.given is not None or self.certificate_only:
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
    deadline: Deadline | None = None,
) -> Answer:
    """Send one request to *m*'s API (over HTTPS, checked, when the config says api.tls),
    with its token when *tokens* finds one; the answer, whatever its status, to read and
    close. *target*: path and query. *timeout* bounds connecting (and the TLS handshake) and,
    unless *read_timeout* is given, each read of the answer; *deadline* (default `DEADLINE`
    seconds) the whole request, reading the answer included. Raises `Unreachable` when the
    node cannot be reached or sends no HTTP answer in time, `CliError` for a TLS problem
    (each says what to do)."""
    tls = tokens is not None and tokens.config.api.tls
    url = url_of(m, target, tls)
    limit = deadline if deadline is not None else Deadline(DEADLINE)
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
        limit.watch(connection)
        connection.request(method, target, body=body, headers=sent)
        if read_timeout is not None and connection.sock is not None:
            connection.sock.settimeout(read_timeout)
        return Answer(connection.getresponse(), limit, url)
    except BaseException as e:
        limit.close()
        if connection is not None:
            connection.close()
        if limit.expired and isinstance(e, Exception):
            raise Unreachable(f"{m.name}'s API at {url} {limit.exceeded()}") from None
        raise _request_problem(m, url, tls, tokens, e) from None


def _request_problem(m: Member, url: str, tls: bool, tokens: Tokens | None, e: BaseException) -> BaseException:
    """What failing to send a request or to read its answer's head means, as an error."""
    if isinstance(e, nodetls.TLSProblem):
        return CliError(str(e))
    if isinstance(e, ssl.SSLError):
        assert tokens is not None  # TLS only with tokens
        return CliError(escape(tokens.trust.problem(m, url, e)))
    if isinstance(e, (http.client.RemoteDisconnected, http.client.BadStatusLine)):
        hint = _no_client_cert(m, tokens) if tls else ""
        hint = hint or ("" if tls else ": does it serve HTTPS (api.tls: true) while this config says plain HTTP?")
        return Unreachable(
            f"{m.name}'s API at {url} closed the connection without an HTTP answer{hint} ({escape(str(e))})"
        )
    if isinstance(e, OSError):
        reason = getattr(e, "strerror", None) or e
        hint = _no_client_cert(m, tokens) if tls else ""
        return Unreachable(f"cannot reach {m.name}'s API at {url}: {reason} (is the node running?){hint}")
    if isinstance(e, (http.client.HTTPException, ValueError)):
        return Unreachable(f"{m.name}'s API at {url} did not answer in HTTP: {escape(str(e)) or type(e).__name__}")
    return e


def _no_client_cert(m: Member, tokens: Tokens | None) -> str:
    """A hint for a connection that broke off, when the config requires client certificates
    and none was shown (TLS 1.3 may tell of the refusal only by closing)."""
    if tokens is None or tokens.trust.client_for(m) is not None or not tokens.config.api.client_certificates_required:
        return ""
    return f"; the config requires a client certificate from the group CA: {nodetls.CLIENT_HELP}"


def get(
    m: Member,
    path: str,
    params: dict[str, str] | None = None,
    tokens: Tokens | None = None,
    fields: shape.Spec | None = None,
) -> Any:
    """GET the node's JSON resource at *path* (with its token, when *tokens* finds one),
    checked against *fields* (`gtmcluster.cli.shape`) when given; clear errors when it
    cannot be reached, refuses, or answers something unusable."""
    target = path + ("?" + urllib.parse.urlencode(params) if params else "")
    answer = request(m, "GET", target, tokens, {"Accept": "application/json"})
    return _json_answer(m, answer, tokens, fields)


def post(m: Member, path: str, body: Any, tokens: Tokens | None = None, fields: shape.Spec | None = None) -> Any:
    """POST *body* as JSON to the node's *path* (with its token); its JSON answer (checked
    against *fields* when given), or a clear error (a refused token says where to give one)."""
    headers = {"Accept": "application/json", "Content-Type": "application/json"}
    data = json.dumps(body).encode()
    return _json_answer(m, request(m, "POST", path, tokens, headers, data), tokens, fields)


def post_raw(
    m: Member,
    path: str,
    data: bytes,
    tokens: Tokens | None = None,
    timeout: float = 300.0,
    fields: shape.Spec | None = None,
) -> Any:
    """POST *data* (JSON already: a config bundle) to the node's *path*; its JSON answer
    (checked against *fields* when given). *timeout*: each read (a publication answers once
    the node has checked and run it); the whole request within `BUNDLE_DEADLINE`."""
    headers = {"Accept": "application/json", "Content-Type": "application/json"}
    deadline = Deadline(BUNDLE_DEADLINE)
    answer = request(m, "POST", path, tokens, headers, data, read_timeout=timeout, deadline=deadline)
    return _json_answer(m, answer, tokens, fields)


def raw(m: Member, path: str, tokens: Tokens | None = None) -> bytes:
    """GET the node's *path* and its body as it is (a config bundle, up to `MAX_BUNDLE`)."""
    answer = request(m, "GET", path, tokens, {"Accept": "application/json"}, deadline=Deadline(BUNDLE_DEADLINE))
    if answer.status != 200:
        _json_answer(m, answer, tokens)  # raises, saying why
    with answer:
        return _body(m, answer, MAX_BUNDLE)


def _body(m: Member, answer: Answer, cap: int) -> bytes:
    try:
        return answer.body(cap)
    except AnswerError as e:
        raise Unreachable(f"{m.name}'s API at {answer.where} {e}") from None


def _json_answer(m: Member, answer: Answer, tokens: Tokens | None, fields: shape.Spec | None = None) -> Any:
    if answer.status == 200:
        with answer:
            data = _body(m, answer, MAX_JSON)
        try:
            value = decode_json(data)
        except AnswerError as e:
            raise Unreachable(f"{m.name}'s API at {answer.where} {e}") from None
        if fields is not None:
            try:
                shape.check(value, fields)
            except shape.Malformed as e:
                raise Unreachable(f"{m.name}'s API at {answer.where} gave an unexpected answer: {e}") from None
        return value
    message = _refusal(answer)
    if answer.status in (401, 403) and tokens is not None and "token" in message:
        raise CliError(_token_problem(m, answer.status, tokens.for_member(m), tokens, message)) from None
    raise CliError(f"{m.name}: {message}")


def _refusal(answer: Answer) -> str:
    """What a node answering other than 200 says (its JSON ``error``, else its HTTP reason),
    escaped; the answer closed."""
    with answer:
        try:
            value = decode_json(answer.body(MAX_ERROR))
        except AnswerError:
            value = None
    said = value.get("error") if isinstance(value, dict) else None
    # (a refusal may list problems, a line each)
    return escape(said, keep="\n") if isinstance(said, str) else f"{answer.status} {answer.reason}".strip()


def _token_problem(m: Member, code: int, token: Token | None, tokens: Tokens, message: str = "") -> str:
    if tokens.certificate_only and token is None:
        # (the node says why the certificate given proves no identity, or which role it lacks)
        shown = tokens.trust.client.source if tokens.trust.client is not None else "a client certificate"
        return f"{m.name}: {message} (the identity given: {shown})"
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
    deadline: float | None = None,
    idle: float | None = None,
) -> Answer:
    """GET *path* of the node and return the open answer, to be read line by line (the
    log, followed): connected within *timeout*, each read within *read_timeout* (default:
    *timeout*), and the whole within *deadline* seconds (default `DEADLINE`), or with *idle*, each whole line
    within *idle* seconds of the one before (`bounded.Deadline`). Unreachable when it cannot
    be reached or answers 5xx; CliError for a refusal (a token problem says where to give
    the token)."""
    target = path + ("?" + urllib.parse.urlencode(params) if params else "")
    headers = {"Accept": "application/x-ndjson"}
    limit = Deadline(DEADLINE if deadline is None else deadline, idle)
    answer = request(m, "GET", target, tokens, headers, timeout=timeout, read_timeout=read_timeout, deadline=limit)
    if answer.status == 200:
        return answer
    message = _refusal(answer)
    if answer.status in (401, 403) and tokens is not None and "token" in message:
        raise CliError(_token_problem(m, answer.status, tokens.for_member(m), tokens, message))
    if answer.status >= 500:
        raise Unreachable(f"{m.name}: {message}")
    raise CliError(f"{m.name}: {message}")
