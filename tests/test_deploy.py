"""deploy/ stays consistent with the code: the DaemonSet's flags and mounts, RBAC, the NodeSLO CRD
(generated from the agent's schema, and accepting every object koordinator's CRD accepts), the
Dockerfile and the CI script that builds its wheel.  kubernetes-validate runs in .ci/check-deploy,
not here."""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

import qosmanager
from qosmanager.api import nodeslo
from qosmanager.api.quantity import parse_quantity
from qosmanager.cli import build_parser
from qosmanager.exporter.server import MetricsServer, parse_addr
from qosmanager.framework.gates import FeatureGates
from qosmanager.host.resources import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
OVERLAYS = DEPLOY / "overlays"
# manifests beside the kustomization that it leaves out on purpose (each says why in its header)
NOT_IN_KUSTOMIZATION = {"nodeslo-example.yaml", "networkpolicy.yaml"}
CHECK_DEPLOY = ROOT / ".ci" / "check-deploy"
CHECK_IMAGE = ROOT / ".ci" / "check-image"


def _load_gen_crd() -> ModuleType:
    spec = importlib.util.spec_from_file_location("qosmanager_deploy_gen_crd", DEPLOY / "gen_crd.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen_crd = _load_gen_crd()


def manifest(name: str) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all((K8S / name).read_text(encoding="utf-8")) if d]
    assert len(docs) == 1, f"{name}: one object per file"
    return docs[0]


@pytest.fixture(scope="module")
def daemonset() -> dict[str, Any]:
    return manifest("daemonset.yaml")


@pytest.fixture(scope="module")
def container(daemonset: dict[str, Any]) -> dict[str, Any]:
    (c,) = daemonset["spec"]["template"]["spec"]["containers"]
    return c


@pytest.fixture(scope="module")
def run_args(container: dict[str, Any]) -> Any:
    """The DaemonSet's args as ``qosmanager run`` parses them (the image's entrypoint is ``run``)."""
    return build_parser().parse_args(["run", *container["args"]])


def flag_value(container: dict[str, Any], flag: str) -> str:
    values = [a.split("=", 1)[1] for a in container["args"] if a.startswith(flag + "=")]
    assert len(values) == 1, f"{flag} must be given once, as {flag}=VALUE: {container['args']}"
    return values[0]


def mount_for(daemonset: dict[str, Any], container: dict[str, Any], path: str) -> tuple[dict, dict]:
    """The volumeMount at ``path`` and its volume."""
    mounts = [m for m in container["volumeMounts"] if m["mountPath"].rstrip("/") == path.rstrip("/")]
    assert len(mounts) == 1, f"no single volume mounted at {path}"
    volumes = {v["name"]: v for v in daemonset["spec"]["template"]["spec"]["volumes"]}
    return mounts[0], volumes[mounts[0]["name"]]


# ---------------------------------------------------------------------------------------------
# The DaemonSet against the command line


def test_every_daemonset_flag_is_accepted_by_qosmanager_run(container: dict[str, Any]) -> None:
    # parse_args exits on an unknown flag or a bad value (a feature gate, a duration)
    args = build_parser().parse_args(["run", *container["args"]])
    FeatureGates.from_overrides(args.feature_gates)  # unknown gate names are refused here
    # and as the installed command documents them
    help_text = subprocess.run([sys.executable, "-m", "qosmanager", "run", "--help"], capture_output=True,
                               text=True, timeout=60, check=True).stdout
    for arg in container["args"]:
        assert arg.startswith("--"), f"{arg!r}: give every flag as --name=value"
        assert re.search(rf"(^|\s){re.escape(arg.split('=', 1)[0])}\b", help_text), arg


def test_host_roots_are_the_host_directories_mounted_writable_where_the_agent_writes(
        daemonset: dict[str, Any], container: dict[str, Any], run_args: Any) -> None:
    defaults = build_parser().parse_args(["run"])  # the pinned defaults are the host's own paths
    features = FeatureGates.from_overrides(run_args.feature_gates)
    roots = (("--cgroup-root", "cgroup_root"), ("--proc-root", "proc_root"), ("--sys-root", "sys_root"))
    for flag, attr in roots:
        _, volume = mount_for(daemonset, container, flag_value(container, flag))
        assert volume["hostPath"]["path"].rstrip("/") == getattr(defaults, attr).rstrip("/"), flag
    # the cgroup tree is written with the default gates; /proc only by systemConfigReconcile (its
    # overlay), and sysfs itself never: its writes are resctrl and debugfs, file systems of their own
    cgroup, _ = mount_for(daemonset, container, flag_value(container, "--cgroup-root"))
    proc, _ = mount_for(daemonset, container, flag_value(container, "--proc-root"))
    sys_mount, sys_volume = mount_for(daemonset, container, flag_value(container, "--sys-root"))
    assert not cgroup.get("readOnly", False)
    assert proc.get("readOnly") is True and not features.enabled("SystemConfig")
    assert sys_mount.get("readOnly") is True and sys_volume["hostPath"]["path"] == "/sys"
    # resctrl mounted on the host after the agent started must reach the container
    assert sys_mount.get("mountPropagation") == "HostToContainer"
    assert cgroup.get("mountPropagation") == "HostToContainer"


def test_only_the_cgroup_tree_and_the_audit_directory_are_writable(
        daemonset: dict[str, Any], container: dict[str, Any]) -> None:
    writable = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly", False)}
    assert writable == {flag_value(container, "--cgroup-root"),
                        os.path.dirname(flag_value(container, "--audit-log"))}
    volumes = {v["name"]: v for v in daemonset["spec"]["template"]["spec"]["volumes"]}
    host_paths = {v["hostPath"]["path"] for v in volumes.values() if "hostPath" in v}
    assert host_paths == {"/sys", "/sys/fs/cgroup", "/proc", "/var/log/qosmanager", "/var/lib/kubelet"}
    assert {m["name"] for m in container["volumeMounts"]} == set(volumes), "a volume mounted nowhere"


def test_every_sysfs_file_the_agent_writes_has_its_way_through_the_read_only_sys_mount() -> None:
    """sysfs is mounted read-only; what the agent writes below the sys root is on file systems of their
    own that a read-only bind does not make read-only (resctrl, debugfs), or in the SystemConfig
    overlay, which mounts those files read-write one by one.  A new sysfs write must be placed here."""
    writes = {r.rel for r in REGISTRY.values() if r.root == "sys"}
    assert writes == {"kernel/mm/memcg_reaper/reap_background", "kernel/mm/pagecache_limit/enabled",
                      "kernel/debug/sched_features", "fs/resctrl/{group}/schemata", "fs/resctrl/{group}/tasks"}
    overlay = rendered_daemonset("system-config")
    (c,) = overlay["spec"]["template"]["spec"]["containers"]
    volumes = {v["name"]: v for v in overlay["spec"]["template"]["spec"]["volumes"]}
    sys_root = flag_value(c, "--sys-root")
    for rel in sorted(w for w in writes if w.startswith("kernel/mm/")):
        mount, volume = mount_for(overlay, c, f"{sys_root}/{rel}")
        assert not mount.get("readOnly", False), rel
        assert volume["hostPath"] == {"path": f"/sys/{rel}", "type": "File"}, rel
        assert volumes[mount["name"]] == volume


def test_kubelet_state_is_mounted_read_only_and_decides_the_cpu_manager_policy(
        daemonset: dict[str, Any], container: dict[str, Any], run_args: Any) -> None:
    defaults = build_parser().parse_args(["run"])
    root = flag_value(container, "--kubelet-root-dir")
    mount, volume = mount_for(daemonset, container, root)
    # the host's kubelet root (the flag's default), the directory (the checkpoint is replaced by a
    # rename), read-only
    assert volume["hostPath"] == {"path": defaults.kubelet_root_dir, "type": "Directory"}
    assert mount.get("readOnly") is True and mount.get("mountPropagation", "None") == "None"
    # kubeadm's configuration file, inside the same mount
    config = flag_value(container, "--kubelet-config")
    assert os.path.dirname(config) == root.rstrip("/")
    # no policy flag: the policy is read from the node, never pinned for every node at once
    assert run_args.kubelet_cpu_manager_policy is None
    assert not any(a.startswith("--kubelet-cpu-manager-policy") for a in container["args"])
    # the pod volumes and CSI mounts below it are masked by empty directories, read-only too
    volumes = {v["name"]: v for v in daemonset["spec"]["template"]["spec"]["volumes"]}
    below = [m for m in container["volumeMounts"] if m["mountPath"].startswith(root.rstrip("/") + "/")]
    assert {m["mountPath"] for m in below} == {f"{root}/pods", f"{root}/plugins"}
    for m in below:
        assert m.get("readOnly") is True and "emptyDir" in volumes[m["name"]], m
        assert m.get("mountPropagation", "None") == "None"
    # and the kubelet's files the agent reads are at the top of the mount, outside the masks
    assert os.path.dirname(config) == root and defaults.kubelet_root_dir == "/var/lib/kubelet"


def test_audit_log_goes_to_a_host_directory(daemonset: dict[str, Any], container: dict[str, Any]) -> None:
    audit = flag_value(container, "--audit-log")
    mount, volume = mount_for(daemonset, container, os.path.dirname(audit))
    assert not mount.get("readOnly", False)
    assert volume["hostPath"] == {"path": "/var/log/qosmanager", "type": "DirectoryOrCreate"}


def test_node_name_comes_from_the_downward_api(container: dict[str, Any], run_args: Any) -> None:
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    # --node-name defaults to $NODE_NAME: not passed, or passed as the variable itself
    assert not any(a.startswith("--node-name") for a in container["args"]) or \
        "--node-name=$(NODE_NAME)" in container["args"]
    assert run_args.kubeconfig is None, "in a pod the agent uses the in-cluster config"


def test_metrics_are_bound_to_the_pod_ip_and_probes_reach_the_agent(
        daemonset: dict[str, Any], container: dict[str, Any]) -> None:
    addr = flag_value(container, "--metrics-addr")
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    # the kubelet expands $(POD_IP) before the agent sees it: an IPv4 and an IPv6 pod IP both parse
    assert "$(POD_IP)" in addr
    port = parse_addr(addr.replace("$(POD_IP)", "10.244.1.7"))[1]
    assert parse_addr(addr.replace("$(POD_IP)", "10.244.1.7")) == ("10.244.1.7", port)
    assert parse_addr(addr.replace("$(POD_IP)", "fd00:10:244::7")) == ("fd00:10:244::7", port)
    ports = {p["name"]: p for p in container["ports"]}
    assert ports["metrics"]["containerPort"] == port
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = container[probe]["httpGet"]
        # liveness leaves out the state check: an API-server outage must not restart the agent
        want = "/healthz?probe=liveness" if probe == "livenessProbe" else "/healthz"
        assert get["path"] == want, probe
        assert get["port"] in ("metrics", port), probe
        assert "host" not in get, "the kubelet probes the pod IP, where the agent listens"
    annotations = daemonset["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(port)
    assert annotations["prometheus.io/path"] == "/metrics"
    assert not daemonset["spec"]["template"]["spec"].get("hostNetwork", False)


def test_the_agent_listens_on_the_address_the_daemonset_gives_and_answers_healthz(
        container: dict[str, Any]) -> None:
    """The DaemonSet's --metrics-addr with $(POD_IP) expanded (a loopback address standing in for the
    pod IP, port 0 for a free one): the server binds it and /healthz answers as the probes ask."""
    import urllib.request

    addr = flag_value(container, "--metrics-addr").replace("$(POD_IP)", "127.0.0.1")
    addr = addr.rpartition(":")[0] + ":0"
    server = MetricsServer(addr, lambda: "", lambda liveness=False: (True, {"status": "ok"}))
    server.start()
    try:
        host, port = server.address
        assert host == "127.0.0.1"
        for path in ("/healthz", "/healthz?probe=liveness"):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
                assert resp.status == 200, path
    finally:
        server.stop()


def test_pod_shape(daemonset: dict[str, Any], container: dict[str, Any]) -> None:
    spec = daemonset["spec"]
    pod = spec["template"]["spec"]
    assert spec["updateStrategy"]["type"] == "RollingUpdate"
    # two agents on one node would fight over the same files
    assert spec["updateStrategy"]["rollingUpdate"]["maxSurge"] == 0
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    # the host's PID namespace is for kill mode only (deploy/overlays/kill-mode)
    assert "hostPID" not in pod and not pod.get("hostNetwork", False) and not pod.get("hostIPC", False)
    assert {"operator": "Exists"} in pod["tolerations"]
    assert pod["priorityClassName"] == "system-node-critical"
    assert 0 < pod["terminationGracePeriodSeconds"] <= 30  # SIGTERM stops the agent within one interval
    assert container["image"] == f"qosmanager:{qosmanager.__version__}"


def test_container_is_root_but_not_privileged(container: dict[str, Any], run_args: Any) -> None:
    sc = container["securityContext"]
    assert sc["privileged"] is False
    assert sc["runAsUser"] == 0  # root owns the cgroup, sysctl and resctrl files
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    # SYS_NICE only: the fast path's sampler thread in SCHED_FIFO (qosmanager.host.sched; refused, it
    # warns at every start).  The default evicts through the Eviction API; KILL is kill mode's
    # (deploy/overlays/kill-mode), and the agent mounts nothing (not even resctrl)
    assert sc["capabilities"]["add"] == ["SYS_NICE"]
    assert set(sc["capabilities"]) == {"drop", "add"}
    assert run_args.evict_mode == "api"
    mounts = container["volumeMounts"]
    # Bidirectional propagation is only allowed in privileged containers
    assert all(m.get("mountPropagation") != "Bidirectional" for m in mounts)


def test_resources_match_the_documented_sizing(container: dict[str, Any]) -> None:
    res = container["resources"]
    expected = {("requests", "cpu"): "100m", ("requests", "memory"): "80Mi",
                ("limits", "cpu"): "500m", ("limits", "memory"): "256Mi"}
    assert {(k, r): res[k][r] for k, r in expected} == expected
    for r in ("cpu", "memory"):
        assert parse_quantity(res["requests"][r]) <= parse_quantity(res["limits"][r])
    readme = (DEPLOY / "README.md").read_text(encoding="utf-8")
    for value in expected.values():
        assert f"`{value}`" in readme, f"deploy/README.md does not state {value}"


# ---------------------------------------------------------------------------------------------
# Overlays: what kill mode and SystemConfig add, and nothing else


def json_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """RFC 6902 as the overlays use it (add, replace, remove, test): ``doc`` patched, a copy."""
    doc = copy.deepcopy(doc)
    for op in ops:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node = doc
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        kind = op["op"]
        if isinstance(node, list):
            index = len(node) if last == "-" else int(last)
            if kind == "test":
                assert node[index] == op["value"], f"test failed at {op['path']}: {node[index]!r}"
            elif kind == "add":
                node.insert(index, copy.deepcopy(op["value"]))
            elif kind == "replace":
                assert index < len(node), op["path"]
                node[index] = copy.deepcopy(op["value"])
            else:
                assert kind == "remove", kind
                del node[index]
        elif kind == "test":
            assert node[last] == op["value"], f"test failed at {op['path']}: {node.get(last)!r}"
        elif kind == "replace":
            assert last in node, f"replace of a missing {op['path']}"
            node[last] = copy.deepcopy(op["value"])
        elif kind == "add":
            node[last] = copy.deepcopy(op["value"])
        else:
            assert kind == "remove", kind
            del node[last]
    return doc


def rendered_daemonset(overlay: str) -> dict[str, Any]:
    """The DaemonSet as ``kubectl apply -k deploy/overlays/<overlay>`` creates it."""
    kustomization = yaml.safe_load((OVERLAYS / overlay / "kustomization.yaml").read_text(encoding="utf-8"))
    assert kustomization["resources"] == ["../../kubernetes"]
    assert set(kustomization) == {"apiVersion", "kind", "resources", "patches"}
    doc = manifest("daemonset.yaml")
    for patch in kustomization["patches"]:
        target = patch["target"]
        assert (target["kind"], target["name"]) == (doc["kind"], doc["metadata"]["name"])
        assert f"{target['group']}/{target['version']}" == doc["apiVersion"]
        ops = yaml.safe_load((OVERLAYS / overlay / patch["path"]).read_text(encoding="utf-8"))
        doc = json_patch(doc, ops)
    return doc


def _diff(a: Any, b: Any, path: str = "") -> set[str]:
    """Paths at which ``a`` and ``b`` differ (list items by index)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return {d for k in a.keys() | b.keys() for d in _diff(a.get(k), b.get(k), f"{path}/{k}")}
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return {d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _diff(x, y, f"{path}/{i}")}
    return set() if a == b else {path}


def test_the_overlays_are_the_only_ones_and_render() -> None:
    assert sorted(p.name for p in OVERLAYS.iterdir()) == ["dry-run", "kill-mode", "system-config"]
    for overlay in ("dry-run", "kill-mode", "system-config"):
        d = rendered_daemonset(overlay)
        build_parser().parse_args(["run", *d["spec"]["template"]["spec"]["containers"][0]["args"]])


def test_dry_run_overlay_adds_dry_run_and_nothing_else(daemonset: dict[str, Any]) -> None:
    dry = rendered_daemonset("dry-run")
    args = dry["spec"]["template"]["spec"]["containers"][0]["args"]
    assert build_parser().parse_args(["run", *args]).dry_run
    base = daemonset["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == [*base, "--dry-run"]
    assert _diff(daemonset, dry) == {"/spec/template/spec/containers/0/args"}


def test_the_default_kustomization_leaves_koordinators_crd_alone() -> None:
    """Beside koordinator, ``kubectl apply -k deploy/kubernetes`` must not replace its NodeSLO CRD: the
    CRD is its own kustomization, for clusters without koordinator."""
    default = yaml.safe_load((K8S / "kustomization.yaml").read_text(encoding="utf-8"))
    kinds = {manifest(name)["kind"] for name in default["resources"]}
    assert "CustomResourceDefinition" not in kinds
    crd_dir = yaml.safe_load((K8S / "crd" / "kustomization.yaml").read_text(encoding="utf-8"))
    assert crd_dir["resources"] == ["nodeslo-crd.yaml"]
    assert manifest("crd/nodeslo-crd.yaml")["metadata"]["name"] == "nodeslos.slo.koordinator.sh"


def test_the_agent_keeps_originals_where_the_uninstall_restores_them(container: dict[str, Any],
                                                                      run_args: Any) -> None:
    """The DaemonSet's --originals-file is on the host directory the uninstall DaemonSet mounts, and the
    uninstall runs ``qosmanager restore`` with the agent's host roots on that file."""
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert os.path.dirname(run_args.originals_file) in mounts
    kust = yaml.safe_load((K8S / "uninstall" / "kustomization.yaml").read_text(encoding="utf-8"))
    assert kust["resources"] == ["daemonset.yaml"]
    ds = manifest("uninstall/daemonset.yaml")
    pod = ds["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["command"][0] == "qosmanager" and init["command"][-1] == "restore"
    args = build_parser().parse_args(["restore", *init["args"]])
    assert args.originals_file == run_args.originals_file
    assert (args.cgroup_root, args.proc_root, args.sys_root) == (run_args.cgroup_root, run_args.proc_root,
                                                                 run_args.sys_root)
    volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    agent_volumes = {v["name"]: v.get("hostPath", {}).get("path") for v in manifest("daemonset.yaml")["spec"]
                     ["template"]["spec"]["volumes"]}
    for m in init["volumeMounts"]:
        agent_mount = mounts.get(m["mountPath"])
        assert agent_mount is not None and volumes[m["name"]] == agent_volumes[agent_mount], m
    writable = {m["mountPath"] for m in init["volumeMounts"] if not m.get("readOnly")}
    assert "/host/sys/fs/cgroup" in writable and os.path.dirname(args.originals_file) in writable
    assert pod["automountServiceAccountToken"] is False
    assert ds["metadata"]["namespace"] == manifest("namespace.yaml")["metadata"]["name"]


def test_kill_mode_overlay_adds_host_pid_and_cap_kill_and_nothing_else(daemonset: dict[str, Any]) -> None:
    kill = rendered_daemonset("kill-mode")
    pod = kill["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    args = build_parser().parse_args(["run", *c["args"]])
    assert args.evict_mode == "kill"
    # cgroup.procs lists PIDs as the reader's PID namespace sees them; the victims are other users'
    assert pod["hostPID"] is True
    # KILL appended to the base's SYS_NICE (the sampler's SCHED_FIFO), not in its place
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_NICE", "KILL"]}
    prefix = "/spec/template/spec"
    assert _diff(daemonset, kill) == {f"{prefix}/hostPID", f"{prefix}/containers/0/securityContext/capabilities/add",
                                      f"{prefix}/containers/0/args/{c['args'].index('--evict-mode=kill')}"}


def test_system_config_overlay_enables_the_gate_and_makes_only_its_files_writable(
        daemonset: dict[str, Any], container: dict[str, Any]) -> None:
    overlay = rendered_daemonset("system-config")
    (c,) = overlay["spec"]["template"]["spec"]["containers"]
    args = build_parser().parse_args(["run", *c["args"]])
    assert FeatureGates.from_overrides(args.feature_gates).enabled("SystemConfig")
    # /proc/sys/vm/* and /proc/sys/kernel/*: /proc writable, the sysfs mount still read-only
    proc, _ = mount_for(overlay, c, flag_value(c, "--proc-root"))
    assert proc.get("readOnly") is False
    sys_mount, _ = mount_for(overlay, c, flag_value(c, "--sys-root"))
    assert sys_mount.get("readOnly") is True
    base_paths = {m["mountPath"] for m in container["volumeMounts"]}
    added = [m for m in c["volumeMounts"] if m["mountPath"] not in base_paths]
    assert {m["mountPath"] for m in added} == {
        f"{flag_value(c, '--sys-root')}/{r.rel}" for r in REGISTRY.values()
        if r.root == "sys" and r.rel.startswith("kernel/mm/")}
    # and the rest is the default DaemonSet's
    base = copy.deepcopy(daemonset)
    for doc in (base, overlay):
        spec = doc["spec"]["template"]["spec"]
        spec["containers"][0]["volumeMounts"] = [m for m in spec["containers"][0]["volumeMounts"]
                                                 if m["name"] != "proc" and m not in added]
        spec["containers"][0]["args"] = [a for a in spec["containers"][0]["args"]
                                         if not a.startswith("--feature-gates=")]
        spec["volumes"] = [v for v in spec["volumes"] if v["name"] not in {m["name"] for m in added}]
    assert base == overlay


def test_json_patch_test_operations_catch_a_base_that_moved(daemonset: dict[str, Any]) -> None:
    ops = yaml.safe_load((OVERLAYS / "kill-mode" / "patch.yaml").read_text(encoding="utf-8"))
    moved = copy.deepcopy(daemonset)
    moved["spec"]["template"]["spec"]["containers"][0]["args"].insert(0, "--dry-run")
    with pytest.raises(AssertionError, match="test failed"):
        json_patch(moved, ops)


def test_network_policy_admits_only_the_scraper_on_the_metrics_port(
        daemonset: dict[str, Any], container: dict[str, Any]) -> None:
    policy = manifest("networkpolicy.yaml")
    assert policy["apiVersion"] == "networking.k8s.io/v1" and policy["kind"] == "NetworkPolicy"
    assert policy["metadata"]["namespace"] == daemonset["metadata"]["namespace"]
    spec = policy["spec"]
    # it selects the agent's pods, and only ingress: the agent's egress (the API server) is left alone
    assert spec["podSelector"]["matchLabels"].items() <= daemonset["spec"]["template"]["metadata"]["labels"].items()
    assert spec["policyTypes"] == ["Ingress"]
    (rule,) = spec["ingress"]
    # one peer with both selectors (the scraper's pods in the scraper's namespace, not either)
    (peer,) = rule["from"]
    assert set(peer) == {"namespaceSelector", "podSelector"}
    assert peer["namespaceSelector"]["matchLabels"] and peer["podSelector"]["matchLabels"]
    metrics = next(p for p in container["ports"] if p["name"] == "metrics")
    assert rule["ports"] == [{"port": "metrics", "protocol": metrics["protocol"]}]


# ---------------------------------------------------------------------------------------------
# RBAC, names and the kustomization


def triples(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(group, resource, verb) for rule in rules for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def test_cluster_role_is_exactly_least_privilege() -> None:
    role = manifest("clusterrole.yaml")
    for rule in role["rules"]:
        assert set(rule) == {"apiGroups", "resources", "verbs"}, "no resourceNames/nonResourceURLs expected"
    expected = {
        ("", "pods", "get"), ("", "pods", "list"), ("", "pods", "watch"),
        ("", "pods/eviction", "create"),
        ("authorization.k8s.io", "selfsubjectaccessreviews", "create"),  # the eviction check's question
        ("", "events", "create"), ("", "events", "patch"),
        ("", "nodes", "get"), ("", "nodes", "list"), ("", "nodes", "watch"),
        ("slo.koordinator.sh", "nodeslos", "get"), ("slo.koordinator.sh", "nodeslos", "list"),
        ("slo.koordinator.sh", "nodeslos", "watch"),
    }
    assert triples(role["rules"]) == expected


def test_names_and_namespaces_agree(daemonset: dict[str, Any]) -> None:
    namespace = manifest("namespace.yaml")["metadata"]["name"]
    account = manifest("serviceaccount.yaml")
    role = manifest("clusterrole.yaml")
    binding = manifest("clusterrolebinding.yaml")
    assert account["metadata"]["namespace"] == daemonset["metadata"]["namespace"] == namespace
    assert daemonset["spec"]["template"]["spec"]["serviceAccountName"] == account["metadata"]["name"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                                    "namespace": namespace}]
    ns_labels = manifest("namespace.yaml")["metadata"]["labels"]
    # hostPath and hostPID are refused by the baseline Pod Security level
    assert ns_labels["pod-security.kubernetes.io/enforce"] == "privileged"


def test_kustomization_lists_every_manifest_but_the_example() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text(encoding="utf-8"))
    assert kustomization["kind"] == "Kustomization"
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"} - NOT_IN_KUSTOMIZATION
    assert len(kustomization["resources"]) == len(set(kustomization["resources"]))
    assert set(kustomization["resources"]) == on_disk
    # a NodeSLO cannot be applied in the run that creates its CRD, so the example stays out; the
    # NetworkPolicy names the scraper, which is the cluster's own
    assert not NOT_IN_KUSTOMIZATION & set(kustomization["resources"])
    assert all((K8S / name).is_file() for name in NOT_IN_KUSTOMIZATION)


def test_install_instructions_name_what_exists() -> None:
    readme = (DEPLOY / "README.md").read_text(encoding="utf-8")
    namespace = manifest("namespace.yaml")["metadata"]["name"]
    for cmd in ("docker build -f deploy/Dockerfile", "kubectl apply -k deploy/kubernetes",
                f"kubectl -n {namespace} rollout status daemonset/qosmanager"):
        assert cmd in readme, cmd
    for path in set(re.findall(r"\b(deploy/[\w./-]+\w|\.ci/[\w-]+)", readme)):
        assert (ROOT / path).exists(), f"deploy/README.md names {path}, which does not exist"


# ---------------------------------------------------------------------------------------------
# The NodeSLO CRD


@pytest.fixture(scope="module")
def crd() -> dict[str, Any]:
    return manifest("crd/nodeslo-crd.yaml")


@pytest.fixture(scope="module")
def schema(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = crd["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def test_generated_crd_is_the_committed_one(tmp_path: Path) -> None:
    committed = (K8S / "crd" / "nodeslo-crd.yaml").read_text(encoding="utf-8")
    assert gen_crd.render() == committed, "run: python deploy/gen_crd.py"
    assert gen_crd.main(["--check"]) == 0
    stale = tmp_path / "crd.yaml"
    stale.write_text(committed.replace("format: int32", "format: int64", 1), encoding="utf-8")
    assert gen_crd.main(["--check", "--output", str(stale)]) == 1
    fresh = tmp_path / "fresh.yaml"
    assert gen_crd.main(["--output", str(fresh)]) == 0
    assert fresh.read_text(encoding="utf-8") == committed


def test_crd_is_what_the_agent_watches(crd: dict[str, Any]) -> None:
    # koordlet-infra §5.3: the cluster-scoped NodeSLO named after the node, slo.koordinator.sh/v1alpha1
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "nodeslos.slo.koordinator.sh"
    assert (spec["group"], spec["scope"]) == ("slo.koordinator.sh", "Cluster")
    assert spec["names"]["plural"] == "nodeslos" and spec["names"]["kind"] == "NodeSLO"
    (version,) = spec["versions"]
    assert version["served"] and version["storage"]
    assert f"{spec['group']}/{version['name']}" == nodeslo.API_VERSION == "slo.koordinator.sh/v1alpha1"
    assert spec["names"]["kind"] == nodeslo.KIND
    # every NodeSLO URL the agent (or its fake API server) builds uses this plural, cluster-scoped
    found = list(_nodeslo_paths())
    for where, plural in found:
        assert plural == spec["names"]["plural"], f"{where} uses {plural!r}"
    if (ROOT / "src" / "qosmanager" / "states" / "kube").is_dir():
        assert any(where.startswith("src/qosmanager/states/kube/") for where, _ in found), \
            "the Kubernetes source names no /apis/slo.koordinator.sh/v1alpha1/... path"


def _nodeslo_paths() -> Iterator[tuple[str, str]]:
    pattern = re.compile(r"/apis/slo\.koordinator\.sh/v1alpha1/([a-z]+)")
    for path in sorted((ROOT / "src" / "qosmanager").rglob("*.py")):
        for match in pattern.finditer(path.read_text(encoding="utf-8")):
            yield str(path.relative_to(ROOT)), match.group(1)


def test_crd_sections_cover_the_agents_spec(schema: dict[str, Any]) -> None:
    spec_props = schema["properties"]["spec"]["properties"]
    assert set(spec_props) == set(nodeslo.default_spec_dict())
    assert spec_props["extensions"]["x-kubernetes-preserve-unknown-fields"] is True


def _walk(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from _walk(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}{{}}")


def test_crd_schema_is_structural(schema: dict[str, Any]) -> None:
    """The API server's rules for a structural schema (checked here: kubernetes-validate does not)."""
    int_or_string = [{"type": "integer"}, {"type": "string"}]
    for path, node in _walk(schema, "$"):
        if node.get("x-kubernetes-int-or-string"):
            assert "type" not in node and node["anyOf"] == int_or_string, path
        else:
            assert "anyOf" not in node and "oneOf" not in node and "allOf" not in node, path
            assert node.get("type") in ("object", "array", "string", "integer", "boolean"), path
        if node.get("x-kubernetes-list-type") == "map":
            keys = node["x-kubernetes-list-map-keys"]
            assert set(keys) <= set(node["items"].get("required", [])), f"{path}: map keys must be required"


# A small validator with the API server's semantics for the keywords the CRD uses: unknown fields
# are errors (the server prunes them, kubectl's strict field validation refuses them).


def validate(schema: dict[str, Any], value: Any, path: str = "$") -> list[str]:
    if value is None:
        return []  # the API server drops nulls of non-nullable fields; the agent keeps the default
    if schema.get("x-kubernetes-int-or-string"):
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            return [f"{path}: not an integer or a string"]
    else:
        kind = schema["type"]
        ok = {
            "object": isinstance(value, dict),
            "array": isinstance(value, list),
            "string": isinstance(value, str),
            "integer": isinstance(value, int) and not isinstance(value, bool),
            "boolean": isinstance(value, bool),
        }[kind]
        if not ok:
            return [f"{path}: not of type {kind}"]
    errors: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: not one of {schema['enum']}")
    if isinstance(value, int) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path}: below {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path}: above {schema['maximum']}")
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(f"{path}: does not match {schema['pattern']}")
        if len(value) < schema.get("minLength", 0):
            errors.append(f"{path}: shorter than {schema['minLength']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                errors.append(f"{path}.{key}: required")
        for key, item in value.items():
            if key in props:
                errors += validate(props[key], item, f"{path}.{key}")
            elif isinstance(schema.get("additionalProperties"), dict):
                errors += validate(schema["additionalProperties"], item, f"{path}.{key}")
            elif not schema.get("x-kubernetes-preserve-unknown-fields"):
                errors.append(f"{path}.{key}: unknown field")
    if isinstance(value, list):
        for i, item in enumerate(value):
            errors += validate(schema["items"], item, f"{path}[{i}]")
        if schema.get("x-kubernetes-list-type") == "map":
            keys = [tuple(item.get(k) for k in schema["x-kubernetes-list-map-keys"])
                    for item in value if isinstance(item, dict)]
            if len(keys) != len(set(keys)):
                errors.append(f"{path}: duplicate map keys")
    return errors


def crd_accepts(schema: dict[str, Any], obj: dict[str, Any]) -> bool:
    # metadata is the API server's ObjectMeta, validated by the server itself, not by the CRD
    return not validate(schema, {k: v for k, v in obj.items() if k != "metadata"})


def agent_applies(obj: dict[str, Any]) -> bool:
    """The agent uses every value of ``obj``: it drops none (it never refuses a NodeSLO-shaped
    object; a bad value costs that field only)."""
    spec = nodeslo.parse_nodeslo(obj)
    # every field set here is one the agent knows
    assert not [w for w in spec.warnings if "unknown field" in w], spec.warnings
    return spec.invalid_fields == ()


def the_object(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": "n1"},
            "spec": spec}


def test_validator_is_not_vacuous(schema: dict[str, Any]) -> None:
    def threshold(**fields: Any) -> dict[str, Any]:
        return the_object({"resourceUsedThresholdWithBE": fields})

    assert crd_accepts(schema, threshold(cpuSuppressThresholdPercent=65))
    assert not crd_accepts(schema, threshold(cpuSupressThresholdPercent=65))  # a typo
    assert not crd_accepts(schema, threshold(cpuSuppressThresholdPercent="65"))
    assert not crd_accepts(schema, threshold(enable="yes"))
    assert not crd_accepts(schema, the_object({"cpuBurstStrategy": {"policy": 3}}))
    assert not crd_accepts(schema, the_object({"systemStrategy": {"totalNetworkBandwidth": "lots"}}))


def test_default_spec_and_example_match_the_crd(schema: dict[str, Any]) -> None:
    assert crd_accepts(schema, the_object(nodeslo.default_spec_dict()))
    example = manifest("nodeslo-example.yaml")
    assert crd_accepts(schema, example), validate(schema, {**example, "metadata": {}})
    assert f"{example['apiVersion']}" == nodeslo.API_VERSION and example["kind"] == nodeslo.KIND
    assert agent_applies(example)
    assert nodeslo.parse_nodeslo(example).resource_used_threshold_with_be.enable is True


# koordinator's own NodeSLO CRD (config/crd/bases/slo.koordinator.sh_nodeslos.yaml of
# koordinator-sh/koordinator), transcribed: typed fields, these minimum/maximum from its kubebuilder
# markers, no enum, no required field, no list type, one pattern (the quantity below).
KOORDINATOR_BOUNDS: dict[str, tuple[int | None, int | None]] = {
    "cpuSuppressThresholdPercent": (0, 100), "cpuSuppressMinPercent": (0, 100),
    "memoryEvictThresholdPercent": (0, 100), "memoryEvictLowerPercent": (0, 100),
    "minLimitPercent": (0, None), "lowLimitPercent": (0, None), "throttlingPercent": (0, None),
    "wmarkRatio": (0, 100), "wmarkScalePermill": (1, 1000), "wmarkMinAdj": (-25, 50),
    "readIOPS": (0, None), "writeIOPS": (0, None), "readBPS": (0, None), "writeBPS": (0, None),
    "ioWeightPercent": (1, 100), "readLatencyPercent": (0, 100), "writeLatencyPercent": (0, 100),
    "modelReadBPS": (1, None), "modelWriteBPS": (1, None), "modelReadSeqIOPS": (1, None),
    "modelWriteSeqIOPS": (1, None), "modelReadRandIOPS": (1, None), "modelWriteRandIOPS": (1, None),
    "catRangeStartPercent": (0, 100), "catRangeEndPercent": (0, 100), "mbaPercent": (0, 100),
    "cpuBurstPercent": (0, 10000),
}
KOORDINATOR_QUANTITY = (r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?"
                        r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")
# memoryQOS fields of koordinator's CRD the agent does not read (ignored with a warning)
KOORDINATOR_ONLY_MEMORY_FIELDS = ("pageCacheLimitEnable", "pageCacheLimitSync")


def koordinator_accepts(spec: Any, value: Any, bounds: bool = True) -> bool:
    """Whether koordinator's CRD admits ``value`` for this field (``bounds=False``: its type)."""
    kind = spec.kind
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        lo, hi = KOORDINATOR_BOUNDS.get(spec.json, (None, None)) if bounds else (None, None)
        return (lo is None or value >= lo) and (hi is None or value <= hi)
    if kind == "bool":
        return isinstance(value, bool)
    if kind in ("str", "enum"):
        return isinstance(value, str)
    if kind == "boolmap":
        return isinstance(value, dict) and all(isinstance(v, bool) for v in value.values())
    if kind == "any":
        return isinstance(value, dict)
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return False  # intstr and quantity: an integer or a string
    if kind == "intstr" or not isinstance(value, str):
        return True
    return re.search(KOORDINATOR_QUANTITY, value) is not None


def test_crd_carries_types_only_like_koordinators(schema: dict[str, Any]) -> None:
    """No bound, enum, required field or list type koordinator's CRD lacks: ranges live in the agent."""
    patterns = []
    for path, node in _walk(schema, "$"):
        for keyword in ("minimum", "maximum", "enum", "required", "minLength", "x-kubernetes-list-type"):
            assert keyword not in node, f"{path}: {keyword}"
        if "pattern" in node:
            patterns.append((path, node["pattern"]))
    assert patterns == [("$.spec.systemStrategy.totalNetworkBandwidth", KOORDINATOR_QUANTITY)]
    klass = schema["properties"]["spec"]["properties"]["resourceQOSStrategy"]["properties"]["lsClass"]
    memory = klass["properties"]["memoryQOS"]["properties"]
    for name in KOORDINATOR_ONLY_MEMORY_FIELDS:
        assert memory[name] == {"type": "integer", "format": "int64"}


def test_every_document_says_the_crd_checks_types_only() -> None:
    """What the documents say of the CRD matches it (types only, the test above): a sentence of the README,
    docs/ or deploy/ that names the CRD together with ranges, minimums, maximums or enums says it checks types only
    (deploy/README once said every range the agent checks was in the CRD)."""
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "deploy").rglob("*.md"))]
    claims = []
    for doc in docs:
        text = re.sub(r"\s+", " ", doc.read_text())
        for sentence in re.split(r"(?<=[.;:])\s", text):
            if re.search(r"\bCRD", sentence) and re.search(r"\b(ranges?|minimum|maximum|enums?)\b", sentence):
                claims.append((doc.relative_to(ROOT).as_posix(), sentence))
    assert claims, "the deploy README says what the CRD checks"
    wrong = [(d, s) for d, s in claims if "types only" not in s]
    assert not wrong, wrong


# Every field of every NodeSLO dataclass, reached through the spec, tried with boundary and
# wrongly-typed values: what koordinator's CRD accepts, ours accepts; what the agent uses, the
# CRD accepts; a value of the wrong type both refuse (the agent drops it, that field only).

SECTION_CLASSES = {name: cls for name, (cls, _) in gen_crd.SECTIONS.items()}


def _field_paths() -> Iterator[tuple[list[str | int], Any]]:
    """(JSON path from spec, field spec) of every leaf field, wherever its class is used (lsrClass
    and beClass alike); a list path uses index 0."""

    def visit(cls: type, path: list[str | int]) -> Iterator[tuple[list[str | int], Any]]:
        for f in dataclasses.fields(cls):
            spec = f.metadata["spec"]
            if spec.kind == "obj":
                yield from visit(spec.cls, [*path, spec.json])
            elif spec.kind == "list":
                yield from visit(spec.cls, [*path, spec.json, 0])
            else:
                yield [*path, spec.json], spec

    for name, cls in SECTION_CLASSES.items():
        yield from visit(cls, [name])
    yield from visit(nodeslo.HostApplicationSpec, ["hostApplications", 0])


def candidates(spec: Any) -> list[Any]:
    """Values for one field spec: the agent's bounds and beyond, koordinator's examples, wrong types."""
    kind = spec.kind
    if kind == "int":
        values: list[Any] = [spec.lo, spec.hi, -7, 0, 120, 500, 10001, 2**40, "7", True, 1.5]
        if spec.lo > -(2**63):
            values.append(spec.lo - 1)
        if spec.hi < 2**63 - 1:
            values.append(spec.hi + 1)
        return values
    if kind == "bool":
        return [True, False, "true", 1]
    if kind == "str":
        return ["some-name", 3]
    if kind == "enum":
        return [*spec.choices, "bogus", 3]
    if kind == "boolmap":
        return [{"FEATURE": True}, {"FEATURE": 1}, "x"]
    if kind == "any":
        return [{"free": {"form": 1}}, "x"]
    if kind in ("quantity", "intstr"):
        values = ["1Gi", "500m", "1e3", "0.5", "50M", "1e1.5", 5, "abc", "1.2.3", "", True, 2.5]
        if kind == "intstr":
            values += [0, 100, 101, -1]
        return values
    raise AssertionError(f"no candidates for field kind {kind}")


def with_value(path: list[str | int], value: Any) -> dict[str, Any]:
    """A spec that sets ``path`` to ``value``; objects with an ``enable`` get ``enable: true`` (a disabled
    cpu/memory/resctrl QoS is replaced by its None values before validation), list items named."""
    spec: dict[str, Any] = {}
    node: Any = spec
    for i, key in enumerate(path[:-1]):
        nxt = path[i + 1]
        if isinstance(key, int):
            continue
        child: Any = [{}] if isinstance(nxt, int) else {}
        node[key] = child
        node = child[0] if isinstance(nxt, int) else child
        if isinstance(nxt, int) and key == "hostApplications":
            node["name"] = "app"
        if key.endswith("QOS"):
            node["enable"] = True
    node[path[-1]] = value
    return spec


def test_crd_accepts_what_koordinators_accepts_and_what_the_agent_uses(schema: dict[str, Any]) -> None:
    tried = 0
    for path, spec in _field_paths():
        for value in candidates(spec):
            obj = the_object(with_value(path, value))
            crd = crd_accepts(schema, obj)
            where = ".".join(map(str, path))
            # "" is Go's omitempty: the agent keeps the default (and both CRDs refuse "" as a quantity)
            used = value != "" and agent_applies(obj)
            if koordinator_accepts(spec, value):
                assert crd, f"{where}={value!r}: koordinator's CRD admits it, ours refuses"
            if koordinator_accepts(spec, value, bounds=False):  # of the right type: bounds are the agent's
                assert crd or not used, f"{where}={value!r}: the agent uses it, the CRD refuses"
            else:
                assert not crd, f"{where}={value!r}: of the wrong type, and the CRD admits it"
                # (Go's Quantity decodes any JSON number, 2.5 too, and so does the agent)
                assert not used or spec.kind == "quantity", f"{where}={value!r}: of the wrong type, used"
            tried += 1
    assert tried > 1500  # every field of every section, not a handful


# The NodeSLOs of the issue: each valid but for one field, accepted by koordinator's CRD (the
# cpuBurstPercent of -7 is below its minimum of 0: ours, with no bounds at all, takes it too).
ISSUE_OBJECTS = {
    "spec.systemStrategy.watermarkScaleFactor": {"systemStrategy": {"watermarkScaleFactor": 500}},
    "spec.resourceUsedThresholdWithBE.cpuEvictBESatisfactionUpperPercent": {
        "resourceUsedThresholdWithBE": {"cpuEvictBESatisfactionUpperPercent": 120,
                                        "cpuEvictBESatisfactionLowerPercent": 40}},
    "spec.cpuBurstStrategy.cpuBurstPercent": {"cpuBurstStrategy": {"policy": "auto", "cpuBurstPercent": -7}},
    # read as cpuset, as koordlet reads it, and reported
    "spec.resourceUsedThresholdWithBE.cpuSuppressPolicy": {
        "resourceUsedThresholdWithBE": {"cpuSuppressPolicy": "cpuSet"}},
}


def test_the_issue_objects_pass_the_crd_and_cost_the_agent_one_field(schema: dict[str, Any]) -> None:
    for dropped, extra in ISSUE_OBJECTS.items():
        spec = {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressPolicy": "cfsQuota"}}
        for section, fields in extra.items():
            spec[section] = {**spec.get(section, {}), **fields}
        obj = the_object(spec)
        assert crd_accepts(schema, obj), validate(schema, {**obj, "metadata": {}})
        parsed = nodeslo.parse_nodeslo(obj)
        assert [p for p, _ in parsed.invalid_fields] == ([dropped] if dropped else [])
        assert parsed.resource_used_threshold_with_be.enable is True
    # and the fields only koordinator's CRD has are admitted (the agent ignores them)
    legacy = the_object({"resourceQOSStrategy": {"lsClass": {"memoryQOS": {
        name: 1 for name in KOORDINATOR_ONLY_MEMORY_FIELDS}}}})
    assert crd_accepts(schema, legacy)


def test_quantity_pattern_takes_the_usual_forms(schema: dict[str, Any]) -> None:
    system = schema["properties"]["spec"]["properties"]["systemStrategy"]
    bandwidth = system["properties"]["totalNetworkBandwidth"]
    for good in ("1Gi", "500m", "1e3", "0.5", "10G", ".5", "+1", 100):
        assert validate(bandwidth, good) == [], good
    for bad in ("abc", "1.2.3", "1 Gi", "Gi", ""):
        assert validate(bandwidth, bad) != [], bad


def test_host_applications_without_a_unique_name_pass_the_crd_and_are_ignored_by_the_agent(
        schema: dict[str, Any]) -> None:
    app = {"name": "nginx", "qos": "LS"}
    cases = {
        "ok": ([app, {**app, "name": "redis"}], []),
        "duplicate": ([app, copy.deepcopy(app)], ["spec.hostApplications[1].name"]),
        "unnamed": ([{"qos": "LS"}], ["spec.hostApplications[0].name"]),
        "empty name": ([{**app, "name": ""}], ["spec.hostApplications[0].name"]),
    }
    for label, (apps, dropped) in cases.items():
        obj = the_object({"hostApplications": apps})
        assert crd_accepts(schema, obj), label  # koordinator's CRD requires no name either
        assert [p for p, _ in nodeslo.parse_nodeslo(obj).invalid_fields] == dropped, label


# ---------------------------------------------------------------------------------------------
# The Dockerfile and the CI script that builds the same wheel


def dockerfile_stages() -> dict[str, list[tuple[str, str]]]:
    """stage name -> [(INSTRUCTION, arguments)], continuation lines joined, comments dropped."""
    text = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    joined = re.sub(r"\\\n\s*", " ", "\n".join(lines))
    stages: dict[str, list[tuple[str, str]]] = {"": []}
    current = ""
    for line in filter(None, (ln.strip() for ln in joined.splitlines())):
        instr, _, rest = line.partition(" ")
        if instr.upper() == "FROM":
            current = rest.split(" AS ")[-1].strip() if " AS " in rest else rest
            stages[current] = []
        stages[current].append((instr.upper(), rest.strip()))
    return stages


def script_array(script: Path, name: str) -> list[str]:
    """A CI script's bash array ``NAME=(...)``, on one line or continued over several."""
    match = re.search(rf"^{name}=\((.*?)\)$", script.read_text(encoding="utf-8"), re.M | re.S)
    assert match, f"{script.relative_to(ROOT)} has no {name}=(...)"
    return shlex.split(match.group(1))


def check_deploy_array(name: str) -> list[str]:
    return script_array(CHECK_DEPLOY, name)


def pip_command(run_args: str, verb: str) -> list[str]:
    tokens = [t for t in shlex.split(run_args) if not t.startswith("--mount=")]
    i = tokens.index("pip")
    assert tokens[i + 1] == verb
    end = tokens.index("&&") if "&&" in tokens else len(tokens)
    return tokens[i + 2:end]


def test_dockerfile_has_a_build_and_a_slim_runtime_stage() -> None:
    stages = dockerfile_stages()
    assert list(stages) == ["", "build", "runtime"]
    args = dict(a.split("=", 1) for i, a in stages[""] if i == "ARG")
    assert args["PYTHON_IMAGE"] == "python:3.11-slim"
    assert stages["build"][0] == ("FROM", "${PYTHON_IMAGE} AS build")
    assert stages["runtime"][0] == ("FROM", "${PYTHON_IMAGE} AS runtime")  # same Python, same libc
    runtime = " ".join(a for _, a in stages["runtime"])
    for tool in ("apt-get", "build-essential", "gcc", "COPY"):
        assert tool not in runtime, f"the runtime stage must not have {tool}"
    build = " ".join(a for _, a in stages["build"])
    assert "build-essential" in build
    assert ("ENTRYPOINT", '["qosmanager", "run"]') in stages["runtime"]
    assert stages["runtime"][-1][0] == "ENTRYPOINT"


def test_ci_builds_the_wheel_the_dockerfile_builds() -> None:
    stages = dockerfile_stages()
    copies = [a.split() for i, a in stages["build"] if i == "COPY"]
    sources = [src for words in copies for src in words[:-1]]
    assert sources == check_deploy_array("CONTEXT")
    (wheel,) = [a for i, a in stages["build"] if i == "RUN" and "pip wheel" in a]
    wheel_args = pip_command(wheel, "wheel")
    assert wheel_args[-1] == "."
    wheel_flags = wheel_args[:-1]
    assert wheel_flags[-2:] == ["--wheel-dir", "/wheels"]
    assert wheel_flags[:-2] == check_deploy_array("WHEEL_FLAGS")
    (install,) = [a for i, a in stages["runtime"] if i == "RUN" and "pip install" in a]
    install_args = pip_command(install, "install")
    assert install_args[-3:] == ["--find-links", "/wheels", "qosmanager"]
    assert install_args[:-3] == check_deploy_array("INSTALL_FLAGS")
    assert "--no-index" in install_args  # the runtime stage installs offline, from the wheels only
    # the build context holds what the wheel needs: the README is the package's long description
    readme = re.search(r'^readme = "(.*)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"), re.M)
    assert readme and readme.group(1) in sources
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text(encoding="utf-8").splitlines()
    assert [ln[1:] for ln in ignore if ln.startswith("!")] == sources
    assert os.access(CHECK_DEPLOY, os.X_OK)


# ---------------------------------------------------------------------------------------------
# .ci/check-image: the image built from the Dockerfile and run as the DaemonSet runs it


def test_ci_runs_the_image_check_after_the_deploy_checks() -> None:
    assert os.access(CHECK_IMAGE, os.X_OK)
    steps = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
             if ln.strip() and not ln.lstrip().startswith("#")]
    assert "bash .ci/check-image" in steps
    assert steps.index("bash .ci/check-deploy") < steps.index("bash .ci/check-image")
    assert "set -euo pipefail" in CHECK_IMAGE.read_text(encoding="utf-8")


def test_image_check_runs_the_agent_with_the_daemonsets_args_mounts_and_security(
        container: dict[str, Any]) -> None:
    assert script_array(CHECK_IMAGE, "DAEMONSET_ARGS") == container["args"]
    expected = []
    for m in container["volumeMounts"]:
        options = ["ro" if m.get("readOnly", False) else "rw"]
        propagation = m.get("mountPropagation", "None")
        assert propagation in ("None", "HostToContainer"), f"{m['name']}: no podman option for {propagation}"
        if propagation == "HostToContainer":
            options.append("rslave")
        expected.append(f"{m['name']}:{m['mountPath']}:{','.join(options)}")
    assert script_array(CHECK_IMAGE, "DAEMONSET_MOUNTS") == expected
    sc = container["securityContext"]
    security = script_array(CHECK_IMAGE, "SECURITY")
    assert f"--user={sc['runAsUser']}" in security
    assert sc["readOnlyRootFilesystem"] is True and "--read-only" in security
    assert "--read-only-tmpfs=false" in security  # a pod's read-only root has no writable /tmp either
    assert sc["allowPrivilegeEscalation"] is False and "--security-opt=no-new-privileges" in security
    assert [a.split("=", 1)[1] for a in security if a.startswith("--cap-drop=")] == sc["capabilities"]["drop"]
    assert [a.split("=", 1)[1] for a in security if a.startswith("--cap-add=")] == sc["capabilities"].get("add", [])
    assert sc["privileged"] is False and not any(a.startswith("--privileged") for a in security)


def test_image_check_builds_the_dockerfile_as_it_is() -> None:
    text = CHECK_IMAGE.read_text(encoding="utf-8")
    args = dict(a.split("=", 1) for i, a in dockerfile_stages()[""] if i == "ARG")
    # the stand-in base goes in through the Dockerfile's own ARG, and nothing else is changed
    assert "PYTHON_IMAGE" in args and '--build-arg "PYTHON_IMAGE=$BASE"' in text
    assert "-f deploy/Dockerfile" in text and not re.search(r"sed\b.*Dockerfile", text)


def test_dockerfile_names_no_path_of_one_python_base() -> None:
    """python:3.11-slim has its Python in /usr/local, Debian's python3 (the image check's stand-in) is
    in /usr: the Dockerfile reaches python3, pip and qosmanager through PATH only."""
    for stage, instructions in dockerfile_stages().items():
        for instruction, args in instructions:
            if instruction in ("RUN", "ENTRYPOINT", "CMD", "ENV", "COPY", "WORKDIR"):
                assert not re.search(r"/usr/|-packages\b|python3\.\d", args), (stage, instruction, args)


# ---------------------------------------------------------------------------------------------
# The optional ServiceMonitor (a kustomize component beside the prometheus.io/* annotations)

MONITOR = K8S / "servicemonitor"
# the fields of the Prometheus Operator's monitoring.coreos.com/v1 API the manifest may use
SERVICEMONITOR_SPEC = {"jobLabel", "targetLabels", "podTargetLabels", "endpoints", "selector",
                       "namespaceSelector", "sampleLimit", "targetLimit", "labelLimit"}
ENDPOINT = {"port", "targetPort", "path", "scheme", "params", "interval", "scrapeTimeout", "honorLabels",
            "honorTimestamps", "metricRelabelings", "relabelings", "followRedirects", "enableHttp2",
            "filterRunning"}
RELABEL = {"sourceLabels", "separator", "targetLabel", "regex", "modulus", "replacement", "action"}
DURATION = re.compile(r"([0-9]+(ms|s|m|h))+")


def test_servicemonitor_is_an_optional_component() -> None:
    component = yaml.safe_load((MONITOR / "kustomization.yaml").read_text(encoding="utf-8"))
    assert component["apiVersion"] == "kustomize.config.k8s.io/v1alpha1" and component["kind"] == "Component"
    assert set(component["resources"]) == {p.name for p in MONITOR.glob("*.yaml")} - {"kustomization.yaml"}
    # the default install works without the operator's CRDs: the component is not in it
    default = yaml.safe_load((K8S / "kustomization.yaml").read_text(encoding="utf-8"))
    listed = default.get("resources", []) + default.get("components", [])
    assert not any("servicemonitor" in str(r) for r in listed)


def test_servicemonitor_scrapes_what_the_annotations_name(daemonset: dict[str, Any],
                                                           container: dict[str, Any]) -> None:
    service, monitor = manifest("servicemonitor/service.yaml"), manifest("servicemonitor/servicemonitor.yaml")
    namespace = daemonset["metadata"]["namespace"]
    assert service["metadata"]["namespace"] == monitor["metadata"]["namespace"] == namespace
    # the Service selects exactly the DaemonSet's pods, headless: every agent is its own target
    assert service["spec"]["selector"] == daemonset["spec"]["selector"]["matchLabels"]
    assert service["spec"]["clusterIP"] == "None"
    (port,) = service["spec"]["ports"]
    metrics_port = int(flag_value(container, "--metrics-addr").rpartition(":")[2])
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert named[port["targetPort"]] == port["port"] == metrics_port
    # the ServiceMonitor selects that Service (and only by labels the Service carries) and its port
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1" and monitor["kind"] == "ServiceMonitor"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [namespace]}
    wanted = monitor["spec"]["selector"]["matchLabels"]
    assert wanted.items() <= service["metadata"]["labels"].items()
    # ... and not the pods' own labels alone, so no other Service of the namespace matches by accident
    assert not wanted.items() <= daemonset["spec"]["template"]["metadata"]["labels"].items()
    annotations = daemonset["spec"]["template"]["metadata"]["annotations"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == port["name"]
    assert endpoint["path"] == annotations["prometheus.io/path"] == "/metrics"
    assert endpoint.get("scheme", "http") == "http"


def test_servicemonitor_uses_only_the_operators_v1_fields() -> None:
    monitor = manifest("servicemonitor/servicemonitor.yaml")
    assert set(monitor) == {"apiVersion", "kind", "metadata", "spec"}
    assert set(monitor["spec"]) <= SERVICEMONITOR_SPEC
    assert set(monitor["spec"]["selector"]) <= {"matchLabels", "matchExpressions"}
    assert set(monitor["spec"]["namespaceSelector"]) <= {"any", "matchNames"}
    for endpoint in monitor["spec"]["endpoints"]:
        assert set(endpoint) <= ENDPOINT, set(endpoint) - ENDPOINT
        for key in ("interval", "scrapeTimeout"):
            assert key not in endpoint or DURATION.fullmatch(endpoint[key]), endpoint[key]
        for relabel in endpoint.get("relabelings", []) + endpoint.get("metricRelabelings", []):
            assert set(relabel) <= RELABEL, set(relabel) - RELABEL
            assert all(isinstance(s, str) for s in relabel.get("sourceLabels", []))
        # a scrape must end before the next one starts
        assert 0 < _seconds(endpoint["scrapeTimeout"]) < _seconds(endpoint["interval"])


def _seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    return sum(float(n) * units[u] for n, u in re.findall(r"([0-9]+)(ms|s|m|h)", duration))
