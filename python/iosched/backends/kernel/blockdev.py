"""A block device as sysfs shows it: identity, size, its queue's scheduler, tunables (queue/iosched/*) and
nr_requests; reading a snapshot of them, applying a run's settings and restoring a snapshot."""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ...errors import SpecError, show
from ...spec import scheduler_registry
from . import KernelError

SYS_DEV_BLOCK = Path("/sys/dev/block")


def parse_scheduler_line(text: str) -> tuple[list[str], str | None]:
    """``none [mq-deadline] kyber bfq`` → (["none", "mq-deadline", "kyber", "bfq"], "mq-deadline")."""
    names, current = [], None
    for word in text.split():
        if word.startswith("[") and word.endswith("]"):
            word = word[1:-1]
            current = word
        names.append(word)
    return names, current


def write_attr(path: Path, value: str) -> None:
    """One write(2) of ``value`` to a sysfs/cgroup file; the kernel's refusal is an OSError with its errno."""
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)      # as a shell's ">" does; sysfs ignores the truncation
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def read_attr(path: Path) -> str:
    return path.read_text().strip()


@dataclass
class BlockDevice:
    path: str               # the device node, symlinks resolved: /dev/loop0
    name: str               # the kernel's name: loop0
    devno: tuple[int, int]  # major, minor
    sysfs: Path             # /sys/devices/.../loop0

    @classmethod
    def open(cls, given: str, *, flag: str = "--device") -> "BlockDevice":
        """The whole-disk block device ``given`` names; a clear SpecError for anything else."""
        path = os.path.realpath(given)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise SpecError(flag, given, "no such device") from None
        except OSError as e:
            raise SpecError(flag, given, f"cannot stat: {e.strerror}") from None
        if not stat.S_ISBLK(st.st_mode):
            raise SpecError(flag, given, "not a block device")
        devno = (os.major(st.st_rdev), os.minor(st.st_rdev))
        sysfs = Path(os.path.realpath(SYS_DEV_BLOCK / f"{devno[0]}:{devno[1]}"))
        if (sysfs / "partition").exists():
            parent = sysfs.parent.name
            raise SpecError(flag, given, f"is a partition of /dev/{parent}: the scheduler belongs to the whole "
                                         f"device, so name it (and mind its other partitions)")
        if not (sysfs / "queue" / "scheduler").exists():
            raise SpecError(flag, given, "has no I/O scheduler (no queue/scheduler in sysfs)")
        return cls(path=path, name=sysfs.name, devno=devno, sysfs=sysfs)

    # ------------------------------------------------------------ identity

    @property
    def queue(self) -> Path:
        return self.sysfs / "queue"

    @property
    def capacity_bytes(self) -> int:
        return int(read_attr(self.sysfs / "size")) * 512      # sysfs counts 512-byte sectors whatever the device

    @property
    def logical_block_bytes(self) -> int:
        return int(read_attr(self.queue / "logical_block_size"))

    def describe(self) -> dict:
        """What the run records about the device."""
        info: dict = {"path": self.path, "name": self.name, "devno": f"{self.devno[0]}:{self.devno[1]}",
                      "capacity_bytes": self.capacity_bytes, "logical_block_bytes": self.logical_block_bytes}
        for attr in ("rotational", "physical_block_size", "max_sectors_kb", "read_ahead_kb", "nomerges",
                     "rq_affinity", "write_cache", "wbt_lat_usec"):
            p = self.queue / attr
            if p.exists():
                try:
                    info[attr] = read_attr(p)
                except OSError:
                    pass
        for attr in ("model", "firmware_rev"):
            p = self.sysfs / "device" / attr
            if p.exists():
                info[attr] = read_attr(p)
        backing = self.sysfs / "loop" / "backing_file"
        if backing.exists():
            info["loop_backing_file"] = read_attr(backing)
            info["loop_direct_io"] = read_attr(self.sysfs / "loop" / "dio") if (self.sysfs / "loop" / "dio").exists() else None
        info["hw_queues"] = len(list((self.sysfs / "mq").glob("*"))) if (self.sysfs / "mq").exists() else None
        return info

    def partitions(self) -> list[str]:
        return sorted(p.name for p in self.sysfs.iterdir() if (p / "partition").exists())

    def holders(self) -> list[str]:
        out = [h.name for h in (self.sysfs / "holders").iterdir()] if (self.sysfs / "holders").exists() else []
        for part in self.partitions():
            hd = self.sysfs / part / "holders"
            if hd.exists():
                out += [f"{h.name} (on {part})" for h in hd.iterdir()]
        return out

    def devnos(self) -> set[tuple[int, int]]:
        """The device's and its partitions' major:minor numbers."""
        out = {self.devno}
        for part in self.partitions():
            ma, mi = read_attr(self.sysfs / part / "dev").split(":")
            out.add((int(ma), int(mi)))
        return out

    # ------------------------------------------------------------ the queue

    def schedulers(self) -> tuple[list[str], str | None]:
        return parse_scheduler_line(read_attr(self.queue / "scheduler"))

    def scheduler(self) -> str | None:
        return self.schedulers()[1]

    def tunables(self) -> dict[str, str]:
        d = self.queue / "iosched"
        if not d.exists():
            return {}
        return {p.name: read_attr(p) for p in sorted(d.iterdir()) if p.is_file()}

    def snapshot(self) -> dict:
        """Everything a run may change, as the kernel shows it now (restore() writes it back).  wbt_lat_usec is
        in it because BFQ turns writeback throttling off while it runs."""
        snap = {"scheduler": self.scheduler(), "nr_requests": int(read_attr(self.queue / "nr_requests")),
                "iosched": self.tunables()}
        if (self.queue / "wbt_lat_usec").exists():
            snap["wbt_lat_usec"] = read_attr(self.queue / "wbt_lat_usec")
        return snap

    def _write(self, attr: str, value: str) -> None:
        try:
            write_attr(self.queue / attr, value)
        except OSError as e:
            raise KernelError(f"{self.path}: cannot write {value!r} to {self.queue / attr}: "
                              f"{e.strerror or os.strerror(e.errno)}") from None

    def set_scheduler(self, name: str) -> None:
        self._write("scheduler", name)
        if self.scheduler() != name:
            raise KernelError(f"{self.path}: wrote {name!r} to {self.queue / 'scheduler'} but it reads "
                              f"{read_attr(self.queue / 'scheduler')!r}")

    def apply(self, scheduler: str, nr_requests: int | None, tunables: dict[str, int], *, file: str,
              notes: list[str] | None = None) -> dict:
        """Give the queue a fresh instance of ``scheduler`` (the kernel's defaults), then nr_requests, then the
        tunables in order; returns the snapshot the run sees.  ``file`` names the spec in errors; a value the
        kernel stores differently (mq-deadline's and BFQ's times are jiffies) adds a note to ``notes``."""
        offered, current = self.schedulers()
        if scheduler not in offered:
            raise SpecError(file, "scheduler.name", f"{show(scheduler)} is not offered by this kernel for "
                            f"{self.path} (it offers: {', '.join(offered)}){elsewhere_hint(scheduler)}")
        if current == scheduler and scheduler != "none" and "none" in offered:
            self.set_scheduler("none")   # switching creates a fresh elevator with default tunables
        if self.scheduler() != scheduler:
            self.set_scheduler(scheduler)
        if nr_requests is not None:
            try:
                write_attr(self.queue / "nr_requests", str(nr_requests))
            except OSError as e:
                raise SpecError(file, "scheduler.nr_requests", f"the kernel refused {nr_requests} for {self.path} "
                                f"({e.strerror}; it has {read_attr(self.queue / 'nr_requests')})") from None
        have = self.tunables()
        for key, value in tunables.items():
            if key not in have:
                raise SpecError(file, f"scheduler.{key}", f"{scheduler} on this kernel has no tunable {show(key)} "
                                f"(it has: {', '.join(have) or 'none'})")
            try:
                write_attr(self.queue / "iosched" / key, str(value))
            except OSError as e:
                raise SpecError(file, f"scheduler.{key}", f"the kernel refused {value} for {self.path} "
                                f"({e.strerror})") from None
        snap = self.snapshot()
        if notes is not None:
            if nr_requests is not None and snap["nr_requests"] != nr_requests:
                notes.append(f"scheduler.nr_requests: the kernel made {nr_requests} into {snap['nr_requests']} "
                             f"on {self.path}")
            for key, value in tunables.items():
                if snap["iosched"].get(key) != str(value):
                    notes.append(f"scheduler.{key}: the kernel made {value} into {snap['iosched'].get(key)} on "
                                 f"{self.path} (it keeps this tunable in its own units)")
        return snap

    def restore(self, saved: dict, touched: list[str] | tuple[str, ...] = ()) -> list[str]:
        """Write a snapshot back: scheduler first (a switch resets the rest), then nr_requests and wbt_lat_usec,
        then every tunable that differs.  Returns the problems (empty when all is back)."""
        return restore_queue(self.queue, saved, touched)


# Tunables that read the same whether the user set them or the scheduler tuned them itself: BFQ's max_budget
# shows its current (auto-tuned) budget, and writing that back would fix it.  Restored only if the run set it.
AUTO_TUNED = {"max_budget"}


def restore_queue(queue: Path, saved: dict, touched: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Write ``saved`` back; ``touched``: the tunables the run set (auto-tuned ones are written only if touched)."""
    problems: list[str] = []

    def put(attr: Path, value: str) -> None:
        try:
            write_attr(attr, value)
        except OSError as e:
            problems.append(f"cannot write {value!r} to {attr}: {e.strerror or os.strerror(e.errno or errno.EIO)}")

    if not queue.exists():
        return [f"{queue} is gone (device removed?)"]
    _, current = parse_scheduler_line(read_attr(queue / "scheduler"))
    if saved.get("scheduler") and current != saved["scheduler"]:
        put(queue / "scheduler", saved["scheduler"])
    if saved.get("nr_requests") is not None and read_attr(queue / "nr_requests") != str(saved["nr_requests"]):
        put(queue / "nr_requests", str(saved["nr_requests"]))
    if saved.get("wbt_lat_usec") is not None and (queue / "wbt_lat_usec").exists() and \
            read_attr(queue / "wbt_lat_usec") != saved["wbt_lat_usec"]:
        put(queue / "wbt_lat_usec", saved["wbt_lat_usec"])
    for key, value in (saved.get("iosched") or {}).items():
        if key in AUTO_TUNED and key not in touched:
            continue
        p = queue / "iosched" / key
        if not p.exists():
            problems.append(f"{p} is missing after restoring the scheduler")
            continue
        if read_attr(p) != value:
            put(p, value)
    return problems


def simulator_only() -> dict[str, str]:
    """The schedulers only the simulator has, with what each is (from the registry in iosched-policy); empty
    without the native module, when a refusal just goes without the hint."""
    rows = scheduler_registry() or {}
    return {name: row["description"] for name, row in rows.items() if row["kernel"] == "simulator-only"}


# The kernel's own blk-mq schedulers besides none: a host kernel built without one (CI's 6.18.44 has no
# CONFIG_IOSCHED_BFQ) still has it in the VM lab, whose Debian kernel loads each as a module (the lab offers these:
# backends/vm/runner.py's LAB_SCHEDULERS is built from this).
KERNEL_SCHEDULERS = ("mq-deadline", "kyber", "bfq")


def elsewhere_hint(name: str) -> str:
    """Where a scheduler this kernel lacks does run: the kernel's own in the VM lab's kernel, our modules (k2,
    kyber-fairness) there too, the other simulator-only schedulers in the simulator; "" for any other name."""
    from ..vm.kmod import vm_hint
    if name in KERNEL_SCHEDULERS:
        return f"; {name} is one of Linux's own schedulers, built out of this kernel: run it with --backend vm, " \
               "whose kernel has it"
    hint = vm_hint(name)
    if hint:
        return hint
    what = simulator_only().get(name)
    return f"; {name} is {what}: run it with --backend sim" if what else ""
