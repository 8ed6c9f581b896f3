"""The dry run's shadow: what ``--dry-run`` pretends is on the host.

Decides two things only a dry run needs.  A directory the dry run "created" (it was decided, not
made) is remembered, so writes to files that would be in it are decided and audited against an empty
file instead of being skipped as missing.  And an uncacheable write (thread ids into a tasks file)
already decided is not decided again within ``force_seconds``, so the same decision is audited once
per force window, as a cacheable one is.
"""

from __future__ import annotations

import os

from qosmanager.executor.types import Key


class DryRun:
    def __init__(self, force_seconds: float) -> None:
        self.force_seconds = force_seconds
        self.dirs: set[str] = set()  # directories decided but not created (absolute)
        self.decided: dict[Key, tuple[str, float]] = {}  # uncacheable writes decided -> (value, when)

    def in_dir(self, path: str) -> bool:
        """``path`` would be a file of a directory the dry run only pretended to create."""
        return bool(self.dirs) and os.path.dirname(path) in self.dirs

    def seen(self, key: Key, value: str, now: float) -> bool:
        """This uncacheable write was decided within the force window."""
        seen = self.decided.get(key)
        return seen is not None and seen[0] == value and now - seen[1] < self.force_seconds

    def decide(self, key: Key, value: str, now: float) -> None:
        self.decided[key] = (value, now)

    def gc(self, now: float) -> None:
        for k in [k for k, (_, ts) in self.decided.items() if now - ts > self.force_seconds]:
            del self.decided[k]

    def forget(self, prefixes: tuple[str, ...]) -> None:
        for k in [k for k in self.decided if k[0].startswith(prefixes)]:
            del self.decided[k]
