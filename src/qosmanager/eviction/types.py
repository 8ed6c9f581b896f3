"""What strategies hand the eviction coordinator: tasks of sorted victims (qos §2.8).

A strategy that wants resources released builds one :class:`EvictTask` per feature (e.g.
``BEMemoryEvict``): how much of which resource must be released, for which *target*
(``podUsed``: what pods use; ``podResourceRequest``: what pods request), and the
candidate victims in eviction order, each with what evicting it would release.  The
coordinator evicts down the list until the task is satisfied, counting pods already
being evicted as released (pending release), and never evicts a pod twice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from qosmanager.api.pod import PodMeta

TARGET_POD_USED = "podUsed"
TARGET_POD_REQUEST = "podResourceRequest"


@dataclass(slots=True)
class Victim:
    pod: PodMeta
    release: Mapping[str, float]  # resource -> amount evicting this pod releases (task units)
    details: Mapping[str, Any] = field(default_factory=dict)  # numbers for the audit (usage, priority)


@dataclass(slots=True)
class EvictTask:
    feature: str  # koordlet feature name, e.g. "BEMemoryEvict"
    reason: str  # human sentence with the numbers that triggered it
    target: str  # TARGET_POD_USED | TARGET_POD_REQUEST
    to_release: Mapping[str, float]  # resource -> amount still to release
    victims: list[Victim]  # in eviction order
    # what evicting a pod that is *not* one of this task's victims releases for this task (koordlet
    # applies every task's resource function to every evicted pod); None: nothing
    release_of: Callable[[PodMeta], Mapping[str, float]] | None = None

    @property
    def koordlet_reason(self) -> str:
        return f"trigger by koordlet feature {self.feature}"


@dataclass(slots=True)
class EvictDecision:
    """One line of the coordinator's account, for the caller and the tests."""

    pod: PodMeta
    feature: str
    action: str  # "evicted" | "pending" (already being evicted) | "failed" | "skipped"
    executed: bool
    reason: str
    error: str | None = None


@dataclass(slots=True)
class EvictResult:
    released: dict[str, dict[str, float]] = field(default_factory=dict)  # target -> resource -> amount
    newly_evicted: bool = False
    decisions: list[EvictDecision] = field(default_factory=list)
    unsatisfied: dict[str, dict[str, float]] = field(default_factory=dict)  # feature -> what is still missing
