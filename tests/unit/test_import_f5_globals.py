"""`gtm global-settings` and the gtm objects the importer does not map: what changes answers
is mapped (the static-persistence prefixes) or CHANGED (exit 1), what does not is listed."""

from __future__ import annotations

from pathlib import Path

from tests.support.f5asker import Asker, check_and_load, run_import

SERVERS = """\
gtm datacenter /Common/DC1 { }
gtm server /Common/lb1 {
    datacenter /Common/DC1
    virtual-servers {
        /Common/a { destination 192.0.2.1:80 }
        /Common/b { destination 192.0.2.2:80 }
        /Common/c { destination 192.0.2.3:80 }
        /Common/d { destination 192.0.2.4:80 }
    }
}
gtm pool a /Common/sticky {
    load-balancing-mode static-persistence
    members {
        /Common/lb1:/Common/a { member-order 0 }
        /Common/lb1:/Common/b { member-order 1 }
        /Common/lb1:/Common/c { member-order 2 }
        /Common/lb1:/Common/d { member-order 3 }
    }
}
gtm wideip a /Common/www.example.com {
    pools { /Common/sticky { order 0 } }
}
"""
RESOLVERS = [f"10.1.1.{n}" for n in range(1, 255, 5)]


def line_of(text: str, needle: str) -> int:
    return text[: text.index(needle)].count("\n") + 1


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gtm.conf"
    path.write_text(text)
    return path


def test_static_persist_cidr_keeps_a_resolvers_network_on_one_member(tmp_path: Path) -> None:
    """F5's `static-persist-cidr-ipv4 24` hashes a resolver's /24: every resolver of a /24
    gets one member. Without it (the default /32, and what main imported, dropping the
    setting as "not mapped") the resolvers of one /24 spread over the members."""
    settings = "gtm global-settings load-balancing {\n    static-persist-cidr-ipv4 24\n}\n"
    done = run_import(tmp_path, write(tmp_path, SERVERS + settings))
    assert done.returncode == 0, done.stderr
    asker = Asker(check_and_load(tmp_path, done.stdout))
    assert len({tuple(asker.answer("www.example.com", r)) for r in RESOLVERS}) == 1
    plain = tmp_path / "plain"
    plain.mkdir()
    done = run_import(plain, write(plain, SERVERS))
    spread = Asker(check_and_load(plain, done.stdout))
    assert len({tuple(spread.answer("www.example.com", r)) for r in RESOLVERS}) > 1


def test_load_balancing_settings_that_change_answers_are_changed(tmp_path: Path) -> None:
    settings = (
        "gtm global-settings load-balancing {\n"
        "    topology-longest-match no\n"
        "    topology-allow-zero-scores yes\n"
        "    verify-vs-availability yes\n"
        "}\n"
        "gtm global-settings general {\n    synchronization yes\n}\n"
    )
    text = SERVERS + settings
    done = run_import(tmp_path, write(tmp_path, text))
    assert done.returncode == 1
    changed = {(line_of(text, "topology-longest"), "CHANGED"), (line_of(text, "topology-allow"), "CHANGED")}
    assert {(f.line, f.level) for f in done.essential()} == changed
    assert "gtm global-settings load-balancing: topology-longest-match no" in done.stderr
    assert "not mapped: gtm global-settings general: synchronization yes" in done.stderr


def test_a_link_is_changed_a_prober_pool_listed(tmp_path: Path) -> None:
    others = (
        "gtm link /Common/isp1 {\n    datacenter /Common/DC1\n    router-addresses { 192.0.2.254 { } }\n"
        "    limit-max-bps 1000000\n    limit-max-bps-status enabled\n}\n"
        "gtm prober-pool /Common/probers {\n    members { /Common/lb1 { order 0 } }\n}\n"
    )
    text = SERVERS + others
    done = run_import(tmp_path, write(tmp_path, text))
    assert done.returncode == 1
    assert [(f.line, f.level) for f in done.essential()] == [(line_of(text, "gtm link"), "CHANGED")]
    assert "CHANGED: gtm link /Common/isp1: F5 links" in done.stderr
    assert "not mapped: gtm prober-pool /Common/probers" in done.stderr
