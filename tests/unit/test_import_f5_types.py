"""An A and an AAAA wide IP of one name on F5 are one wide IP of both types here: the import
says where that answers otherwise (the other type's pool-lb-mode, where it has pools to
choose among), and nothing where it answers the same."""

from __future__ import annotations

from pathlib import Path

from gtmcluster.dnsdata.zone import TYPE_AAAA
from tests.support.f5asker import Asker, check_and_load, run_import

SERVERS = """\
gtm datacenter /Common/DC1 { }
gtm server /Common/lb1 {
    datacenter /Common/DC1
    virtual-servers {
        /Common/v4a { destination 192.0.2.1:80 }
        /Common/v6a { destination 2001:db8::1.80 }
        /Common/v6b { destination 2001:db8::2.80 }
    }
}
gtm pool a /Common/web4 { members { /Common/lb1:/Common/v4a { } } }
gtm pool aaaa /Common/web6 { members { /Common/lb1:/Common/v6a { } } }
gtm pool aaaa /Common/spare6 { members { /Common/lb1:/Common/v6b { } } }
"""


def test_same_answers_for_both_types_exit_0(tmp_path: Path) -> None:
    text = SERVERS + (
        "gtm wideip a /Common/www.example.com {\n    pool-lb-mode global-availability\n"
        "    pools { /Common/web4 { } }\n}\n"
        "gtm wideip aaaa /Common/www.example.com {\n"
        "    pool-lb-mode global-availability\n"
        "    pools { /Common/web6 { order 0 } /Common/spare6 { order 1 } }\n}\n"
    )
    (tmp_path / "gtm.conf").write_text(text)
    done = run_import(tmp_path, tmp_path / "gtm.conf")
    assert done.returncode == 0, done.stderr
    asker = Asker(check_and_load(tmp_path, done.stdout))
    assert asker.answer("www.example.com", "10.0.0.53") == ["192.0.2.1"]
    assert asker.answer("www.example.com", "10.0.0.53", TYPE_AAAA) == ["2001:db8::1"]
    asker.availability.down.add("lb1.v6a")
    assert asker.answer("www.example.com", "10.0.0.53", TYPE_AAAA) == ["2001:db8::2"]


def test_the_other_types_mode_is_changed_where_it_chooses(tmp_path: Path) -> None:
    text = SERVERS + (
        "gtm wideip a /Common/www.example.com {\n    pool-lb-mode global-availability\n"
        "    pools { /Common/web4 { } }\n}\n"
        "gtm wideip aaaa /Common/www.example.com {\n"
        "    pool-lb-mode round-robin\n"
        "    pools { /Common/web6 { order 0 } /Common/spare6 { order 1 } }\n}\n"
    )
    (tmp_path / "gtm.conf").write_text(text)
    done = run_import(tmp_path, tmp_path / "gtm.conf")
    assert done.returncode == 1
    assert "pool-lb-mode differs from the other type's; global_availability is used for AAAA queries" in done.stderr
