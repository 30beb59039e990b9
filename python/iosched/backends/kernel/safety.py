"""What is on a device before the kernel backend writes to it (DESIGN.md, "Safety of the kernel backend").

A device is refused for a workload that writes (write jobs, --precondition, --filesystem) when it is mounted (or
a partition of it is), is in use as swap, has partitions, has holders (device-mapper, md, ...) or carries a
signature blkid recognises (a filesystem, a partition table, RAID or LVM metadata), unless --destructive is given.
The device holding the root filesystem is refused for writes even with --destructive: there is no way to do that
without destroying the running system.  A read-only workload needs no flag: it is run with fio --readonly.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import SpecError
from .blockdev import SYS_DEV_BLOCK, BlockDevice, read_attr


def _unescape(s: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (\\040)."""
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 3 < len(s) and s[i + 1:i + 4].isdigit():
            out.append(chr(int(s[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


@dataclass
class Mount:
    devno: tuple[int, int]
    mountpoint: str
    fstype: str
    source: str


def parse_mountinfo(text: str) -> list[Mount]:
    out = []
    for line in text.splitlines():
        pre, sep, post = line.partition(" - ")
        if not sep:
            continue
        f, g = pre.split(), post.split()
        if len(f) < 5 or len(g) < 2:
            continue
        ma, _, mi = f[2].partition(":")
        out.append(Mount((int(ma), int(mi)), _unescape(f[4]), g[0], _unescape(g[1])))
    return out


def _rdev(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISBLK(st.st_mode):
        return None
    return os.major(st.st_rdev), os.minor(st.st_rdev)


def mounts_of(devnos: set[tuple[int, int]], mounts: list[Mount]) -> list[Mount]:
    """Mounts backed by any of ``devnos``, by number or by source node (btrfs shows an anonymous number)."""
    return [m for m in mounts if m.devno in devnos or (m.source.startswith("/") and _rdev(m.source) in devnos)]


def _lower_devnos(devno: tuple[int, int], seen: set[tuple[int, int]]) -> None:
    """``devno``, the disk it is a partition of, and everything below it (dm/md slaves), recursively."""
    if devno in seen:
        return
    seen.add(devno)
    sysfs = Path(os.path.realpath(SYS_DEV_BLOCK / f"{devno[0]}:{devno[1]}"))
    if not sysfs.exists():
        return
    if (sysfs / "partition").exists() and (sysfs.parent / "dev").exists():
        ma, mi = read_attr(sysfs.parent / "dev").split(":")
        _lower_devnos((int(ma), int(mi)), seen)
    slaves = sysfs / "slaves"
    if slaves.exists():
        for s in slaves.iterdir():
            if (s / "dev").exists():
                ma, mi = read_attr(s / "dev").split(":")
                _lower_devnos((int(ma), int(mi)), seen)


def root_devnos(mounts: list[Mount]) -> set[tuple[int, int]]:
    """Every block device under the root filesystem."""
    out: set[tuple[int, int]] = set()
    for m in mounts:
        if m.mountpoint == "/":
            _lower_devnos(m.devno, out)
            rd = _rdev(m.source) if m.source.startswith("/") else None
            if rd:
                _lower_devnos(rd, out)
    return out


def swap_devnos() -> set[tuple[int, int]]:
    out = set()
    try:
        lines = Path("/proc/swaps").read_text().splitlines()[1:]
    except OSError:
        return out
    for line in lines:
        parts = line.split()
        if parts and (rd := _rdev(_unescape(parts[0]))):
            out.add(rd)
    return out


def probe_signature(path: str) -> str | None:
    """What blkid's low-level probe finds on the device (a filesystem, partition table, RAID member...)."""
    blkid = shutil.which("blkid")
    if blkid is None:
        return "unknown (blkid, from util-linux, is not installed: cannot look for signatures)"
    r = subprocess.run([blkid, "-p", "-o", "export", path], capture_output=True, text=True)
    if r.returncode == 2:
        return None
    if r.returncode != 0:
        return f"unclear (blkid -p exited {r.returncode}: {r.stderr.strip() or r.stdout.strip()})"
    kv = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
    if "PTTYPE" in kv and "TYPE" not in kv:
        return f"{article(kv['PTTYPE'])} {kv['PTTYPE']} partition table"
    if "TYPE" in kv:
        usage = kv.get("USAGE", "filesystem")
        return f"{article(kv['TYPE'])} {kv['TYPE']} {'filesystem' if usage == 'filesystem' else usage + ' signature'}"
    return "a signature (" + ", ".join(f"{k}={v}" for k, v in kv.items() if k != "DEVNAME") + ")"


# Signature names read letter by letter that start with a vowel sound ("an xfs", "an LVM2_member").
_AN_LETTERS = ("xfs", "f2fs", "ntfs", "lvm", "hfs", "nilfs", "mbr", "sgi", "romfs")


def article(name: str) -> str:
    """"a" or "an" before a filesystem or signature name as people say it: an ext4, an xfs, a btrfs, a dos."""
    low = name.lower()
    return "an" if low[:1] in ("a", "e", "i", "o") or low.startswith(_AN_LETTERS) else "a"


@dataclass
class Findings:
    device: BlockDevice
    mounted: list[str] = field(default_factory=list)
    swap: bool = False
    partitions: list[str] = field(default_factory=list)
    holders: list[str] = field(default_factory=list)
    signature: str | None = None
    holds_root: bool = False

    def problems(self) -> list[str]:
        out = []
        if self.holds_root:
            out.append("holds the root filesystem")
        if self.mounted:
            out.append("is mounted (" + "; ".join(self.mounted) + ")")
        if self.swap:
            out.append("is in use as swap")
        if self.partitions:
            out.append("has partitions (" + ", ".join(self.partitions) + ")")
        if self.holders:
            out.append("has holders (" + ", ".join(self.holders) + ")")
        if self.signature:
            out.append(f"carries {self.signature}")
        return out


def inspect(dev: BlockDevice) -> Findings:
    mounts = parse_mountinfo(Path("/proc/self/mountinfo").read_text())
    devnos = dev.devnos()
    f = Findings(device=dev)
    f.mounted = [f"{m.source} on {m.mountpoint} ({m.fstype})" for m in mounts_of(devnos, mounts)]
    f.swap = bool(devnos & swap_devnos())
    f.partitions = dev.partitions()
    f.holders = dev.holders()
    f.signature = probe_signature(dev.path)
    f.holds_root = bool(devnos & root_devnos(mounts))
    return f


def check(dev: BlockDevice, *, writes: str | None, destructive: bool, flag: str = "--device") -> list[str]:
    """Refuse ``dev`` (SpecError) when the workload writes and the device is in use or holds data; ``writes``
    says what writes (None: read-only).  Returns notes for a read-only workload on such a device."""
    found = inspect(dev)
    problems = found.problems()
    if not problems:
        return []
    if writes is None:
        return [f"{dev.path} {'; '.join(problems)}: the workload only reads (fio --readonly), so it runs"]
    if found.holds_root:
        raise SpecError(flag, dev.path, f"holds the root filesystem and {writes} would write to it: refused "
                                        "(also with --destructive)")
    if not destructive:
        raise SpecError(flag, dev.path, f"{'; '.join(problems)}, and {writes} would write to it: refused "
                                        "(--destructive to overwrite it anyway)")
    if found.mounted or found.swap or found.holders:
        # Writing under a mounted filesystem or an active device-mapper target corrupts it and whatever uses it.
        raise SpecError(flag, dev.path, f"{'; '.join(problems)}: refused even with --destructive while it is in use "
                                        "(unmount it, swapoff, remove its holders first)")
    return [f"{dev.path} {'; '.join(problems)}: overwriting it (--destructive)"]
