"""A run's folder as the guest sent it → the results schema (through the kernel backend's fio parsing).

The guest's folder holds jobs.fio, fio.json (json+), fio.log, fio.rc, fio.start / fio.end (guest uptime),
stat.log (/proc/stat samples: ``@ UPTIME`` then the cpuN lines), queue-dK.txt (each device's queue as the run saw
it), cgroup-G.txt and cgroup-G.io.stat, dmesg.txt, fio's IOPS logs under logs/, diskstat-dK.before / .after
(/sys/block/<dev>/stat around fio) and sched-dK/ (the scheduler's debugfs files after fio).
"""

from __future__ import annotations

import io
import os
import json
import re
import tarfile
from pathlib import Path
from typing import Any

from ... import safepath
from ...errors import SpecError
from ..kernel import KernelError
from ..kernel.blockdev import parse_scheduler_line
from ..kernel.sampler import cpu_shares, parse_proc_stat
from . import VmError

SATURATED_BUSY = 0.90        # a vCPU this busy over the measurement: the guest's CPU, not the device, set the pace
CONTENDED_WAIT = 0.10        # qemu's threads waiting this share of their runnable time for a host CPU


def unpack(data: bytes, dest: Path) -> list[str]:
    """Extract a run's tar (regular files and folders only; each path proven inside ``dest`` by safepath, since
    ``dest`` is a run's folder under --out and the names come from the guest)."""
    names = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tf:
        for m in tf.getmembers():
            rel = os.path.normpath(m.name)
            if rel == "." or not (m.isfile() or m.isdir()):
                continue
            try:
                target = safepath.inside(dest, rel)
            except SpecError:
                continue        # a name the guest should never send (absolute, "..", NUL, too long): not written
            if m.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            src = tf.extractfile(m)
            target.write_bytes(src.read() if src else b"")
            names.append(rel)
    return names


def read_kv(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            out[k.strip()] = v.strip()
    return out


def queue_snapshot(text: str) -> dict[str, Any]:
    """queue-dK.txt → the kernel backend's snapshot shape: scheduler, nr_requests, wbt_lat_usec, iosched."""
    kv = read_kv(text)
    _, current = parse_scheduler_line(kv.get("scheduler", ""))
    snap: dict[str, Any] = {"scheduler": current, "offered": parse_scheduler_line(kv.get("scheduler", ""))[0],
                            "nr_requests": int(kv["nr_requests"]) if kv.get("nr_requests", "").isdigit() else None,
                            "iosched": {k[len("iosched."):]: v for k, v in kv.items() if k.startswith("iosched.")}}
    if "wbt_lat_usec" in kv:
        snap["wbt_lat_usec"] = kv["wbt_lat_usec"]
    return snap


def setting_notes(snap: dict[str, Any], scheduler: str, nr_requests: int | None, tunables: dict[str, int],
                  device: str) -> list[str]:
    """Where the kernel stored a value differently from what was written (as the kernel backend notes it)."""
    notes = []
    if snap["scheduler"] != scheduler:
        raise VmError(f"{device}: the run asked for {scheduler} but the queue had {snap['scheduler']}")
    if nr_requests is not None and snap["nr_requests"] != nr_requests:
        notes.append(f"scheduler.nr_requests: the kernel made {nr_requests} into {snap['nr_requests']} on {device}")
    for key, value in tunables.items():
        if snap["iosched"].get(key) != str(value):
            notes.append(f"scheduler.{key}: the kernel made {value} into {snap['iosched'].get(key)} on {device} "
                         "(it keeps this tunable in its own units)")
    return notes


def parse_stat_log(text: str) -> list[tuple[float, dict[int, list[int]]]]:
    """stat.log → [(guest uptime s, cpuN → /proc/stat fields)], whole samples only (the sampler is killed at the
    end and may leave a sample cut short: every line needs its 8 counters, every sample the same CPUs)."""
    out: list[tuple[float, dict[int, list[int]]]] = []
    up, lines = None, []
    for line in text.splitlines() + ["@ end"]:
        if line.startswith("@ "):
            whole = lines and all(len(ln.split()) >= 9 for ln in lines)
            if up is not None and whole:
                per = parse_proc_stat("\n".join(lines))
                if per and (not out or set(per) == set(out[0][1])):
                    out.append((up, per))
            try:
                up = float(line[2:].split()[0])
            except (ValueError, IndexError):
                up = None
            lines = []
        elif line.startswith("cpu"):
            lines.append(line)
    return out


def guest_cpu(samples: list[tuple[float, dict[int, list[int]]]], start_s: float, from_ns: int
              ) -> tuple[list[float], list[dict[str, Any]]]:
    """Per-vCPU busy share between the first sample at or after ``from_ns`` (the ramp's end, counted from fio's
    start at guest uptime ``start_s``) and the last one; and the time series (source "guest", subject "cpuN":
    busy, user, system, irq, iowait per interval)."""
    rows = []
    for (t0, a), (t1, b) in zip(samples, samples[1:]):
        t = int(round((t1 - start_s) * 1e9))
        for cpu in sorted(b):
            if cpu in a:
                for metric, v in cpu_shares(a[cpu], b[cpu]).items():
                    rows.append({"t_ns": max(t, 0), "source": "guest", "subject": f"cpu{cpu}", "metric": metric,
                                 "value": v})
    window = [s for s in samples if (s[0] - start_s) * 1e9 >= from_ns - 1e6]
    if len(window) < 2:
        window = samples
    if len(window) < 2:
        return [], rows
    (_, a), (_, b) = window[0], window[-1]
    return [cpu_shares(a[c], b[c])["busy"] for c in sorted(b) if c in a], rows


def saturation_warning(busy: list[float], accel: str) -> str | None:
    if busy and max(busy) >= SATURATED_BUSY:
        shares = ", ".join(f"cpu{i} {100 * b:.0f}%" for i, b in enumerate(busy))
        return (f"guest CPU saturated during the measurement ({shares} busy): under {accel} the numbers then say "
                f"more about the emulated CPU than about the device and the scheduler")
    return None


def contention_warning(run_ns: int, wait_ns: int) -> str | None:
    """qemu's threads waiting for a host CPU a tenth of the time they wanted one: the guest's clock runs on while
    its vCPUs stand still, so its timings stretch (other work on the host, or more vCPUs than free cores)."""
    if run_ns + wait_ns > 0 and wait_ns / (run_ns + wait_ns) >= CONTENDED_WAIT:
        return (f"host CPU contention: qemu's threads waited for a host CPU {100 * wait_ns / (run_ns + wait_ns):.0f}% "
                f"of the time they were runnable ({wait_ns / 1e9:.1f} s): the guest's timings stretch; use fewer "
                f"vCPUs (--vm cpus=N) or a quieter host")
    return None


def io_stat_ios(text: str) -> int:
    """A cgroup's io.stat → its I/O count over all devices (rios + wios + dios)."""
    total = 0
    for line in text.splitlines():
        for item in line.split()[1:]:
            k, _, v = item.partition("=")
            if k in ("rios", "wios", "dios") and v.isdigit():
                total += int(v)
    return total


def read_fio(rdir: Path) -> dict[str, Any]:
    """fio.json as a document, or a VmError with fio's own words."""
    rc = (rdir / "fio.rc").read_text().strip() if (rdir / "fio.rc").exists() else "?"
    log = ""
    if (rdir / "fio.log").exists():
        lines = [ln for ln in (rdir / "fio.log").read_text(errors="replace").splitlines() if ln.strip()]
        log = " | ".join(lines[-6:])
    if rc != "0":
        raise VmError(f"fio exited {rc} in the guest: {log or '(no output)'}")
    text = (rdir / "fio.json").read_text(errors="replace") if (rdir / "fio.json").exists() else ""
    start = text.find("{")
    try:
        return json.loads(text[start:])
    except ValueError as e:
        raise VmError(f"the guest's fio.json is not JSON ({e}); fio said: {log or '(nothing)'}") from None


def job_results(doc: dict[str, Any], names: list[str]) -> list[dict[str, Any]]:
    try:
        from ..kernel import fioresult
        return fioresult.job_results(doc, names)
    except KernelError as e:
        raise VmError(str(e)) from None


# Lines of a kernel log that mean something went wrong in the kernel (a module of ours, most likely): WARN_ON and
# WARN_ONCE, BUG and oopses, lockdep and lockup reports.  Tainting by an out-of-tree, unsigned module is expected.
KERNEL_PROBLEM_RE = re.compile(r"WARNING: |BUG: |kernel BUG |Oops|general protection fault|Call Trace:|"
                               r"hard LOCKUP|rcu: INFO: |INFO: task .* blocked for more than|"
                               r"possible circular locking|inconsistent lock state|UBSAN: |KASAN: ")


def kernel_problems(text: str) -> list[str]:
    """The lines of a kernel log (dmesg) that report a warning, a bug or an oops."""
    return [ln.strip() for ln in text.splitlines() if KERNEL_PROBLEM_RE.search(ln)]


def read_sched_state(folder: Path) -> dict[str, Any]:
    """A run's copy of the scheduler's debugfs files (sched-dK/): each file's text, and the files of KEY=VALUE
    lines (our modules' ``counters``) as numbers; ``groups`` (kyber-fairness: a line of KEY=VALUE per cgroup) as a
    list of rows."""
    out: dict[str, Any] = {}
    if not folder.is_dir():
        return out
    for p in sorted(folder.iterdir()):
        text = p.read_text(errors="replace")
        if p.name == "counters":
            out["counters"] = {k: _number(v) for k, v in read_kv(text).items()}
        elif p.name == "groups":
            out["groups"] = [{k: _number(v) for k, _, v in (item.partition("=") for item in line.split())}
                             for line in text.splitlines() if line.strip()]
        else:
            out[p.name] = text.strip()
    return out


def _number(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        return text


DISKSTAT_FIELDS = ("read_ios", "read_merges", "read_sectors", "read_ticks", "write_ios", "write_merges",
                   "write_sectors", "write_ticks", "in_flight", "io_ticks", "time_in_queue", "discard_ios",
                   "discard_merges", "discard_sectors", "discard_ticks", "flush_ios", "flush_ticks")


def diskstat_delta(before: str, after: str) -> dict[str, int] | None:
    """/sys/block/<dev>/stat before and after fio → the counters' change (in_flight: the value after); None when
    either is missing.  read_ios + write_ios + discard_ios are the requests the device completed."""
    a, b = before.split(), after.split()
    if not a or not b or len(a) != len(b) or not all(x.isdigit() for x in a + b):
        return None
    out = {}
    for name, x, y in zip(DISKSTAT_FIELDS, a, b):
        out[name] = int(y) if name == "in_flight" else int(y) - int(x)
    return out
