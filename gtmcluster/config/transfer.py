"""Config of zone transfer out: the top-level ``tsig_keys``, each zone's ``transfer``, and
the limits of all transfers together, ``dns_server.transfer``.

    tsig_keys:
      xfr-key: {algorithm: hmac-sha256, secret: BASE64}     # or secret_file: PATH
    zones:
      - origin: example.com
        file: example.com.zone
        transfer: {allow: [192.0.2.0/24], notify: ["192.0.2.53:53"], tsig: xfr-key}
    dns_server:
      transfer: {max_in_flight: 10, max_per_source: 2, stall_timeout: 30, tsig_max_fudge: 300}

A ``secret_file`` is the member's own (named relative to its own base folder, like
``api.token_file``), so a secret never travels in a config sync bundle; it holds the
base64 text, as ``keymgr``/``tsig-keygen`` print it.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gtmcluster.config.addresses import IPNetwork
from gtmcluster.config.dnsserver import TransferLimits, TSIGKey, ZoneTransfer
from gtmcluster.config.problems import KeyPath
from gtmcluster.config.reader import Mapping, Reader
from gtmcluster.runtime import files

#: the algorithms offered (RFC 8945 6: HMAC-SHA256 is the one to implement), config name ->
#: the algorithm's DNS name as dnspython knows it
ALGORITHMS = {
    "hmac-sha256": "hmac-sha256.",
    "hmac-sha384": "hmac-sha384.",
    "hmac-sha512": "hmac-sha512.",
}
#: RFC 8945 6: a key shorter than the hash is weak; refuse one under 16 bytes outright
MIN_SECRET = 16


def read_tsig_keys(r: Reader, top: Mapping, resolve: Callable[[str], Path]) -> dict[str, TSIGKey]:
    """``tsig_keys: {NAME: {algorithm, secret | secret_file}}``."""
    out: dict[str, TSIGKey] = {}
    if not top.has("tsig_keys"):
        return out
    keys = r.mapping(("tsig_keys",), top.get("tsig_keys"), "a mapping of key names to {algorithm, secret}")
    if keys is None:
        return out
    for raw_name, raw in keys.items():
        name = str(raw_name)
        path: KeyPath = ("tsig_keys", name)
        key = _key(r, path, name, raw, resolve)
        if key is not None:
            out[name] = key
    return out


def _key(r: Reader, path: KeyPath, name: str, raw: Any, resolve: Callable[[str], Path]) -> TSIGKey | None:
    m = r.mapping(path, raw, "a mapping {algorithm, secret or secret_file}")
    if m is None:
        return None
    good_name = _key_name_ok(name)
    if not good_name:
        r.error(path, f"{name!r} is not a valid key name (letters, digits, '-', '_' and '.' only)")
    algorithm = m.string("algorithm", "hmac-sha256", choices=tuple(ALGORITHMS))
    text: str | None = None
    where = m.at("secret")
    if m.has("secret") and m.has("secret_file"):
        r.error(m.at("secret_file"), "give 'secret' or 'secret_file', not both")
    elif m.has("secret"):
        text = m.string("secret", None)
    elif m.has("secret_file"):
        where = m.at("secret_file")
        file_name = m.string("secret_file", None)
        if file_name is not None:
            file = resolve(file_name)
            try:
                text = files.read_text(file, files.SECRET).strip()  # (a FIFO here would hold a reload)
            except OSError as e:
                r.error(where, f"cannot read {file}: {e.strerror or e}")
    else:
        m.require("secret", "the key's secret in base64 (or secret_file: PATH)")
    m.done()
    if text is None or algorithm is None or not good_name:
        return None
    try:
        secret = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        r.error(where, "the secret is not base64 (as tsig-keygen or keymgr -t print it)")
        return None
    if len(secret) < MIN_SECRET:
        r.error(where, f"the secret is {len(secret)} bytes: at least {MIN_SECRET} are needed")
        return None
    return TSIGKey(name, ALGORITHMS[algorithm], secret)


def _key_name_ok(name: str) -> bool:
    labels = name.rstrip(".").split(".")
    return bool(name) and all(
        0 < len(label) <= 63 and all(c.isascii() and (c.isalnum() or c in "-_") for c in label) for label in labels
    )


def read_transfer(r: Reader, path: KeyPath, raw: Any, keys: dict[str, TSIGKey]) -> ZoneTransfer | None:
    """``zones[i].transfer: {allow: [networks], notify: [ADDR:PORT], tsig: NAME}``."""
    m = r.mapping(path, raw, "a mapping {allow, notify, tsig}")
    if m is None:
        return None
    allow: list[IPNetwork] = []
    allowed = r.list(
        m.at("allow"),
        m.require("allow", "the networks that may transfer the zone"),
        "a list of networks such as 192.0.2.0/24",
    )
    for i, item in enumerate(allowed or []):
        network = r.network((*m.at("allow"), i), item)
        if network is not None:
            allow.append(network)
    notify = []
    items = r.list(m.at("notify"), m.get("notify", []), "a list of secondaries as ADDRESS:PORT")
    for i, item in enumerate(items or []):
        target = r.hostport((*m.at("notify"), i), item, 53)
        if target is not None:
            notify.append(target)
    key = None
    if m.has("tsig"):
        key_name = m.string("tsig", None)
        if key_name is not None:
            key = keys.get(key_name)
            if key is None:
                known = ", ".join(sorted(keys)) or "none"
                r.error(m.at("tsig"), f"no TSIG key {key_name!r} in tsig_keys (known: {known})")
    m.done()
    if not allow and allowed is not None and not allowed:
        r.error(m.at("allow"), "allows no one: list the secondaries' networks (or leave 'transfer' out)")
    return ZoneTransfer(tuple(allow), tuple(notify), key)


def read_transfer_limits(r: Reader, parent: Mapping) -> TransferLimits:
    """``dns_server.transfer: {max_in_flight, max_per_source, stall_timeout, tsig_max_fudge}``
    (*parent* is ``dns_server``); the defaults where absent or broken."""
    default = TransferLimits()
    if not parent.has("transfer"):
        return default
    m = r.mapping(
        parent.at("transfer"),
        parent.get("transfer"),
        "a mapping {max_in_flight, max_per_source, stall_timeout, tsig_max_fudge}",
    )
    if m is None:
        return default
    total = m.integer("max_in_flight", default.max_in_flight, 1, 10_000)
    per_source = m.integer("max_per_source", default.max_per_source, 1, 10_000)
    stall = m.number("stall_timeout", default.stall_timeout, 1, 3600)
    fudge = m.integer("tsig_max_fudge", default.tsig_max_fudge, 1, 65_535)
    m.done()
    if total is not None and per_source is not None and per_source > total:
        if m.has("max_per_source"):
            r.error(m.at("max_per_source"), f"{per_source} is more than max_in_flight ({total})")
        # (left out, it follows a max_in_flight set below its default)
        per_source = total
    return TransferLimits(
        total or default.max_in_flight,
        per_source or default.max_per_source,
        stall or default.stall_timeout,
        fudge or default.tsig_max_fudge,
    )
