"""The standalone state files in examples/ (what the README shows an operator) parse without a single
warning and drive the real strategies: a busy node suppresses the example's BE pod."""

from __future__ import annotations

from pathlib import Path

from qosmanager.api.decode import load_object
from qosmanager.api.node import node_meta
from qosmanager.api.nodeslo import parse_nodeslo
from qosmanager.api.pod import pod_list
from qosmanager.sim.harness import Harness

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "standalone"


def load(name: str) -> dict:
    return load_object((EXAMPLES / name).read_text(), name)


def test_the_examples_parse_cleanly() -> None:
    pods, errors = pod_list(load("pods.json"))
    assert errors == [] and [p.key for p in pods] == ["shop/web-0", "batch/spark-exec-1"]
    assert all(p.warnings == () for p in pods)
    assert [p.qos for p in pods] == ["LS", "BE"] and pods[0].cpu_burst is not None
    node = node_meta(load("node.yaml"))
    assert node.name == "node-1"
    spec = parse_nodeslo(load("nodeslo.yaml"))
    assert spec.warnings == ()
    assert spec.resource_used_threshold_with_be.enable is True
    assert spec.resource_used_threshold_with_be.cpu_suppress_policy == "cfsQuota"


def test_the_examples_suppress_be_on_a_busy_node() -> None:
    h = Harness(n_cpus=8, memory_bytes=32 << 30, strategies=["cpuSuppress"])
    h.set_node(load("node.yaml"))
    h.set_pods(load("pods.json")["items"])
    h.set_nodeslo(load("nodeslo.yaml"))
    web, spark = "0b6c2a9e-3f7d-4c1a-9a57-2d8e6f1b4c01", "7e3d9c1b-5a2f-4e8d-b6c4-1f0a9e8d7c02"
    h.add_samples("node_cpu_usage", [(h.now, 6.0)])
    h.add_samples("pod_cpu_usage", [(h.now, 2.0)], pod=web)
    h.add_samples("pod_cpu_usage", [(h.now, 3.5)], pod=spark)
    h.tick("cpuSuppress")
    quota = [w for w in h.recorded.writes if w["file"].endswith("besteffort/cpu.cfs_quota_us")]
    # the threshold is 65 % of the 8-CPU capacity = 5.2 cores; LS uses 2 and the system
    # 6 - 2 - 3.5 = 0.5, so BE may have 2.7 cores: 270,000 us per 100,000 us period
    assert quota and int(quota[-1]["value"]) == 270000
