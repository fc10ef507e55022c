"""The users file (``api.users_file``) and its tokens: scrypt hashes made and checked, their
form bounded; the file's problems each naming the file, the key path and what is wrong; a
file others may read refused; what the node remembers of tokens, bounded and forgotten on a
reload; the bound on hash checks per source and in all; ``gtmcluster users``."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from gtmcluster.api.identity import UNKNOWN, Identity, Known, Rate
from gtmcluster.cli.main import main
from gtmcluster.config.load import load
from gtmcluster.config.problems import ConfigError
from gtmcluster.config.users import read_users
from gtmcluster.runtime import tokenhash
from tests.support import configs

HASH = tokenhash.make("alice.0123456789012345678901234567890123456789abc", log_n=10)


def test_a_token_is_kept_as_a_slow_hash_and_checked() -> None:
    token = tokenhash.new_token("alice")
    assert tokenhash.name_of(token) == "alice" and len(token.split(".")[-1]) == tokenhash.SECRET_CHARACTERS
    stored = tokenhash.make(token)
    assert stored.startswith("$scrypt$ln=14,r=8,p=1$") and token not in stored
    parsed = tokenhash.parse(stored)
    assert isinstance(parsed, tokenhash.Hash)
    assert tokenhash.verify(token, parsed) and not tokenhash.verify(token + "x", parsed)
    assert tokenhash.make(token) != stored  # a salt of its own each time
    for bad in ("$scrypt$ln=30,r=8,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA", "$argon2id$v=19$m=65536", "$scrypt$ln=14"):
        assert isinstance(tokenhash.parse(bad), str)
    assert tokenhash.looks_plain(token) and not tokenhash.looks_plain(stored)


@pytest.mark.parametrize(
    ("text", "where", "problem"),
    [
        ("alice: {role: viewer, token_hash: alice.0123456789abcdefghijklmnop}\n", "alice.token_hash", "a plain token"),
        (f'alice: {{role: root, token_hash: "{HASH}"}}\n', "alice.role", "'root' is not one of: viewer"),
        ("alice: {role: viewer, token_hash: $scrypt$nope}\n", "alice.token_hash", "not a token hash of the form"),
        (
            f'alice: {{role: viewer, token_hash: "{HASH}"}}\nalice: {{role: admin, cert_subject: "CN=a"}}\n',
            "alice",
            "duplicate key",
        ),
        (
            'a: {role: viewer, cert_subject: "CN=x,O=Ops"}\nb: {role: admin, cert_subject: "O=Ops,CN=x"}\n',
            "b.cert_subject",
            "the subject of a already",
        ),
        (
            f'a: {{role: viewer, token_hash: "{HASH}"}}\nb: {{role: admin, token_hash: "{HASH}"}}\n',
            "b.token_hash",
            "the same hash as a's",
        ),
        ("a: {role: viewer}\n", "a", "give one of token_hash, cert_subject, cert_san"),
        ('a: {role: viewer, cert_san: "mail:x"}\n', "a.cert_san", "a SAN is KIND:VALUE"),
        ('a: {role: viewer, cert_subject: "not a subject"}\n', "a.cert_subject", "not a subject"),
        (f'api-token: {{role: viewer, token_hash: "{HASH}"}}\n', "api-token", "an identity of the node's own"),
        (f'a: {{role: viewer, token_hash: "{HASH}", colour: red}}\n', "a.colour", "unknown key"),
    ],
)
def test_each_problem_names_the_file_the_key_and_what_is_wrong(
    tmp_path: Path, text: str, where: str, problem: str
) -> None:
    path = configs.write_secret(tmp_path / "users.yaml", text)
    _, problems = read_users(path)
    shown = [str(p) for p in problems]
    assert any(s.startswith(f"{path}: {where}: ") and problem in s for s in shown), shown


def test_the_config_refuses_a_users_file_with_problems_or_that_others_may_read(tmp_path: Path) -> None:
    path = configs.write_secret(tmp_path / "users.yaml", "alice: {role: boss, token_hash: x}\n")
    raw = configs.base()
    raw["api"] = {"users_file": "users.yaml"}
    with pytest.raises(ConfigError) as e:
        load(configs.write(tmp_path, raw))
    assert f"{path}: alice.role: 'boss' is not one of" in str(e.value)
    path.write_text(f'alice: {{role: admin, token_hash: "{HASH}"}}\n')
    path.chmod(0o644)
    with pytest.raises(ConfigError) as e:
        load(configs.write(tmp_path, raw))
    assert "api.users_file: cannot read" in str(e.value) and "others" in str(e.value), str(e.value)
    path.chmod(0o600)
    users = load(configs.write(tmp_path, raw)).api.users
    assert users.by_name["alice"].role == "admin"


def test_known_tokens_are_bounded_and_forgotten_when_the_file_is_read_again(tmp_path: Path) -> None:
    path = configs.write_secret(tmp_path / "users.yaml", f'alice: {{role: admin, token_hash: "{HASH}"}}\n')
    first, _ = read_users(path)
    known = Known(lambda: 0.0)
    known.size = 3
    alice = Identity("alice", "admin", "token")
    assert known.lookup("t0", first) is UNKNOWN
    known.learn("t0", first, alice)
    assert known.lookup("t0", first) == alice and known.lookup("t1", first) is UNKNOWN
    for i in range(1, 5):
        known.learn(f"t{i}", first, None)
    assert known.lookup("t0", first) is UNKNOWN and known.lookup("t4", first) is None  # (the oldest dropped)
    again, _ = read_users(path)
    assert known.lookup("t4", again) is UNKNOWN
    known.learn("late", first, alice)  # checked under the file read before: not learnt
    assert known.lookup("late", again) is UNKNOWN


def test_hash_checks_are_bounded_per_source_and_in_all() -> None:
    now = [0.0]
    known = Known(lambda: now[0])
    allowed = []
    for i in range(40):
        source = f"192.0.2.{i % 10}"
        why = known.may_check(source)
        if why is None:
            known.done()
        allowed.append(why is None)
    assert sum(allowed) == 16  # the burst in all, whatever the sources
    now[0] = 1.0
    later = 0
    for _ in range(10):
        if known.may_check(f"198.51.100.{later}") is None:
            known.done()
            later += 1
    assert later == 8  # a second later: 8 more (8 a second in all)
    rate = Rate(2.0, 4.0, keys=2)
    assert [rate.take("a", 0.0) for _ in range(5)] == [True] * 4 + [False]
    rate.take("b", 0.0)
    rate.take("c", 0.0)  # "a" forgotten (at most 2 sources kept): it starts full again
    assert rate.take("a", 0.0)


def test_users_add_list_remove(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "users.yaml"
    assert main(["users", "add", "alice", "--role", "operator", "--file", str(path)]) == 0
    out = capsys.readouterr().out
    token = out.strip()
    assert out == token + "\n" and tokenhash.name_of(token) == "alice"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and token not in path.read_text()
    assert main(["users", "add", "bob", "--role", "admin", "--file", str(path), "--cert-subject", "CN=bob,O=Ops"]) == 0
    users, problems = read_users(path)
    assert not problems and users.by_name["alice"].role == "operator"
    stored = users.by_name["alice"].token_hash
    assert stored is not None and tokenhash.verify(token, stored)
    capsys.readouterr()
    assert main(["users", "list", "--file", str(path)]) == 0
    listing = capsys.readouterr().out
    assert "alice  operator  token" in listing and "bob    admin     certificate subject CN=bob,O=Ops" in listing
    assert main(["users", "add", "alice", "--role", "admin", "--file", str(path)]) == 1
    assert main(["users", "add", "bad name!", "--role", "admin", "--file", str(path)]) == 1
    assert main(["users", "remove", "alice", "--file", str(path)]) == 0
    assert list(read_users(path)[0].by_name) == ["bob"]
