"""Reading a query log file: its records, and one line each for an operator.

    python -m gtmcluster.querylog.read FILE [FILE ...]

prints, per record: the query's time (UTC), the client's address and port, the transport,
the question, the response's rcode and answer records, and the extra field (which wide IP
decided, and how) as written: what BIND's ``dnstap-read`` does not show. A file that is
being written (no STOP frame yet) is read up to its last whole record.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import sys
from collections.abc import Iterator
from pathlib import Path

import dns.exception
import dns.message
import dns.rcode
import dns.rdatatype

from gtmcluster.querylog import dnstap


def records(data: bytes) -> Iterator[dnstap.Record]:
    """The records of a query log file's bytes, in order (a file still being written is read
    up to its last whole frame). Raises dnstap.FrameError or DecodeError when malformed."""
    try:
        frames = dnstap.read_frames(data)
    except dnstap.FrameError:
        frames = dnstap.read_frames(_whole(data))
    if frames.content_type != dnstap.CONTENT_TYPE:
        raise dnstap.FrameError(f"content type {frames.content_type!r}, not {dnstap.CONTENT_TYPE.decode()}")
    for payload in frames.records:
        yield dnstap.decode(payload)


def _whole(data: bytes) -> bytes:
    """*data* up to the end of its last whole frame."""
    at = 0
    end = 0
    while at + 4 <= len(data):
        length = int.from_bytes(data[at : at + 4], "big")
        if length == 0:  # a control frame
            if at + 8 > len(data):
                break
            length = 4 + int.from_bytes(data[at + 4 : at + 8], "big")
        if at + 4 + length > len(data):
            break
        at += 4 + length
        end = at
    return data[:end]


def describe(record: dnstap.Record) -> str:
    """One line for *record*."""
    when = datetime.datetime.fromtimestamp(record.query_time[0], datetime.UTC)
    stamp = when.strftime("%Y-%m-%dT%H:%M:%S") + f".{record.query_time[1] // 1_000_000:03d}Z"
    client = ipaddress.ip_address(record.query_address) if record.query_address else "?"
    transport = {dnstap.UDP: "UDP", dnstap.TCP: "TCP"}.get(record.protocol, str(record.protocol))
    question = _question(record.query_message)
    if record.response_message is None:
        outcome = "no response"
    else:
        try:
            response = dns.message.from_wire(record.response_message)
            answers = [f"{rr}" for rrset in response.answer for rr in rrset]
            outcome = dns.rcode.to_text(response.rcode()) + (" " + ",".join(answers) if answers else "")
        except dns.exception.DNSException:
            outcome = "a malformed response"
    extra = f" [{record.extra.decode('ascii', 'replace')}]" if record.extra else ""
    return f"{stamp} {client}:{record.query_port} {transport} {question} {outcome}{extra}"


def _question(wire: bytes) -> str:
    try:
        query = dns.message.from_wire(wire)
    except dns.exception.DNSException:
        return "(a malformed query)"
    if not query.question:
        return "(no question)"
    q = query.question[0]
    return f"{q.name} {dns.rdatatype.to_text(q.rdtype)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print the records of query log files (dnstap).")
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args(argv)
    for path in args.files:
        try:
            for record in records(path.read_bytes()):
                print(describe(record))
        except (OSError, ValueError) as e:
            print(f"{path}: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
