"""A member's name: the config's name rule (`reader.NAME_RE`) narrowed to a DNS host name.

A member's name is also its certificate's only DNS name (`sync.certs.issue`), the file name
the config's ``certs/{node}.pem`` expands to, and the name its peers' hellos must claim; so
the config refuses, when it is read, a member name that no certificate could carry, and
``gtmcluster certs issue`` refuses the same names with the same words.
"""

from __future__ import annotations

import re

from gtmcluster.config.reader import NAME_RE

#: one DNS label (RFC 1123): letters, digits and inner hyphens; lower case only
_LABEL_RE = re.compile(r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?")
#: the stem of the sync group CA's own files in a certificates folder (``ca.pem``,
#: ``ca.key``: `sync.certs`), which no member's files may take
CA_STEM = "ca"


class BadName(ValueError):
    """A name that cannot be a member's; the message says why and what to use."""


def check(text: str) -> str:
    """Return *text* if it can be a member's name (a certificate's DNS name and file name),
    else raise `BadName`.

    The rule is the config's name rule (`NAME_RE`) narrowed to a host name usable as a
    certificate's DNS name: dot-separated labels of lower-case letters, digits and inner
    hyphens. Upper case is refused rather than folded: the name is also the file name that
    the config's ``certs/{node}.pem`` expands to, and the name a peer's hello must claim.
    """
    if not isinstance(text, str) or not text:
        raise BadName("the node name is empty: give the member's name from the config")
    shown = repr(text)
    # NAME_RE ends in "$", which also matches before a final newline
    if not NAME_RE.match(text) or "\n" in text:
        raise BadName(
            f"{shown} is not a valid node name: use the member's name from the config "
            "(letters, digits, '-' and '.', starting with a letter or digit; at most 63)"
        )
    if text != text.lower():
        raise BadName(
            f"{shown} has upper-case letters: use {text.lower()!r}, here and as the member name in the "
            "config (DNS names ignore case, but the name is also the file name certs/{node}.pem)"
        )
    if "_" in text:
        raise BadName(
            f"{shown} contains '_', which a certificate's DNS name cannot: use {text.replace('_', '-')!r}, "
            "here and as the member name in the config"
        )
    for label in text.split("."):
        if not label:
            raise BadName(f"{shown} has an empty label (a leading, trailing or doubled '.')")
        if not _LABEL_RE.fullmatch(label):
            raise BadName(f"{shown}: the label {label!r} starts or ends with '-'")
    if text.rsplit(".", 1)[-1].isdigit():
        raise BadName(f"{shown} ends in a number, so it reads as an IP address: a node name must be a DNS name")
    if text == CA_STEM:
        raise BadName(f"{shown} is reserved: {CA_STEM}.pem and {CA_STEM}.key are the CA's own files")
    return text
