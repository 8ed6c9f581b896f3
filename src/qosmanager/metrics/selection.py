"""Demand mode's selection: which slots a tick reads, and which files of each.

Map of the file:

* :class:`Selections` - ``select(kind, plan, ...)`` turns the strategies' :class:`CollectPlan`
  into the slots of one kind (pods or containers) and a file bitmask per slot.  A demand
  names its keys (None: every slot, ``"be"``: the BestEffort containers, else pod UIDs or
  container IDs) and a cadence (every N ticks, the keys spread evenly over the ticks).
* The same plan at the same turn of its cadences over the same tracked set gives the same
  selection: selections and key masks are kept until the tracked set changes (its
  generation), bounded so that plans coming and going with the pod set do not pile up.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from qosmanager.framework.demand import BE_CONTAINERS, POD, CollectPlan
from qosmanager.metrics.slots import TrackedPod

_Selection = tuple[CollectPlan, np.ndarray, np.ndarray]  # plan, slots, files of each


class Selections:
    """The kept selections and key masks of demand mode."""

    def __init__(self) -> None:
        self.kept: dict[tuple[str, tuple[int, ...], int, int], _Selection] = {}
        self._masks: dict[tuple[str, object], tuple[int, np.ndarray]] = {}

    def __len__(self) -> int:
        return len(self.kept)

    def select(self, kind: str, plan: CollectPlan, hw: int, tick: int, track_gen: int,
               be_mask: np.ndarray, pods: Mapping[str, TrackedPod]) -> tuple[np.ndarray, np.ndarray]:
        """The slots of ``kind`` this tick reads and the files of each (bits); the same plan at the
        same turn of its cadences over the same tracked set gives the same selection (kept).
        ``hw``: the reader's high water; ``track_gen``: the tracked set's generation."""
        turns = tuple(tick % d.every for d in plan.demands if d.kind == kind)
        key = (kind, turns, hw, track_gen)
        hit = self.kept.get(key)
        if hit is not None and hit[0] == plan:
            return hit[1], hit[2]
        files = np.zeros(hw, dtype=np.uint8)
        for d in plan.demands:
            if d.kind != kind or not hw:
                continue
            mask = self._key_mask(kind, d.keys, hw, track_gen, be_mask, pods)
            if d.every > 1:  # each key every d.every ticks, the keys spread evenly over the ticks
                turn = (np.arange(hw) % d.every) == (tick % d.every)
                mask = turn if mask is None else mask & turn
            if mask is None:
                files |= d.files
            else:
                files[mask] |= d.files
        slots = np.flatnonzero(files)
        if len(self.kept) > 256 or next(iter(self.kept), key)[3] != key[3]:
            # a selection holds arrays of the tracked set's size: those of an earlier tracked set
            # (pods came or went) are never asked for again (all kept share one generation)
            self.kept.clear()
        self.kept[key] = (plan, slots, files[slots])
        return slots, files[slots]

    def _key_mask(self, kind: str, keys: frozenset[str] | str | None, hw: int, track_gen: int,
                  be_mask: np.ndarray, pods: Mapping[str, TrackedPod]) -> np.ndarray | None:
        """The slots of ``keys`` (None: all, ``"be"``: the BestEffort containers), kept until the
        tracked set changes."""
        if keys is None:
            return None
        if keys == BE_CONTAINERS:
            mask = np.zeros(hw, dtype=bool)
            n = min(hw, len(be_mask))
            mask[:n] = be_mask[:n]
            return mask
        hit = self._masks.get((kind, keys))
        if hit is not None and hit[0] == track_gen and len(hit[1]) == hw:
            return hit[1]
        mask = np.zeros(hw, dtype=bool)
        if kind == POD:
            cols = [tp.cg.col for uid in keys if (tp := pods.get(uid)) is not None]
        else:
            ids = {cid: tr.col for tp in pods.values() for cid, tr in tp.containers.items()}
            cols = [c for cid in keys if (c := ids.get(cid)) is not None]
        cols = [c for c in cols if c < hw]
        mask[cols] = True
        if len(self._masks) > 64:  # plans come and go with the pod set: keep only the recent masks
            self._masks.clear()
        self._masks[(kind, keys)] = (track_gen, mask)
        return mask
