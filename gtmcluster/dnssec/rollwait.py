"""When each step of a key rollover happened, and how long the next one must wait.

A rollover's steps (`dnssec.rollover`) are safe only once caches have caught up with the
step before: a validator may hold the DNSKEY set it fetched for its TTL, the signatures made
by a retired key for the longest TTL of the zone, and the parent's old DS for the DS TTL. So
each step is recorded, per zone and role, in ``ZONE.roll.json`` in the key directory (mode
0600, beside the keys: ``{"ksk": {"published": T, "rolled": T}}``, times in seconds since the
epoch), and the next step is refused, naming the time left, until:

- ``roll`` (the pre-published key signs the data, or for a KSK the parent may take its DS):
  the DNSKEY TTL plus `PROPAGATION` after the pre-publication, so every cached DNSKEY set
  holds the new key;
- ``roll --finish`` (the retired key is removed): `PROPAGATION` plus, after the roll, the
  longest TTL of the zone for a ZSK (signatures it made may be cached that long), the
  parent's DS TTL for a KSK (the old DS may be cached that long after the parent swapped
  it), and the longer of the two for a CSK.

`PROPAGATION` is the time to copy the key directory to every member and reload them. The
operator may pass ``--force`` (a test zone, or a wait already known to be over).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

from gtmcluster.dnsdata import keys
from gtmcluster.dnssec.signer import DNSKEY_TTL
from gtmcluster.runtime import private

#: copying the key directory to every member and reloading them, after a step
PROPAGATION = 300
#: the longest TTL of a zone's records, unless stated (`--max-ttl`)
MAX_TTL = 86400
PUBLISHED, ROLLED = "published", "rolled"


class RollWaitError(keys.DnssecKeyError):
    """A step taken before the caches can have caught up with the one before; the message
    says how long is left and why."""


def read(directory: Path, zone: str) -> dict[str, dict[str, float]]:
    """The recorded steps by role (empty when there is no record or it is not readable)."""
    try:
        value = json.loads(keys.roll_state_path(directory, zone).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(value, dict):
        return {}
    out: dict[str, dict[str, float]] = {}
    for role, steps in value.items():
        if role in keys.ROLES and isinstance(steps, dict):
            out[role] = {step: float(at) for step, at in steps.items() if step in (PUBLISHED, ROLLED) and _number(at)}
    return out


def record(directory: Path, zone: str, role: str, step: str | None, now: float) -> None:
    """Record that *role*'s *step* happened at *now* (None: its roll is over, forget it)."""
    state = read(directory, zone)
    if step is None:
        state.pop(role, None)
    elif step == PUBLISHED:
        state[role] = {PUBLISHED: now}
    else:
        state.setdefault(role, {})[step] = now
    path = keys.roll_state_path(directory, zone)
    if not state:
        path.unlink(missing_ok=True)
        return
    try:
        private.write(path, (json.dumps(state, sort_keys=True) + "\n").encode(), private.KEY_MODE, True)
    except private.WriteError as e:
        raise keys.DnssecKeyError(str(e)) from e


@dataclass(frozen=True)
class Wait:
    """What a step waits for: *seconds* after the step *after* of *role*, and why."""

    role: str
    after: str
    seconds: int
    why: str


def before_roll(role: str) -> Wait:
    why = f"the DNSKEY TTL {DNSKEY_TTL} s + propagation {PROPAGATION} s"
    return Wait(role, PUBLISHED, DNSKEY_TTL + PROPAGATION, why)


def before_finish(role: str, max_ttl: int, ds_ttl: int | None) -> Wait:
    """*ds_ttl* (the parent's) is needed for a KSK or CSK: its DS is swapped in this roll."""
    parts: list[tuple[int, str]] = []
    if role in ("zsk", "csk"):
        parts.append((max_ttl, f"the zone's longest TTL {max_ttl} s"))
    if role in ("ksk", "csk"):
        if ds_ttl is None:
            raise RollWaitError(
                "state the parent's DS TTL with --ds-ttl SECONDS (the TTL of the DS records the parent "
                "serves: dig DS ZONE at the parent's servers), or pass --force"
            )
        parts.append((ds_ttl, f"the parent's DS TTL {ds_ttl} s"))
    longest, why = max(parts)
    return Wait(role, ROLLED, longest + PROPAGATION, f"{why} + propagation {PROPAGATION} s")


def check(directory: Path, zone: str, step: str, wait: Wait, now: float) -> None:
    """Refuse *step* (the command, as the message names it) while *wait* is not over."""
    name = keys.zone_file_name(zone)
    at = read(directory, zone).get(wait.role, {}).get(wait.after)
    what = "pre-published" if wait.after == PUBLISHED else "rolled"
    if at is None:
        record_name = keys.roll_state_path(directory, zone).name
        raise RollWaitError(
            f"{name}: no record of when its {wait.role.upper()} was {what} ({record_name}); "
            f"{step} needs {wait.why} after that: pass --force once that much time has passed"
        )
    left = at + wait.seconds - now
    if left > 0:
        raise RollWaitError(
            f"{name}: its {wait.role.upper()} was {what} at {_utc(at)}; {step} must wait {wait.why} after "
            f"that: {duration(left)} more (from {_utc(at + wait.seconds)}), or pass --force"
        )


def duration(seconds: float) -> str:
    """*seconds* rounded up, as ``1h 5m 0s`` (hours and minutes only when there are any)."""
    whole = int(-(-seconds // 1))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes}m {secs}s"
    return f"{minutes}m {secs}s" if minutes else f"{secs}s"


def _utc(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
