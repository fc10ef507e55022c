"""Members added to and removed from the sync group by a reload: the running nodes connect to
an added member without a restart, and drop a removed one (its connections are closed and it
is refused from then on, while it keeps running on its old config)."""

from __future__ import annotations

import copy
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.trio import Group, running_group

pytestmark = [pytest.mark.process]


def write(group: Group, config: dict[str, Any]) -> None:
    group.config_path.write_text(yaml.safe_dump(config, sort_keys=False))


def with_members(config: dict[str, Any], names: list[str]) -> dict[str, Any]:
    out = copy.deepcopy(config)
    out["sync_group"]["members"] = [m for m in config["sync_group"]["members"] if m["name"] in names]
    return out


def reload(group: Group, *nodes: str) -> None:
    """SIGHUP *nodes* and wait until each has taken the file (its config digest changes)."""
    before = {node: group.status(node)["config_digest"] for node in nodes}
    for node in nodes:
        proc = group.members[node].proc
        assert proc is not None
        proc.send_signal(signal.SIGHUP)
    for node in nodes:
        group.wait_for(
            lambda n=node: group.status(n)["config_digest"] != before[n],  # type: ignore[misc]
            10,
            f"{node} to reload",
            lambda n=node: group.log_text(n)[-2000:],  # type: ignore[misc]
        )


def peers(group: Group, node: str) -> dict[str, bool]:
    return {p["name"]: p["connected"] for p in group.status(node)["peers"]}


def test_added_member_is_connected_and_removed_member_dropped(tmp_path: Path) -> None:
    with running_group(tmp_path, 3, run=[]) as group:
        everyone = copy.deepcopy(group.config)
        write(group, with_members(everyone, ["n1", "n2"]))
        group.start("n1", "n2")
        group.wait_converged(["n1", "n2"])
        assert set(peers(group, "n1")) == {"n2"}

        # add n3: n1 and n2 reload, n3 starts on the new file; all three connect
        write(group, everyone)
        reload(group, "n1", "n2")
        assert set(peers(group, "n1")) == {"n2", "n3"}
        group.start("n3")
        statuses = group.wait_converged(["n1", "n2", "n3"])
        assert len({s["config_digest"] for s in statuses.values()}) == 1

        # remove n2: n1 and n3 reload and drop it; n2 runs on, refused by both
        write(group, with_members(everyone, ["n1", "n3"]))
        since = {node: group.log_size(node) for node in ("n1", "n3")}
        reload(group, "n1", "n3")
        assert set(peers(group, "n1")) == {"n3"}
        group.wait_converged(["n1", "n3"])
        group.wait_for(
            lambda: not any(peers(group, "n2").values()), 10, "n2 to lose its peers", lambda: peers(group, "n2")
        )
        for node in ("n1", "n3"):
            group.wait_log(node, "dropping peer connection n2", 5, since[node])
            assert "no longer a member of the sync group" in group.wait_log(node, "dropping peer connection n2")
            # n2 keeps dialling on its old config; the certificate check refuses it now
            group.wait_log(node, "certificate names n2, not a member of the group", 15, since[node])
        assert not any(peers(group, "n2").values())
