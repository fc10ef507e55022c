"""How an HTTP listener of ours ends a connection after writing its refusal: the admin API
(`api.connection`) and the public RUM listener (`rum.listener`) alike.

The client may still be sending (a body we refused before reading it): closing at once would
make the kernel answer its data with a reset that can destroy the refusal before it is read.
So the writing side is closed and the connection is aborted `drain` seconds later. Under TLS a
half close would reach past TLS to the TCP connection, and TLS closes only once the channel
stops being the transport's producer: it sends its close alert now, and the connection ends
when the client answers it or after `drain` seconds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.interfaces import IDelayedCall

#: a channel's `callLater` (twisted.web's `HTTPChannel.callLater`)
CallLater = Callable[[float, Callable[[], object]], IDelayedCall]


def end_after_refusal(transport: Any, secure: bool, call_later: CallLater, drain: float) -> IDelayedCall | None:
    """Close *transport* once what was written is sent; the delayed abort, if one was set
    (the caller cancels it when the connection ends first)."""
    if secure:
        transport.unregisterProducer()
        transport.loseConnection()
        return call_later(drain, transport.abortConnection)
    close_writing = getattr(transport, "loseWriteConnection", None)
    if close_writing is not None:
        close_writing()
        return call_later(drain, transport.abortConnection)
    transport.loseConnection()
    return None
