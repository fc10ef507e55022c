"""F5 names made into ours, and F5 addresses read.

Our object names are ``[A-Za-z0-9][A-Za-z0-9_.-]{0,62}`` (`config.reader.NAME_RE`). An F5
name keeps its text where it can: the ``/Common/`` partition is dropped, another partition
``/P/name`` becomes ``P.name``, the ``:`` between a server and its virtual server becomes
``.``, any other character we do not allow becomes ``_``, a name starting with neither a
letter nor a digit gets an ``x`` in front, and a name longer than 63 characters is cut to 54
plus ``-`` and 8 hex digits of its hash. Two F5 objects that end up with one name (a and aaaa
pools called alike, say) are told apart by a suffix (``-aaaa``, else ``-2``, ``-3``, ...).

A wide IP's name is not an object name but a DNS name: F5 answers the last component of its
path, in every partition and folder (`dns_name`: ``/Tenant/App/www.example.com`` answers
``www.example.com``, as AS3 writes it); its aliases likewise.
"""

from __future__ import annotations

import hashlib
import ipaddress
import itertools
import re

from gtmcluster.dnsdata import names

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_BAD = re.compile(r"[^A-Za-z0-9_.-]")
MAX_NAME = 63

#: well-known service names F5 writes in place of port numbers
SERVICES = {
    "http": 80,
    "https": 443,
    "domain": 53,
    "ftp": 21,
    "ssh": 22,
    "smtp": 25,
    "pop3": 110,
    "imap": 143,
    "ldap": 389,
    "snmp": 161,
    "ntp": 123,
    "sip": 5060,
    "rtsp": 554,
    "mysql": 3306,
    "telnet": 23,
}

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def strip_partition(name: str) -> str:
    """``/Common/web`` -> ``web``; ``/Prod/web`` -> ``Prod/web`` (each part of a ``a:b`` pair)."""
    return ":".join(_strip(part) for part in name.split(":")) if ":" in name and "/" in name else _strip(name)


def dns_name(f5_name: str) -> str:
    """The DNS name F5 answers for a wide IP or alias: the last component of its path
    (``/Common/www.example.com``, ``/T/A/www.example.com`` -> ``www.example.com``)."""
    return f5_name.rsplit("/", 1)[-1]


def domain_problem(name: str) -> str:
    """Why *name* is no DNS name our config takes for a wide IP, an alias or a CNAME target
    ("" when it is one): a blank, a control character or a backslash (a quoted F5 word can
    hold them; F5 answers no such name), or what the loader refuses (`dnsdata.names.from_text`:
    an empty label, one over 63 octets, a name IDNA cannot encode)."""
    if not name.isprintable() or any(c.isspace() or c == "\\" for c in name):
        return f"{one_line(name)!r} holds a blank, a control character or a backslash: no name F5 answers"
    try:
        names.from_text(name)
    except names.BadName as e:
        return one_line(str(e))
    return ""


def one_line(text: str) -> str:
    """*text* as one line that shows what it holds: line breaks and every other character
    that does not print (controls, blanks other than the space, format characters) written
    as Python escapes (``\\n``, ``\\x00``, ``\\u2028``); for an F5 word quoted in a finding
    or a YAML comment."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _strip(name: str) -> str:
    if name.startswith("/Common/"):
        return name[len("/Common/") :]
    return name.lstrip("/")


def sanitise(f5_name: str) -> str:
    """Our spelling of an F5 object name (see the module's docstring)."""
    text = strip_partition(f5_name).replace("/", ".").replace(":", ".")
    text = _BAD.sub("_", text)
    if not text or not text[0].isalnum():
        text = "x" + text
    if len(text) > MAX_NAME:
        digest = hashlib.blake2b(text.encode(), digest_size=4).hexdigest()
        text = f"{text[:54]}-{digest}"
    return text


class Namespace:
    """Our names for one kind of F5 object, each unique; an F5 name (with a qualifier such as
    the pool type) keeps the name it got first."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.by_f5: dict[tuple[str, str], str] = {}
        self.taken: set[str] = set()

    def get(self, f5_name: str, qualifier: str = "") -> str | None:
        """Our name for *f5_name* if it has one already."""
        return self.by_f5.get((strip_partition(f5_name), qualifier))

    def name(self, f5_name: str, qualifier: str = "") -> str:
        """Our name for *f5_name* (given once, kept after)."""
        key = (strip_partition(f5_name), qualifier)
        if key in self.by_f5:
            return self.by_f5[key]
        base = sanitise(f5_name)
        # (lazily: most names take the first; making all 100,000 each time made an import
        # quadratic in its names)
        suffixes = itertools.chain(
            ["", *([f"-{sanitise(qualifier)}"] if qualifier else [])], (f"-{n}" for n in range(2, 100000))
        )
        for suffix in suffixes:
            candidate = base[: MAX_NAME - len(suffix)] + suffix
            if candidate.lower() not in self.taken and NAME_RE.match(candidate):
                break
        self.taken.add(candidate.lower())
        self.by_f5[key] = candidate
        return candidate

    def alias(self, f5_name: str, ours: str, qualifier: str = "") -> None:
        """Let *f5_name* stand for our object *ours* (one object of ours for two of F5's)."""
        self.by_f5[(strip_partition(f5_name), qualifier)] = ours

    def renamed(self, f5_name: str, qualifier: str = "") -> bool:
        """Whether our name differs from F5's (beyond the dropped /Common/ partition)."""
        return self.get(f5_name, qualifier) != strip_partition(f5_name)


def port(text: str) -> int | None:
    """A port number or well-known service name; None when it is neither (or ``any``/0)."""
    if text.isdigit():
        value = int(text)
        return value if 1 <= value <= 65535 else None
    return SERVICES.get(text.lower())


def address_port(text: str) -> tuple[IPAddress, int | None] | None:
    """F5's ``10.1.1.1:80``, ``10.1.1.1:http``, ``2001:db8::1.80`` or a bare address: the
    address and port (None for ``any``, ``*``, 0). None when it is no address."""
    for address, sep, rest in (text.rpartition(":"), text.rpartition(".")):
        if not sep:
            continue
        try:
            ip = ipaddress.ip_address(strip_route_domain(address))
        except ValueError:
            continue
        if (sep, ip.version) in ((":", 4), (".", 6)):
            return ip, port(rest)
    try:
        return ipaddress.ip_address(strip_route_domain(text)), None
    except ValueError:
        return None


def strip_route_domain(address: str) -> str:
    """``10.1.1.1%2`` (an address in route domain 2) -> ``10.1.1.1``."""
    return address.split("%", 1)[0]


def network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    """A subnet F5 writes ``10.0.0.0/8`` or as a bare address; None when it is not one."""
    address, slash, length = text.partition("/")
    try:
        return ipaddress.ip_network(strip_route_domain(address) + slash + length, strict=False)
    except ValueError:
        return None
