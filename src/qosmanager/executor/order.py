"""The leveled order: in which phase, and so in which order, each write of a batch goes.

Decides the steps of one write and the order of the batch, so that a parent never holds less than a
child at any moment (the kernel rejects that for v1 quotas and cpusets).  Two phases: phase 0 is
written parents first, phase 1 children first.  A limit that rises (``order == "larger"``) goes in
phase 0, one that falls in phase 1; a cpuset (``"looser"``) that gains CPUs first widens to the union
of old and new in phase 0, then narrows to the exact set in phase 1 (one step where the union is the
exact set); a knob with no order (``"none"``) goes in phase 0.
"""

from __future__ import annotations

from collections.abc import Callable

from qosmanager.executor.types import Item
from qosmanager.host import resources as res
from qosmanager.host.cpuset import format_cpu_list, parse_cpu_list

# (phase, what to write to a kernel file, what a plain file must hold afterwards)
Step = tuple[int, str, str]


def steps(it: Item, cur: str | None, content: str, after: str,
          canonical: Callable[[res.Resource, str], str]) -> list[Step]:
    """The steps that take ``it``'s file from ``cur`` to ``content`` (``after``: the whole file then)."""
    w, r = it.write, it.resource
    out: list[Step] = []
    phase_exact = 1
    if cur is not None and r.order == "larger":
        old_c = canonical(r, cur)
        new_c = canonical(r, content) if w.raw else w.value
        try:
            phase_exact = 0 if res.larger(old_c, new_c) else 1
        except ValueError:
            phase_exact = 1
    elif cur is not None and r.order == "looser":
        try:
            old_set = set(parse_cpu_list(cur))
            new_set = set(parse_cpu_list(content))
        except ValueError:
            old_set = new_set = set()
        if not new_set <= old_set:
            union = format_cpu_list(old_set | new_set)
            out.append((0, union, union))
            if old_set | new_set == new_set:
                return out  # the union is the exact value: one step
    elif r.order == "none":
        phase_exact = 0
    out.append((phase_exact, content, after))
    return out


def phases(items: list[Item]) -> list[list[tuple[Item, str, str]]]:
    """The batch's writes, ``(item, entry, payload)``, in two phases: phase 0 (limits rise, cpusets
    widen) parents first, phase 1 (limits fall, cpusets narrow) children first.  A kernel file takes the
    entry; a plain (fake) file is given the whole table it would show."""
    out = []
    for phase in (0, 1):
        batch = [(it, kernel, plain if it.truncate else kernel) for it in items
                 for ph, kernel, plain in it.steps if ph == phase]
        batch.sort(key=lambda x: x[0].depth, reverse=(phase == 1))
        out.append(batch)
    return out
