"""`gtmcluster logs --config FILE [-f] [--since WHEN] [--lines N] [--json] [NODE ...]`: the nodes' logs.

Asks every member (or the NODEs named) for its own log through its API
(``GET /api/v1/logs``, with the API's bearer token found as for the other commands), so it
works from any host that reaches the nodes' APIs, however the nodes were started. Lines are
merged across nodes by time and printed with their node as prefix, coloured per node on a
terminal (not when piped, with --no-color, or when NO_COLOR is set); --json prints the
nodes' JSON lines as they are. It shows the last --lines of each node (20 by default), or
everything since --since (a duration such as 30s, 10m, 2h, 1d or 1h30m, or a time such as
2026-11-30T08:00, local time unless it has an offset).

With -f it then follows every node until Ctrl-C. A node that goes away (restarted, cut off)
is asked again every few seconds; once it answers, its log resumes where it stopped (since=
the last line shown), without repeating lines. Followed lines are held half a second, so
that lines of several nodes come out in time order.

What answers at a node's address is read within limits: a line up to `MAX_LINE` bytes
(a longer one is left out, with a note), at most `reader.MAX_LINES` lines and `MAX_READ`
bytes from each node without -f, all within `READ_DEADLINE` seconds; with -f, each whole
line (or heartbeat) within `READ_TIMEOUT` seconds of the one before. Control characters in
what the nodes send are shown escaped (`gtmcluster.cli.terminal`).

Exit status: 0 when every node's log was read (and after Ctrl-C with -f); 1 for a config
problem, a NODE that is not a member, a --since not understood, a node that could not be
read (the others are still shown), or with -f when every node refused (a wrong token).
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import os
import queue
import re
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

from gtmcluster.cli import nodeapi
from gtmcluster.cli.bounded import AnswerError, LongLine, Readable, lines
from gtmcluster.cli.nodeapi import CliError, Tokens, Unreachable, load_config
from gtmcluster.cli.terminal import escape, escape_json_line
from gtmcluster.config.model import Config, Member
from gtmcluster.nodelog.reader import MAX_LINES
from gtmcluster.nodelog.record import line_time, parse_line

DEFAULT_LINES = 20
#: seconds a followed line waits for lines of other nodes that may come before it
HOLD = 0.5
#: seconds between attempts to reach a node that went away (doubling up to the last)
RETRY = (1.0, 2.0, 4.0)
#: a followed node sends an empty line after 15 s of silence; without a whole line (or that
#: empty one) for this long the connection is taken as dead and made again (connecting has
#: nodeapi.TIMEOUT, so a node that is down or cut off is reported within seconds)
READ_TIMEOUT = 45.0
PATH = "/api/v1/logs"
#: the longest log line read, bytes (a node's lines are far shorter; longer ones are left out)
MAX_LINE = 64 * 1024
#: the most bytes of lines read from one node without -f (a node sends at most
#: `reader.MAX_LINES` lines)
MAX_READ = 32 * 1024 * 1024
#: seconds to read one node's lines without -f, from connecting to the last line
READ_DEADLINE = 60.0
#: lines (and notes) the followers may have waiting to be printed: beyond, they stop reading
#: (and the nodes' own follow buffers take the wait)
MAX_WAITING = 1000
#: bytes of followed lines held for time order (`Holder`): beyond, the oldest go out at once
MAX_HELD_BYTES = 16 * 1024 * 1024
#: lines of one time remembered to resume without repeats (`Resume`)
MAX_AT_LAST = 10000

DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}

#: ANSI colours given to the nodes in the config's member order
COLORS = (36, 33, 35, 32, 34, 31, 96, 93, 95, 92, 94, 91)
RESET = "\x1b[0m"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "logs",
        help="show and follow the nodes' logs (through their APIs), each line prefixed with its node",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_reading_arguments(p, "logs", "lines")
    p.add_argument(
        "--lines",
        "-n",
        type=non_negative,
        metavar="N",
        help=f"the last N lines of each node (default {DEFAULT_LINES}, or all since --since)",
    )
    add_output_arguments(p)
    p.set_defaults(run=run)


def add_reading_arguments(p: argparse.ArgumentParser, what: str, items: str) -> None:
    """The options of a command that reads the members' *what* (logs, audit logs) through
    their APIs: the config, --follow, --since (*items*: what it counts, lines or entries)."""
    p.add_argument("--config", "-c", required=True, metavar="FILE", help="the sync group's YAML config")
    p.add_argument("--follow", "-f", action="store_true", help=f"keep following the {what} until Ctrl-C")
    p.add_argument(
        "--since", metavar="WHEN", help=f"{items} since a duration ago (10m, 2h) or a time (2026-11-30T08:00)"
    )


def add_output_arguments(p: argparse.ArgumentParser) -> None:
    """How such a command prints (--json, --no-color), the identity it shows, the members it asks."""
    p.add_argument("--json", action="store_true", help="print the nodes' JSON lines as they are")
    p.add_argument("--no-color", action="store_true", help="no ANSI colours, even on a terminal")
    nodeapi.add_token_argument(p)
    p.add_argument("nodes", nargs="*", metavar="NODE", help="only these members (default: every member)")


def non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more: {text}")
    return value


# -- times -----------------------------------------------------------------------------------


def parse_time(text: str) -> datetime:
    """An ISO 8601 time as an aware datetime; one without an offset is local time."""
    value = datetime.fromisoformat(text.replace(",", "."))
    return value if value.tzinfo is not None else value.astimezone()


def parse_since(text: str, now: datetime) -> datetime:
    """``--since``: a duration before *now* (``90s``, ``10m``, ``2h``, ``1d``, ``1h30m``) or a
    time (``2026-11-30T08:00``, ``2026-11-30 08:00:00+0000``, ``2026-11-30``)."""
    text = text.strip()
    parts = DURATION_PART.findall(text)
    if parts and "".join(n + u for n, u in parts) == text:
        return now - timedelta(seconds=sum(float(n) * UNIT_SECONDS[u] for n, u in parts))
    try:
        return parse_time(text)
    except ValueError:
        raise ValueError(
            f"--since {text!r}: not a duration (30s, 10m, 2h, 1d, 1h30m) nor a time (2026-11-30T08:00)"
        ) from None


def log_time(moment: datetime) -> str:
    """*moment* in the form of the log's time field (what ``since=`` takes)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# -- lines -----------------------------------------------------------------------------------

_seq = itertools.count()


@dataclass(order=True)
class Line:
    """One line of a node's log; lines order by time, then by arrival."""

    time: str
    seq: int
    node: str = field(compare=False)
    raw: str = field(compare=False)


def make_line(node: str, raw: str) -> Line | None:
    """*raw* as a Line of *node*, or None for what is not a log line (a heartbeat)."""
    stamp = line_time(raw)
    return None if stamp is None else Line(stamp, next(_seq), node, raw)


class Resume:
    """Where a node's log was left: the time of the last line taken and (hashes of) the lines
    taken at that time, so that asking again with ``since=`` that time repeats nothing. (At
    most `MAX_AT_LAST` lines of one time are remembered: a node logs far fewer in one
    microsecond.)"""

    def __init__(self) -> None:
        self.last: str | None = None
        self.at_last: set[int] = set()

    def take(self, line: Line) -> bool:
        """Whether *line* is new (and so to be shown)."""
        seen = hash(line.raw)
        if self.last is not None and (line.time < self.last or (line.time == self.last and seen in self.at_last)):
            return False
        if line.time != self.last:
            self.last, self.at_last = line.time, set()
        if len(self.at_last) < MAX_AT_LAST:
            self.at_last.add(seen)
        return True


def merge(batches: Iterable[Iterable[Line]]) -> list[Line]:
    """Lines of several nodes in time order (each node's own order kept)."""
    return list(heapq.merge(*batches))


class Holder:
    """Followed lines, each held until `HOLD` seconds after it came, then let out in time
    order with every other held line up to its time; while they hold more than *max_bytes*,
    the earliest are let out at once. Each line costs O(log n)."""

    def __init__(self, hold: float = HOLD, max_bytes: int = MAX_HELD_BYTES):
        self.hold = hold
        self.max_bytes = max_bytes
        self._heap: list[Line] = []
        #: (arrival, line) in arrival order; lines already let out are skipped here lazily
        self._arrivals: deque[tuple[float, Line]] = deque()
        self._out: set[int] = set()
        self._bytes = 0

    def add(self, line: Line, now: float) -> None:
        heapq.heappush(self._heap, line)
        self._arrivals.append((now, line))
        self._bytes += len(line.raw)

    def due(self, now: float, everything: bool = False) -> list[Line]:
        """The lines to show now: every held line at or before the newest held line that
        has waited long enough (all of them with *everything*)."""
        upto: Line | None = None
        while self._arrivals and (everything or self._arrivals[0][0] <= now - self.hold):
            _, line = self._arrivals.popleft()
            if line.seq in self._out:
                self._out.discard(line.seq)
            elif upto is None or line > upto:
                upto = line
        out: list[Line] = []
        while self._heap and ((upto is not None and self._heap[0] <= upto) or self._bytes > self.max_bytes):
            line = heapq.heappop(self._heap)
            out.append(line)
            self._out.add(line.seq)
            self._bytes -= len(line.raw)
        return out

    def next_due(self) -> float | None:
        """When the earliest held line came (monotonic seconds): it is due `hold` later."""
        return self._arrivals[0][0] if self._arrivals else None


# -- output ----------------------------------------------------------------------------------


class Printer:
    """Writes lines with a prefix per node: its name padded to the longest, and a bar; the
    time (UTC, milliseconds), level, system and message; a message's further lines (a
    traceback) each under the same prefix."""

    def __init__(
        self,
        nodes: Sequence[str],
        out: TextIO,
        color: bool,
        palette_order: Sequence[str] | None = None,
        raw: bool = False,
    ):
        self.out = out
        self.raw = raw
        self.width = max((len(n) for n in nodes), default=0)
        order = list(palette_order) if palette_order is not None else list(nodes)
        self.prefixes = {}
        for node in nodes:
            text = f"{node.ljust(self.width)} |"
            if color:
                code = COLORS[(order.index(node) if node in order else 0) % len(COLORS)]
                text = f"\x1b[{code}m{text}{RESET}"
            self.prefixes[node] = text

    def format(self, line: Line) -> str:
        """*line* for the terminal: what the node sent, its control characters escaped (a
        message's newlines kept, each further line under the prefix)."""
        if self.raw:
            return escape_json_line(line.raw) + "\n"
        prefix = self.prefixes[line.node]
        fields = _fields(line.raw)
        if fields is None:
            return f"{prefix} {escape(line.raw)}\n"
        shown = escape(fields["time"][:23]) + "Z"
        first, *more = escape(fields["message"], keep="\n\t").split("\n")
        head = f"{prefix} {shown} {escape(fields['level']):<5} [{escape(fields['system'])}] {first}\n"
        return head + "".join(f"{prefix}     {text}\n" for text in more)

    def write(self, lines: Iterable[Line]) -> None:
        for line in lines:
            self.out.write(self.format(line))
        self.out.flush()


def _fields(raw: str) -> dict[str, str] | None:
    """`parse_line`, with a line nested too deeply to parse taken as not ours."""
    try:
        return parse_line(raw)
    except RecursionError:
        return None


def use_color(no_color: bool, out: TextIO, environ: Mapping[str, str] = os.environ) -> bool:
    """Colour only on a terminal, unless --no-color or a non-empty NO_COLOR says otherwise."""
    if no_color or environ.get("NO_COLOR"):
        return False
    isatty = getattr(out, "isatty", None)
    return bool(isatty and isatty())


def note(text: str, command: str = "logs") -> None:
    print(f"gtmcluster {command}: {text}", file=sys.stderr, flush=True)


# -- asking the nodes ------------------------------------------------------------------------


def params_for(since: str | None, count: int | None, follow: bool) -> dict[str, str]:
    out: dict[str, str] = {}
    if since is not None:
        out["since"] = since
    if count is not None:
        out["lines"] = str(count)
    if follow:
        out["follow"] = "1"
    return out


@dataclass
class Read:
    """What one node gave (not following): its lines, and how many were left out as longer
    than `MAX_LINE`."""

    lines: list[Line]
    left_out: int = 0


def read_all(m: Member, params: dict[str, str], tokens: Tokens, path: str = PATH) -> Read:
    """The lines *m* gives for *params* (not following), within `READ_DEADLINE`, at most
    `MAX_LINES` lines of at most `MAX_LINE` bytes and `MAX_READ` bytes in all (Unreachable
    beyond); *path*: the API's route of its log (the audit log's, `gtmcluster.cli.audit`)."""
    out = Read([])
    size = 0
    with nodeapi.open_stream(m, path, params, tokens, deadline=READ_DEADLINE) as response:
        for raw in _lines(m, response):
            if isinstance(raw, LongLine):
                out.left_out += 1
                continue
            size += len(raw)
            if size > MAX_READ:
                raise Unreachable(f"{m.name} sent more than {MAX_READ:,} bytes of log lines (ask for fewer: --lines)")
            line = make_line(m.name, raw.decode("utf-8", errors="replace"))
            if line is None:
                continue
            if len(out.lines) == MAX_LINES:
                raise Unreachable(f"{m.name} sent more than the {MAX_LINES:,} lines a node sends at most")
            out.lines.append(line)
    return out


def _lines(m: Member, response: Readable) -> Iterator[bytes | LongLine]:
    """`bounded.lines` of *response*, a broken answer `Unreachable` (naming *m*)."""
    try:
        yield from lines(response, MAX_LINE)
    except AnswerError as e:
        raise Unreachable(f"{m.name}'s log: {e}") from None


def long_line(m: Member, count: int) -> str:
    """A note for *count* lines left out as too long."""
    many = "a log line" if count == 1 else f"{count} log lines"
    return f"{m.name}: left out {many} longer than {MAX_LINE:,} bytes"


class NodeFollower(threading.Thread):
    """Follows one node: puts its new lines on *out*, asks again when the connection ends
    (`RETRY`), resuming with since= where it stopped; stops for good on a refusal."""

    def __init__(
        self,
        m: Member,
        first: dict[str, str],
        tokens: Tokens,
        out: queue.Queue[Line | tuple[str, str | None]],
        stop: threading.Event,
        path: str = PATH,
    ):
        super().__init__(name=f"logs-{m.name}", daemon=True)
        self.path = path
        self.m = m
        self.first = first
        self.tokens = tokens
        self.out = out
        self.stop = stop
        self.resume = Resume()

    def params(self) -> dict[str, str]:
        if self.resume.last is None:
            return dict(self.first)
        return {"since": self.resume.last, "follow": "1"}

    def run(self) -> None:
        failures = 0
        lost = False
        while not self.stop.is_set():
            try:
                with nodeapi.open_stream(
                    self.m,
                    self.path,
                    self.params(),
                    self.tokens,
                    read_timeout=READ_TIMEOUT,
                    deadline=READ_TIMEOUT,
                    idle=READ_TIMEOUT,
                ) as response:
                    if lost:
                        self.out.put(("note", f"{self.m.name}: reading its log again"))
                    lost, failures = False, 0
                    for raw in lines(response, MAX_LINE):
                        if isinstance(raw, LongLine):
                            self.out.put(("note", long_line(self.m, 1)))
                            continue
                        line = make_line(self.m.name, raw.decode("utf-8", errors="replace"))
                        if line is not None and self.resume.take(line):
                            self.out.put(line)
                        if self.stop.is_set():
                            return
                why = "the connection ended"
            except Unreachable as e:
                why = str(e)
            except CliError as e:
                self.out.put(("fatal", f"{e}"))
                return
            except (OSError, AnswerError) as e:  # silent too long, or the connection broke mid-answer
                why = f"the connection broke: {e}"
            if not lost:
                self.out.put(("note", f"{self.m.name}: {why}; asking again until it answers"))
                lost = True
            self.stop.wait(RETRY[min(failures, len(RETRY) - 1)])
            failures += 1


# -- the command -----------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    try:
        return show(args)
    except CliError as e:
        note(str(e))
        return 1
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:
        # the reader went away (| head): stop quietly, and keep Python from complaining at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


@dataclass
class Asked:
    """What a command that reads the members' logs was asked (`asked`): the config, the
    group's members, the members to read (``--node``, else all) and their entries, the
    time to read from (``--since``) and the API tokens."""

    config: Config
    members: list[str]
    nodes: list[str]
    targets: list[Member]
    since: str | None
    tokens: Tokens


def asked(args: argparse.Namespace) -> Asked:
    """The members and time *args* name, checked (a name not a member's, or a time not
    one, is a `CliError` saying so)."""
    config = load_config(args.config)
    members = [m.name for m in config.sync_group.members]
    unknown = [n for n in args.nodes if n not in members]
    if unknown:
        raise CliError(
            f"not a member of sync group {config.sync_group.name!r}: {', '.join(unknown)} "
            f"(members: {', '.join(members)})"
        )
    nodes = list(dict.fromkeys(args.nodes)) or members
    try:
        since = log_time(parse_since(args.since, datetime.now().astimezone())) if args.since else None
    except ValueError as e:
        raise CliError(str(e)) from None
    return Asked(config, members, nodes, [config.member(n) for n in nodes], since, Tokens.from_args(config, args))


def read_every(
    targets: list[Member], params: dict[str, str], tokens: Tokens, printer: Printer, path: str, command: str
) -> int:
    """Read *path* with *params* from every target at once, print the lines merged in time
    order, and note what was left out and who could not be read (1 if anyone)."""

    def ask(m: Member) -> Read | str:
        try:
            return read_all(m, params, tokens, path)
        except CliError as e:
            return str(e)

    with ThreadPoolExecutor(max_workers=min(8, len(targets))) as pool:
        answers = list(pool.map(ask, targets))
    failed = [a for a in answers if isinstance(a, str)]
    printer.write(merge(a.lines for a in answers if not isinstance(a, str)))
    for m, answer in zip(targets, answers, strict=True):
        if not isinstance(answer, str) and answer.left_out:
            note(long_line(m, answer.left_out), command)
    for problem in failed:
        note(problem, command)
    return 1 if failed else 0


def show(args: argparse.Namespace) -> int:
    a = asked(args)
    count = args.lines if args.lines is not None else (None if a.since is not None else DEFAULT_LINES)
    printer = Printer(a.nodes, sys.stdout, use_color(args.no_color, sys.stdout), a.members, raw=args.json)
    if args.follow:
        return follow(a.targets, params_for(a.since, count, True), a.tokens, printer)
    return read_every(a.targets, params_for(a.since, count, False), a.tokens, printer, PATH, "logs")


def follow(
    targets: list[Member],
    first: dict[str, str],
    tokens: Tokens,
    printer: Printer,
    path: str = PATH,
    command: str = "logs",
) -> int:
    """Follow every target until Ctrl-C (0), or until every one of them refused (1); the
    log at *path* (notes under *command*'s name)."""
    # Ctrl-C stops following, even when started with SIGINT ignored (a background job)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    inbox: queue.Queue[Line | tuple[str, str | None]] = queue.Queue(MAX_WAITING)
    stop = threading.Event()
    followers = [NodeFollower(m, first, tokens, inbox, stop, path) for m in targets]
    for f in followers:
        f.start()
    holder = Holder()
    refused = 0
    try:
        while refused < len(followers):
            wait = holder.next_due()
            timeout = 0.2 if wait is None else max(0.0, wait + holder.hold - time.monotonic())
            items = []
            try:
                items.append(inbox.get(timeout=timeout))
                while True:  # take everything already there before choosing what is due
                    items.append(inbox.get_nowait())
            except queue.Empty:
                pass
            now = time.monotonic()
            for item in items:
                if isinstance(item, Line):
                    holder.add(item, now)
                    continue
                kind, text = item
                if kind == "fatal":
                    refused += 1
                if text:
                    note(text, command)
            printer.write(holder.due(now))
        printer.write(holder.due(time.monotonic(), everything=True))
        return 1
    finally:
        stop.set()
