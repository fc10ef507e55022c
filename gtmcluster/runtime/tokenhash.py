"""API tokens of the users file: made, stored only as a slow hash, and checked.

A token is ``NAME.SECRET``: the identity's name, a dot, and 32 random bytes in URL-safe
base64 (43 characters, no dot). The name is in the token so that the node checks one hash
per token presented, that of the identity it names, never every hash of the file (Kubernetes'
bootstrap tokens are ``ID.SECRET`` for the same reason).

Its hash is scrypt (RFC 7914, ``hashlib.scrypt``: OpenSSL's, in the standard library, so no
dependency is added) with n = 2^14, r = 8, p = 1 (16 MiB, the RFC's interactive figures;
0.05 to 0.15 s of one core), written in the PHC string form passlib and others use:
``$scrypt$ln=14,r=8,p=1$SALT$HASH`` (SALT: 16 bytes, HASH: 32 bytes, both base64 without
padding). Tokens are random, so no dictionary finds one; the slow hash is there so that a
copy of the users file gives no token, even by brute force on a fast machine. The figures
a hash may give are bounded (`parse`): a file cannot make one check take a second or a GiB.

Plain work, no Twisted: the config reader checks the form (`problem`), the node checks a
token in a thread (`verify`), `gtmcluster users add` makes them (`new_token`, `make`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

#: the figures new hashes use
LOG_N = 14
R = 8
P = 1
SALT_BYTES = 16
HASH_BYTES = 32
#: the figures a stored hash may give: n up to 2^16 (64 MiB at r = 8), r and p small
MAX_LOG_N = 16
MAX_R = 16
MAX_P = 4
_FORM = re.compile(r"\$scrypt\$ln=([0-9]{1,2}),r=([0-9]{1,2}),p=([0-9]{1,2})\$([A-Za-z0-9+/]+)\$([A-Za-z0-9+/]+)")
#: what a token made by `new_token` looks like (the name's own form is the config's)
SECRET_CHARACTERS = 43
#: how a hash is described in messages
FORM_TEXT = "$scrypt$ln=14,r=8,p=1$SALT$HASH (as `gtmcluster users add` writes it)"


@dataclass(frozen=True)
class Hash:
    """A stored token hash, read."""

    log_n: int
    r: int
    p: int
    salt: bytes
    digest: bytes


def new_token(name: str) -> str:
    """A new token for identity *name*."""
    return f"{name}.{secrets.token_urlsafe(32)}"


def name_of(token: str) -> str | None:
    """The identity a token names (the part before its last dot), None when it names none."""
    name, dot, secret = token.rpartition(".")
    return name if dot and name and secret else None


def make(token: str, log_n: int = LOG_N) -> str:
    """The stored hash of *token*, with a new random salt."""
    salt = secrets.token_bytes(SALT_BYTES)
    digest = _scrypt(token, Hash(log_n, R, P, salt, b""))
    return f"$scrypt$ln={log_n},r={R},p={P}${_b64(salt)}${_b64(digest)}"


def parse(text: str) -> Hash | str:
    """The hash *text* stores, or why it is not one."""
    m = _FORM.fullmatch(text)
    if m is None:
        return f"not a token hash of the form {FORM_TEXT}"
    log_n, r, p = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if not (10 <= log_n <= MAX_LOG_N and 1 <= r <= MAX_R and 1 <= p <= MAX_P):
        return f"scrypt figures out of range (ln 10 to {MAX_LOG_N}, r 1 to {MAX_R}, p 1 to {MAX_P})"
    try:
        salt, digest = _unb64(m.group(4)), _unb64(m.group(5))
    except (binascii.Error, ValueError):
        return "its salt or hash is not base64"
    if len(salt) < 8 or len(digest) < 16:
        return "its salt (at least 8 bytes) or hash (at least 16 bytes) is too short"
    return Hash(log_n, r, p, salt, digest)


def looks_plain(text: str) -> bool:
    """Whether *text*, given where a hash belongs, looks like a token itself."""
    return not text.startswith("$") and bool(re.fullmatch(r"[\x21-\x7e]{16,4096}", text))


def verify(token: str, stored: Hash) -> bool:
    """Whether *token* is the one *stored* is the hash of (slow: call it off the reactor)."""
    return hmac.compare_digest(_scrypt(token, stored, len(stored.digest)), stored.digest)


def _scrypt(token: str, h: Hash, length: int = HASH_BYTES) -> bytes:
    return hashlib.scrypt(
        token.encode("utf-8", errors="replace"),
        salt=h.salt,
        n=2**h.log_n,
        r=h.r,
        p=h.p,
        maxmem=2 * 128 * h.r * 2**h.log_n + 1024 * 1024,
        dklen=length,
    )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
