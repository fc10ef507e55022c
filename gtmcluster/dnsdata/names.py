"""Domain names as tuples of labels.

A name is a tuple of label bytes in their original case, without the root label:
``(b"www", b"Example", b"com")``. Its *key* is the same tuple lowercased, used for every
lookup and comparison (DNS names compare case-insensitively, RFC 4343).
"""

from __future__ import annotations

import dns.exception
import dns.name

Name = tuple[bytes, ...]

ROOT: Name = ()


class BadName(ValueError):
    """Text that is not a valid domain name."""


def key(name: Name) -> Name:
    """The lowercased form of *name*, for lookups."""
    return tuple(label.lower() for label in name)


def from_text(text: str) -> Name:
    """Parse an absolute name; a trailing dot is optional. Raises `BadName`."""
    if not text or text.strip() != text:
        raise BadName(f"{text!r} is not a domain name")
    try:
        parsed = dns.name.from_text(text, origin=dns.name.root)
    except dns.exception.DNSException as e:
        raise BadName(f"{text!r} is not a domain name: {e}") from None
    return from_dnspython(parsed)


def from_dnspython(name: dns.name.Name) -> Name:
    """Convert an absolute dnspython name."""
    return tuple(name.labels[:-1])


def to_text(name: Name) -> str:
    """Presentation form with a trailing dot, escaping as dnspython does."""
    return dns.name.Name((*name, b"")).to_text()


def is_subdomain(name: Name, parent: Name) -> bool:
    """True when *name* equals or lies below *parent* (both keys)."""
    n = len(parent)
    return n == 0 or (len(name) >= n and name[-n:] == parent)


def wire_length(name: Name) -> int:
    """Uncompressed wire length of *name*, root label included."""
    return sum(len(label) + 1 for label in name) + 1
