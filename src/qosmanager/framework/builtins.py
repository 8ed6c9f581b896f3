"""The built-in strategies: the modules of :mod:`qosmanager.strategies`, in the order they are listed.

Each module registers its strategy class with :func:`qosmanager.framework.strategy.register`; the
classes then meet the plugins' (:mod:`qosmanager.framework.plugins`) in
:func:`qosmanager.framework.manager.load_strategies`, and both kinds are built, gated, scheduled and
executed the same way.  Built-ins come first, in :data:`ORDER` (at equal due times they run in it).
"""

from __future__ import annotations

import importlib
import pkgutil

from qosmanager.framework.strategy import REGISTRY, Strategy

# the order strategies are listed and, at equal due times, run
ORDER = ("cpuSuppress", "cpuBurst", "cpuEvict", "memoryHigh", "memoryEvict", "cgroupReconcile",
         "resctrlReconcile", "systemConfigReconcile", "blkioReconcile")


def builtin_strategies() -> dict[str, type[Strategy]]:
    """Import every module of ``qosmanager.strategies`` (each registers its strategy); name -> class."""
    import qosmanager.strategies as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        if not mod.name.startswith("_"):
            importlib.import_module(f"{pkg.__name__}.{mod.name}")
    known = [n for n in ORDER if n in REGISTRY] + sorted(n for n in REGISTRY if n not in ORDER)
    return {n: REGISTRY[n] for n in known}
