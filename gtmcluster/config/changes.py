"""What a reload changes: the definitions that differ between two configs, by name; what
a running node cannot take (`restart_needed`); and what a config sync bundle may never
change, a member's own ground (`own_ground`).

Comparing thousands of definitions takes a while (tens of milliseconds at 5,000 virtual
servers), so a reload compares in the thread that read the new config, and the parts that
react in the reactor thread (health checks, health evaluation) look names up instead: what
they do costs what changed, not the size of the config.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePath

from gtmcluster.config.dnsserver import QueryLog
from gtmcluster.config.model import ApiSettings, Config


@dataclass(frozen=True)
class Changes:
    """The names of the virtual servers and links added, removed or changed."""

    virtual_servers: frozenset[str]
    links: frozenset[str]


def between(old: Config, new: Config) -> Changes:
    """What differs from *old* to *new*."""
    return Changes(_differ(old.virtual_servers, new.virtual_servers), _differ(old.links, new.links))


def _differ(old: Mapping[str, object], new: Mapping[str, object]) -> frozenset[str]:
    changed = {name for name, definition in new.items() if old.get(name) != definition}
    changed.update(name for name in old if name not in new)
    return frozenset(changed)


def restart_needed(old: Config, new: Config, node: str, bundle: bool = False) -> list[str]:
    """Changes a running node cannot take (its sockets and credentials are set at start).
    *bundle*: *new* is a config sync bundle's, which may not change the member's own
    ground either (`own_ground`: there a restart would not take it)."""
    problems = []
    names = [m.name for m in new.sync_group.members]
    if node not in names:
        return [f"{node} is no longer a member of the sync group: stop it instead"]
    before, after = old.member(node), new.member(node)
    for what in ("dns", "peer", "api", "probe_source", "rum"):
        if getattr(before, what) != getattr(after, what):
            problems.append(f"{node}'s {what} address changed: restart the node to apply it")
    if old.api.tls != new.api.tls and not bundle:
        problems.append("api.tls changed: restart the node to switch its API between HTTP and HTTPS")
    if (old.rum and old.rum.tls) != (new.rum and new.rum.tls) and not bundle:
        problems.append("rum.tls changed: restart the node to switch its beacon listener between HTTP and HTTPS")
    if old.sync_group.name != new.sync_group.name:
        problems.append("the sync group's name changed: restart every node")
    if (len(old.sync_group.members) > 1) != (len(new.sync_group.members) > 1):
        problems.append("the group changed between one member and several: restart to open or close the peer port")
    if old.dns_server.processes != new.dns_server.processes:
        problems.append("dns_server.processes changed: restart the node to start or stop answering processes")
    if old.log_dir != new.log_dir and not bundle:
        problems.append("log_dir changed: restart the node to write its log there")
    if bundle:
        problems.extend(own_ground(old, new, node))
    return problems


#: what a refusal of a change to a member's own ground says to do instead
_OWN = (
    "a member's own ground never comes from the group's config: change it in each member's own file and "
    "restart the member"
)


def own_ground(old: Config, new: Config, node: str) -> list[str]:
    """What config *new* (a config sync bundle's, read with the member's own folder) would
    change of member *node*'s own ground, compared with what it runs (*old*): each refused
    with the reason. Its certificates and key (a new group CA is the out-of-band rotation,
    docs/reliability.md), whether its API is HTTPS, where its API token comes from, its
    state and log folders, its query log, where its users file and operators' CA are (a
    users file it names is read again on each reload) are its own. A file of its own that
    *old* does not name (a new TSIG key's ``secret_file``, a new signed zone's ``keys``) is
    taken only inside the member's own folder (no absolute path, no ``..``), and not in its
    state or log folder (where the bundles it receives are kept) nor one of the files
    above."""
    problems = []
    if old.tls_for(node) != new.tls_for(node):
        t = new.sync_group.tls
        problems.append(
            f"sync_group.tls changed (ca {t.ca}, cert {t.cert}, key {t.key}): {_OWN}; a new group CA is rotated "
            "out of band, as docs/reliability.md says"
        )
    if old.api.tls != new.api.tls:
        problems.append(f"api.tls changed: {_OWN}")
    if _token_source(old.api) != _token_source(new.api):
        problems.append(f"the API token changed from {_token_source(old.api)} to {_token_source(new.api)}: {_OWN}")
    for key, before, after in (
        ("api.users_file", old.api.users_file, new.api.users_file),
        ("api.tls.client_ca", old.api.client_ca, new.api.client_ca),
    ):
        if before != after:
            problems.append(f"{key} changed from {before or 'none'} to {after or 'none'}: {_OWN}")
    if old.state_dir_for(node) != new.state_dir_for(node):
        problems.append(f"state_dir changed to {new.state_dir_for(node)}: {_OWN}")
    if old.log_dir != new.log_dir:
        problems.append(f"log_dir changed to {new.log_dir}: {_OWN}")
    if _query_log(old.dns_server.query_log) != _query_log(new.dns_server.query_log):
        problems.append(
            f"dns_server.query_log changed (now {_query_log_text(new.dns_server.query_log)}): the files it writes "
            f"and removes are the member's own: {_OWN}"
        )
    fixed = _fixed(old, node) | _fixed(new, node)
    folders = (new.state_dir_for(node), new.log_dir, old.state_dir_for(node), old.log_dir)
    for path, written in new.own_paths.items():
        if path in old.own_paths or path in fixed:
            continue
        at = Path(str(path).replace("{node}", node))
        if os.path.isabs(written) or ".." in PurePath(written).parts:
            problems.append(
                f"{written}: a file of the member's own that it does not use now is named inside its own folder "
                "(no absolute path, no '..')"
            )
        elif any(at == folder or at.is_relative_to(folder) for folder in folders):
            problems.append(
                f"{written}: a file of the member's own cannot be in its state_dir or log_dir (where it keeps "
                "what it receives and writes)"
            )
    return problems


def _fixed(config: Config, node: str) -> set[Path]:
    """The member's own files that only its own file sets: certificates, token, query log."""
    t, mine = config.sync_group.tls, config.tls_for(node)
    out = {t.ca, t.cert, t.key, mine.ca, mine.cert, mine.key, config.log_dir}
    for own in (config.api.token_file, config.api.users_file, config.api.client_ca):
        if own is not None:
            out.add(own)
    if config.dns_server.query_log is not None:
        out.add(config.dns_server.query_log.path)
    return out


def _token_source(api: ApiSettings) -> str:
    if api.token_file is not None:
        return f"the file {api.token_file}"
    return "an inline api.token" if api.token else "none (the member's own state_dir/api-token)"


def _query_log(q: QueryLog | None) -> tuple[Path, int, Path | None] | None:
    return None if q is None else (q.path, q.keep, q.dir)


def _query_log_text(q: QueryLog | None) -> str:
    return "off" if q is None else f"path {q.path}, keep {q.keep}" + (f", dir {q.dir}" if q.dir else "")
