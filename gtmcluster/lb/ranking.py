"""What every load-balancing method takes and gives: candidates, the slot it runs in, and
its ranking."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from gtmcluster.config.model import Prefixes, QosWeights, Tolerance, VirtualServer
from gtmcluster.lb.context import Context


class Candidate(Protocol):
    """A pool member, or a pool at the wide IP level."""

    @property
    def name(self) -> str: ...

    @property
    def ratio(self) -> int: ...

    @property
    def topology_mask(self) -> frozenset[int]: ...

    @property
    def datacenters(self) -> frozenset[str]: ...

    @property
    def members(self) -> tuple[VirtualServer, ...]: ...


C = TypeVar("C", bound=Candidate)

DEFAULT_TOLERANCE = Tolerance()
DEFAULT_QOS = QosWeights()


@dataclass(frozen=True, slots=True)
class Slot:
    """Where a method runs: its rotation counter and the settings of its pool."""

    rotation: tuple[str, ...]
    static_persist: Prefixes
    tolerance: Tolerance = DEFAULT_TOLERANCE
    qos: QosWeights = DEFAULT_QOS


@dataclass(frozen=True, slots=True)
class Ranking:
    order: tuple[Candidate, ...]
    scores: tuple[tuple[str, float], ...] = ()
    scope: int = 0
    note: str = ""


Method = Callable[[Sequence[Candidate], Context, Slot], Ranking]
