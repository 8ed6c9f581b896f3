"""Command line: ``qosmanager run | simulate | replay | restore`` (flags pinned by docs/interfaces.md)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from qosmanager import __version__
from qosmanager.logfmt import LOG_FORMATS, setup_logging

# One thread for the numeric libraries, set before numpy is first imported (nothing above imports
# it): OpenBLAS, OpenMP and MKL otherwise start a thread per CPU, 95 idle threads and their buffers
# on a 96-CPU node, for vectors a single core handles in microseconds.  An operator's own setting
# wins.
NUMERIC_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
for _var in NUMERIC_THREAD_VARS:
    os.environ.setdefault(_var, "1")


# glibc's malloc, tuned for a long-running agent with a few threads (mallopt, before any thread
# starts): one arena instead of one per thread that allocates (the HTTP, watch and event threads
# would each keep their own, pages freed in one never serving another), and freed memory at the
# top of the heap returned beyond 128 KiB instead of a threshold that grows with the largest block
# ever freed (a decoded pod list).  At 2,000 containers this lowers the peak by about 5 MiB.  The
# operator's own MALLOC_ARENA_MAX / MALLOC_TRIM_THRESHOLD_ win (glibc reads them at start).
M_TRIM_THRESHOLD, M_ARENA_MAX = -1, -8
MALLOC_TUNING = ((M_ARENA_MAX, "MALLOC_ARENA_MAX", 1), (M_TRIM_THRESHOLD, "MALLOC_TRIM_THRESHOLD_", 128 << 10))


def tune_malloc() -> list[str]:
    """Apply :data:`MALLOC_TUNING` where the environment does not set it; the names applied
    (none where the C library is not glibc)."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own symbols: the C library's
    except (OSError, AttributeError):
        return []
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return [var for param, var, value in MALLOC_TUNING if var not in os.environ and mallopt(param, value) == 1]


def terminal_width() -> int:
    """The width help is wrapped to: ``$COLUMNS``, else the terminal's, else 80 (what
    ``shutil.get_terminal_size`` gives).  Not ``shutil`` itself: argparse's own formatter imports it
    for every ``add_argument`` (a check of the metavar), and ``shutil`` imports ``bz2`` and ``lzma``,
    about 0.8 MiB of every agent that never prints its help."""
    with contextlib.suppress(ValueError):
        if int(os.environ.get("COLUMNS", "0")) > 0:
            return int(os.environ["COLUMNS"])
    try:
        columns = os.get_terminal_size(sys.__stdout__.fileno()).columns if sys.__stdout__ else 0
    except (AttributeError, ValueError, OSError):
        columns = 0
    return columns or 80


class HelpFormatter(argparse.HelpFormatter):
    """Every option's default at the end of its help, unless the help says it already."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if len(args) < 4 and kwargs.get("width") is None:  # argparse's default, without shutil
            kwargs["width"] = terminal_width() - 2
        super().__init__(*args, **kwargs)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if not action.option_strings or action.default is argparse.SUPPRESS or "default" in text:
            return text
        if isinstance(action, (argparse._StoreTrueAction, argparse._CountAction)):
            shown = "off" if not action.default else str(action.default)
        elif action.default is None:
            shown = "none"
        elif isinstance(action.default, str):
            shown = repr(action.default) if action.default == "" else action.default
        else:
            shown = f"{action.default:g}" if isinstance(action.default, float) else str(action.default)
        return f"{text} (default: {shown})".lstrip()


class Parser(argparse.ArgumentParser):
    """A usage error is one line naming the flag (and where to look), exit status 2; ``--help`` gives
    every option's default."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def duration(text: str) -> float:
    """``1s``, ``500ms``, ``2m``, ``1h`` or a plain number of seconds; never negative."""
    m = re.fullmatch(r"\s*(-)?\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r} (use e.g. 1s, 500ms, 2m)")
    if m.group(1):
        raise argparse.ArgumentTypeError(f"a duration cannot be negative, got {text!r}")
    value = float(m.group(2))
    return value * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}[m.group(3)]


def positive_duration(text: str) -> float:
    value = duration(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text!r}")
    return value


def seconds(text: str) -> float:
    """A number of seconds >= 0 (koordlet's ``--*-seconds`` flags; 0 switches a strategy off)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0, got {text!r}")
    return value


def feature_gates(text: str) -> dict[str, bool]:
    gates: dict[str, bool] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep or value.strip().lower() not in ("true", "false"):
            raise argparse.ArgumentTypeError(f"invalid feature gate {part!r} (use Name=true|false)")
        gates[name.strip()] = value.strip().lower() == "true"
    return gates


def gates_help(extra: str = "") -> str:
    from qosmanager.framework.gates import ACCEPTED_ONLY, ACTED_ON, describe

    return (f"Name=true,Other=false{extra}. Acted on here: {describe(ACTED_ON)}; AllAlpha and AllBeta switch "
            f"every alpha or beta gate. Accepted for koordlet compatibility, no effect here: "
            f"{describe(ACCEPTED_ONLY)} (default: each gate's own, marked (on))")


def strategies_help() -> str:
    from qosmanager.framework.manager import load_strategies

    names = ", ".join(f"{n} ({'/'.join(c.gates)})" for n, c in load_strategies().items())
    return (f"comma-separated strategy names to run, each needing one of its gates on: {names} "
            "(default: every strategy whose gate is on)")


def add_host_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cgroup-root", default="/sys/fs/cgroup", help="host cgroup mount")
    p.add_argument("--proc-root", default="/proc", help="host procfs")
    p.add_argument("--sys-root", default="/sys", help="host sysfs")
    p.add_argument("--cgroup-version", default="auto", choices=["auto", "1", "2"],
                   help="auto: from the file system type of --cgroup-root")
    p.add_argument("--cgroup-driver", default="auto", choices=["auto", "cgroupfs", "systemd"],
                   help="auto: from the kubepods layout found under --cgroup-root")
    p.add_argument("--kubelet-cgroup-root", default="/",
                   help="the kubelet's cgroupRoot: where kubepods sits inside each hierarchy")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="qosmanager", description=__doc__)
    parser.add_argument("--version", action="version", version=f"qosmanager {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="more logging: run logs INFO by default and DEBUG with -v; simulate and replay "
                             "only warnings by default, INFO with -v, DEBUG with -vv")
    parser.add_argument("--log-format", choices=LOG_FORMATS, default="text",
                        help="text, or json: one object per line (ts, level, logger, msg, fields)")
    sub = parser.add_subparsers(dest="command", required=True)
    # -v and --log-format also after the subcommand (an image's entrypoint already says "run")
    verbose = Parser(add_help=False)
    verbose.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                         help="more logging (run: -v for debug; simulate, replay: -v info, -vv debug)")
    verbose.add_argument("--log-format", choices=LOG_FORMATS, default=argparse.SUPPRESS,
                         help="text (default), or json: one object per line (ts, level, logger, msg, fields)")

    run = sub.add_parser("run", help="run the agent", parents=[verbose])
    add_host_flags(run)
    run.add_argument("--node-name", default=os.environ.get("NODE_NAME", ""),
                     help="this node's name (default: $NODE_NAME)")
    run.add_argument("--kubeconfig", default=None,
                     help="Kubernetes source of node, pods and NodeSLO (default: in-cluster when no --pods-file)")
    run.add_argument("--pods-file", default=None, help="standalone: a PodList JSON (the kubelet's /pods)")
    run.add_argument("--node-file", default=None, help="standalone: a Node object (YAML or JSON)")
    run.add_argument("--node-slo-file", default=None,
                     help="standalone: a NodeSLO object (YAML or JSON; default: none, koordlet's defaults)")
    run.add_argument("--evict-mode", default=None, choices=["api", "kill", "none"],
                     help="default: api with Kubernetes, none standalone")
    run.add_argument("--dry-run", action="store_true", help="decide and audit; write and evict nothing")
    run.add_argument("--audit-log", default=None, help="JSON-lines audit file (default: none)")
    run.add_argument("--originals-file", default=None,
                     help="keep here what each file held before the agent first changed it, for "
                          "`qosmanager restore` at uninstall (default: not kept)")
    run.add_argument("--metrics-addr", default="127.0.0.1:9316", help="/metrics and /healthz; empty disables")
    run.add_argument("--feature-gates", type=feature_gates, default={}, help=gates_help())
    run.add_argument("--collect-interval", type=positive_duration, default=1.0,
                     help="metric collection period")
    run.add_argument("--collect-mode", default="demand", choices=["demand", "all"],
                     help="demand: read what the enabled strategies and exported metrics need; "
                          "all: every stat file of every pod and container each tick")
    run.add_argument("--react-mode", default="fast", choices=["fast", "tick"],
                     help="fast: BE's CPU limit lowered within 100 ms of a rise in LS demand (a 50 ms sampler "
                          "thread); tick: only at cpuSuppress's interval, koordlet's pace")
    run.add_argument("--duration", type=duration, default=0.0,
                     help="stop after this long (default: 0, forever)")
    run.add_argument("--force-update-seconds", type=seconds, default=60.0,
                     help="re-check files written earlier than this (corrects outside changes)")
    add_qos_flags(run)

    replay = sub.add_parser("replay", help="evaluate strategies offline on a scenario file (prints JSON)",
                            parents=[verbose])
    replay.add_argument("scenario", help="scenario file (YAML or JSON; - reads standard input)")
    replay.add_argument("--compact", action="store_true",
                        help="print only writes, evictions and files (no refused/errors/audit)")

    sim = sub.add_parser("simulate", parents=[verbose],
                         help="run the real agent on a synthetic dense node with a closed-loop load")
    sim.add_argument("--containers", type=int, default=2000, help="containers on the node (2 per pod)")
    sim.add_argument("--duration", type=duration, default=30.0, help="simulated time to run")
    sim.add_argument("--cgroup-version", type=int, default=1, choices=[1, 2], help="of the synthetic node")
    sim.add_argument("--seed", type=int, default=0, help="seed of the pods and the load")
    sim.add_argument("--cpus", type=int, default=64, help="CPUs of the synthetic node")
    sim.add_argument("--memory-gib", type=int, default=256, help="memory of the synthetic node (GiB)")
    sim.add_argument("--suppress-policy", default="cfsQuota", choices=["cfsQuota", "cpuset"],
                     help="NodeSLO cpuSuppressPolicy")
    sim.add_argument("--step", type=duration, default=1.0, help="load-model step (simulated seconds)")
    sim.add_argument("--react-mode", default="fast", choices=["fast", "tick"],
                     help="as run's: fast runs the fast path every 50 ms of simulated time between ticks "
                          "(the model's QoS-dir counters move at that cadence too); tick: cpuSuppress's ticks only")
    sim.add_argument("--collect-mode", default="demand", choices=["demand", "all"],
                     help="the agent's --collect-mode (all: the read-everything collector, for comparison)")
    sim.add_argument("--ls-memory-growth", type=float, default=0.0, metavar="FRACTION",
                     help="every LS pod's memory grows by this fraction of itself over the run (e.g. 0.4: with "
                          "BEMemoryHigh the cap holds BE, then the node reaches memoryEvict's threshold anyway; 3: "
                          "LS outgrows the node and stalls on memory, the agent's PSI triggers fire)")
    sim.add_argument("--feature-gates", type=feature_gates, default={},
                     help=gates_help(" on top of the simulation's (BEMemoryEvict=true)"))
    sim.add_argument("--plot", default=None, metavar="FILE.png",
                     help="draw the run (needs matplotlib; default: no plot)")
    sim.add_argument("--audit-log", default=None, help="keep the agent's JSON-lines audit here (default: none)")
    sim.add_argument("--workdir", default=None,
                     help="build the node here (default: a temporary dir on /dev/shm)")
    sim.add_argument("--keep", action="store_true", help="keep the synthetic node's files")
    sim.add_argument("--real-time", action="store_true",
                     help="run on the wall clock instead of simulated time")
    sim.add_argument("--json", default=None, metavar="FILE",
                     help="also write the timeline and summary as JSON (default: none)")
    from qosmanager.restore import add_restore_parser

    add_restore_parser(sub, [verbose], add_host_flags)
    return parser


def add_qos_flags(p: argparse.ArgumentParser) -> None:
    """koordlet's QoS-manager flags (same names and defaults)."""
    p.add_argument("--reconcile-interval-seconds", type=seconds, default=1.0,
                   help="cpuBurst and the reconcile strategies (0: off)")
    p.add_argument("--cpu-suppress-interval-seconds", type=seconds, default=1.0, help="cpuSuppress (0: off)")
    p.add_argument("--cpu-evict-interval-seconds", type=seconds, default=1.0, help="cpuEvict (0: off)")
    p.add_argument("--memory-evict-interval-seconds", type=seconds, default=1.0, help="memoryEvict (0: off)")
    p.add_argument("--memory-evict-cool-time-seconds", type=seconds, default=4.0,
                   help="no memory eviction for this long after one")
    p.add_argument("--cpu-evict-cool-time-seconds", type=seconds, default=20.0,
                   help="no CPU eviction for this long after one")
    p.add_argument("--kubelet-cpu-manager-policy", default=None, choices=["none", "static"],
                   help="the kubelet's CPU manager policy, overriding what the node says (default: not "
                        "given: the kubelet's cpu_manager_state, else --kubelet-config, else the topology "
                        "annotation, else none)")
    p.add_argument("--kubelet-root-dir", default="/var/lib/kubelet",
                   help="the kubelet's root directory: its cpu_manager_state is read from here "
                        "(empty: not read)")
    p.add_argument("--kubelet-config", default=None,
                   help="the kubelet's configuration file (cpuManagerPolicy, reservedSystemCPUs; default: none)")
    p.add_argument("--strategies", default=None, help=strategies_help())


def log_level(command: str, verbosity: int) -> int:
    """``run`` says what it does (INFO; -v: DEBUG); simulate and replay print their own output and
    log only warnings unless asked (-v: INFO, -vv: DEBUG)."""
    if command == "run":
        return logging.INFO if verbosity == 0 else logging.DEBUG
    return logging.WARNING if verbosity == 0 else logging.INFO if verbosity == 1 else logging.DEBUG


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(log_level(args.command, args.verbose), args.log_format, sys.stderr)
    if args.command == "run":
        tune_malloc()  # before the agent starts its threads
        from qosmanager.agent import run_from_args

        return run_from_args(args)
    if args.command == "replay":
        from qosmanager.sim.replay import replay_main

        return replay_main(args.scenario, compact=args.compact)
    if args.command == "restore":
        from qosmanager.restore import restore_from_args

        return restore_from_args(args)
    if args.command == "simulate":
        tune_malloc()  # the simulated agent runs with the deployed agent's allocator settings
        from qosmanager.sim.simulate import simulate_from_args

        return simulate_from_args(args)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
