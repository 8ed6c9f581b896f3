"""Every fake host a test builds itself is a koordinator node: ``FakeHost.add_pod`` lays a pod out
with what koordlet's batch-resource hook and the kubelet write (``sim.koordnode``), from the pod
object ``pod_object`` makes of it (the one the agent tests put in their pods file or API server).

The agent-process tests (``test_run_command``, ``test_exporter_http``, ``test_kube_agent``,
``test_faults_*``, ...) build their nodes this way; a vanilla node there (BE pods without their batch
quota, shares and memory limit) would hide what the agent does on a real colocation node.  A test
that needs a vanilla node says so: ``koordinator=False`` in its ``FakeHost(...)`` call, the reason in
a comment on that line.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from qosmanager.api.pod import pod_meta
from qosmanager.host.cgroups import KubeQoS
from qosmanager.host.resources import milli_cpu_to_shares, shares_to_weight
from qosmanager.sim import koordnode
from qosmanager.sim.fakehost import V1_MEMORY_UNLIMITED, FakeContainer, FakeHost, FakePod
from qosmanager.sim.objects import pod_object
from test_run_command import fake_node

GIB = 1 << 30
TESTS = Path(__file__).parent


def cg(host: FakeHost, subsystem: str, rel: str, name: str) -> str:
    return host.read(f"cgroup/{subsystem + '/' if subsystem else ''}{rel}/{name}").strip()


def quota(host: FakeHost, rel: str) -> int:
    if host.version == 1:
        return int(cg(host, "cpu", rel, "cpu.cfs_quota_us"))
    q = cg(host, "", rel, "cpu.max").split()[0]
    return -1 if q == "max" else int(q)


def memory_limit(host: FakeHost, rel: str) -> int:
    if host.version == 1:
        v = int(cg(host, "memory", rel, "memory.limit_in_bytes"))
        return -1 if v == V1_MEMORY_UNLIMITED else v
    v2 = cg(host, "", rel, "memory.max")
    return -1 if v2 == "max" else int(v2)


def shares(host: FakeHost, rel: str) -> int:
    """v1 shares, or v2 weight turned back into the shares it came from (compared as weights)."""
    if host.version == 1:
        return int(cg(host, "cpu", rel, "cpu.shares"))
    return int(cg(host, "", rel, "cpu.weight"))


def as_read(host: FakeHost, v1_shares: int) -> int:
    return v1_shares if host.version == 1 else shares_to_weight(v1_shares)


@pytest.mark.parametrize("version", [1, 2])
def test_an_agent_tests_node_carries_koordlets_batch_values_on_be_pods(tmp_path: Path, version: int) -> None:
    """The node test_run_command's agents run on (FakeHost + make_pods + add_pods, pod_object's pods
    file): each BE pod dir and container holds koordlet's quota and memory limit for its batch
    resources (1 core, 1 GiB per container), LS pods the kubelet's; the QoS dirs the kubelet's shares."""
    host, pods, _ = fake_node(tmp_path, version)
    be = [p for p in pods if p.qos is KubeQoS.BESTEFFORT]
    assert be, "the agent tests' node has BE pods"
    for p in be:
        pod_dir = host.pod_dir(p.uid)
        n = len(p.containers)
        assert quota(host, pod_dir) == n * 100_000, "a BE pod dir without koordlet's batch quota: a vanilla node"
        assert memory_limit(host, pod_dir) == n * GIB
        assert shares(host, pod_dir) == as_read(host, milli_cpu_to_shares(n * 1000))
        for c in p.containers:
            rel = host.container_dir(p.uid, c.name)
            assert (quota(host, rel), memory_limit(host, rel)) == (100_000, GIB)
            assert shares(host, rel) == as_read(host, 1024)
    for p in pods:  # every pod as the model says for its object
        pod_level, containers = koordnode.pod_values(pod_meta(pod_object(p)))
        assert quota(host, host.pod_dir(p.uid)) == pod_level.quota
        assert memory_limit(host, host.pod_dir(p.uid)) == pod_level.memory_limit
        for c in p.containers:
            assert quota(host, host.container_dir(p.uid, c.name)) == containers[c.name].quota
    burstable = sum(pod_meta(pod_object(p)).cpu_request_milli for p in pods if p.qos is KubeQoS.BURSTABLE)
    layout = host.layout
    assert shares(host, layout.qos_dir(KubeQoS.BURSTABLE)) == as_read(host, milli_cpu_to_shares(burstable))
    assert shares(host, layout.qos_dir(KubeQoS.BESTEFFORT)) == as_read(host, 2)


def burstable(uid: str, n: int) -> FakePod:
    return FakePod(uid, "default", uid, KubeQoS.BURSTABLE,
                   [FakeContainer(f"c{i}", f"containerd://{uid[0] * 63}{i}") for i in range(n)])


def test_the_burstable_qos_shares_follow_pods_added_and_removed(tmp_path: Path) -> None:
    host = FakeHost(str(tmp_path / "host"), n_cpus=4)
    rel = host.layout.qos_dir(KubeQoS.BURSTABLE)
    host.add_pod(burstable("a", 2))  # pod_object: 500m requested per Burstable container
    assert shares(host, rel) == milli_cpu_to_shares(1000)
    host.add_pod(burstable("b", 1))
    assert shares(host, rel) == milli_cpu_to_shares(1500)
    host.remove_pod("a")
    assert shares(host, rel) == milli_cpu_to_shares(500)
    host.remove_pod("b")
    assert shares(host, rel) == 2  # the kubelet's minimum


def test_a_pod_added_with_its_object_is_laid_out_from_that_object(tmp_path: Path) -> None:
    host = FakeHost(str(tmp_path / "host"), version=2, n_cpus=4)
    be = FakePod("be-1", "default", "be", KubeQoS.BESTEFFORT, [FakeContainer("c", "containerd://" + "a" * 64)])
    host.add_pod(be, pod_meta(pod_object(be, cpu_milli=1500, memory=2 * GIB)))
    assert (quota(host, host.pod_dir("be-1")), memory_limit(host, host.pod_dir("be-1"))) == (150_000, 2 * GIB)


def test_a_vanilla_host_is_asked_for(tmp_path: Path) -> None:
    host = FakeHost(str(tmp_path / "host"), koordinator=False)  # the opt-out under test
    host.add_pods(FakeHost.make_pods(4, seed=1, be_fraction=1.0))
    for uid in host.pods:
        assert quota(host, host.pod_dir(uid)) == -1


def test_every_vanilla_opt_out_in_the_tests_says_why() -> None:
    """A test module may build a vanilla node only with the reason on the line (a comment)."""
    unexplained = []
    for path in sorted(TESTS.glob("*.py")):
        for no, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"koordinator\s*=\s*False\s*[,)]|koordinator_default\s*=\s*False", line) and "#" not in line:
                unexplained.append(f"{path.name}:{no}: {line.strip()}")
    assert not unexplained, "vanilla nodes without a reason:\n" + "\n".join(unexplained)
