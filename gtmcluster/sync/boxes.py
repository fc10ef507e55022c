"""What one box (a command or an answer) from a peer may be, before AMP reads it: its size
on the wire, its shape, and how many commands a second a peer may send. The connection
(`sync.peer`) applies these; a box that breaks one drops the peer."""

from __future__ import annotations

from twisted.protocols import amp

#: a box (one command or answer) larger than this ends the connection
MAX_BOX = 256 * 1024
#: commands a peer may send per second (averaged over a few seconds) before it is dropped
MAX_COMMAND_RATE = 2000.0
RATE_BURST = 4000.0


def box_problem(box: amp.AmpBox) -> str | None:
    """Why *box* cannot be handled, as far as its shape tells, or None."""
    if amp.ANSWER in box or amp.ERROR in box:
        if amp.ANSWER not in box and (amp.ERROR_CODE not in box or amp.ERROR_DESCRIPTION not in box):
            return "an error answer without its code and description"
        return None
    if amp.COMMAND not in box:
        return "a box that is neither a command nor an answer"
    return None


def encoded_size(box: amp.AmpBox) -> int:
    """The bytes *box* took on the wire: each key and value with its 2-byte length, and
    the empty key that ends it."""
    return sum(4 + len(key) + len(value) for key, value in box.items()) + 2
