"""An AS3-shaped F5 configuration (wide IPs under /Tenant/Application/) with an apex wide IP,
imported with `gtmcluster import f5`, served by a real node (``twistd -n gtm``) and asked
with the real `dig`: each wide IP answers its DNS name, the apex one in a zone of its own
with SOA and NS, and the node claims no top-level domain (``google.com``: REFUSED)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.dig import dig
from tests.support.f5asker import gtmcluster
from tests.support.nodeproc import loopback_address, running_node

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("dig_tool")]

DNS_PORT = 5353

BIGIP_GTM = """\
gtm datacenter /Common/DC1 { }
gtm server /Common/lb1 {
    datacenter /Common/DC1
    virtual-servers {
        /Common/shop-vs {
            destination 198.51.100.10:443
        }
        /Common/home-vs {
            destination 198.51.100.20:443
        }
    }
}
gtm pool a /Shop/Storefront/web_pool {
    members {
        /Common/lb1:/Common/shop-vs {
            member-order 0
        }
    }
}
gtm pool a /Common/home_pool {
    members {
        /Common/lb1:/Common/home-vs {
            member-order 0
        }
    }
}
gtm wideip a /Common/example.com {
    pools {
        /Common/home_pool {
            order 0
        }
    }
}
gtm wideip a /Shop/Storefront/www.example.com {
    aliases {
        /Shop/Storefront/shop.example.com
    }
    pools {
        /Shop/Storefront/web_pool {
            order 0
        }
    }
}
"""


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The configuration above imported (exit 0) and served by a real node: its address."""
    tmp_path = tmp_path_factory.mktemp("f5names")
    address = loopback_address()
    (tmp_path / "bigip_gtm.conf").write_text(BIGIP_GTM)
    command = ["import", "f5", "bigip_gtm.conf", "--site", f"DC1={address}", "-o", "cluster.yaml"]
    done = gtmcluster(*command, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    config = tmp_path / "cluster.yaml"
    text = config.read_text()
    text = text.replace(f"'{address}:53'", f"'{address}:{DNS_PORT}'").replace("127.0.0.1:8053", f"{address}:8053")
    config.write_text(text)
    with running_node(config, "gtm-dc1", address, DNS_PORT, tmp_path):
        yield address


def test_as3_wide_ip_answers_its_dns_name(node: str) -> None:
    """/Shop/Storefront/www.example.com and its alias answer www.example.com and
    shop.example.com, as on F5."""
    for name in ("www.example.com", "shop.example.com"):
        answer = dig(node, DNS_PORT, name)
        assert (answer.status, answer.answer_data()) == ("NOERROR", ["198.51.100.10"]), name
        assert "aa" in answer.flags


def test_apex_wide_ip_in_its_own_zone_and_no_top_level_domain(node: str) -> None:
    """/Common/example.com answers at the apex of zone example.com (its SOA and NS still
    there); names outside it, in .com or .com itself, are REFUSED: not ours."""
    for outside in ("google.com", "com"):  # (no NXDOMAIN with our SOA for .com)
        refused = dig(node, DNS_PORT, outside)
        assert (refused.status, refused.answer, refused.authority) == ("REFUSED", [], []), outside
    apex = dig(node, DNS_PORT, "example.com")
    assert (apex.status, apex.answer_data()) == ("NOERROR", ["198.51.100.20"])
    soa = dig(node, DNS_PORT, "example.com", "SOA")
    assert (soa.status, [line.split()[0] for line in soa.answer], soa.types()) == ("NOERROR", ["example.com."], ["SOA"])
    ns = dig(node, DNS_PORT, "example.com", "NS")
    assert (ns.status, ns.answer_data()) == ("NOERROR", ["gtm-dc1.example.com."])
