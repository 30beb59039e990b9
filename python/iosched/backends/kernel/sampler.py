"""Sampling during a run, into the same time-series rows as the simulator's (run_id, t_ns, source, subject,
metric, value): per-core CPU from /proc/stat (source "host", subject "cpuN": busy, user, system, irq, iowait as
shares of the interval), and under Kyber its domain token pools from debugfs (source "scheduler", subject the
device: ``<domain>_tokens`` the depth, ``<domain>_tokens_in_use`` the busy tokens, ``<domain>_waiting_hctxs``
hardware queues waiting for a token; the simulator's Kyber reports the same names).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from . import KernelError
from .state import HANDLED, Journal

DEBUGFS = Path("/sys/kernel/debug")
KYBER_DOMAINS = ("read", "write", "discard", "other")


def parse_proc_stat(text: str) -> dict[int, list[int]]:
    """cpuN → [user, nice, system, idle, iowait, irq, softirq, steal] in clock ticks."""
    out = {}
    for line in text.splitlines():
        if line.startswith("cpu") and line[3:4].isdigit():
            f = line.split()
            out[int(f[0][3:])] = [int(x) for x in f[1:9]] + [0] * (9 - len(f))
    return out


def cpu_shares(a: list[int], b: list[int]) -> dict[str, float]:
    d = [y - x for x, y in zip(a, b)]
    total = sum(d)
    if total <= 0:
        return {"busy": 0.0, "user": 0.0, "system": 0.0, "irq": 0.0, "iowait": 0.0}
    user, nice, system, idle, iowait, irq, softirq, steal = d[:8]
    return {"busy": (total - idle - iowait) / total, "user": (user + nice) / total, "system": system / total,
            "irq": (irq + softirq) / total, "iowait": iowait / total}


def parse_sbitmap(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep and v.strip().isdigit():
            out[k.strip()] = int(v)
    return out


def ensure_debugfs(journal: Journal) -> Path:
    """debugfs at /sys/kernel/debug, mounted (and journalled for unmounting) if it is not.  Whether it has Kyber's
    files (CONFIG_BLK_DEBUG_FS) each run checks once Kyber is set: without them the run goes on with a note."""
    if (DEBUGFS / "block").exists():
        return DEBUGFS
    if not os.path.ismount(DEBUGFS):
        r = subprocess.run(["mount", "-t", "debugfs", "debugfs", str(DEBUGFS)], capture_output=True, text=True)
        if r.returncode != 0:
            raise KernelError(f"cannot mount debugfs on {DEBUGFS} (needed for Kyber's domain depths): "
                              f"{r.stderr.strip()}")
        journal.add({"op": "umount", "path": str(DEBUGFS)})
    return DEBUGFS


class Sampler(threading.Thread):
    """Samples every ``interval_ns`` from start() until stop(); t_ns counts from start()."""

    def __init__(self, interval_ns: int, kyber: list[tuple[str, Path]]):
        super().__init__(name="iosched-sampler", daemon=True)
        self.interval_ns = interval_ns
        self.kyber = kyber              # (subject, /sys/kernel/debug/block/<name>)
        self.rows: list[dict[str, Any]] = []
        self.stat: list[tuple[int, dict[int, list[int]]]] = []     # (t_ns, /proc/stat per core)
        self._halt = threading.Event()
        self.t0 = 0
        self.errors: list[str] = []

    def start(self) -> None:
        self.t0 = time.monotonic_ns()
        self.stat.append((0, parse_proc_stat(Path("/proc/stat").read_text())))
        super().start()

    def stop(self) -> None:
        self._halt.set()
        if self.is_alive():
            self.join()
        t = time.monotonic_ns() - self.t0
        self.stat.append((t, parse_proc_stat(Path("/proc/stat").read_text())))

    def run(self) -> None:
        # Signals go to the main thread, which is waiting for fio and must be woken to stop it and restore.
        signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)
        k = 1
        while not self._halt.wait(max(0.0, (self.t0 + k * self.interval_ns - time.monotonic_ns()) / 1e9)):
            t = k * self.interval_ns
            try:
                self._sample(t)
            except OSError as e:          # a device gone or debugfs unmounted mid-run: keep the CPU series
                if len(self.errors) < 5:
                    self.errors.append(str(e))
            k += 1
            # If sampling fell behind (a stalled machine), skip the missed ticks rather than bunch them up.
            k = max(k, (time.monotonic_ns() - self.t0) // self.interval_ns + 1)

    def _sample(self, t: int) -> None:
        now = parse_proc_stat(Path("/proc/stat").read_text())
        _, prev = self.stat[-1]
        self.stat.append((t, now))
        for cpu in sorted(now):
            if cpu in prev:
                for metric, v in cpu_shares(prev[cpu], now[cpu]).items():
                    self.rows.append({"t_ns": t, "source": "host", "subject": f"cpu{cpu}", "metric": metric,
                                      "value": v})
        for subject, d in self.kyber:
            sched = d / "sched"
            if not (sched / "read_tokens").exists():
                continue      # not (or no longer) Kyber
            waiting = {dom: 0 for dom in KYBER_DOMAINS}
            for h in d.glob("hctx*/sched"):
                for dom in KYBER_DOMAINS:
                    with contextlib.suppress(OSError, ValueError):
                        waiting[dom] += int((h / f"{dom}_waiting").read_text().strip() or 0)
            for dom in KYBER_DOMAINS:
                sb = parse_sbitmap((sched / f"{dom}_tokens").read_text())
                self.rows += [
                    {"t_ns": t, "source": "scheduler", "subject": subject, "metric": f"{dom}_tokens",
                     "value": float(sb.get("depth", 0))},
                    {"t_ns": t, "source": "scheduler", "subject": subject, "metric": f"{dom}_tokens_in_use",
                     "value": float(sb.get("busy", 0))},
                    {"t_ns": t, "source": "scheduler", "subject": subject, "metric": f"{dom}_waiting_hctxs",
                     "value": float(waiting[dom])},
                ]

    def core_busy(self, from_ns: int) -> list[float]:
        """Busy share per core between the first sample at or after ``from_ns`` (the end of the ramp) and the
        last one (the whole run when there are too few)."""
        snaps = [s for s in self.stat if s[0] >= from_ns]
        if len(snaps) < 2:
            snaps = self.stat
        (_, a), (_, b) = snaps[0], snaps[-1]
        return [cpu_shares(a[c], b[c])["busy"] for c in sorted(b) if c in a]
