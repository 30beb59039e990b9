"""Test devices: a loop device over a file, with direct I/O, its data written once.

Reads of a never-written (sparse) region of the backing file return zeros without touching storage, so
create-loop writes every block first: reads then reach the backing store, as they would on a drive.  With
``--direct-io=on`` the loop driver reads and writes the file with O_DIRECT, so the host's page cache does not
answer reads either.  Which loop devices (and backing files) iosched made is kept in ``<state dir>/loops/``;
remove-loop deletes a backing file only if iosched created it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

from ...errors import SpecError
from . import KernelError
from .blockdev import BlockDevice, read_attr
from .safety import mounts_of, parse_mountinfo
from .state import _atomic_json, state_dir

CHUNK = 4 << 20
DEFAULT_BACKING_DIR = "/var/tmp"


def _records() -> Path:
    return state_dir() / "loops"


def _losetup() -> str:
    exe = shutil.which("losetup")
    if exe is None:
        raise KernelError("losetup (util-linux) is not installed")
    return exe


def fill(path: Path, size: int, progress: Callable[[int], None] | None = None) -> None:
    """Write ``size`` bytes of pseudo-random data to ``path`` (every block allocated and holding data), then
    drop it from the page cache."""
    pattern = bytearray(os.urandom(CHUNK))
    fd = os.open(path, os.O_WRONLY)
    try:
        done = 0
        while done < size:
            n = min(CHUNK, size - done)
            # Every 4 KiB block differs (its offset in its first bytes): nothing below can deduplicate them.
            for off in range(0, n, 4096):
                pattern[off:off + 8] = (done + off).to_bytes(8, "little")
            os.write(fd, memoryview(pattern)[:n])
            done += n
            if done % (256 << 20) == 0 or done == size:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, done, os.POSIX_FADV_DONTNEED)
                if progress:
                    progress(done)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def create_loop(size: int, backing: str | None, echo: Callable[[str], None] = print) -> BlockDevice:
    if os.geteuid() != 0:
        raise KernelError("creating a loop device needs root")
    if size < (1 << 20) or size % 4096:
        raise SpecError("--size", None, f"expected at least 1 MiB in whole 4 KiB blocks, got {size} bytes")
    created = False
    if backing is None:
        fd, name = tempfile.mkstemp(prefix="iosched-loop-", suffix=".img", dir=DEFAULT_BACKING_DIR)
        os.close(fd)
        path = Path(name)
        created = True
    else:
        path = Path(backing).absolute()
        if path.exists() and not path.is_file():
            raise SpecError("--backing", backing, "not a regular file")
        if path.exists() and path.stat().st_size not in (0, size):
            raise SpecError("--backing", backing, f"exists with {path.stat().st_size} bytes; expected {size} "
                                                  "(or an empty or new file)")
        if not path.exists():
            try:
                path.touch()
            except OSError as e:
                raise SpecError("--backing", backing, f"cannot create: {e.strerror}") from None
            created = True
    try:
        st = path.stat()
        need = size - st.st_blocks * 512
        free = shutil.disk_usage(path.parent).free
        if need > free:
            raise KernelError(f"{path.parent} has {free >> 20} MiB free; the backing file needs {need >> 20} MiB more")
        fs_type = _fs_type(path)
        if fs_type == "tmpfs":
            raise SpecError("--backing", str(path), "is on tmpfs, which has no direct I/O: reads would come from "
                                                    "memory; put the backing file on a disk filesystem")
        os.truncate(path, size)
        if st.st_blocks * 512 < size:
            echo(f"writing {size >> 20} MiB to {path} once, so reads reach the backing store ...")
            fill(path, size)
        r = subprocess.run([_losetup(), "--find", "--show", "--direct-io=on", "--", str(path)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise KernelError(f"losetup failed: {r.stderr.strip()}")
        node = r.stdout.strip()
    except BaseException:
        if created:
            with contextlib.suppress(OSError):
                path.unlink()
        raise
    dev = BlockDevice.open(node)
    dio = dev.sysfs / "loop" / "dio"
    if dio.exists() and read_attr(dio) != "1":
        subprocess.run([_losetup(), "-d", node], capture_output=True)
        if created:
            path.unlink()
        raise KernelError(f"{path}'s filesystem ({fs_type}) refused direct I/O for the loop device")
    _records().mkdir(parents=True, exist_ok=True)
    _atomic_json(_records() / f"{dev.name}.json", {"device": node, "backing": str(path), "created_backing": created,
                                                   "size": size})
    return dev


def _fs_type(path: Path) -> str:
    best, fstype = "", "?"
    real = os.path.realpath(path)
    for m in parse_mountinfo(Path("/proc/self/mountinfo").read_text()):
        mp = m.mountpoint.rstrip("/") + "/"
        if (real + "/").startswith(mp) and len(mp) > len(best):
            best, fstype = mp, m.fstype
    return fstype


def remove_loop(node: str, echo: Callable[[str], None] = print) -> None:
    if os.geteuid() != 0:
        raise KernelError("removing a loop device needs root")
    dev = BlockDevice.open(node)
    if not (dev.sysfs / "loop").exists():
        raise SpecError(None, node, "not an attached loop device")
    mounts = mounts_of(dev.devnos(), parse_mountinfo(Path("/proc/self/mountinfo").read_text()))
    if mounts:
        raise SpecError(None, node, "is mounted (" + "; ".join(f"{m.mountpoint}" for m in mounts) + "): unmount it first")
    if dev.holders():
        raise SpecError(None, node, "has holders (" + ", ".join(dev.holders()) + "): remove them first")
    backing = read_attr(dev.sysfs / "loop" / "backing_file")
    rec_path = _records() / f"{dev.name}.json"
    rec = None
    with contextlib.suppress(OSError, ValueError):
        rec = json.loads(rec_path.read_text())
    r = subprocess.run([_losetup(), "-d", dev.path], capture_output=True, text=True)
    if r.returncode != 0:
        raise KernelError(f"losetup -d {dev.path} failed: {r.stderr.strip()}")
    with contextlib.suppress(FileNotFoundError):
        rec_path.unlink()
    if rec and rec.get("created_backing") and rec.get("backing") == backing:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(backing)
        echo(f"detached {dev.path} and deleted its backing file {backing} (created by iosched)")
    else:
        echo(f"detached {dev.path}; its backing file {backing} stays (iosched did not create it)")


def list_loops() -> list[dict]:
    out = []
    d = _records()
    if not d.exists():
        return out
    for p in sorted(d.glob("*.json")):
        with contextlib.suppress(OSError, ValueError):
            rec = json.loads(p.read_text())
            sysfs = Path("/sys/block") / p.stem / "loop" / "backing_file"
            rec["attached"] = sysfs.exists() and read_attr(sysfs) == rec.get("backing")
            out.append(rec)
    return out
