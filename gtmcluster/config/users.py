"""The API's users file (``api.users_file``): identities, each with a role.

A YAML mapping of names to identities::

    alice: {role: operator, token_hash: "$scrypt$ln=14,r=8,p=1$..."}
    audit-bot: {role: viewer, token_hash: "$scrypt$..."}
    bob: {role: admin, cert_subject: "CN=bob,O=Example Ops"}
    carol: {role: operator, cert_san: "email:carol@ops.example"}

An identity is a bearer token, stored only as its hash (`runtime.tokenhash`), or a TLS
client certificate from the operators' CA (``api.tls.client_ca``), named by its whole
subject (``cert_subject``, RFC 4514, the order of its parts free) or by one of its subject
alternative names (``cert_san``: ``dns:``, ``email:``, ``uri:`` or ``ip:`` and the value).
A role is one of `ROLES`, each allowed what those before it are. The file is a member's own,
read with its config (so a reload takes it) as a secret is (`files.USERS`: its owner's, not
readable by others). Every problem names the file, the key path and what is wrong: a plain
token where its hash belongs, a hash of a bad form, an unknown role, a name, subject, SAN or
hash given twice.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from cryptography import x509

from gtmcluster.config.problems import ConfigError, KeyPath, Problem, Problems
from gtmcluster.config.reader import NAME_RE, Reader
from gtmcluster.config.source import yamlsrc
from gtmcluster.runtime import files, tokenhash
from gtmcluster.runtime.tokenhash import Hash

#: the roles, least first: each may do what those before it may
ROLES = ("viewer", "operator", "admin")
#: names the node gives identities of its own: the config's single ``api.token``, and a
#: loopback reader that showed nothing
RESERVED = ("api-token", "anonymous")
#: the kinds of subject alternative name ``cert_san`` may give
SAN_KINDS = ("dns", "email", "uri", "ip")
#: a subject, as compared: its (attribute OID, value) pairs, in any order
Subject = frozenset[tuple[str, str]]


@dataclass(frozen=True)
class ApiUser:
    """One identity of the users file: a token (its hash) or a certificate (subject or SAN)."""

    name: str
    role: str
    token_hash: Hash | None = None
    cert_subject: Subject | None = None
    #: ``kind:value``, the value lowercased but for uri
    cert_san: str | None = None


@dataclass(frozen=True, eq=False)
class ApiUsers:
    """The identities of a users file, by name and by certificate. Compared by identity: a
    reload reads a new one, and what was learnt of the old (known tokens) is dropped."""

    by_name: Mapping[str, ApiUser]
    by_subject: Mapping[Subject, ApiUser]
    by_san: Mapping[str, ApiUser]

    def __len__(self) -> int:
        return len(self.by_name)


NO_USERS = ApiUsers(MappingProxyType({}), MappingProxyType({}), MappingProxyType({}))


def subject_of(name: x509.Name) -> Subject:
    """A certificate's subject, as compared with ``cert_subject``."""
    return frozenset((a.oid.dotted_string, str(a.value)) for a in name)


def san_key(kind: str, value: str) -> str:
    """A subject alternative name, as compared with ``cert_san``."""
    return f"{kind}:{value if kind == 'uri' else value.lower()}"


def sans_of(certificate: x509.Certificate) -> list[str]:
    """The subject alternative names of *certificate*, as compared with ``cert_san``."""
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    out = [san_key("dns", v) for v in names.get_values_for_type(x509.DNSName)]
    out += [san_key("email", v) for v in names.get_values_for_type(x509.RFC822Name)]
    out += [san_key("uri", v) for v in names.get_values_for_type(x509.UniformResourceIdentifier)]
    out += [san_key("ip", str(v)) for v in names.get_values_for_type(x509.IPAddress)]
    return out


def read_users(path: Path) -> tuple[ApiUsers, list[Problem]]:
    """The identities of the users file at *path*, and its problems (each naming the file).
    Raises OSError when it cannot be read (`files.read_text`: not a regular file, too big,
    readable by others)."""
    text = files.read_text(path, files.USERS)
    try:
        data, lines, duplicates = yamlsrc.load(str(path), text)
    except ConfigError as e:  # a syntax error
        return NO_USERS, e.problems
    problems = Problems(str(path), lines)
    problems.found.extend(duplicates)
    r = Reader(problems)
    if data is None:
        data = {}
    top = r.mapping((), data, "a mapping of names to {role, token_hash or cert_subject or cert_san}")
    by_name: dict[str, ApiUser] = {}
    by_subject: dict[Subject, ApiUser] = {}
    by_san: dict[str, ApiUser] = {}
    hashes: dict[str, str] = {}
    for name, raw in top.items() if top is not None else ():
        at = (name,)
        if not isinstance(name, str) or not NAME_RE.match(name):
            r.error(at, f"{name!r} is not a name (letters, digits, '_', '-', '.'; at most 63)")
            continue
        if name in RESERVED:
            r.error(at, f"{name!r} is the name of an identity of the node's own ({', '.join(RESERVED)})")
            continue
        m = r.mapping(at, raw, "a mapping {role, token_hash or cert_subject or cert_san}")
        if m is None:
            continue
        role = r.string(m.at("role"), m.require("role", "one of " + ", ".join(ROLES)), choices=ROLES)
        ways = [k for k in ("token_hash", "cert_subject", "cert_san") if m.has(k)]
        m.done()
        if len(ways) != 1:
            r.error(at, "give one of token_hash, cert_subject, cert_san" + (f", not {len(ways)}" if ways else ""))
            continue
        way = ways[0]
        value = r.string(m.at(way), m.get(way))
        if value is None or role is None:
            continue
        user = _user(r, m.at(way), name, role, way, value)
        if user is None:
            continue
        if user.token_hash is not None:
            if (other := hashes.setdefault(value, name)) != name:
                r.error(m.at(way), f"the same hash as {other}'s: each identity has a token of its own")
                continue
        elif user.cert_subject is not None:
            if (same := by_subject.setdefault(user.cert_subject, user)) is not user:
                r.error(m.at(way), f"the subject of {same.name} already")
                continue
        elif user.cert_san is not None and (same := by_san.setdefault(user.cert_san, user)) is not user:
            r.error(m.at(way), f"the SAN of {same.name} already")
            continue
        by_name[name] = user
    users = ApiUsers(MappingProxyType(by_name), MappingProxyType(by_subject), MappingProxyType(by_san))
    return users, problems.found


def _user(r: Reader, at: KeyPath, name: str, role: str, way: str, value: str) -> ApiUser | None:
    if way == "token_hash":
        if tokenhash.looks_plain(value):
            r.error(
                at,
                "a plain token where its hash belongs: the file keeps only hashes "
                "(`gtmcluster users add NAME --role ROLE --file FILE` makes a token and writes its hash)",
            )
            return None
        parsed = tokenhash.parse(value)
        if isinstance(parsed, str):
            r.error(at, parsed)
            return None
        return ApiUser(name, role, token_hash=parsed)
    if way == "cert_subject":
        try:
            subject = subject_of(x509.Name.from_rfc4514_string(value))
        except ValueError as e:
            r.error(at, f"not a subject of the form CN=NAME,O=ORGANISATION (RFC 4514): {e}")
            return None
        if not subject:
            r.error(at, "an empty subject")
            return None
        return ApiUser(name, role, cert_subject=subject)
    kind, colon, rest = value.partition(":")
    kind = kind.strip().lower()
    rest = rest.strip()
    if not colon or kind not in SAN_KINDS or not rest:
        r.error(at, f"a SAN is KIND:VALUE, KIND one of {', '.join(SAN_KINDS)} (dns:alice.ops.example)")
        return None
    if kind == "ip":
        try:
            rest = str(ipaddress.ip_address(rest))
        except ValueError:
            r.error(at, f"{rest!r} is not an IP address")
            return None
    return ApiUser(name, role, cert_san=san_key(kind, rest))
