"""Knob ownership: which strategy's value a file gets when two want it.

Decides, per file (or entry), who owns it: the strategy that last wrote it, while its claim is live
(renewed by each write, lasting the write's ``lease``).  When another strategy wants a different
value meanwhile, the resource's declared merge rule decides (e.g. the lower CFS quota wins); the
loser's write is answered ``"lost"`` and audited once per standing disagreement, not every tick.
"""

from __future__ import annotations

from dataclasses import dataclass

from qosmanager.executor.audit import AuditLog
from qosmanager.executor.types import ExecutorStats, Item, Key


@dataclass(slots=True)
class Claim:
    strategy: str
    value: str
    ts: float
    lease: float


class Claims:
    def __init__(self, audit: AuditLog, stats: ExecutorStats) -> None:
        self.audit = audit
        self.stats = stats
        self.claims: dict[Key, Claim] = {}
        self.lost: dict[Key, tuple[str, str, str]] = {}  # key -> (loser, winner, value) last audited

    def settle(self, item: Item, now: float) -> bool:
        """True when ``item`` goes on (its strategy owns the file now); False when it lost."""
        w = item.write
        claim = self.claims.get(item.key)
        if claim is None or claim.strategy == w.strategy or now - claim.ts > claim.lease:
            self.claims[item.key] = Claim(w.strategy, w.value, now, w.lease)
            return True
        winner = item.resource.merge(claim.value, w.value)
        if winner == w.value and w.value != claim.value:
            self._note(item, loser=claim.strategy, winner=w.strategy, loser_value=claim.value)
            self.claims[item.key] = Claim(w.strategy, w.value, now, w.lease)
            return True
        item.result.status = "lost"
        if w.value != claim.value:
            self.stats.lost += 1
            self._note(item, loser=w.strategy, winner=claim.strategy, loser_value=w.value)
        return False

    def _note(self, item: Item, loser: str, winner: str, loser_value: str) -> None:
        sig = (loser, winner, loser_value)
        if self.lost.get(item.key) == sig:
            return  # audit a standing conflict once, not every tick
        self.lost[item.key] = sig
        self.audit.record(
            strategy=loser, action="write", target=item.target, value=loser_value, uid=item.write.uid,
            executed=False, reason=f"{item.target} is owned by {winner}: {item.resource.merge_rule}",
        )

    def owner(self, key: Key) -> str | None:
        claim = self.claims.get(key)
        return claim.strategy if claim else None

    def keys_of(self, strategy: str) -> list[Key]:
        return [k for k, c in self.claims.items() if c.strategy == strategy]

    def release(self, strategy: str) -> None:
        for k in self.keys_of(strategy):
            del self.claims[k]

    def gc(self, now: float, ttl: float) -> None:
        for k in [k for k, c in self.claims.items() if now - c.ts > max(c.lease, ttl)]:
            del self.claims[k]

    def forget(self, prefixes: tuple[str, ...]) -> None:
        for d in (self.claims, self.lost):
            for k in [k for k in d if k[0].startswith(prefixes)]:
                del d[k]
