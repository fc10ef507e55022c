"""F5 pools imported as F5 answers with them: pools without members that answer their
fallback-ip, disabled pools, pool members and wide IPs (admin states that an operator's
`enable` overrides), and every pool setting that would change an answer either mapped or
CHANGED. Each imports F5-shaped input (written from F5's tmsh reference for `gtm pool` and
`gtm wideip`) with the real CLI or the importer, then asks the decision engine over what it
wrote."""

from __future__ import annotations

from pathlib import Path

import pytest

from gtmcluster.config.model import Config
from gtmcluster.dnsdata.zone import TYPE_A
from gtmcluster.importers import f5import
from gtmcluster.lb.trace import Action, Decision
from gtmcluster.state.admin import AdminState
from tests.support import f5asker
from tests.support.f5asker import CORPUS, ImportRun, check_and_load, run_import

SAMPLE = CORPUS / "fallback_disabled_gtm.conf"
LDNSES = ("198.51.100.53", "203.0.113.53", "8.8.8.8")

SERVERS = """\
gtm datacenter /Common/DC1 { }
gtm server /Common/srv1 {
    datacenter /Common/DC1
    virtual-servers {
        /Common/vs1 {
            destination 10.1.1.10:80
        }
        /Common/vs2 {
            destination 10.1.1.20:80
        }
    }
}
"""


def import_and_load(tmp_path: Path, sample: Path) -> tuple[ImportRun, Config]:
    """`gtmcluster import f5 SAMPLE` (the config on stdout), `gtmcluster check` on what it
    wrote (which must pass), and the loaded config."""
    done = run_import(tmp_path, sample)
    return done, check_and_load(tmp_path, done.stdout)


class Asker(f5asker.Asker):
    """The decision engine over an imported config (tests/support/f5asker.py), asked from
    the first of LDNSES unless told; *admin*: operators' admin records."""

    def __init__(self, config: Config, admin: dict[str, AdminState] | None = None) -> None:
        super().__init__(config)
        self.availability.admin = admin or {}

    def ask(self, name: str, ldns: str = LDNSES[0], qtype: int = TYPE_A) -> Decision:
        return super().ask(name, ldns, qtype)

    def answers(self, name: str, times: int = 4) -> set[tuple[str, ...]]:
        """Every answer *name* got, asked *times* by each LDNS."""
        return {tuple(self.answer(name, ldns)) for ldns in LDNSES for _ in range(times)}


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> tuple[ImportRun, Config]:
    return import_and_load(tmp_path_factory.mktemp("pools"), SAMPLE)


def test_the_sample_imports_with_nothing_lost_or_changed(
    sample: tuple[ImportRun, Config],
) -> None:
    """Fallback-only pools and disabled objects are all mapped as F5 behaves: exit 0."""
    done, _ = sample
    assert done.returncode == 0, done.stderr
    assert "0 LOST, 0 CHANGED" in done.stderr


def test_a_pool_without_members_answers_its_fallback_ip(
    sample: tuple[ImportRun, Config],
) -> None:
    """maint (load-balancing-mode fallback-ip, no members) answers 10.200.30.43 to everyone;
    sorry (`members none`, alternate-mode fallback-ip) its own address by the alternate."""
    _, config = sample
    asker = Asker(config)
    assert asker.answers("maint.example.com") == {("10.200.30.43",)}
    d = asker.ask("sorry.example.com")
    assert ([str(a) for a in d.addresses], d.pool, d.method, d.slot) == (
        ["10.200.30.44"],
        "sorry",
        "fallback_ip",
        "alternate",
    )


def test_a_disabled_pool_is_skipped_and_a_disabled_member_is_not_chosen(
    sample: tuple[ImportRun, Config],
) -> None:
    """www.example.com (global availability over web_dc2, then web): web_dc2 is disabled,
    so web answers; its member vs1 is disabled, so round robin only ever gives vs2."""
    _, config = sample
    asker = Asker(config)
    assert asker.answers("www.example.com") == {("10.1.1.20",)}
    d = asker.ask("www.example.com")
    assert (d.pool, d.members) == ("web", ("srv1.vs2",))
    assert [s.note for s in d.trace if s.slot == "admin"] == [
        "pool web_dc2 disabled in the config: out for every client",
        "pool member web/srv1.vs1 disabled in the config: out for every client",
    ]


def test_a_disabled_wideip_gives_the_query_to_the_zone(sample: tuple[ImportRun, Config]) -> None:
    """F5 hands a disabled wide IP's queries to the DNS zone; ours answers its
    failure_response, return_to_dns (the zone) by default."""
    _, config = sample
    assert Asker(config).ask("old.example.com").action is Action.RETURN_TO_DNS


def test_an_operators_enable_overrides_the_imported_disabled_states(
    sample: tuple[ImportRun, Config],
) -> None:
    """As on F5, enabling what the configuration disabled brings it back: an `enable`
    record of the pool, the member and the wide IP."""
    _, config = sample
    enabled = {
        key: AdminState(key.split("/", 1)[0], key.split("/", 1)[1], "enabled", by="alice")
        for key in ("pool/web_dc2", "member/web/srv1.vs1", "wideip/old.example.com")
    }
    asker = Asker(config, enabled)
    assert asker.answers("www.example.com") == {("10.2.1.10",)}
    del enabled["pool/web_dc2"]
    assert asker.answers("www.example.com") == {("10.1.1.10",), ("10.1.1.20",)}
    assert asker.ask("old.example.com").action is Action.ANSWER


def test_a_pool_whose_members_were_all_lost_still_answers_its_fallback_ip(tmp_path: Path) -> None:
    """Its member names a virtual server that was not imported: LOST for the member, and
    CHANGED for the pool, which answers only its fallback-ip; the wide IP is kept and
    answers that address, as F5 does while no member is available."""
    conf = tmp_path / "bigip_gtm.conf"
    conf.write_text(
        SERVERS
        + """\
gtm pool a /Common/web {
    fallback-ip 10.200.30.43
    fallback-mode fallback-ip
    members {
        /Common/srv9:/Common/gone {
            member-order 0
        }
    }
}
gtm wideip a /Common/www.example.com {
    pools {
        /Common/web {
            order 0
        }
    }
}
"""
    )
    done, config = import_and_load(tmp_path, conf)
    assert done.returncode == 1
    assert ":17: LOST: pool a /Common/web member /Common/srv9:/Common/gone: no such virtual server" in done.stderr
    assert ":13: CHANGED: pool a /Common/web: no member could be imported: the pool answers only its" in done.stderr
    assert Asker(config).answers("www.example.com") == {("10.200.30.43",)}


def run(tmp_path: Path, text: str) -> f5import.Result:
    path = tmp_path / "bigip_gtm.conf"
    path.write_text(SERVERS + text)
    return f5import.run([str(path)])


def levels(result: f5import.Result) -> dict[str, str]:
    """Each finding's level by its ``what: why``."""
    return {f"{f.what}: {f.why}": f.level for f in result.imported.findings}


@pytest.mark.parametrize(
    ("pool", "why"),
    [
        ("load-balancing-mode round-robin\n    fallback-ip 10.200.30.43", "no mode of the pool is fallback-ip"),
        ("load-balancing-mode fallback-ip", "it has no fallback-ip address"),
        ("load-balancing-mode fallback-ip\n    fallback-ip 2001:db8::43", "cannot answer a queries"),
    ],
    ids=["no-fallback-mode", "no-address", "wrong-family"],
)
def test_a_pool_without_members_that_cannot_answer_is_lost(tmp_path: Path, pool: str, why: str) -> None:
    result = run(tmp_path, f"gtm pool a /Common/empty {{\n    {pool}\n}}\n")
    assert "empty" not in result.imported.pools
    lost = [f for f in result.imported.findings if f.what == "pool a /Common/empty"]
    assert len(lost) == 1 and lost[0].level == "LOST" and why in lost[0].why


MEMBER = "/Common/srv1:/Common/vs1"


@pytest.mark.parametrize(
    ("setting", "finding"),
    [
        ("alternate-mode cpu", "pool a /Common/p: alternate-mode cpu: needs the servers' CPU load"),
        ("fallback-mode virtual-server-score", "pool a /Common/p: fallback-mode virtual-server-score: needs the score"),
        ("max-answers-returned 32", "pool a /Common/p: max-answers-returned 32: out of our range (1 to 16): 16"),
        ("ttl 4294967295", "pool a /Common/p: ttl 4294967295: out of our range"),
        ("qos-rtt 2000000", "pool a /Common/p: qos-rtt 2000000: out of our range"),
        ("verify-member-availability disabled", "F5 answers with members whatever their availability"),
        ("manual-resume enabled", "F5 keeps the pool out after it went down until an operator enables it"),
        ("dynamic-ratio enabled", "F5 scales the members' ratios by their measured QoS scores"),
        ("qos-lcs 30", "F5's qos score also counts link capacity"),
        ("limit-max-connections-status enabled", "F5 takes a member out while it is over this limit"),
    ],
)
def test_a_pool_setting_that_changes_answers_is_changed(tmp_path: Path, setting: str, finding: str) -> None:
    """Each pool setting this import does not carry over, but which changes F5's answers, is
    CHANGED (the import fails, the operator decides); the pool itself is imported."""
    result = run(
        tmp_path, f"gtm pool a /Common/p {{\n    {setting}\n    members {{\n        {MEMBER} {{ }}\n    }}\n}}\n"
    )
    assert "p" in result.imported.pools
    found = {text: level for text, level in levels(result).items() if finding in text}
    assert list(found.values()) == ["CHANGED"], levels(result)


@pytest.mark.parametrize(
    ("member", "finding"),
    [
        ("ratio 70000", "pool a /Common/p member /Common/srv1:/Common/vs1 ratio 70000: out of our range"),
        ("ratio many", "pool a /Common/p member /Common/srv1:/Common/vs1 ratio many: not a whole number"),
        ("limit-max-bps-status enabled\n            limit-max-bps 1000", "F5 takes a member out while it is over"),
    ],
)
def test_a_member_setting_that_changes_answers_is_changed(tmp_path: Path, member: str, finding: str) -> None:
    text = (
        f"gtm pool a /Common/p {{\n    members {{\n        {MEMBER} {{\n            {member}\n        }}\n    }}\n}}\n"
    )
    found = {text: level for text, level in levels(run(tmp_path, text)).items() if finding in text}
    assert list(found.values()) == ["CHANGED"]


def test_a_member_listed_twice_is_changed_beside_other_members(tmp_path: Path) -> None:
    """F5 counts a virtual server named twice (by name and by address) twice, a double share
    beside another member; ours once: CHANGED. Alone in its pool the share changes nothing."""
    twice = f"        {MEMBER} {{ }}\n        10.1.1.10:80 {{ }}\n"
    other = "        /Common/srv1:/Common/vs2 { }\n"
    result = run(tmp_path, f"gtm pool a /Common/p {{\n    members {{\n{twice}{other}    }}\n}}\n")
    assert [f.level for f in result.imported.findings if "is in the pool already" in f.why] == ["CHANGED"]
    result = run(tmp_path, f"gtm pool a /Common/p {{\n    members {{\n{twice}    }}\n}}\n")
    assert [f.level for f in result.imported.findings if "is in the pool already" in f.why] == ["not mapped"]


def test_pool_and_member_settings_at_f5_defaults_are_no_finding(tmp_path: Path) -> None:
    """A listing with all properties shows every default: those change nothing here."""
    text = f"""\
gtm pool a /Common/p {{
    dynamic-ratio disabled
    limit-max-bps 0
    limit-max-bps-status disabled
    manual-resume disabled
    qos-lcs 0
    qos-vs-score 0
    verify-member-availability enabled
    members {{
        {MEMBER} {{
            limit-max-connections 0
            limit-max-connections-status disabled
            enabled
        }}
    }}
}}
"""
    assert levels(run(tmp_path, text)) == {}


def test_an_a_and_aaaa_wideip_of_one_name_disabled_for_one_type_is_changed(tmp_path: Path) -> None:
    """One wide IP of ours answers both types with one admin state: F5's A wide IP disabled
    and AAAA one enabled cannot be carried over (imported enabled, CHANGED)."""
    text = f"""\
gtm server /Common/srv6 {{
    datacenter /Common/DC1
    virtual-servers {{
        /Common/vs6 {{
            destination 2001:db8::10.80
        }}
    }}
}}
gtm pool a /Common/p {{
    members {{
        {MEMBER} {{ }}
    }}
}}
gtm pool aaaa /Common/p6 {{
    members {{
        /Common/srv6:/Common/vs6 {{ }}
    }}
}}
gtm wideip a /Common/www.example.com {{
    disabled
    pools {{
        /Common/p {{ }}
    }}
}}
gtm wideip aaaa /Common/www.example.com {{
    pools {{
        /Common/p6 {{ }}
    }}
}}
"""
    result = run(tmp_path, text)
    assert "admin_state" not in result.imported.wideips["www.example.com"].value
    assert levels(result) == {
        "wideip www.example.com: disabled on F5 for A only; one wide IP here answers both types: imported enabled": (
            "CHANGED"
        )
    }
