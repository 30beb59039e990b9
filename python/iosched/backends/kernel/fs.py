"""``--filesystem``: a fresh filesystem on each device, mounted under the state dir, with one test file the jobs
run on (seed 003's file-system study).  ``--precondition``: seed 000 §2.1's sequential fill then random writes.

mkfs runs without discard (ext4 ``-E nodiscard``, xfs ``-K``, f2fs ``-t 0``) so a preconditioned device keeps its
state.  The test file is as large as what the jobs address (their largest offset + size), at most 90% of the free
space, and is written once (so reads reach the device); jobs address it as they would the device (offset, size
within the file).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from . import KernelError
from .blockdev import BlockDevice
from .loop import fill
from .cgroups import parse_proc_mounts
from .state import Journal, state_dir

FILESYSTEMS = {
    # name: (mkfs program, its options: force, quiet, no discard; Debian package)
    "ext4": ("mkfs.ext4", ["-F", "-q", "-E", "nodiscard"], "e2fsprogs"),
    "xfs": ("mkfs.xfs", ["-f", "-q", "-K"], "xfsprogs"),
    "f2fs": ("mkfs.f2fs", ["-f", "-q", "-t", "0"], "f2fs-tools"),
}
TEST_FILE = "iosched.data"


def unavailable(fs: str) -> str | None:
    """Why ``fs`` cannot be made and mounted here (None: it can)."""
    prog, _, package = FILESYSTEMS[fs]
    if shutil.which(prog) is None:
        return f"{prog} is not installed (Debian package {package}: apt-get install {package})"
    try:
        known = Path("/proc/filesystems").read_text().split()
    except OSError:
        known = []
    if fs not in known:
        # A module may still load on mount; try that only where modules exist.
        if not Path(f"/lib/modules/{os.uname().release}").exists():
            return f"this kernel ({os.uname().release}) does not support {fs} (not in /proc/filesystems, no modules)"
    return None


def addressed_bytes(runs: list, device: int) -> int:
    """How much of the spec's device ``device`` the runs' jobs address (their largest offset + size, with numjobs'
    offset increments), 0 when none uses it: what its test file must hold."""
    return max((j.config["offset_bytes"] + (j.config["numjobs"] - 1) * j.config["offset_increment_bytes"]
                + j.config["size_bytes"] for r in runs for j in r.jobs if device in j.config["devices"]), default=0)


@dataclass
class Mounted:
    device: BlockDevice
    fs: str
    mountpoint: Path
    file: Path
    capacity_bytes: int
    options: str

    def describe(self) -> dict:
        return {"filesystem": self.fs, "mountpoint": str(self.mountpoint), "file": str(self.file),
                "file_bytes": self.capacity_bytes, "mount_options": self.options}


def make(dev: BlockDevice, fs: str, index: int, journal: Journal, echo=print, want_bytes: int | None = None) -> Mounted:
    """mkfs, mount and a test file: ``want_bytes`` (what the jobs address, rounded up to MiB) when they address
    less than 90% of the free space, else 90% of it."""
    why = unavailable(fs)
    if why:
        raise KernelError(f"--filesystem {fs}: {why}")
    prog, opts, _ = FILESYSTEMS[fs]
    r = subprocess.run([shutil.which(prog), *opts, dev.path], capture_output=True, text=True)
    if r.returncode != 0:
        raise KernelError(f"{prog} {dev.path} failed: {(r.stderr or r.stdout).strip()}")
    mp = state_dir() / f"mnt-{os.getpid()}-{index}"
    mp.mkdir(parents=True, exist_ok=True)
    journal.add({"op": "umount", "path": str(mp), "rmdir": True})
    r = subprocess.run(["mount", "-t", fs, "--", dev.path, str(mp)], capture_output=True, text=True)
    if r.returncode != 0:
        raise KernelError(f"mount -t {fs} {dev.path} failed: {r.stderr.strip()}")
    st = os.statvfs(mp)
    size = int(st.f_bavail * st.f_frsize * 0.9) // (1 << 20) * (1 << 20)
    if want_bytes:
        size = min(size, -(-want_bytes // (1 << 20)) * (1 << 20))
    if size < (1 << 20):
        raise KernelError(f"{fs} on {dev.path} leaves {st.f_bavail * st.f_frsize} bytes free: too small for a test file")
    f = mp / TEST_FILE
    f.touch()
    echo(f"{fs} on {dev.path}: writing a {size >> 20} MiB test file once ...")
    fill(f, size)
    options = next((m.options for m in parse_proc_mounts(Path("/proc/mounts").read_text())
                    if m.mountpoint == str(mp)), "")
    return Mounted(dev, fs, mp, f, size, options)
