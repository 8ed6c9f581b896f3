"""``qosmanager simulate --plot FILE.png``: the run as a picture (needs the optional extra ``plot``).

matplotlib is imported only here and only when a plot is asked for, so the agent and the other
commands never pay for it; without it the command says how to install it before it runs anything.
"""

from __future__ import annotations

import importlib.util
import itertools
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from qosmanager.sim.result import SimResult

INSTALL_HINT = "--plot needs matplotlib: pip install 'qosmanager[plot]' (or pip install matplotlib)"


class PlotUnavailable(RuntimeError):
    pass


def check_available() -> None:
    """Raise :class:`PlotUnavailable` with the install hint when matplotlib is missing."""
    if importlib.util.find_spec("matplotlib") is None:
        raise PlotUnavailable(INSTALL_HINT)


def draw(res: SimResult, path: str) -> None:
    """LS usage, BE usage, the BE limit, the CPU threshold and node memory over time (with memoryHigh: BE's
    memory, its memory.high and the spans a level was in force; with memory stalls: LS's and BE's share of time
    stalled and the PSI trigger events); evictions as marks."""
    check_available()
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    cfg = res.config
    cap = float(cfg.cpus)
    t = [r.t for r in res.records]
    fig, (ax, axm) = plt.subplots(2, 1, sharex=True, figsize=(10, 6), height_ratios=(3, 1))
    ax.plot(t, [r.ls_used for r in res.records], label="LS used", color="tab:blue")
    ax.plot(t, [r.be_used for r in res.records], label="BE used", color="tab:orange")
    ax.step(t, [cap if math.isinf(r.be_limit) else r.be_limit for r in res.records], where="pre",
            label="BE limit", color="tab:red", linestyle="--")
    ax.axhline(cap * cfg.cpu_threshold_percent / 100.0, color="grey", linestyle=":",
               label=f"threshold {cfg.cpu_threshold_percent} %")
    ax.set_ylabel("cores")
    ax.set_ylim(0, cap * 1.05)
    ax.legend(loc="upper left", fontsize="small")
    ax.set_title(f"qosmanager simulate: {cfg.containers} containers, cgroup v{cfg.cgroup_version}, "
                 f"{cfg.suppress_policy}")
    axm.plot(t, [100.0 * r.memory_used / r.memory_total for r in res.records], color="tab:green",
             label="node memory %")
    axm.axhline(cfg.memory_threshold_percent, color="grey", linestyle=":")
    if any(r.be_memory_high >= 0 for r in res.records):  # memoryHigh: BE's usage, its cap and the level
        axm.plot(t, [100.0 * r.be_memory / r.memory_total for r in res.records], color="tab:orange",
                 label="BE memory %")
        axm.step(t, [100.0 * r.be_memory_high / r.memory_total if r.be_memory_high >= 0 else math.nan
                     for r in res.records], where="pre", color="tab:red", linestyle="--", label="BE memory.high %")
        axm.fill_between(t, 0, 100, where=[r.memory_level >= 1 for r in res.records], step="pre",
                         color="tab:red", alpha=0.08, label="level >= 1 (BE capped)")
    elif any(r.memory_level >= 1 for r in res.records):  # v1: a soft limit, which holds nothing
        axm.fill_between(t, 0, 100, where=[r.memory_level >= 1 for r in res.records], step="pre",
                         color="tab:grey", alpha=0.08, label="level >= 1: v1 soft limit set (holds nothing)")
    if res.records and (res.records[-1].ls_stall_ms or res.records[-1].be_stall_ms):  # the pressure files
        for attr, label, color in (("ls_stall_ms", "LS memory stall %", "tab:blue"),
                                   ("be_stall_ms", "BE memory stall %", "tab:brown")):
            share = [0.0] + [(getattr(b, attr) - getattr(a, attr)) / 10.0 / max(b.t - a.t, 1e-9)
                             for a, b in itertools.pairwise(res.records)]
            axm.step(t, share, where="pre", color=color, linewidth=0.9, alpha=0.8, label=label)
    for i, (te, _, _) in enumerate(res.psi_events):
        axm.axvline(te, color="tab:cyan", alpha=0.6, linewidth=0.8, linestyle="-.",
                    label="PSI trigger event" if i == 0 else None)
    if any(r.memory_level >= 1 for r in res.records) or res.psi_events or (
            res.records and res.records[-1].ls_stall_ms):
        axm.legend(loc="lower left", fontsize="x-small")
    for e in res.evictions:
        axm.axvline(e.t, color="tab:purple", alpha=0.5, linewidth=0.8)
    axm.set_ylabel("memory %")
    axm.set_ylim(0, 105)
    axm.set_xlabel(f"simulated seconds (evictions marked: {len(res.evictions)})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
