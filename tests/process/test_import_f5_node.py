"""An F5 tmsh configuration imported with `gtmcluster import f5`, served by a real node
(``twistd -n gtm``) and asked with the real `dig`: topology sends each resolver where F5
would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.dig import dig
from tests.support.nodeproc import loopback_address, running_node

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("dig_tool")]

DNS_PORT = 5353


def bigip_gtm(near: str) -> str:
    """Two data centers; resolvers at *near* go to DC1 by a region, the rest to DC2."""
    return f"""\
gtm datacenter /Common/DC1 {{ }}
gtm datacenter /Common/DC2 {{ }}
gtm server /Common/lb1 {{
    datacenter /Common/DC1
    virtual-servers {{
        /Common/web {{
            destination 192.0.2.1:80
        }}
    }}
}}
gtm server /Common/lb2 {{
    datacenter /Common/DC2
    virtual-servers {{
        /Common/web {{
            destination 192.0.2.2:80
        }}
    }}
}}
gtm region /Common/near {{
    region-members {{
        subnet {near}/32 {{ }}
    }}
}}
gtm topology ldns: region /Common/near server: datacenter /Common/DC1 {{
    order 1
    score 100
}}
gtm topology ldns: subnet 0.0.0.0/0 server: datacenter /Common/DC2 {{
    order 2
    score 10
}}
gtm pool a /Common/web_pool {{
    load-balancing-mode topology
    members {{
        /Common/lb1:/Common/web {{
            member-order 0
        }}
        /Common/lb2:/Common/web {{
            member-order 1
        }}
    }}
    ttl 30
}}
gtm wideip a /Common/www.gslb.example.test {{
    pools {{
        /Common/web_pool {{
            order 0
        }}
    }}
}}
"""


def test_imported_config_answers_by_topology(tmp_path: Path) -> None:
    address, near, far = loopback_address(), loopback_address(), loopback_address()
    (tmp_path / "bigip_gtm.conf").write_text(bigip_gtm(near))
    command = ["import", "f5", "bigip_gtm.conf", "--site", f"DC1={address}", "-o", "cluster.yaml"]
    done = subprocess.run(
        [sys.executable, "-m", "gtmcluster.cli.main", *command],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    config = tmp_path / "cluster.yaml"
    # the member as an operator would place it for a test: an unprivileged port, its own API
    text = config.read_text()
    text = text.replace(f"'{address}:53'", f"'{address}:{DNS_PORT}'").replace("127.0.0.1:8053", f"{address}:8053")
    config.write_text(text)
    with running_node(config, "gtm-dc1", address, DNS_PORT, tmp_path):
        answer = dig(address, DNS_PORT, "www.gslb.example.test", source=near)
        assert (answer.status, answer.answer_data()) == ("NOERROR", ["192.0.2.1"])
        assert answer.answer[0].split()[1] == "30"  # the pool's ttl
        assert dig(address, DNS_PORT, "www.gslb.example.test", source=far).answer_data() == ["192.0.2.2"]
        soa = dig(address, DNS_PORT, "gslb.example.test", "SOA")
        assert soa.status == "NOERROR" and soa.types() == ["SOA"]  # the zone file the import wrote
