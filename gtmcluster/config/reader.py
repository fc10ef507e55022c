"""Typed, path-aware reading of YAML values. Every failure becomes a `Problem`.

Readers return ``None`` (after recording the problem) instead of raising, so one pass over
the file finds every problem. `Mapping` also reports keys it was never asked about.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections.abc import Iterator
from typing import Any, ClassVar

from gtmcluster.config.problems import KeyPath, Problems

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class _Missing:
    """A required key that is absent (already reported); readers pass it on as None quietly."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


def type_name(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    return {
        bool: "a boolean",
        int: "a number",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a mapping",
    }.get(type(value), type(value).__name__)


class Reader:
    """Value checks at a key path, recording problems in a shared `Problems`.

    Networks are read once per text: a reload reads its 40,000 networks again (at 5,000
    servers, regions and topology subnets), a third of its build, so the networks of the
    last config built are reused (the same immutable objects, shared by both configs),
    and a reload pays for the networks that changed."""

    #: the networks the last config built read, by their text (`keep_networks`)
    kept_networks: ClassVar[dict[str, IPNetwork]] = {}

    def __init__(self, problems: Problems):
        self.problems = problems
        #: (kind, name) of objects that are defined but invalid: references to them are not
        #: reported again as dangling
        self.broken: set[tuple[str, str]] = set()
        self.networks: dict[str, IPNetwork] = {}  # read by this reader

    def keep_networks(self) -> None:
        """Let the next reader reuse the networks this one read (its config was built);
        those of the config before are let go."""
        Reader.kept_networks = self.networks

    def error(self, path: KeyPath, message: str) -> None:
        self.problems.add(path, message)

    def mapping(self, path: KeyPath, value: Any, what: str = "a mapping") -> Mapping | None:
        if value is MISSING:
            return None
        if not isinstance(value, dict):
            self.error(path, f"must be {what}, not {type_name(value)}")
            return None
        return Mapping(self, path, value)

    def list(self, path: KeyPath, value: Any, what: str = "a list", allow_scalar: bool = False) -> list[Any] | None:
        if value is MISSING:
            return None
        if allow_scalar and not isinstance(value, (list, dict)) and value is not None:
            return [value]
        if not isinstance(value, list):
            self.error(path, f"must be {what}, not {type_name(value)}")
            return None
        return value

    def string(self, path: KeyPath, value: Any, *, choices: tuple[str, ...] | None = None) -> str | None:
        if value is MISSING:
            return None
        if not isinstance(value, str) or not value:
            self.error(path, f"must be a non-empty string, not {type_name(value)}")
            return None
        if choices is not None and value not in choices:
            self.error(path, f"{value!r} is not one of: {', '.join(choices)}{_did_you_mean(value, choices)}")
            return None
        return value

    def name(self, path: KeyPath, value: Any, what: str = "name") -> str | None:
        if value is MISSING:
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        text = self.string(path, value)
        if text is None:
            return None
        if not NAME_RE.match(text):
            self.error(path, f"{text!r} is not a valid {what} (letters, digits, '_', '-', '.'; at most 63)")
            return None
        return text

    def integer(self, path: KeyPath, value: Any, lo: int, hi: int) -> int | None:
        if value is MISSING:
            return None
        if isinstance(value, float) and not isinstance(value, bool):
            self.error(path, f"{value:g} is not a whole number ({lo} to {hi})")
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(path, f"must be a whole number from {lo} to {hi}, not {type_name(value)}")
            return None
        if not lo <= value <= hi:
            self.error(path, f"{value} is out of range ({lo} to {hi})")
            return None
        return value

    def number(self, path: KeyPath, value: Any, lo: float, hi: float) -> float | None:
        if value is MISSING:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.error(path, f"must be a number from {lo:g} to {hi:g}, not {type_name(value)}")
            return None
        if not lo <= value <= hi:
            # (an int too large for a float has no :g form: found by fuzz/config_load.py)
            shown = f"{value:g}" if isinstance(value, float) or abs(value) < 10**15 else f"{str(value)[:20]}..."
            self.error(path, f"{shown} is out of range ({lo:g} to {hi:g})")
            return None
        return float(value)

    def boolean(self, path: KeyPath, value: Any) -> bool | None:
        if value is MISSING:
            return None
        if not isinstance(value, bool):
            self.error(path, f"must be true or false, not {type_name(value)}")
            return None
        return value

    def known(self, path: KeyPath, value: Any, kind: str, names: Any, what: str) -> str | None:
        """*value* must name one of *names* (objects of *kind*: "datacenter", "pool", ...).

        Names of objects that are defined but broken, and every name when the whole
        section is broken (``(kind, "*")`` in `broken`), are accepted quietly: their own
        problem is already reported.
        """
        text = self.string(path, value)
        if text is None:
            return None
        if text in names:
            return text
        if (kind, text) in self.broken or (kind, "*") in self.broken:
            return None
        listed = sorted(names)
        hint = f" (known: {', '.join(listed)})" if 0 < len(listed) <= 20 else ""
        self.error(path, f"no {what} named {text!r}{_did_you_mean(text, listed) or hint}")
        return None

    def address(self, path: KeyPath, value: Any) -> IPAddress | None:
        if value is MISSING:
            return None
        if not isinstance(value, str):
            self.error(path, f"must be an IPv4 or IPv6 address, not {type_name(value)}")
            return None
        try:
            return ipaddress.ip_address(value)
        except ValueError:
            self.error(path, f"{value!r} is not an IPv4 or IPv6 address")
            return None

    def network(self, path: KeyPath, value: Any) -> IPNetwork | None:
        if value is MISSING:
            return None
        if not isinstance(value, str):
            self.error(path, f"must be a network such as 192.0.2.0/24, not {type_name(value)}")
            return None
        network = self.networks.get(value) or Reader.kept_networks.get(value)
        if network is None:
            try:
                network = network_of(value)
            except ValueError:
                self.error(path, network_problem(value) or f"{value!r} is not an IPv4 or IPv6 network")
                return None
        self.networks[value] = network
        return network

    def hostport(self, path: KeyPath, value: Any, default_port: int | None) -> tuple[IPAddress, int] | None:
        """``192.0.2.1:53``, ``[2001:db8::1]:53``, or (with a default port) just the address."""
        if value is MISSING:
            return None
        if not isinstance(value, str):
            self.error(path, f"must be ADDRESS:PORT, not {type_name(value)}")
            return None
        text = value.strip()
        port_text: str | None = None
        if text.startswith("["):
            host, sep, rest = text[1:].partition("]")
            if not sep or (rest and not rest.startswith(":")):
                host = ""
            port_text = rest[1:] if rest else None
        elif text.count(":") == 1:
            host, _, port_text = text.partition(":")
        elif ":" in text:
            # "2001:db8::1:53" could be an address with a port or an address alone
            self.error(path, f"{value!r}: an IPv6 address goes in brackets, as in [2001:db8::1]:53")
            return None
        else:
            host = text
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            self.error(path, f"{value!r} is not ADDRESS:PORT (an IPv6 address goes in brackets: [2001:db8::1]:53)")
            return None
        if port_text is None:
            if default_port is None:
                self.error(path, f"{value!r} has no port")
                return None
            return address, default_port
        # (ASCII digits only: str.isdigit() takes '²', which int() refuses)
        if not (port_text.isascii() and port_text.isdigit() and 1 <= int(port_text) <= 65535):
            self.error(path, f"port {port_text!r} is not a number from 1 to 65535")
            return None
        return address, int(port_text)


def network_of(text: str) -> IPNetwork:
    """`ipaddress.ip_network(text)` (strict: no host bits), raising ValueError as it does;
    plain IPv4 networks (``192.0.2.0/24``, decimal octets without leading zeros) are read
    without its string parser, which is most of the time a config of 40,000 networks takes."""
    address, slash, bits = text.partition("/")
    octets = address.split(".")
    if (
        slash
        and len(octets) == 4
        and bits.isdigit()
        and bits.isascii()
        and (len(bits) == 1 or bits[0] != "0")
        and all(o.isdigit() and o.isascii() and len(o) <= 3 and (len(o) == 1 or o[0] != "0") for o in octets)
    ):
        a, b, c, d = (int(o) for o in octets)
        prefix = int(bits)
        if a < 256 and b < 256 and c < 256 and d < 256 and prefix <= 32:
            return ipaddress.IPv4Network(((a << 24) | (b << 16) | (c << 8) | d, prefix))
    return ipaddress.ip_network(text)


def network_problem(text: str) -> str | None:
    """Why *text* is not a network (host bits set, bad syntax), or None."""
    try:
        ipaddress.ip_network(text)
    except ValueError as e:
        try:
            ipaddress.ip_network(text, strict=False)
        except ValueError:
            return f"{text!r} is not an IPv4 or IPv6 network"
        return f"{text!r} has host bits set ({e})"
    return None


def _did_you_mean(word: str, choices: tuple[str, ...] | list[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


class Mapping:
    """A YAML mapping being read; `done` reports the keys nobody asked for."""

    def __init__(self, reader: Reader, path: KeyPath, raw: dict[str, Any]):
        self.r = reader
        self.path = path
        self.raw = raw
        self.known: list[str] = []

    def at(self, key: str) -> KeyPath:
        return (*self.path, key)

    def has(self, key: str) -> bool:
        self._know(key)
        return key in self.raw

    def _know(self, key: str) -> None:
        if key not in self.known:
            self.known.append(key)

    def get(self, key: str, default: Any = None) -> Any:
        self._know(key)
        return self.raw.get(key, default)

    def require(self, key: str, what: str) -> Any:
        """The value at *key*, or `MISSING` (reported here) when the key is absent."""
        self._know(key)
        if key not in self.raw:
            self.r.error(self.path, f"missing key {key!r} ({what})")
            return MISSING
        return self.raw[key]

    def items(self) -> Iterator[tuple[str, Any]]:
        return iter(self.raw.items())

    # typed getters: default when absent, None (after a problem) when wrong
    def integer(self, key: str, default: int | None, lo: int, hi: int) -> int | None:
        return default if not self.has(key) else self.r.integer(self.at(key), self.raw[key], lo, hi)

    def number(self, key: str, default: float | None, lo: float, hi: float) -> float | None:
        return default if not self.has(key) else self.r.number(self.at(key), self.raw[key], lo, hi)

    def boolean(self, key: str, default: bool) -> bool:
        if not self.has(key):
            return default
        value = self.r.boolean(self.at(key), self.raw[key])
        return default if value is None else value

    def string(self, key: str, default: str | None, choices: tuple[str, ...] | None = None) -> str | None:
        return default if not self.has(key) else self.r.string(self.at(key), self.raw[key], choices=choices)

    def done(self) -> None:
        for key in self.raw:
            if key not in self.known:
                self.r.error(
                    self.at(key),
                    f"unknown key{_did_you_mean(key, self.known)}; known keys here: {', '.join(self.known)}",
                )
