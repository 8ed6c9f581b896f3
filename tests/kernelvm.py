"""A real cgroup v2 (or v1) kernel for tests: a Debian kernel under QEMU, the host's ``/`` shared read-only.

The machines this project is built on mount cgroup v1 (with an empty cgroup2 ``unified`` beside it),
so cgroup v2's files (``cpu.max``, ``cpu.max.burst``, ``cpu.idle``, ``memory.high``, PSI ...) exist
only faked -- unless a real kernel runs them.  This module boots one under QEMU (software emulation:
about 5 s to boot, code about 20x slower) with:

* the host's ``/`` over 9p, read-only, so the guest runs the very interpreter, virtual environment
  and source tree of the tests that started it; RAM overlays on ``/tmp``, ``/var/tmp``, ``/root``,
  ``/home`` and ``/etc``;
* one host directory (the *share*) read-write at the same path, where the command runs and leaves
  its results;
* cgroup2 alone at ``/sys/fs/cgroup`` (``cgroup_no_v1=all``) with every controller enabled for the
  root's children, as systemd does on a v2 host;
* or, for a cgroup v1 guest (``cgroup=1``), a tmpfs at ``/sys/fs/cgroup`` with the v1 hierarchies
  ``cpu``, ``cpuacct``, ``cpuset``, ``memory`` and ``blkio`` mounted in it, as on the project's hosts.
  Its kernel is another one (:data:`V1_KERNEL_PACKAGE`, assets in ``guest_dir(1)``): the 6.12 one is
  built without v1 cpusets and memory (``CONFIG_CPUSETS_V1``, ``CONFIG_MEMCG_V1``).  It serves what
  the host cannot show: the host has 2 CPUs, cpuset suppression needs 3.

``setup(dir)`` installs QEMU and BusyBox from Debian's packages and unpacks a kernel package into
``dir`` (idempotent: a second call with the assets in place does nothing); ``.ci/setup-guest`` calls
it for both guests.  ``run(script, share, timeout=...)`` boots the guest once, runs a shell script in
the share and returns its exit status and output.  ``unavailable()`` says why the guest cannot run
here (tests skip with it).

    python3 tests/kernelvm.py setup [DIR]          # once per machine (root, Debian)
    python3 tests/kernelvm.py setup-v1 [DIR]       # the cgroup v1 guest's kernel
    python3 tests/kernelvm.py run SHARE 'cmd ...'  # boot, run, print the output, exit with cmd's status
    python3 tests/kernelvm.py run-v1 SHARE 'cmd ...'  # the same in the cgroup v1 guest

Standard library only: ``.ci/setup-guest`` runs it before any virtual environment exists.
"""

from __future__ import annotations

import dataclasses
import glob
import gzip
import hashlib
import json
import lzma
import os
import shutil
import subprocess
import sys
import tempfile
import time

# The kernel: Debian's 6.12 series (bookworm backports it; its "cloud" flavour lacks 9p).
KERNEL_PACKAGE = os.environ.get("QOSM_GUEST_KERNEL", "linux-image-6.12-amd64")
# The cgroup v1 guest's: Debian 12's own series (6.1), with every v1 controller built in.
V1_KERNEL_PACKAGE = os.environ.get("QOSM_GUEST_V1_KERNEL", "linux-image-amd64")
HOST_PACKAGES = ("qemu-system-x86", "busybox-static", "kmod")
QEMU = "qemu-system-x86_64"
BUSYBOX = "/bin/busybox"
# Modules the initramfs loads (each with what it depends on) unless built in.
MODULES = ("virtio_pci", "9pnet_virtio", "9p", "overlay", "virtio_blk")


def guest_dir(cgroup: int = 2) -> str:
    """Where the guest's assets are cached: ``$QOSM_GUEST_DIR``, else ``~/.cache/qosmanager/guest``;
    the cgroup v1 guest's in the same path with ``-v1`` appended."""
    explicit = os.environ.get("QOSM_GUEST_DIR")
    if explicit:
        base = os.path.abspath(explicit)
    else:
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(cache, "qosmanager", "guest")
    return base if cgroup == 2 else base + "-v1"


# ---------------------------------------------------------------------------------------------
# the guest's first process

# Runs as PID 1 from the initramfs.  Kernel arguments: qosm.share=<host dir> (mounted read-write at
# the same path), qosm.modules=<names> (loaded in order).  Runs <share>/guest-run.sh with its output
# in <share>/guest-run.log and its exit status in <share>/guest-rc, then powers off.
INIT = r"""#!/bin/busybox sh
B=/bin/busybox
$B mount -t proc proc /proc
$B mount -t sysfs sys /sys
$B mount -t devtmpfs dev /dev
arg() { $B sed -n "s/.*$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
SHARE=$(arg qosm.share)
for m in $(arg qosm.modules | $B tr , ' '); do
    $B insmod /modules/$m.ko || echo "guest: cannot load module $m"
done
fail() { echo "guest: $*"; $B poweroff -f; }
$B mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose hostroot /newroot \
    || fail "cannot mount the host root"
for d in proc sys dev; do $B mount --move /$d /newroot/$d; done
$B mount -t tmpfs tmpfs /newroot/run
$B mkdir -p /overlays
$B mount -t tmpfs tmpfs /overlays
for d in tmp var/tmp root home etc; do
    [ -d /newroot/$d ] || continue
    o=/overlays/$(echo $d | $B tr / _)
    $B mkdir -p $o/upper $o/work
    $B mount -t overlay overlay -o lowerdir=/newroot/$d,upperdir=$o/upper,workdir=$o/work /newroot/$d \
        || echo "guest: no overlay on /$d"
done
$B mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 share /newroot$SHARE || fail "cannot mount $SHARE"
$B mount -t cgroup2 -o nsdelegate cgroup2 /newroot/sys/fs/cgroup || fail "cannot mount cgroup2"
ctrls=$($B cat /newroot/sys/fs/cgroup/cgroup.controllers)
for c in $ctrls; do echo "+$c" > /newroot/sys/fs/cgroup/cgroup.subtree_control || echo "guest: no +$c"; done
$B mkdir -p /newroot/dev/pts /newroot/dev/shm
$B mount -t devpts devpts /newroot/dev/pts
$B mount -t tmpfs tmpfs /newroot/dev/shm
$B hostname qosm-guest
$B chroot /newroot /bin/sh -c "cd '$SHARE' && \
    HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    sh ./guest-run.sh > ./guest-run.log 2>&1; echo \$? > ./guest-rc"
$B sync
$B poweroff -f
"""


# Run first in a cgroup v1 guest (booted without cgroup_no_v1): hand every controller back from the
# cgroup2 mount init made, and mount the v1 hierarchies the host has in its place.
V1_MOUNTS = r"""
for c in $(cat /sys/fs/cgroup/cgroup.subtree_control); do
    echo "-$c" > /sys/fs/cgroup/cgroup.subtree_control || exit 97
done
umount /sys/fs/cgroup || exit 97
mount -t tmpfs -o mode=755 tmpfs /sys/fs/cgroup || exit 97
for c in cpu cpuacct cpuset memory blkio; do
    mkdir /sys/fs/cgroup/$c && mount -t cgroup -o $c cgroup /sys/fs/cgroup/$c \
        || { echo "guest: no v1 $c"; exit 97; }
done
"""


def _newc_entry(name: str, mode: int, data: bytes, ino: int) -> bytes:
    """One file of a cpio archive in the kernel's "newc" format (headers and data 4-byte aligned)."""
    raw = name.encode() + b"\0"
    fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(raw), 0)
    header = b"070701" + b"".join(b"%08X" % f for f in fields)
    out = header + raw
    out += b"\0" * (-len(out) % 4) + data
    return out + b"\0" * (-len(out) % 4)


def _module_order(mod_dir: str, wanted: tuple[str, ...]) -> list[str]:
    """Module files (relative to ``mod_dir``) to load for ``wanted``, dependencies first; built-ins skipped."""
    deps: dict[str, list[str]] = {}
    with open(os.path.join(mod_dir, "modules.dep")) as f:
        for line in f:
            path, _, rest = line.partition(":")
            deps[path] = rest.split()
    builtin: set[str] = set()
    with open(os.path.join(mod_dir, "modules.builtin")) as f:
        builtin = {_module_name(line.strip()) for line in f if line.strip()}
    by_name = {_module_name(p): p for p in deps}
    order: list[str] = []

    def add(path: str) -> None:
        for dep in reversed(deps[path]):  # modules.dep lists the deepest dependency last
            add(dep)
        if path not in order:
            order.append(path)

    for name in wanted:
        if name in builtin:
            continue
        if name not in by_name:
            raise RuntimeError(f"kernel module {name} is neither built in nor in {mod_dir}")
        add(by_name[name])
    return order


def _module_name(path: str) -> str:
    return os.path.basename(path).split(".ko")[0].replace("-", "_")


def _module_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".xz"):
        return lzma.decompress(data)
    if path.endswith(".gz"):
        return gzip.decompress(data)
    if path.endswith(".zst"):
        return subprocess.run(["zstd", "-dc", path], check=True, capture_output=True).stdout
    return data


def build_initramfs(kernel_root: str, version: str, out: str) -> list[str]:
    """The guest's initramfs: BusyBox, the modules for 9p/overlay/virtio and :data:`INIT`.
    Returns the module names in load order."""
    mod_dir = os.path.join(kernel_root, "lib", "modules", version)
    if not os.path.exists(os.path.join(mod_dir, "modules.dep")):
        subprocess.run(["depmod", "-b", kernel_root, version], check=True)
    entries: list[tuple[str, int, bytes]] = [
        (d, 0o40755, b"") for d in ("bin", "dev", "modules", "newroot", "proc", "sys")
    ]
    with open(BUSYBOX, "rb") as f:
        entries.append(("bin/busybox", 0o100755, f.read()))
    names = []
    for rel in _module_order(mod_dir, MODULES):
        name = _module_name(rel)
        entries.append((f"modules/{name}.ko", 0o100644, _module_bytes(os.path.join(mod_dir, rel))))
        names.append(name)
    entries.append(("init", 0o100755, INIT.encode()))
    archive = b"".join(_newc_entry(n, m, d, i + 1) for i, (n, m, d) in enumerate(entries))
    archive += _newc_entry("TRAILER!!!", 0, b"", 0)
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(gzip.compress(archive, 1))
    os.replace(tmp, out)
    return names


# ---------------------------------------------------------------------------------------------
# assets


@dataclasses.dataclass(frozen=True)
class Assets:
    """What :func:`setup` leaves in the guest dir (``assets.json`` names them)."""

    dir: str
    kernel: str
    initrd: str
    version: str
    modules: tuple[str, ...]

    @classmethod
    def load(cls, directory: str) -> Assets | None:
        try:
            with open(os.path.join(directory, "assets.json")) as f:
                meta = json.load(f)
        except (OSError, ValueError):
            return None
        if meta.get("init") != _init_digest():
            return None  # made by another version of this module: rebuild
        assets = cls(directory, os.path.join(directory, meta["kernel"]), os.path.join(directory, meta["initrd"]),
                     meta["version"], tuple(meta["modules"]))
        return assets if os.path.isfile(assets.kernel) and os.path.isfile(assets.initrd) else None


def _init_digest() -> str:
    return hashlib.sha256((INIT + ",".join(MODULES)).encode()).hexdigest()[:16]


def _run(cmd: list[str], **kw: object) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)  # type: ignore[call-overload]


def setup(directory: str | None = None, package: str = KERNEL_PACKAGE) -> Assets:
    """Install QEMU and BusyBox (Debian packages) and unpack ``package``'s kernel into ``directory``.
    Does nothing when everything is already in place."""
    directory = os.path.abspath(directory or guest_dir())
    assets = Assets.load(directory)
    if assets is not None and shutil.which(QEMU):
        print(f"guest assets in place: {directory} (kernel {assets.version})")
        return assets
    os.makedirs(directory, exist_ok=True)
    missing = not shutil.which(QEMU) or not os.path.exists(BUSYBOX) or not shutil.which("depmod")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    kernel_dir = os.path.join(directory, "kernel")
    if missing or not glob.glob(os.path.join(kernel_dir, "boot", "vmlinuz-*")):
        _run(["apt-get", "update", "-q"], env=env)
    if missing:
        _run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *HOST_PACKAGES], env=env)
    if not glob.glob(os.path.join(kernel_dir, "boot", "vmlinuz-*")):
        depends = subprocess.run(["apt-cache", "depends", package], check=True, capture_output=True,
                                 text=True).stdout
        image = next((line.split()[1] for line in depends.splitlines()
                      if line.strip().startswith("Depends: linux-image-")), package)
        debs = os.path.join(directory, "debs")
        shutil.rmtree(debs, ignore_errors=True)
        os.makedirs(debs)
        # apt's sandbox user may not write into a root-owned cache: download as the caller
        _run(["apt-get", "download", "-q", "-o", "APT::Sandbox::User=root", image], cwd=debs, env=env)
        unpack = tempfile.mkdtemp(dir=directory, prefix="kernel.")
        _run(["dpkg-deb", "-x", *glob.glob(os.path.join(debs, "*.deb")), unpack])
        shutil.rmtree(kernel_dir, ignore_errors=True)
        os.replace(unpack, kernel_dir)
        shutil.rmtree(debs)
    (vmlinuz,) = glob.glob(os.path.join(kernel_dir, "boot", "vmlinuz-*"))
    version = os.path.basename(vmlinuz)[len("vmlinuz-"):]
    modules = build_initramfs(kernel_dir, version, os.path.join(directory, "initrd.gz"))
    meta = {"kernel": os.path.relpath(vmlinuz, directory), "initrd": "initrd.gz", "version": version,
            "modules": modules, "init": _init_digest()}
    with open(os.path.join(directory, "assets.json"), "w") as f:
        json.dump(meta, f, indent=1)
    assets = Assets.load(directory)
    assert assets is not None
    print(f"guest assets ready: {directory} (kernel {version}, modules {', '.join(modules)})")
    return assets


def unavailable(directory: str | None = None, cgroup: int = 2) -> str | None:
    """Why the guest (of cgroup version ``cgroup``) cannot run here, or None when it can."""
    directory = directory or guest_dir(cgroup)
    if sys.platform != "linux" or os.uname().machine != "x86_64":
        return f"the guest needs an x86_64 Linux host, not {sys.platform}/{os.uname().machine}"
    if not shutil.which(QEMU):
        return f"{QEMU} is not installed (run .ci/setup-guest)"
    if Assets.load(directory) is None:
        return f"no cgroup v{cgroup} guest kernel in {directory} (run .ci/setup-guest, or set QOSM_GUEST_DIR)"
    return None


# ---------------------------------------------------------------------------------------------
# running


@dataclasses.dataclass
class GuestRun:
    rc: int | None  # the script's exit status; None when the guest did not report one
    output: str  # what the script printed (stdout and stderr)
    console: str  # the guest's serial console (kernel and init messages)
    seconds: float  # boot to power-off, wall clock
    timed_out: bool = False

    def explain(self) -> str:
        """A few lines for a failure message: why, and the end of the console and output."""
        why = ("the guest did not finish in time" if self.timed_out
               else "the guest reported no exit status" if self.rc is None else f"exit status {self.rc}")
        tail = (self.console.strip().splitlines() + self.output.strip().splitlines())[-30:]
        return why + "\n" + "\n".join(tail)


def qemu_command(assets: Assets, share: str, *, cpus: int = 2, memory: str = "1G",
                 drives: tuple[str, ...] = (), append: str = "", cgroup: int = 2) -> list[str]:
    """The QEMU command line: TCG (no KVM here), serial console on stdout, ``/`` and ``share`` over 9p,
    each of ``drives`` (raw image files) a virtio disk (``/dev/vda``, ``/dev/vdb`` ...).  ``cgroup=1``:
    the v1 controllers are left to the kernel (the script mounts them)."""
    no_v1 = "cgroup_no_v1=all " if cgroup == 2 else ""
    # no_timer_check: under TCG on a loaded host the kernel's boot-time check of the IO-APIC timer sees
    # too few ticks and panics ("IO-APIC + timer doesn't work"); the emulated timer does work
    kargs = (f"console=ttyS0 quiet loglevel=1 panic=-1 no_timer_check {no_v1}qosm.share={share} "
             f"qosm.modules={','.join(assets.modules)} {append}").strip()
    cmd = [QEMU, "-machine", "pc,accel=tcg", "-cpu", "max", "-smp", str(cpus), "-m", memory,
           "-nodefaults", "-no-user-config", "-display", "none", "-serial", "stdio", "-no-reboot",
           "-kernel", assets.kernel, "-initrd", assets.initrd, "-append", kargs,
           "-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
           "-virtfs", f"local,path={share},mount_tag=share,security_model=none,multidevs=remap"]
    for d in drives:
        cmd += ["-drive", f"file={d},format=raw,if=virtio"]
    return cmd


def run(script: str, share: str, *, timeout: float, assets: Assets | None = None, cpus: int = 2,
        memory: str = "1G", drives: tuple[str, ...] = (), append: str = "", cgroup: int = 2) -> GuestRun:
    """Boot the guest, run the shell ``script`` in ``share`` (a host dir, read-write in the guest at the
    same path) and power off.  ``timeout`` bounds the whole run: QEMU is killed after it.  ``cgroup=1``:
    the cgroup v1 guest (its kernel, its hierarchies mounted before the script runs)."""
    if assets is None:
        assets = Assets.load(guest_dir(cgroup))
        if assets is None:
            raise RuntimeError(unavailable(cgroup=cgroup) or "no guest assets")
    if cgroup == 1:
        script = V1_MOUNTS + script
    share = os.path.realpath(share)
    if any(c.isspace() for c in share):
        raise ValueError(f"the share's path must not hold white space: {share!r}")
    os.makedirs(share, exist_ok=True)
    for name in ("guest-rc", "guest-run.log"):
        if os.path.exists(os.path.join(share, name)):
            os.unlink(os.path.join(share, name))
    with open(os.path.join(share, "guest-run.sh"), "w") as f:
        f.write(script)
    cmd = qemu_command(assets, share, cpus=cpus, memory=memory, drives=drives, append=append, cgroup=cgroup)
    t0 = time.monotonic()
    timed_out = False
    try:
        done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
        console = (done.stdout + done.stderr).decode(errors="replace")
    except subprocess.TimeoutExpired as e:  # subprocess.run has killed QEMU (our child) by then
        timed_out = True
        console = ((e.stdout or b"") + (e.stderr or b"")).decode(errors="replace")
    seconds = time.monotonic() - t0
    rc: int | None = None
    try:
        with open(os.path.join(share, "guest-rc")) as f:
            rc = int(f.read().strip())
    except (OSError, ValueError):
        rc = None
    try:
        with open(os.path.join(share, "guest-run.log"), errors="replace") as f:
            output = f.read()
    except OSError:
        output = ""
    return GuestRun(rc, output, console, seconds, timed_out)


def main(argv: list[str]) -> int:
    if argv[:1] == ["setup"]:
        setup(argv[1] if len(argv) > 1 else None)
        return 0
    if argv[:1] == ["setup-v1"]:
        setup(argv[1] if len(argv) > 1 else guest_dir(1), V1_KERNEL_PACKAGE)
        return 0
    if len(argv) >= 3 and argv[0] in ("run", "run-v1"):
        cgroup = 1 if argv[0] == "run-v1" else 2
        reason = unavailable(cgroup=cgroup)
        if reason:
            print(reason, file=sys.stderr)
            return 2
        result = run(" ".join(argv[2:]) + "\n", argv[1], timeout=600, cgroup=cgroup)
        sys.stdout.write(result.output)
        if result.rc is None:
            print(result.explain(), file=sys.stderr)
            return 125
        return result.rc
    print(__doc__.split("\n\n")[-2], file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
