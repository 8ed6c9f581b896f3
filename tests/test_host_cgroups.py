"""cgroup version/driver detection and the kubepods path layout (infra §2.2, §2.3)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qosmanager.host.cgroups import (
    CGROUP2_SUPER_MAGIC,
    CGROUP_SUPER_MAGIC,
    TMPFS_MAGIC,
    CgroupLayout,
    KubeQoS,
    detect_driver,
    detect_version,
    kube_qos_of_dir,
    split_container_id,
)
from qosmanager.host.roots import HostRoots

UID = "6f1e4a52-0b2c-4d7e-9a11-3c5d2e8f7b90"
UID_ = "6f1e4a52_0b2c_4d7e_9a11_3c5d2e8f7b90"
HASH = "a" * 8 + "0123456789abcdef" * 3 + "b" * 8

G, BU, BE = KubeQoS.GUARANTEED, KubeQoS.BURSTABLE, KubeQoS.BESTEFFORT

# Written out by hand from the tables of infra §2.3 (kubelet cgroup root "/").
QOS_DIRS = {
    ("systemd", G): "kubepods.slice",
    ("systemd", BU): "kubepods.slice/kubepods-burstable.slice",
    ("systemd", BE): "kubepods.slice/kubepods-besteffort.slice",
    ("cgroupfs", G): "kubepods",
    ("cgroupfs", BU): "kubepods/burstable",
    ("cgroupfs", BE): "kubepods/besteffort",
}
POD_DIRS = {
    ("systemd", G): f"kubepods.slice/kubepods-pod{UID_}.slice",
    ("systemd", BU): f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice",
    ("systemd", BE): f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice",
    ("cgroupfs", G): f"kubepods/pod{UID}",
    ("cgroupfs", BU): f"kubepods/burstable/pod{UID}",
    ("cgroupfs", BE): f"kubepods/besteffort/pod{UID}",
}
CONTAINER_NAMES = {
    ("systemd", "docker"): f"docker-{HASH}.scope",
    ("systemd", "containerd"): f"cri-containerd-{HASH}.scope",
    ("systemd", "cri-o"): f"crio-{HASH}.scope",
    ("systemd", "pouch"): f"pouch-{HASH}.scope",
    ("cgroupfs", "docker"): HASH,
    ("cgroupfs", "containerd"): HASH,
    ("cgroupfs", "cri-o"): HASH,
    ("cgroupfs", "pouch"): HASH,
}
KUBELET_ROOTS = {"/": "", "/kube.slice": "kube.slice/", "/a/b/": "a/b/"}


def layout(version: int = 1, driver: str = "cgroupfs", kubelet_root: str = "/",
           cgroup: str = "/cg") -> CgroupLayout:
    return CgroupLayout(HostRoots(cgroup=cgroup, kubelet_cgroup_root=kubelet_root), version, driver)


@pytest.mark.parametrize("kubelet_root", list(KUBELET_ROOTS))
@pytest.mark.parametrize("runtime", ["docker", "containerd", "cri-o", "pouch"])
@pytest.mark.parametrize("qos", [G, BU, BE])
@pytest.mark.parametrize("driver", ["systemd", "cgroupfs"])
@pytest.mark.parametrize("version", [1, 2])
def test_path_table(version: int, driver: str, qos: KubeQoS, runtime: str, kubelet_root: str) -> None:
    lay = layout(version, driver, kubelet_root)
    pre = KUBELET_ROOTS[kubelet_root]
    assert lay.kubepods_dir() == pre + QOS_DIRS[(driver, G)]
    assert lay.qos_dir(qos) == pre + QOS_DIRS[(driver, qos)]
    assert lay.qos_dir(qos.value) == pre + QOS_DIRS[(driver, qos)]
    pod = lay.pod_dir(qos, UID)
    assert pod == pre + POD_DIRS[(driver, qos)]
    cont = lay.container_dir(pod, f"{runtime}://{HASH}")
    assert cont == pod + "/" + CONTAINER_NAMES[(driver, runtime)]
    for rel in (pod, cont):
        assert not rel.startswith("/") and not rel.endswith("/") and "//" not in rel
    # absolute paths
    if version == 1:
        assert lay.abs_dir("cpu", cont) == f"/cg/cpu/{cont}"
        assert lay.file("memory", pod, "memory.stat") == f"/cg/memory/{pod}/memory.stat"
        assert lay.file("cpuset", "", "cpuset.cpus") == "/cg/cpuset/cpuset.cpus"
    else:
        assert lay.abs_dir("cpu", cont) == f"/cg/{cont}"
        assert lay.file("memory", pod, "memory.stat") == f"/cg/{pod}/memory.stat"
        assert lay.file("cpuset", "", "cpuset.cpus") == "/cg/cpuset.cpus"
    # and back again
    assert lay.parse_pod_dir(pod) == (qos, UID)
    assert lay.parse_container_dir(cont) == HASH
    assert lay.parse_container_dir(os.path.basename(cont)) == HASH
    assert kube_qos_of_dir(pod) is qos
    assert kube_qos_of_dir(cont) is qos


def test_systemd_basename_carries_qos() -> None:
    lay = layout(driver="systemd")
    assert lay.parse_pod_dir(f"kubepods-besteffort-pod{UID_}.slice") == (BE, UID)
    assert lay.parse_pod_dir(f"kubepods-burstable-pod{UID_}.slice") == (BU, UID)
    assert lay.parse_pod_dir(f"kubepods-pod{UID_}.slice") == (G, UID)


@pytest.mark.parametrize(
    ("driver", "name"),
    [
        ("systemd", "kubepods-besteffort.slice"),
        ("systemd", "kubepods-burstable.slice"),
        ("systemd", "kubepods-pod.slice"),
        ("systemd", f"kubepods-pod{UID_}"),
        ("systemd", f"docker-{HASH}.scope"),
        ("systemd", "system.slice"),
        ("cgroupfs", "burstable"),
        ("cgroupfs", "pod"),
        ("cgroupfs", "pod..x"),
        ("cgroupfs", HASH),
    ],
)
def test_parse_pod_dir_rejects(driver: str, name: str) -> None:
    assert layout(driver=driver).parse_pod_dir(name) is None


@pytest.mark.parametrize(
    ("driver", "name", "expected"),
    [
        ("systemd", f"crio-{HASH}", HASH),  # bare cri-o dir without .scope
        ("systemd", f"crio-conmon-{HASH}.scope", None),  # cri-o's monitor, not a container
        ("systemd", f"kubepods-pod{UID_}.slice", None),
        ("systemd", f"containerd-{HASH}.scope", None),
        ("systemd", "docker-.scope", None),
        ("systemd", "cgroup.procs", None),
        ("cgroupfs", "cpu.stat", None),
        ("cgroupfs", "", None),
    ],
)
def test_parse_container_dir_edges(driver: str, name: str, expected: str | None) -> None:
    assert layout(driver=driver).parse_container_dir(name) == expected


def test_cgroupfs_pod_qos_needs_parent() -> None:
    lay = layout(driver="cgroupfs")
    assert lay.parse_pod_dir(f"kubepods/besteffort/pod{UID}") == (BE, UID)
    assert lay.parse_pod_dir(f"pod{UID}") == (G, UID)


@pytest.mark.parametrize(
    "cid", ["", HASH, "rkt://abc", "docker://", "docker://../../etc", "docker://a/b", "docker://a.scope",
            "containerd//abc"]
)
def test_container_dir_bad_ids(cid: str) -> None:
    lay = layout()
    with pytest.raises(ValueError) as err:
        lay.container_dir("kubepods/podx", cid)
    assert str(err.value)


def test_split_container_id() -> None:
    assert split_container_id("cri-o://abc") == ("cri-o", "abc")
    with pytest.raises(ValueError, match="unknown container protocol"):
        split_container_id("rkt://abc")


@pytest.mark.parametrize("uid", ["", "../x", "a/b", "a b"])
def test_pod_dir_bad_uid(uid: str) -> None:
    with pytest.raises(ValueError, match="UID"):
        layout().pod_dir(BE, uid)


def test_bad_qos_and_constructor_args() -> None:
    with pytest.raises(ValueError, match="kube QoS"):
        layout().qos_dir("BE")
    with pytest.raises(ValueError, match="version"):
        layout(version=3)
    with pytest.raises(ValueError, match="driver"):
        layout(driver="cgroupv1")
    with pytest.raises(ValueError, match="subsystem"):
        layout(version=1).abs_dir("cpuset.cpus", "kubepods")
    # v2 ignores the subsystem altogether
    assert layout(version=2).abs_dir("anything", "kubepods") == "/cg/kubepods"


def test_roots_normalisation() -> None:
    r = HostRoots(cgroup="/x/cg/", proc="/p/", sys="/s", kubelet_cgroup_root="kube.slice/")
    assert (r.cgroup, r.proc) == ("/x/cg", "/p")
    assert (r.kubelet_cgroup_root, r.kubelet_rel) == ("/kube.slice", "kube.slice")
    assert r.proc_path("sys/vm/min_free_kbytes") == "/p/sys/vm/min_free_kbytes"
    assert r.proc_path("/stat") == "/p/stat"
    assert r.sys_path("fs/resctrl") == "/s/fs/resctrl"
    assert HostRoots(proc="/").proc_path("stat") == "/stat"
    assert HostRoots().kubelet_rel == ""
    with pytest.raises(ValueError):
        HostRoots(kubelet_cgroup_root="/../x")
    with pytest.raises(ValueError):
        HostRoots(cgroup="")
    # the root of the hierarchy itself
    assert layout(version=1, cgroup="/").abs_dir("cpu", "") == "/cpu"
    assert layout(version=2, cgroup="/").abs_dir("cpu", "kubepods") == "/kubepods"


# -- host applications ---------------------------------------------------------
@pytest.mark.parametrize(
    ("driver", "app", "expected"),
    [
        ("cgroupfs", {"name": "nginx", "qos": "LS"}, "host-latency-sensitive/nginx"),
        ("cgroupfs", {"name": "nginx", "qos": "LSR"}, "host-latency-sensitive/nginx"),
        ("cgroupfs", {"name": "nginx", "qos": "LSE"}, "host-latency-sensitive/nginx"),
        ("cgroupfs", {"name": "batch", "qos": "BE"}, "host-best-effort/batch"),
        ("cgroupfs", {"name": "sysd", "qos": "SYSTEM"}, "sysd"),
        ("cgroupfs", {"name": "plain"}, "plain"),
        ("cgroupfs", {"name": "a", "cgroupPath": {"base": "CgroupRoot", "parentDir": "p/",
                                                   "relativePath": "r"}}, "p/r"),
        ("cgroupfs", {"name": "a", "cgroupPath": {"parentDir": "/p", "relativePath": "r/"}}, "p/r"),
        ("cgroupfs", {"name": "a", "cgroupPath": {"base": "Kubepods", "relativePath": "x"}}, "kubepods/x"),
        ("cgroupfs", {"name": "a", "cgroupPath": {"base": "KubepodsBurstable", "relativePath": "x"}},
         "kubepods/burstable/x"),
        ("cgroupfs", {"name": "a", "cgroupPath": {"base": "KubepodsBesteffort", "parentDir": "q",
                                                   "relativePath": "x"}}, "kubepods/besteffort/q/x"),
        ("systemd", {"name": "a", "cgroupPath": {"base": "KubepodsBesteffort", "relativePath": "x.slice"}},
         "kubepods.slice/kubepods-besteffort.slice/x.slice"),
        ("systemd", {"name": "a", "cgroupPath": {"base": "Kubepods"}}, "kubepods.slice"),
    ],
)
def test_host_app_dir(driver: str, app: dict, expected: str) -> None:
    assert layout(driver=driver).host_app_dir(app) == expected


@pytest.mark.parametrize(
    ("app", "match"),
    [
        ({"qos": "LS"}, "no name"),
        ({"name": "a", "cgroupPath": {"base": "Nope"}}, "unknown cgroupPath.base"),
        ({"name": "a", "cgroupPath": {"relativePath": "../../etc"}}, r"\.\."),
        ({"name": "a", "cgroupPath": {"base": "CgroupRoot", "relativePath": "/"}}, "cgroup root"),
        ({"name": "a", "cgroupPath": "kubepods"}, "must be an object"),
    ],
)
def test_host_app_dir_rejects(app: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        layout().host_app_dir(app)


def test_host_app_with_kubelet_root() -> None:
    lay = layout(driver="cgroupfs", kubelet_root="/kube.slice")
    assert lay.host_app_dir({"name": "a", "cgroupPath": {"base": "Kubepods", "relativePath": "x"}}) == (
        "kube.slice/kubepods/x"
    )
    # without cgroupPath host apps live at the hierarchy root, not under the kubelet root
    assert lay.host_app_dir({"name": "a", "qos": "BE"}) == "host-best-effort/a"


# -- version detection -----------------------------------------------------------
def _fake_statfs(magic: int | None):
    seen: list[str] = []

    def statfs(path: str) -> int | None:
        seen.append(path)
        return magic

    return statfs, seen


def test_version_by_magic(tmp_path: Path) -> None:
    statfs, seen = _fake_statfs(CGROUP2_SUPER_MAGIC)
    assert detect_version(str(tmp_path) + "/", statfs) == 2
    assert seen == [str(tmp_path)]  # trailing slash dropped before statfs
    assert detect_version(str(tmp_path), _fake_statfs(CGROUP_SUPER_MAGIC)[0]) == 1


@pytest.mark.parametrize("magic", [TMPFS_MAGIC, 0xEF53, None])
def test_version_plain_directory(tmp_path: Path, magic: int | None) -> None:
    statfs, _ = _fake_statfs(magic)
    # a v1 host: tmpfs root with per-subsystem dirs and a hybrid `unified/` cgroup2 mount
    for sub in ("cpu", "memory", "unified"):
        (tmp_path / sub).mkdir()
    (tmp_path / "unified" / "cgroup.controllers").write_text("")
    assert detect_version(str(tmp_path), statfs) == 1
    # a v2 tree: cgroup.controllers at the root
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    assert detect_version(str(tmp_path), statfs) == 2


def test_version_missing_root(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        detect_version(str(tmp_path / "nope"), _fake_statfs(None)[0])


@pytest.mark.kernel  # reads the real cgroup mounts
def test_version_real_host() -> None:
    sysio = pytest.importorskip("qosmanager._native.sysio")
    root = "/sys/fs/cgroup"
    if sysio.statfs_magic(root) != TMPFS_MAGIC or not os.path.isdir(root + "/unified"):
        pytest.skip("this machine is not the v1 host with a hybrid unified mount the test expects")
    assert sysio.statfs_magic(root + "/unified") == CGROUP2_SUPER_MAGIC
    assert detect_version(root) == 1
    assert detect_version(root, sysio.statfs_magic) == 1
    # the hybrid mount on its own is a (empty) cgroup2 tree
    assert detect_version(root + "/unified") == 2
    assert detect_version(root + "/cpu") == 1


# -- driver detection ------------------------------------------------------------
@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("kubelet_root", ["/", "/kube.slice"])
@pytest.mark.parametrize(
    ("dirs", "expected"),
    [(["kubepods.slice"], "systemd"), (["kubepods"], "cgroupfs"), ([], "systemd"),
     (["kubepods.slice", "kubepods"], "systemd")],
)
def test_detect_driver(tmp_path: Path, version: int, kubelet_root: str, dirs: list[str],
                       expected: str) -> None:
    base = tmp_path / ("cpu" if version == 1 else "") / kubelet_root.strip("/")
    for d in dirs:
        (base / d).mkdir(parents=True)
    roots = HostRoots(cgroup=str(tmp_path), kubelet_cgroup_root=kubelet_root)
    assert detect_driver(roots, version) == expected


def test_detect_driver_looks_in_the_right_hierarchy(tmp_path: Path) -> None:
    # on v2 a `cpu/kubepods` dir means nothing (koordlet's import-time quirk looked there)
    (tmp_path / "cpu" / "kubepods").mkdir(parents=True)
    roots = HostRoots(cgroup=str(tmp_path))
    assert detect_driver(roots, 2) == "systemd"
    assert detect_driver(roots, 1) == "cgroupfs"
    # and kubepods outside the kubelet root is not ours
    assert detect_driver(HostRoots(cgroup=str(tmp_path), kubelet_cgroup_root="/k"), 1) == "systemd"


# -- walking -----------------------------------------------------------------------
def test_walkers(tmp_path: Path) -> None:
    lay = layout(version=1, cgroup=str(tmp_path))
    be = lay.qos_dir(BE)
    for rel in (f"{be}/podb/c2", f"{be}/podb/c1", f"{be}/poda/c3"):
        os.makedirs(lay.abs_dir("cpuset", rel))
    (Path(lay.abs_dir("cpuset", be)) / "cpuset.cpus").write_text("0-3\n")
    assert lay.dirs_at_depth("cpuset", be, 1) == [f"{be}/poda", f"{be}/podb"]
    assert lay.dirs_at_depth("cpuset", be, 2) == [f"{be}/poda/c3", f"{be}/podb/c1", f"{be}/podb/c2"]
    assert lay.dirs_up_to_depth("cpuset", be, 1) == [be, f"{be}/poda", f"{be}/podb"]
    assert lay.dirs_up_to_depth("cpuset", be, 2) == [
        be, f"{be}/poda", f"{be}/poda/c3", f"{be}/podb", f"{be}/podb/c1", f"{be}/podb/c2"]
    assert lay.dirs_at_depth("cpu", be, 1) == []
    assert lay.dirs_up_to_depth("cpu", be, 2) == []
    # the whole subtree, in the same order, and at most so many dirs
    assert lay.subtree("cpuset", be, 100) == (lay.dirs_up_to_depth("cpuset", be, 2), False)
    assert lay.subtree("cpuset", be, 3) == ([be, f"{be}/poda", f"{be}/poda/c3"], True)
    assert lay.subtree("cpuset", be, 6) == (lay.dirs_up_to_depth("cpuset", be, 2), False)
    assert lay.subtree("cpu", be, 10) == ([], False)


def test_the_subtree_walk_reaches_a_nesting_deeper_than_the_recursion_limit(tmp_path: Path) -> None:
    """A container may nest cgroups as deep as it likes (kill mode walks it): no recursion."""
    import sys

    lay = layout(version=2, cgroup=str(tmp_path))
    top = lay.qos_dir(BE)
    depth = sys.getrecursionlimit() + 50
    os.makedirs(lay.abs_dir("", top))
    rel = top
    try:
        for _ in range(depth):  # one by one: os.makedirs itself recurses
            rel += "/d"
            os.mkdir(lay.abs_dir("", rel))
        dirs, more = lay.subtree("", top, depth + 10)
        assert not more and len(dirs) == depth + 1 and dirs[-1] == rel
    finally:  # removed deepest first here: shutil.rmtree (pytest's clean-up) recurses too
        while rel != top:
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(lay.abs_dir("", rel))
            rel = rel.rsplit("/", 1)[0]


@given(
    uid=st.uuids().map(str) | st.text("0123456789abcdef", min_size=32, max_size=32),  # static pods: md5 hex
    digest=st.text("0123456789abcdef", min_size=1, max_size=64),
    driver=st.sampled_from(["systemd", "cgroupfs"]),
    qos=st.sampled_from(list(KubeQoS)),
    runtime=st.sampled_from(["docker", "containerd", "cri-o", "pouch"]),
)
def test_paths_parse_back(uid: str, digest: str, driver: str, qos: KubeQoS, runtime: str) -> None:
    lay = layout(driver=driver)
    pod = lay.pod_dir(qos, uid)
    assert lay.parse_pod_dir(pod) == (qos, uid)
    assert lay.parse_container_dir(lay.container_dir(pod, f"{runtime}://{digest}")) == digest
