"""Identities and roles on a real node (``twistd gtm``, HTTPS API, ``api.users_file`` and an
operators' CA ``api.tls.client_ca``), asked by the real `gtmcluster` command.

The users file is made with `gtmcluster users add` as an operator would: a viewer and an
operator with tokens, an admin by client certificate (``certs init`` / ``certs issue
--client`` in a CA of the operators' own). The config's single token stays an admin.

- the viewer's token reads (`status`) but may not change admin state: exit 1, the node's
  403 naming the operator role; the operator's token disables and enables a data center;
- the admin's certificate (``--cert``) reads and changes, with no token sent; a client
  certificate of the group CA (not the operators') proves no identity: 401 saying why;
- a wrong token is 403; unknown tokens past the bound are 429 before any hashing;
- a user added to the file is taken on SIGHUP, and one removed is refused after the next.
"""

from __future__ import annotations

import signal
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.process.test_api_https import gtmcluster, https_config
from tests.support import apiclient, configs, poll
from tests.support.nodeproc import RunningNode, loopback_address, running_node

pytestmark = [pytest.mark.process]


@dataclass
class Group:
    node: RunningNode
    directory: Path
    config: Path
    tokens: dict[str, Path]

    def cli(self, *args: str, token: str | None = None, cert: str | None = None) -> tuple[int, str]:
        given = ["--token-file", str(self.tokens[token])] if token else []
        if cert is not None:
            given += ["--cert", str(self.directory / cert)]
        ran = gtmcluster(*args, "--config", str(self.config), *given)
        return ran.returncode, ran.stdout + ran.stderr

    def ask(self, path: str, token: str, method: str = "GET") -> int:
        context = ssl.create_default_context(cafile=str(self.directory / "certs" / "ca.pem"))
        return apiclient.call((self.node.address, 8053), path, method, token, tls=context, name="n1")[0]


def add_user(directory: Path, name: str, role: str) -> Path:
    ran = gtmcluster("users", "add", name, "--role", role, "--file", "users.yaml", cwd=directory)
    assert ran.returncode == 0, ran.stderr
    token = ran.stdout.strip()
    assert ran.stdout == token + "\n"
    return configs.write_secret(directory / f"{name}.token", token + "\n")


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Group]:
    directory = tmp_path_factory.mktemp("api-roles")
    for args in (
        ("init", "--dir", "certs"),
        ("issue", "n1", "--dir", "certs"),
        ("issue", "--client", "alice", "--dir", "certs"),
        ("init", "--dir", "ops"),
        ("issue", "--client", "carol", "--dir", "ops"),
    ):
        made = gtmcluster("certs", *args, cwd=directory)
        assert made.returncode == 0, made.stderr
    tokens = {"viewer": add_user(directory, "vera", "viewer"), "operator": add_user(directory, "oscar", "operator")}
    ran = gtmcluster(
        "users", "add", "carol", "--role", "admin", "--file", "users.yaml",
        "--cert-subject", "CN=carol,OU=gtmcluster API client", cwd=directory,
    )  # fmt: skip
    assert ran.returncode == 0 and ran.stdout == "", ran.stderr
    address = loopback_address()
    raw = https_config(address, directory)
    raw["api"] = {
        "token_file": "api-token",
        "token_for_reads": True,
        "users_file": "users.yaml",
        "tls": {"client_ca": "ops/ca.pem"},
    }
    path = configs.write(directory, raw)
    with running_node(path, "n1", address, 5353, directory) as running:
        yield Group(running, directory, path, tokens)


def test_each_identity_does_what_its_role_allows(group: Group) -> None:
    code, out = group.cli("status", token="viewer")
    assert code == 0, out
    code, out = group.cli("disable", "datacenter", "DC2", "--reason", "test", token="viewer")
    assert code == 1 and "this needs the operator role; vera is a viewer" in out, out
    for action in ("disable", "enable"):
        code, out = group.cli(action, "datacenter", "DC2", "--reason", "roles test", token="operator")
        assert code == 0, out
    code, out = group.cli("config", "history", token="operator")
    assert code == 1 and "this needs the admin role; oscar is an operator" in out, out


def test_a_certificate_of_the_operators_ca_is_an_identity(group: Group) -> None:
    carol = "ops/clients/carol.pem"
    code, out = group.cli("status", cert=carol)
    assert code == 0, out
    code, out = group.cli("drain", "datacenter", "DC2", "--reason", "cert", cert=carol)
    assert code == 0, out
    code, out = group.cli("enable", "datacenter", "DC2", cert=carol)
    assert code == 0, out
    # the group CA's client certificate is no identity here: 401 saying why
    code, out = group.cli("status", cert="certs/clients/alice.pem")
    assert code == 1 and "not one of the operators' CA" in out, out


def test_wrong_and_unknown_tokens_are_refused_and_bounded(group: Group) -> None:
    assert group.ask("/api/v1/status", "vera." + "x" * 43) == 403
    codes = [group.ask("/api/v1/status", f"oscar.{i:043d}") for i in range(8)]
    assert 429 in codes and set(codes) <= {403, 429}, codes


def test_the_users_file_is_taken_on_reload(group: Group) -> None:
    token = add_user(group.directory, "nina", "operator").read_text().strip()
    assert group.ask("/api/v1/status", token) == 403  # not yet: the node reads it on reload
    group.node.proc.send_signal(signal.SIGHUP)
    poll.until(lambda: group.ask("/api/v1/status", token) == 200, timeout=20, what="nina's token after SIGHUP")
    ran = gtmcluster("users", "remove", "nina", "--file", "users.yaml", cwd=group.directory)
    assert ran.returncode == 0, ran.stderr
    group.node.proc.send_signal(signal.SIGHUP)
    poll.until(lambda: group.ask("/api/v1/status", token) == 403, timeout=20, what="nina refused after SIGHUP")
