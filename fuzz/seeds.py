"""Write the seed corpus (``fuzz/corpus/<target>/``) from real messages: ``python -m fuzz.seeds``.

The seeds are checked in; this says where each comes from and makes them again after a
format change. Queries are built as dig and resolvers send them (EDNS, DO, cookies, client
subnets), configs are the sample's and the tests', peer messages are what `sync` encodes.
"""

from __future__ import annotations

import codecs
import gzip
import hashlib
import struct
from pathlib import Path
from typing import Any

import yaml
from twisted.protocols import amp

from gtmcluster.state.record import Record, Version
from gtmcluster.sync import codec, commands
from tests.support import configs

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"


def query(
    name: str,
    qtype: int = 1,
    *,
    qid: int = 0x1234,
    flags: int = 0x0100,
    edns: bool = False,
    do: bool = False,
    payload: int = 1232,
    version: int = 0,
    options: bytes = b"",
    qdcount: int = 1,
    qclass: int = 1,
) -> bytes:
    use_edns = edns or do or bool(options)
    wire_name = b"".join(bytes([len(label)]) + label.encode() for label in name.split(".") if label) + b"\0"
    out = struct.pack("!HHHHHH", qid, flags, qdcount, 0, 0, 1 if use_edns else 0) + wire_name
    out += struct.pack("!HH", qtype, qclass)
    if use_edns:
        ttl = (version << 16) | (0x8000 if do else 0)
        out += b"\0" + struct.pack("!HHIH", 41, payload, ttl, len(options)) + options
    return out


def ecs(family: int, source: int, address: bytes, scope: int = 0) -> bytes:
    body = struct.pack("!HBB", family, source, scope) + address
    return struct.pack("!HH", 8, len(body)) + body


COOKIE = struct.pack("!HH", 10, 8) + bytes.fromhex("24a4c6b1e8a0c0e9")


def queries(names: list[str]) -> list[bytes]:
    """Queries of every shape for *names*: what dig, resolvers and broken clients send."""
    out = []
    for name in names:
        out += [
            query(name),
            query(name, 28, edns=True, do=True, payload=4096),
            query(name, 1, options=COOKIE, payload=1232),
            query(name, 1, options=ecs(1, 24, bytes([198, 51, 100]))),
            query(name, 28, options=COOKIE + ecs(2, 56, bytes.fromhex("20010db8aaaa00"))),
            query(name, 16, options=ecs(1, 0, b"")),
            query(name, 255, edns=True, payload=512),
        ]
    first = names[0]
    out += [
        query(first, flags=0x2800),  # NOTIFY (opcode 5)
        query(first, flags=0x8100),  # a response
        query(first, qdcount=2),  # the count says two questions
        query(first, 252),  # AXFR
        query(first, 1, edns=True, version=1),  # BADVERS
        query(first, 1, options=ecs(1, 24, bytes([198, 51, 100]), scope=24)),  # scope set in a query
        query(first, 1, qclass=3),  # CHAOS
        query(first)[:-3],  # cut short
        query(first) + query(first)[:12],  # trailing bytes
        b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\xc0\x0c\x00\x01\x00\x01",  # a pointer loop
    ]
    return out


def box(command: type[amp.Command], ask: bytes | None, **arguments: Any) -> bytes:
    out = command.makeArguments(arguments, None)
    out[amp.COMMAND] = command.commandName
    if ask is not None:
        out[amp.ASK] = ask
    return bytes(out.serialize())


def answer(tag: bytes, **values: bytes) -> bytes:
    out = amp.AmpBox({k.encode(): v for k, v in values.items()})
    out[amp.ANSWER] = tag
    return bytes(out.serialize())


def records() -> list[Record]:
    path = {"rtt": 12000, "last_rtt": 11800, "hops": 0, "completion": 10000, "protocol": "dns_dot"}
    path.update({"failures": 0, "window": "1", "by": "gtm-b", "at": 1000.0})
    return [
        Record("path/198.51.100.53/DC2", path, Version(999_000_000, 0, "gtm-b"), 2419200.0, 999_990.0),
        Record("obs/vs/vs-cnc/gtm-b", {"up": False, "reason": "refused"}, Version(999_000_001, 0, "gtm-b"), 90.0, 0),
        Record("admin/vs/vs-tel", {"state": "disabled"}, Version(999_000_002, 3, "gtm-b"), None, 0),
        Record(
            "persist/www.example.test/1/198.51.100.0/24",
            {"pool": "p", "members": ["vs1"]},
            Version(999_000_003, 0, "gtm-c"),
            3600,
            0,
        ),
        Record("probe/198.51.100.53", None, Version(999_000_004, 0, "gtm-b"), 3600.0, 999_999.0),
    ]


def peer_decode() -> list[bytes]:
    now = 1_000_000.0
    (batch, _), *_ = codec.batches(records(), now)
    return [
        b"\0" + batch,
        b"\1" + b'["path/198.51.100.53/DC2","admin/vs/vs-tel"]',
        b"\2" + b'[[0,""],[17,"k/3"],[1023,""]]',
        b"\3" + b'{"gtm-a":[3,"0f1e2d3c4b5a6978"],"gtm-b":[120,"00000000000000ff"]}',
        b"\4" + b'[["k/1",999000000,0,"gtm-b"],["k/2",999000001,5,"gtm-b"]]',
        b"\5" + b'[[4,"k/9"]]',
        b"\6" + b'["k/10","k/11"]',
        # JSON escapes
        b"\0" + b'[["admin/vs/caf\\u00e9",{"state":"drain","by":"\\u00e9"},999000000,0,"gtm-b",60,1.5]]',
    ]


def peer_stream() -> list[bytes]:
    now = 1_000_000.0
    (batch, _), *_ = codec.batches(records(), now)
    hello = box(
        commands.Hello,
        b"1",
        node="gtm-b",
        group="g",
        datacenter="DC2",
        version=1,
        min_version=1,
        config_digest="d",
    )
    established = [
        box(commands.Publish, b"1", records=batch, bulk=False),
        box(commands.Publish, b"2", records=batch, bulk=True) + box(commands.Changed, b"3"),
        box(commands.Summary, b"1", summary=b'{"gtm-b":[5,"00000000000000aa"]}'),
        box(commands.Buckets, b"1", origin="gtm-a"),
        box(commands.Listing, b"1", origin="gtm-a", buckets=b'[[0,""],[1,""]]'),
        box(commands.Pull, b"1", keys=b'["k/0","k/1"]'),
        box(commands.SendAll, b"1", origin="gtm-a"),
        box(commands.Heartbeat, None, connected="gtm-a,gtm-c", digest="3-00aa"),
        answer(b"1", summary=b'{"gtm-b":[5,"00000000000000aa"],"gtm-a":[3,"0000000000000001"]}'),
        answer(b"1", summary=b"{}") + box(commands.Heartbeat, None),
        amp.AmpBox({b"_error": b"1", b"_error_code": b"UNKNOWN", b"_error_description": b"no"}).serialize(),
    ]
    # first byte: odd = already established; second: the size of each read, less one
    out = [b"\0\xff" + hello, b"\0\x07" + hello + box(commands.Heartbeat, b"2")]
    out += [b"\1\xff" + s for s in established]
    out += [b"\1\x00" + established[0][:40], b"\1\x10" + established[-3]]
    return out


def configs_seeds() -> list[bytes]:
    out = [
        (ROOT / "etc" / "cluster.yaml").read_bytes(),
        (ROOT / "etc" / "two-datacenters.yaml").read_bytes(),
        (ROOT / "fuzz" / "fixtures" / "dns.yaml").read_bytes(),
    ]
    base = configs.base()
    base["zones"][0]["file"] = "example.test.zone"
    out.append(yaml.safe_dump(base, sort_keys=False).encode())
    broken = configs.base()
    broken["virtual_servers"]["vs2"]["port"] = 70000
    broken["pools"]["p"]["load_balancing"]["preferred"] = "topolgy"
    broken["wideips"]["gslb.example.test"]["pools"] = ["pp"]
    broken["zones"][0]["file"] = "missing.zone"
    out.append(yaml.safe_dump(broken, sort_keys=False).encode())
    out.append(b"a: &x [1, 2]\nb: *x\nc: {<<: {d: 1}, d: 2}\nsync_group: [\n")
    return out


def _chunked(body: bytes, size: int) -> bytes:
    parts = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def load_body() -> list[bytes]:
    """Replies of load sources: the bodies captured from Debian's haproxy and nginx
    (tests/support/loadbodies), plain and chunked as haproxy sends them; the first byte
    picks the source (`fuzz.load_body.SOURCES`)."""
    bodies = ROOT / "tests" / "support" / "loadbodies"
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\n"
    chunks = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    stats = (bodies / "haproxy-2.6-stats.csv").read_bytes().replace(b"\na,FRONTEND", b"\nweb,FRONTEND")
    prom = (
        b'# TYPE conns gauge\nconns{proxy="web"} 3\nconns{proxy="x"} 9\nlimit 50\n'
        b"# TYPE bytes counter\nbytes_total 1234\n# TYPE packets counter\npackets 77\n"
    )
    nginx = (bodies / "nginx-1.22-stub-status.txt").read_bytes()
    return [
        b"\0" + head + prom,
        b"\0" + chunks + _chunked(prom, 16),
        b"\0" + head + b'conns{proxy="web"} NaN\n',
        b"\1" + chunks + _chunked(stats, 700),
        b"\1" + head + stats,
        b"\1" + b"HTTP/1.0 503 Service Unavailable\r\n\r\n",
        b"\2" + head + nginx,
        b"\2" + b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n" + nginx,
        b"\3" + head + b'{"connections": 4, "kbps": 12.5, "capacity": 10}',
        b"\3" + head + b"[1,2]",
    ]


def http_stream() -> list[bytes]:
    """What servers send the node's HTTP clients (`fuzz.http_stream`): byte 0 picks the
    reader (0-3 the load monitors of `load_body`, 4 and 5 the counters readers, Prometheus
    and HAProxy), byte 1 the split points, byte 2 the cap (64 + 64 x byte 2): well-formed
    replies framed every way, and the hostile ones of tests/support/hostilehttp.py, cut
    to a few kilobytes (endless bodies and headers, a 10**12 Content-Length, a 2**48
    chunk, an error with a body)."""
    ok = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n"
    prom = b'# TYPE conns gauge\nconns{proxy="web"} 3\nlimit 50\n# TYPE bytes counter\nbytes_total 1234\n'
    counters = b"# TYPE rx_bytes_total counter\nrx_bytes_total 1000\n# TYPE tx_bytes_total counter\ntx_bytes_total 9\n"
    stats = (ROOT / "tests" / "support" / "loadbodies" / "haproxy-2.6-stats.csv").read_bytes()
    stats = stats.replace(b"\na,FRONTEND", b"\nweb,FRONTEND")
    json_body = b'{"connections": 4, "kbps": 12.5, "capacity": 10}'

    def framed(body: bytes) -> list[bytes]:
        return [
            ok + b"\r\n" + body,
            ok + b"content-length: %d\r\n\r\n" % len(body) + body,
            ok + b"transfer-encoding: chunked\r\n\r\n" + _chunked(body, 40),
        ]

    endless = [
        b"HTTP/1.1 500 Internal Server Error\r\n\r\n" + b"e" * 4000,
        ok + b"content-length: %d\r\n\r\n" % 10**12 + b"#" * 4000,
        ok + b"".join(b"X-Pad: %d\r\n" % i for i in range(300)),
        ok + b"transfer-encoding: chunked\r\n\r\nffffffffffff\r\n" + b"#" * 4000,
        ok + b"content-length: 1" + b"0" * 5000 + b"\r\n\r\n",
        ok + b"content-length: 4096\r\n\r\n" + b"#" * 10,
    ]
    seeds: list[bytes] = []
    for reader, body in ((0, prom), (1, stats), (3, json_body), (4, counters), (5, stats)):
        for i, reply in enumerate(framed(body)):
            seeds.append(bytes([reader, i * 37, 255 if reader in (1, 5) else 4]) + reply)
    for i, reply in enumerate(endless):
        seeds.append(bytes([(0, 4, 5)[i % 3], i, 16]) + reply)
    seeds.append(
        b"\2\7\1"
        + ok
        + b"\r\n"
        + (ROOT / "tests" / "support" / "loadbodies" / "nginx-1.22-stub-status.txt").read_bytes()
    )
    return seeds


def _framed(*messages: bytes) -> bytes:
    return b"".join(struct.pack("!H", len(m)) + m for m in messages)


def _reads(size: int, stream: bytes, controls: bytes, then: bytes = b"") -> bytes:
    """*stream* cut into reads of *size* bytes at most (the largest that divides it: the
    target reads whole reads), each after a control byte (`fuzz.xfr_stream`), taken from
    *controls* in turn; *then*, control bytes with no read after them."""
    size = max(n for n in range(1, min(size, len(stream)) + 1) if len(stream) % n == 0)
    out = bytes([size - 1])
    for i in range(0, len(stream), size):
        out += bytes([controls[(i // size) % len(controls)]]) + stream[i : i + size]
    return out + bytes(c | 16 for c in then)


def ixfr(serial: int, qid: int = 0x4321) -> bytes:
    """An IXFR request for example.test from *serial* (the SOA in its authority section)."""
    soa = b"\xc0\x0c" + struct.pack("!HHIH", 6, 1, 0, 22) + b"\x00\x00" + struct.pack("!IIIII", serial, 0, 0, 0, 0)
    head = struct.pack("!HHHHHH", qid, 0, 1, 0, 1, 0)
    return head + b"\x07example\x04test\x00" + struct.pack("!HH", 251, 1) + soa


def xfr_stream() -> list[bytes]:
    """Zone transfer requests on a TCP connection, as secondaries (and careless or hostile
    clients) send them; the first byte the read size, then reads after control bytes:
    take (1), tick (2), turn (4), close (8)."""
    axfr = query("example.test", 252, flags=0)
    axfr_edns = query("example.test", 252, qid=0x1111, flags=0, edns=True)
    www = query("www.example.test", 1)
    # (the client reading and the clock ticking: encoding turns, a transfer taken)
    drain = b"\x03" * 24
    return [
        _reads(256, _framed(axfr), b"\x01", drain),  # one AXFR, read as it comes
        _reads(64, _framed(axfr, axfr_edns, axfr, axfr_edns), b"\x00\x00\x01\x03", drain * 4),  # pipelined
        _reads(32, _framed(axfr) * 4, b"\x02", b"\x02" * 40),  # pipelined, never read: the stall deadline
        _reads(128, _framed(ixfr(1), ixfr(2), ixfr(0)), b"\x01\x03", drain),  # a difference, up to date, whole
        _reads(1, _framed(axfr), b"\x05", drain),  # a byte at a time
        _reads(200, _framed(*[www] * 40, axfr, www), b"\x00\x04\x05", b"\x05" * 4 + drain),  # a burst
        _reads(64, _framed(query("www.example.test", 252, flags=0), query("example.test", 252, qclass=3)), b"\x01"),
        _reads(16, _framed(axfr)[:20], b"\x01\x02", b"\x02" * 6),  # cut short: the message timeout
        _reads(16, _framed(www) + b"\x00\x05hello", b"\x01"),  # a runt: the connection closed
        _reads(64, _framed(axfr, axfr), b"\x00", b"\x03\x03\x08"),  # closed while the transfer is made
    ]


def bundle_decode() -> list[bytes]:
    """Bundles as members send them (the test config and its zone, a zone with an
    ``$INCLUDE``, a quoted ``"zones":`` key), one with a file its config does not name,
    and files given by name (odd first byte: `fuzz.bundle_decode`) with names that leave
    the folder or clash."""
    from gtmcluster.groupconfig.bundle import Bundle, encode

    config = yaml.safe_dump(configs.base(), sort_keys=False).encode()
    zone = configs.ZONE.encode()
    included = zone + b"$INCLUDE hosts/lab.inc lab.example.test.\n"
    quoted = config.replace(b"\nzones:", b'\n"zones":')
    made = [
        {"cluster.yaml": config, "example.test.zone": zone},
        {"cluster.yaml": config, "example.test.zone": included, "hosts/lab.inc": b"www IN A 192.0.2.80\n"},
        {"cluster.yaml": quoted, "example.test.zone": zone},
        {"cluster.yaml": config, "example.test.zone": zone, "keys/ca.pem": b"-----BEGIN CERTIFICATE-----\n"},
        {"cluster.yaml": b"api: {token: inline-secret-0123456789}\nx: 1\n"},
    ]
    out = [b"\0" + encode(Bundle("cluster.yaml", files, 3, 2, "n1", 1000.0)) for files in made]
    out += [
        b"\1cluster.yaml\0zones: [{origin: a.test, file: a.zone}]\n\0a.zone\0$INCLUDE b.inc\n\0b.inc\0\0",
        b"\1cluster.yaml\0x: 1\n\0../escape\0x\0",
        b"\1cluster.yaml\0x: 1\n\0/etc/escape\0x\0",
        b"\1cluster.yaml\0x: 1\n\0a\0file\0a/b\0under a file\0",
        b"\1cluster.yaml\0x: 1\n\0a//b/./c\0x\0.partial-x\0y\0",
        b'\0{"format": 1, "files": {}}',
        b"\0[[[[[[[[[[[[[[[[[[[[",
    ]
    return out


def zone_include() -> list[bytes]:
    """Zone files with every kind of ``$INCLUDE`` (first byte even: shared; odd: a node's
    own, ``zone/opened`` opened), and the files they include (`fuzz.zone_include`)."""
    zone = configs.ZONE.encode()
    return [
        b"\0" + zone + b"$INCLUDE hosts.inc\n\0hosts.inc\0lab IN A 192.0.2.71\n",
        b"\0" + zone + b"$INCLUDE sub/a.inc sub.example.test.\n\0sub/a.inc\0$INCLUDE b.inc\n\0sub/b.inc\0x A 1.2.3.4\n",
        b"\0" + zone + b"$INCLUDE notes.inc\n$INCLUDE link.inc\n$INCLUDE ../secret.env\n",
        b"\1" + zone + b"$INCLUDE ../secret.env\n$INCLUDE opened/x.inc\n\0opened/x.inc\0y IN A 192.0.2.9\n",
        b"\0" + zone + b"$INCLUDE a.inc\n\0a.inc\0$INCLUDE b.inc\n\0b.inc\0$INCLUDE a.inc\n",
        b"\0" + zone + b"$INCLUDE f.inc\n\0f.inc\0" + b"$INCLUDE f.inc\n" * 4,
        b"\0" + zone + b"$include z.zone\n$INCLUDE\n$INCLUDE a b c\n$GENERATE 1-2 x A 1.2.3.$\n",
    ]


#: a bigip.conf with what is not GTM around GTM objects: iRules (Tcl with braces and quotes in
#: strings and comments), a virtual server, sys settings (written from F5's tmsh syntax)
BIGIP_CONF = b"""#TMSH-VERSION: 16.1.3
ltm rule /Common/redirect_https {
when HTTP_REQUEST {
    # a lone quote " and an open brace { in a comment
    if { [HTTP::host] ne "" } {
        HTTP::redirect "https://[HTTP::host][HTTP::uri]"
    }
}
}
ltm virtual /Common/vs_web {
    destination /Common/192.0.2.10:80
    ip-protocol tcp
    rules { /Common/redirect_https }
}
gtm datacenter /Common/DC1 { }
gtm rule /Common/gslb_log {
when DNS_REQUEST { log local0. "q [DNS::question name]" }
}
gtm server /Common/lb1 {
    datacenter /Common/DC1
    monitor /Common/bigip
    virtual-servers {
        /Common/vs_web {
            destination 192.0.2.10:80
        }
    }
}
gtm pool a /Common/p_web {
    fallback-ip 192.0.2.99
    members {
        /Common/lb1:/Common/vs_web {
            member-order 0
        }
    }
}
gtm wideip a /Common/www.example.com {
    pools {
        /Common/p_web {
            order 0
        }
    }
    rules { /Common/gslb_log }
}
sys global-settings {
    hostname bigip1.example.com
}
"""

#: tmsh one-line listings of what the multi-line seeds spell over several lines: monitors with
#: ``none``, ``reverse``, status-line ``recv``; a fallback-only pool; negated region members
ONE_LINE = b"".join(
    line + b"\n"
    for line in (
        b"gtm datacenter /Common/DC1 { }",
        b'gtm monitor http /Common/m_http { defaults-from /Common/http destination *:* interval 10 recv "HTTP/1." '
        b'send "HEAD / HTTP/1.0\\r\\n\\r\\n" timeout 31 }',
        b"gtm monitor tcp /Common/m_tcp { defaults-from /Common/tcp destination *:* "
        b"recv none reverse enabled send none }",
        b"gtm region /Common/outside { region-members { subnet 0.0.0.0/0 { } not subnet 10.0.0.0/8 { } } }",
        b"gtm server /Common/lb1 { datacenter /Common/DC1 monitor /Common/m_http and /Common/m_tcp "
        b"product generic-host virtual-servers { /Common/vs { destination 192.0.2.1:80 } } }",
        b"gtm pool a /Common/p_fb { fallback-ip 10.200.30.43 fallback-mode fallback-ip "
        b"load-balancing-mode fallback-ip }",
        b"gtm pool a /Common/p { members { /Common/lb1:/Common/vs { member-order 0 ratio 2 } } "
        b"monitor min 1 of { /Common/m_http /Common/m_tcp } ttl 60 }",
        b"gtm topology ldns: region /Common/outside server: pool /Common/p { order 1 score 100 }",
        b"gtm topology ldns: not subnet 10.0.0.0/8 server: datacenter /Common/DC1 { score 10 }",
        b"gtm wideip a /Common/www.example.com { aliases { alt.example.com } last-resort-pool a /Common/p_fb "
        b"pool-lb-mode topology pools { /Common/p { order 0 } /Common/p_fb { order 1 } } }",
    )
)


def f5_import() -> list[bytes]:
    """F5 configurations as operators bring them (`fuzz.f5_import`; the first byte picks the
    options): the importer's samples and corpus (tmsh of BIG-IP 11 to 17, one-line listings, a
    whole bigip.conf, 3-DNS wideip.conf), then made shapes: a bigip.conf with iRules, one-line
    monitors, regions and fallback pools, CRLF with a byte-order mark, UTF-16 and UTF-32, two
    files (tmsh and 3-DNS), words cut by no-break spaces, a gzip file, a NUL byte."""
    data = ROOT / "tests" / "data" / "f5"
    files = sorted(data.glob("*.conf")) + sorted((data / "corpus").glob("*.conf"))
    out = [bytes([i % 4]) + f.read_bytes() for i, f in enumerate(files)]
    ucs_gtm = (data / "corpus" / "shape-ucs-gtm.conf").read_bytes()
    wideip = (data / "wideip.conf").read_bytes()
    out += [
        b"\x02" + BIGIP_CONF,
        b"\x00" + ONE_LINE,
        b"\x05" + codecs.BOM_UTF8 + (data / "corpus" / "names-as3.conf").read_bytes().replace(b"\n", b"\r\n"),
        b"\x00" + codecs.BOM_UTF16_LE + (data / "corpus" / "regions-split-dns.conf").read_text().encode("utf-16-le"),
        b"\x01" + codecs.BOM_UTF32_BE + ONE_LINE.decode().encode("utf-32-be"),
        b"\x0c" + ucs_gtm + b"\n#--next-file--\n" + wideip,
        b"\x04" + wideip.replace(b"\n", b"\r\n"),
        b"\x00" + "gtm\xa0datacenter /Common/DC1\u2003{\xa0}\ngtm wideip a\u3000/Common/w.example.com { }\n".encode(),
        b"\x00" + gzip.compress(BIGIP_CONF, mtime=0),
        b"\x00" + ONE_LINE[:200] + b"\x00" + ONE_LINE[200:],
    ]
    return out


def write(target: str, seeds: list[bytes]) -> None:
    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    for seed in seeds:
        (folder / hashlib.sha1(seed).hexdigest()).write_bytes(seed)  # named by content, as libFuzzer names its inputs
    print(f"{target}: {len(seeds)} seeds")


def main() -> None:
    dns_names = ["www.example.test", "gslb.example.test", "GSLB.Example.TEST"]
    write("dns_request", queries(dns_names))
    response_names = [
        "gslb.example.test",
        "sticky.example.test",
        "many.example.test",
        "big.example.test",
        "x.deep.example.test",
        "example.test",
        "to-gslb.example.test",
        "x.wild.example.test",
        "nothere.example.test",
        "other.test",
    ]
    seeds = [bytes([i % 6]) + q for i, q in enumerate(queries(response_names))]
    seeds.append(b"\x00" + query("example.test", 2, edns=True, payload=512))
    write("dns_response", seeds)
    write("config_load", configs_seeds())
    write("peer_decode", peer_decode())
    write("peer_stream", peer_stream())
    write("load_body", load_body())
    write("http_stream", http_stream())
    write("xfr_stream", xfr_stream())
    write("bundle_decode", bundle_decode())
    write("zone_include", zone_include())
    write("f5_import", f5_import())


if __name__ == "__main__":
    main()
