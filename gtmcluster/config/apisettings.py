"""The ``api`` section: the HTTP API's token, TLS, client certificates, host names and
limits, and whether a member's API may listen beyond loopback under them."""

from __future__ import annotations

import re
from typing import Any

from cryptography import x509

from gtmcluster.config.addresses import HostPort
from gtmcluster.config.model import ApiLimits, ApiSettings
from gtmcluster.config.reader import Mapping, Reader
from gtmcluster.config.users import NO_USERS, read_users
from gtmcluster.runtime import files


def api_beyond_loopback(api: HostPort, settings: ApiSettings) -> str | None:
    """Why a member's API may not listen on *api* (not loopback) under *settings*, if so."""
    if not settings.token and settings.users_file is None:
        return f"{api} is not loopback: set api.token, api.token_file or api.users_file first"
    if not settings.tls and not settings.insecure_http:
        return (
            f"{api} is not loopback and api.tls is off: the bearer token would cross the network in clear "
            "text; set api.tls: true (HTTPS with the member's sync group certificate), or accept plain "
            "HTTP knowingly with api.insecure_http: true"
        )
    return None


def read_api(r: Reader, top: Mapping, resolve: Any) -> ApiSettings:
    """``api: {token: STRING}`` or ``{token_file: PATH}``: the bearer token of the HTTP API,
    ``token_for_reads: true`` to need it for reads on loopback too, and ``names: [...]``,
    the host names operators reach the API by (``{node}``: the member's name); ``tls: true``
    (HTTPS with the member's certificate), ``client_certificates: required`` (clients must
    show a certificate from the group CA), ``insecure_http: true`` (plain HTTP beyond
    loopback, knowingly), ``limits: {...}`` (`read_limits`). The token file is read as
    `files.SECRET`: a regular file of at most 8 KiB, which others may not read and only its
    owner may write. ``users_file: PATH``: identities with roles (`config.users`), read as
    `files.USERS`; ``tls: {client_ca: FILE}`` (TLS on, and client certificates of the
    operators' CA in FILE are identities of the users file)."""
    if not top.has("api"):
        return ApiSettings()
    m = r.mapping(
        ("api",),
        top.get("api"),
        "a mapping {token or token_file, users_file, token_for_reads, names, tls, client_certificates, "
        "insecure_http, limits}",
    )
    if m is None:
        return ApiSettings()
    token = None
    token_file = None
    if m.has("token") and m.has("token_file"):
        r.error(m.at("token_file"), "give 'token' or 'token_file', not both")
    elif m.has("token"):
        token = m.string("token", None)
    elif m.has("token_file"):
        name = m.string("token_file", None)
        if name is not None:
            path = token_file = resolve(name)
            try:
                token = files.read_text(path, files.SECRET).strip()
            except OSError as e:
                r.error(m.at("token_file"), f"cannot read {path}: {e.strerror or e}")
    users, users_file = NO_USERS, None
    if m.has("users_file"):
        name = m.string("users_file", None)
        if name is not None:
            users_file = resolve(name)
            try:
                users, problems = read_users(users_file)
            except OSError as e:
                r.error(m.at("users_file"), f"cannot read {users_file}: {e.strerror or e}")
            else:
                r.problems.found.extend(problems)
    for_reads = bool(m.boolean("token_for_reads", False))
    names = _api_names(r, m)
    client_ca, client_ca_pem = None, b""
    if isinstance(m.get("tls"), dict):
        tls = True
        client_ca, client_ca_pem = _client_ca(r, m, resolve)
    else:
        tls = bool(m.boolean("tls", False))
    clients = m.string("client_certificates", "none", choices=("none", "required"))
    insecure = bool(m.boolean("insecure_http", False))
    limits = read_limits(r, m)
    m.done()
    if token is not None and len(token) < 16:
        r.error(m.at("token" if m.has("token") else "token_file"), "the token must have at least 16 characters")
        token = None
    if clients == "required" and not tls:
        r.error(m.at("client_certificates"), "client certificates are asked for over TLS only: set api.tls: true")
    if insecure and tls:
        r.error(m.at("insecure_http"), "api.tls is on, so nothing is served over plain HTTP: remove insecure_http")
    # a tls or insecure_http that is not a boolean is its own problem: the members' API
    # addresses are not judged by a guess about it
    unsure = (m.has("tls") and not isinstance(m.get("tls"), bool | dict)) or (
        m.has("insecure_http") and not isinstance(m.get("insecure_http"), bool)
    )
    return ApiSettings(
        token,
        for_reads,
        names,
        token_file if token is not None else None,
        tls=tls,
        client_certificates_required=clients == "required",
        insecure_http=insecure or unsure,
        limits=limits,
        users=users,
        users_file=users_file,
        client_ca=client_ca,
        client_ca_pem=client_ca_pem,
    )


def _client_ca(r: Reader, api: Mapping, resolve: Any) -> tuple[Any, bytes]:
    """``api.tls: {client_ca: FILE}``: the operators' CA (its path, its PEM text)."""
    m = r.mapping(api.at("tls"), api.get("tls"), "true, false or a mapping {client_ca}")
    if m is None:
        return None, b""
    name = m.string("client_ca", None)
    m.done()
    if name is None:
        r.error(api.at("tls"), "give client_ca: FILE (the operators' CA), or write tls: true")
        return None, b""
    path = resolve(name)
    try:
        pem = files.read_bytes(path, files.PEM)
        if not x509.load_pem_x509_certificates(pem):
            raise ValueError("no certificate in it")
    except OSError as e:
        r.error(m.at("client_ca"), f"cannot read {path}: {e.strerror or e}")
        return None, b""
    except ValueError as e:
        r.error(m.at("client_ca"), f"{path} is not a PEM CA certificate: {e}")
        return None, b""
    return path, pem


#: each limit's key, whether it is a whole number, and its range
_LIMITS: dict[str, tuple[bool, float, float]] = {
    "connections": (True, 1, 100_000),
    "connections_per_source": (True, 1, 100_000),
    "answers": (True, 1, 10_000),
    "answers_without_token": (True, 0, 10_000),
    "answers_per_source": (True, 1, 10_000),
    "followers": (True, 0, 1_000),
    "followers_without_token": (True, 0, 1_000),
    "followers_per_source": (True, 1, 1_000),
    "idle_timeout": (False, 1, 3600),
    "stall_timeout": (False, 1, 3600),
    "follow_without_token": (False, 0, 7 * 86400),
}


def read_limits(r: Reader, api: Mapping) -> ApiLimits:
    """``api.limits``: what the API's clients may hold (see `ApiLimits`; every key
    optional, each checked against its range, unknown keys refused)."""
    default = ApiLimits()
    if not api.has("limits"):
        return default
    m = r.mapping(api.at("limits"), api.get("limits"), "a mapping {" + ", ".join(_LIMITS) + "}")
    if m is None:
        return default
    values: dict[str, Any] = {}
    for key, (whole, lo, hi) in _LIMITS.items():
        if whole:
            value: float | None = m.integer(key, getattr(default, key), int(lo), int(hi))
        else:
            value = m.number(key, getattr(default, key), lo, hi)
        values[key] = getattr(default, key) if value is None else value
    m.done()
    return ApiLimits(**values)


#: a host name as a Host header gives it: labels of letters, digits and '-' ({node} allowed)
_LABEL = r"([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?|\{node\})"
_HOST_NAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*\.?")


def _api_names(r: Reader, m: Mapping) -> tuple[str, ...]:
    names: list[str] = []
    for i, raw in enumerate(r.list(m.at("names"), m.get("names", [])) or []):
        name = r.string((*m.at("names"), i), raw)
        if name is None:
            continue
        if name.lower() == "localhost" or not _HOST_NAME.fullmatch(name):
            r.error((*m.at("names"), i), f"{name!r} is not a host name (localhost is accepted on loopback anyway)")
            continue
        names.append(name.lower().rstrip("."))
    return tuple(dict.fromkeys(names))
