"""The log on stderr for the systemd journal: ``twistd -n --logger gtmcluster.nodelog.journal.observer gtm ...``.

`observer` is a twistd ``--logger`` factory. When ``JOURNAL_STREAM`` is set (systemd sets it
when stdout or stderr is connected to the journal), each event becomes lines on stderr that
start with their sd-daemon(3) priority, ``<3>`` error, ``<4>`` warn, ``<6>`` info, ``<7>``
debug (``<2>`` critical), which journald takes as the entry's priority
(``journalctl -p warning`` then works); every line of a multi-line message (a traceback)
gets the prefix. Without ``JOURNAL_STREAM`` it logs as twistd -n does: text lines on stdout.
The node's own JSON log file (`gtmcluster.nodelog.writer`) is written either way.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any, TextIO

from twisted.logger import ILogObserver, textFileLogObserver
from zope.interface import implementer

from gtmcluster.nodelog.record import PRIORITY, level_of, message_of, system_of


def journal_lines(event: dict[str, Any]) -> str:
    """*event* as the text written for the journal: each line ``<N>[system] text``."""
    prefix = f"<{PRIORITY.get(level_of(event), 6)}>"
    system = system_of(event)
    lines = message_of(event).splitlines() or [""]
    return "".join(f"{prefix}[{system}] {line}\n" for line in lines)


@implementer(ILogObserver)
class JournalObserver:
    """Writes events for the journal on *out* (stderr)."""

    def __init__(self, out: TextIO):
        self.out = out

    def __call__(self, event: dict[str, Any]) -> None:
        self.out.write(journal_lines(event))
        self.out.flush()


def observer(environ: Mapping[str, str] | None = None) -> Any:
    """twistd's ``--logger``: journal lines on stderr under systemd, else twistd's text on stdout."""
    env = os.environ if environ is None else environ
    if env.get("JOURNAL_STREAM"):
        return JournalObserver(sys.stderr)
    return textFileLogObserver(sys.stdout)
