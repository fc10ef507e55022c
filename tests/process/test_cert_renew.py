"""A member's certificate renewed under DNS load, on a real two-member group over real TLS
(peers and HTTPS API): `gtmcluster certs renew n1 --config FILE --reload` writes a new pair
from the group CA and has n1 reload while a thread asks n1 a query every few milliseconds.

No query is lost and every answer is NOERROR; the peer link n1-n2 stays up (the same TLS
connection, connected since before the renewal, still carrying replication: a reload
changes only what new connections are built from, `sync.tls.TLSContexts`, and an open
connection keeps the session and certificate it began with, which n2 still records); a
fresh TLS connection, to the peer port and to the API, is shown the new certificate (its
serial and not-after, read by ``openssl s_client``); n1's status reports the new serial and
its days left, and `gtmcluster status` shows them.
"""

from __future__ import annotations

import datetime
import os
import ssl
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import dns.exception
import dns.message
import dns.query
import dns.rcode
import pytest

from gtmcluster.sync import certs
from tests.support import apiclient, configs
from tests.support.trio import Group, running_group

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("openssl_tool")]

GTMCLUSTER = Path(sys.executable).parent / "gtmcluster"
TOKEN = "a-renewal-token-for-tests-0123456789"
#: the load's pace: a query every few milliseconds, each waited for up to `WAIT` s
PAUSE = 0.003
WAIT = 2.0


class Load:
    """A thread asking *server* for the wide IP, one query at a time, until stopped: every
    query counted by its outcome (an rcode's name, or ``lost`` when no answer came)."""

    def __init__(self, server: tuple[str, int]):
        self.server = server
        self.outcomes: Counter[str] = Counter()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, name="dns load", daemon=True)

    def run(self) -> None:
        query = dns.message.make_query("gslb.example.test", "A")
        while not self.stop.is_set():
            try:
                answer = dns.query.udp(query, self.server[0], port=self.server[1], timeout=WAIT)
            except dns.exception.Timeout:
                self.outcomes["lost"] += 1
            else:
                self.outcomes[dns.rcode.to_text(answer.rcode())] += 1
            self.stop.wait(PAUSE)

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(WAIT + 5)


def gtmcluster(*args: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GTM_API_")}
    command = [str(GTMCLUSTER), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False, env=environ)


def served(group: Group, address: tuple[str, int], node: str, client: str | None = None) -> dict[str, str]:
    """What a fresh TLS connection to *address* is shown, as ``openssl s_client`` and
    ``openssl x509`` tell it: ``serial`` (lower-case hex) and ``notAfter``. *client*: the
    member whose certificate the client shows (the peer port asks for one)."""
    c = group.certs
    who = ["-cert", str(c / f"{client}.pem"), "-key", str(c / f"{client}.key")] if client else []
    shown = subprocess.run(
        ["openssl", "s_client", "-connect", f"{address[0]}:{address[1]}", "-servername", node,
         "-CAfile", str(c / "ca.pem"), "-verify_return_error", *who],
        input=b"", capture_output=True, timeout=20, check=False,
    )  # fmt: skip
    assert b"Verify return code: 0 (ok)" in shown.stdout, shown.stdout.decode() + shown.stderr.decode()
    fields = subprocess.run(
        ["openssl", "x509", "-noout", "-serial", "-enddate"], input=shown.stdout, capture_output=True, check=True
    ).stdout.decode()
    found = dict(line.split("=", 1) for line in fields.splitlines())
    return {"serial": found["serial"].lower().lstrip("0"), "notAfter": found["notAfter"]}


def openssl_date(moment: datetime.datetime) -> str:
    """*moment* as ``openssl x509 -enddate`` writes it: ``Mar 10 05:42:42 2029 GMT``."""
    return f"{moment:%b} {moment.day:2d} {moment:%H:%M:%S %Y} GMT"


def peer(status: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in status["peers"] if p["name"] == name)


def test_a_renewal_under_dns_load_loses_no_query_and_keeps_the_peer_link(tmp_path: Path) -> None:
    def https(config: dict[str, Any]) -> None:
        configs.write_secret(tmp_path / "api-token", TOKEN + "\n")
        config["api"] = {"token_file": "api-token", "tls": True}

    with running_group(tmp_path, 2, customize=https) as group:
        group.wait_converged()
        n1 = group.members["n1"]
        old = certs.load_certificate(group.certs / "n1.pem")
        old_serial = f"{old.serial_number:x}"
        assert served(group, n1.peer, "n1", client="n2")["serial"] == old_serial
        before = group.status("n1")
        assert before["certificates"]["node"]["serial"] == old_serial
        assert before["certificates"]["api"]["serial"] == old_serial
        linked = time.monotonic()

        with Load(n1.dns) as load:
            group.wait_for(lambda: load.outcomes.total() >= 50, 10, "the load to get going")
            ran = gtmcluster("certs", "renew", "n1", "--config", str(group.config_path), "--reload")
            asked_during = load.outcomes.total()
            group.wait_for(lambda: load.outcomes.total() >= asked_during + 50, 10, "the load to go on after")
        assert ran.returncode == 0, ran.stdout + ran.stderr
        new = certs.load_certificate(group.certs / "n1.pem")
        new_serial = f"{new.serial_number:x}"
        assert new_serial != old_serial
        assert ran.stdout.splitlines()[-1] == (
            f"n1 reloaded: new connections get serial {new_serial}; open ones keep the certificate they began with"
        ), ran.stdout
        assert set(load.outcomes) == {"NOERROR"}, load.outcomes  # not one lost, not one failed
        assert load.outcomes["NOERROR"] > 100, load.outcomes

        # the peer link stayed up: the connection from before, which still shows the old certificate
        up_for = time.monotonic() - linked
        statuses = group.wait_converged(["n1", "n2"], timeout=10)
        for node, other in (("n1", "n2"), ("n2", "n1")):
            link = peer(statuses[node], other)
            assert link["connected"] and link["connected_for"] >= up_for - 1.0, link
        assert peer(statuses["n2"], "n1")["certificate"]["serial"] == old_serial
        context = ssl.create_default_context(cafile=str(group.certs / "ca.pem"))
        disable = "/api/v1/virtual-servers/vs3/disable"
        code, body = apiclient.call(n1.api, disable, "POST", TOKEN, tls=context, name="n1")
        assert code == 200, body
        group.wait_for(
            lambda: group.status("n2")["health"]["virtual_servers"]["vs3"]["admin"] == "disabled",
            10,
            "n2 to hear over the same link that n1 disabled vs3",
        )

        # a fresh connection is shown the new certificate, on the peer port and on the API
        end = openssl_date(new.not_valid_after_utc)
        assert served(group, n1.peer, "n1", client="n2") == {"serial": new_serial, "notAfter": end}
        assert served(group, n1.api, "n1") == {"serial": new_serial, "notAfter": end}
        held = group.status("n1")["certificates"]
        assert held["node"]["serial"] == held["api"]["serial"] == new_serial
        assert held["node"]["days_left"] == certs.NODE_DAYS - 1
        assert held["ca"]["serial"] == before["certificates"]["ca"]["serial"]

        shown = gtmcluster("status", "--config", str(group.config_path))
        assert shown.returncode == 0, shown.stdout + shown.stderr
        row = next(line for line in shown.stdout.splitlines() if line.startswith("n1 ") and "days" in line)
        assert row.split()[1:3] == [str(certs.NODE_DAYS - 1), "days"], shown.stdout
