"""Who asks the API: identities and their roles, and what the node remembers of tokens.

An `Identity` is a name, a role and how it was proven (`Identity.proof`): a token of the
users file (``token``), the config's single ``api.token`` or the node's own token
(``api.token``, the role ``admin``: the small-site form), a client certificate of the
operators' CA (``certificate``), or nothing at all (``none``: a read on loopback where
reads need no token, the role ``viewer``). A route needs a role (`RANKS`: each allows what
those below it do; ``anyone`` is the dashboard page alone).

A token of the users file is checked against its slow hash (`runtime.tokenhash`, some
0.1 s of a core) once: `Known` remembers the answer, good or bad, under an HMAC-SHA256 of
the token with a key made at start (so the memory never holds a token, nor a digest that
outlives the process), at most `Known.size` of them, least recently used dropped first,
and all forgotten when the users file is read again (a reload). A check not remembered
costs a hash, so they are bounded (`Known.may_check`): per source and in all, per second
(token buckets), and in progress at once; beyond, the request is refused at once (429),
before any hashing. Pure (nothing from Twisted): the clock is given.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from gtmcluster.config.users import NO_USERS, ApiUsers
from gtmcluster.runtime.tokenbucket import Buckets
from gtmcluster.runtime.tokenhash import Hash

#: roles by rank: a route needing one is open to it and to those above
RANKS = {"anyone": 0, "viewer": 1, "operator": 2, "admin": 3}


@dataclass(frozen=True)
class Identity:
    """Who a request is, as far as its credentials prove it."""

    name: str
    role: str
    #: token (users file), api.token (the single token), certificate, none (anonymous)
    proof: str

    def allowed(self, need: str) -> bool:
        return RANKS[self.role] >= RANKS[need]

    def describe(self) -> dict[str, str]:
        return {"name": self.name, "role": self.role, "proof": self.proof}


#: a read on loopback where reads need no token, showing nothing
ANONYMOUS = Identity("anonymous", "viewer", "none")
#: the config's single api.token, or the node's own
SINGLE_TOKEN = Identity("api-token", "admin", "api.token")


class Rate(Buckets[str]):
    """Checks allowed per second (*rate*, up to *burst* at once) per key, for at most
    *keys* keys (the least recently used forgotten beyond: it starts full again, and the
    bound in all still holds)."""

    def __init__(self, rate: float, burst: float, keys: int = 4096):
        super().__init__(rate, burst, keys)


#: what `Known.lookup` says of a token it never checked
UNKNOWN = object()


class Known:
    """The tokens of the users file checked already (identity, or None: refused), and the
    bound on checks not yet made."""

    #: tokens remembered
    size = 4096
    #: hash checks a second (and at most at once after a quiet while) from one source, and
    #: in all; in progress at once (each holds 16 MiB for 0.05 to 0.15 s of a core)
    PER_SOURCE = (2.0, 4.0)
    IN_ALL = (8.0, 16.0)
    at_once = 2

    def __init__(self, clock: Callable[[], float]):
        self.clock = clock
        self._key = secrets.token_bytes(32)
        self._users: ApiUsers = NO_USERS
        self._known: OrderedDict[bytes, Identity | None] = OrderedDict()
        #: the token hash of each identity of the users file the known tokens were checked under
        self._hashes: dict[str, Hash] = {}
        self.per_source = Rate(*self.PER_SOURCE)
        self.in_all = Rate(*self.IN_ALL, keys=1)
        #: checks in progress
        self.checking = 0
        #: checks made, refused for the bound, and answered from memory (for /metrics)
        self.counts = {"checked": 0, "bounded": 0, "remembered": 0}

    def _digest(self, token: str) -> bytes:
        return hmac.new(self._key, token.encode("utf-8", errors="replace"), hashlib.sha256).digest()

    def _current(self, users: ApiUsers) -> None:
        if users is self._users:
            return
        # A reload read the file again: a token checked before stays known while its
        # identity keeps the same hash (with the role the file gives it now), so a reload
        # costs no hash check of the operators' tokens (nor, under a flood of bad tokens
        # from their address, a 429 for them); refusals are forgotten (the file may now
        # hold the token). At most `size` entries: bounded, whatever the file holds.
        self._users = users
        kept: OrderedDict[bytes, Identity | None] = OrderedDict()
        for key, identity in self._known.items():
            if identity is None:
                continue
            before, now = self._hashes.get(identity.name), users.by_name.get(identity.name)
            if now is not None and now.token_hash is not None and now.token_hash == before:
                kept[key] = Identity(identity.name, now.role, identity.proof)
        self._known = kept
        self._hashes = {name: u.token_hash for name, u in users.by_name.items() if u.token_hash is not None}

    def lookup(self, token: str, users: ApiUsers) -> Identity | object | None:
        """What is known of *token* under *users*: its identity, None (refused), or UNKNOWN."""
        self._current(users)
        key = self._digest(token)
        if key not in self._known:
            return UNKNOWN
        self._known.move_to_end(key)
        self.counts["remembered"] += 1
        return self._known[key]

    def learn(self, token: str, users: ApiUsers, identity: Identity | None) -> None:
        """*token* was checked under *users*: *identity*, or None when refused (nothing is
        learnt when the users file was read again meanwhile)."""
        if users is not self._users:
            return
        self._known[self._digest(token)] = identity
        while len(self._known) > self.size:
            self._known.popitem(last=False)

    def may_check(self, source: str) -> str | None:
        """Why a hash check for *source* may not start now (None: it may, and is counted)."""
        now = self.clock()
        if self.checking >= self.at_once:
            why = "token checks are in progress already"
        elif not self.per_source.take(source, now):
            why = "too many unknown tokens from this address"
        elif not self.in_all.take("", now):
            why = "too many unknown tokens"
        else:
            self.checking += 1
            self.counts["checked"] += 1
            return None
        self.counts["bounded"] += 1
        return why

    def done(self) -> None:
        """A check that `may_check` allowed is over."""
        self.checking -= 1
