"""An in-memory TCP transport with Twisted's send-buffer manners, for back-pressure tests.

Twisted's transports (`abstract.FileDescriptor`) pause their streaming producer when more
than ``bufferSize`` bytes (64 KiB) wait to be sent, and resume it once they have sent them
all. `SendBuffer` does the same with the bytes written to it; `take` is the client
reading: it returns what waits, empties the buffer and resumes the producer it paused. It
also records the most bytes that ever waited, the figure back-pressure bounds.
"""

from __future__ import annotations

import struct

from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransportWithDisconnection


class SendBuffer(StringTransportWithDisconnection):
    """A transport from *host* whose producer is paused past *size* bytes waiting."""

    def __init__(self, host: str = "127.0.0.1", size: int = 65536):
        super().__init__(peerAddress=IPv4Address("TCP", host, 40000), hostAddress=IPv4Address("TCP", "127.0.0.1", 53))
        self.size = size
        #: whether we paused the producer (Twisted's `producerPaused`)
        self.held = False
        #: the most bytes that ever waited
        self.most = 0

    def write(self, data: bytes) -> None:
        if not self.connected:
            return  # (Twisted drops writes to a closed connection)
        super().write(data)
        waiting = len(self.io.getvalue())
        self.most = max(self.most, waiting)
        if waiting > self.size and self.producer is not None and self.streaming:
            self.held = True
            self.producer.pauseProducing()

    def take(self) -> bytes:
        """What waits, as the client reads it all; the producer is resumed if paused."""
        data: bytes = self.value()
        self.clear()
        if self.held and self.connected and self.producer is not None:
            self.held = False
            self.producer.resumeProducing()
        return data


def frames(data: bytes) -> list[bytes]:
    """The DNS messages of a TCP stream (two-byte length prefixes); raises ValueError when
    the stream ends inside a message."""
    out = []
    while data:
        if len(data) < 2:
            raise ValueError("a length prefix cut short")
        (length,) = struct.unpack_from("!H", data)
        if len(data) < 2 + length:
            raise ValueError(f"a message of {length} bytes cut at {len(data) - 2}")
        out.append(data[2 : 2 + length])
        data = data[2 + length :]
    return out
