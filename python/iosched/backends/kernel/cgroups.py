"""A cgroup per job that names one (fio's ``cgroup``), with its ``cgroup_weight``.

fio moves each job process into ``<mount>/<cgroup>`` itself, in the first cgroup hierarchy /proc/mounts lists that
is either cgroup v1 with blkio or cgroup v2 (fio's cgroup.c).  fio can set weights only on v1 and only through
CFQ's ``blkio.weight``, gone since Linux 5.0, so iosched creates the cgroups beforehand, writes the weights itself
and gives fio only ``cgroup=`` (which then finds the directory there and just joins it):

| hierarchy fio uses | weight files written | honoured by |
|---|---|---|
| cgroup v2 with the io controller | ``io.bfq.weight``, and ``io.weight`` where it exists | bfq; io.weight by iocost, only where ``io.cost.qos`` enables it (iosched leaves that alone) |
| cgroup v1 blkio | ``blkio.bfq.weight`` | bfq |
| v2 without the io controller | none: an error (fio would put the jobs where no I/O controller sees them) | |

Under none, mq-deadline and kyber the weights have no effect, as in the simulator.  The cgroups live under
``<mount>/iosched-<pid>/`` and are removed after each run (and by recovery after a killed one).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import SpecError, show
from ...safepath import inside
from . import KernelError
from .blockdev import read_attr, write_attr
from .state import Journal

NAME_RE = re.compile(r"[A-Za-z0-9_.+-]+")
FIO_PATH_MAX = 63           # fio formats "<mount>/<cgroup>" into a 64-byte buffer


@dataclass
class Hierarchy:
    version: int            # 1 (blkio) or 2 (io)
    mount: Path
    note: str = ""


@dataclass
class Mount:
    fstype: str
    mountpoint: str
    options: str


def parse_proc_mounts(text: str) -> list[Mount]:
    out = []
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 4:
            out.append(Mount(f[2], f[1].replace("\\040", " "), f[3]))
    return out


def fio_hierarchy(mounts: list[Mount]) -> tuple[Hierarchy | None, str]:
    """The hierarchy fio will use, or None and why it cannot be used for I/O weights."""
    v1 = next((m for m in mounts if m.fstype == "cgroup" and "blkio" in m.options.split(",")), None)
    for m in mounts:
        # fio takes the first cgroup mount whose options contain "blkio", or the first cgroup2 mount.
        if m.fstype == "cgroup" and "blkio" in m.options:
            return Hierarchy(1, Path(m.mountpoint)), ""
        if m.fstype == "cgroup2":
            root = Path(m.mountpoint)
            try:
                controllers = read_attr(root / "cgroup.controllers").split()
            except OSError:
                controllers = []
            if "io" in controllers:
                return Hierarchy(2, root), ""
            where = f" (blkio is on cgroup v1 at {v1.mountpoint}, listed after it)" if v1 else ""
            return None, (f"fio places job processes in the first cgroup hierarchy /proc/mounts lists, cgroup v2 at "
                          f"{root}, and its io controller is not available there{where}")
    return None, "no cgroup hierarchy with the blkio (v1) or io (v2) controller is mounted"


@dataclass
class RunCgroups:
    """The cgroups of one run."""
    hierarchy: Hierarchy
    parent: Path
    members: dict[str, int]                      # cgroup name → weight
    written: dict[str, dict[str, str]] = field(default_factory=dict)   # cgroup → {file: value}

    def fio_name(self, cgroup: str) -> str:
        return f"{self.parent.name}/{cgroup}"

    def describe(self) -> dict:
        return {"version": self.hierarchy.version, "mount": str(self.hierarchy.mount), "parent": str(self.parent),
                "weights": self.members, "written": self.written}


def check_names(groups: dict[str, tuple[int, str, str]], hierarchy: Hierarchy) -> None:
    """``groups``: cgroup → (weight, file, job label).  Names become paths and fio options: keep them plain."""
    prefix = len(str(hierarchy.mount)) + 1 + len(f"iosched-{os.getpid()}") + 1
    for name, (_, file, label) in groups.items():
        if not NAME_RE.fullmatch(name) or name in (".", ".."):
            raise SpecError(file, f"{label}: cgroup", f"{show(name)}: the kernel backend takes cgroup names of "
                            "letters, digits and _ . + - only")
        if prefix + len(name) > FIO_PATH_MAX:
            raise SpecError(file, f"{label}: cgroup", f"{show(name)} is too long: fio keeps the cgroup's path "
                            f"({hierarchy.mount}/iosched-<pid>/{name}) in 64 bytes; use at most "
                            f"{FIO_PATH_MAX - prefix} characters")


def weight_files(version: int, leaf: Path) -> list[str]:
    names = ["blkio.bfq.weight"] if version == 1 else ["io.bfq.weight", "io.weight"]
    return [n for n in names if (leaf / n).exists()]


def create(hierarchy: Hierarchy, groups: dict[str, int], journal: Journal, *, need_weights: bool) -> RunCgroups:
    """Make ``<mount>/iosched-<pid>/<name>`` for each cgroup and write its weight (journalled for removal)."""
    root = hierarchy.mount
    if hierarchy.version == 2:
        sub = root / "cgroup.subtree_control"
        if "io" not in read_attr(sub).split():
            _write(sub, "+io")
            journal.add({"op": "write", "path": str(sub), "value": "-io"})
    parent = root / f"iosched-{os.getpid()}"
    try:
        parent.mkdir()
    except FileExistsError:
        pass
    except OSError as e:
        raise KernelError(f"cannot create cgroup {parent}: {e.strerror}") from None
    journal.add({"op": "cgroup", "path": str(parent)})
    if hierarchy.version == 2:
        _write(parent / "cgroup.subtree_control", "+io")
    rc = RunCgroups(hierarchy, parent, dict(groups))
    for name, weight in groups.items():
        leaf = inside(parent, name)       # check_names made sure; a cgroup is a folder made from a user's name
        try:
            leaf.mkdir(exist_ok=True)
        except OSError as e:
            raise KernelError(f"cannot create cgroup {leaf}: {e.strerror}") from None
        files = weight_files(hierarchy.version, leaf)
        if not files and need_weights:
            want = "blkio.bfq.weight" if hierarchy.version == 1 else "io.bfq.weight or io.weight"
            raise KernelError(f"the spec gives cgroup weights, but cgroup v{hierarchy.version} at {root} has no "
                              f"{want} (a kernel without BFQ group scheduling or the io cost controller)")
        rc.written[name] = {}
        for fname in files:
            _write(leaf / fname, str(weight))
            rc.written[name][fname] = read_attr(leaf / fname)
    return rc


def _write(path: Path, value: str) -> None:
    try:
        write_attr(path, value)
    except OSError as e:
        raise KernelError(f"cannot write {value!r} to {path}: {e.strerror}") from None
