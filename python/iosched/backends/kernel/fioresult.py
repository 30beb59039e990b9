"""fio's json+ output → the simulator's per-job result shape, so both backends fill the same results schema.

A job's entries (one per process, or one with group_reporting) are merged per direction: I/Os and bytes add,
latency histograms (json+ ``bins``) add, and the percentiles are read off the merged histogram with fio's own rule
(the first bin whose cumulative count reaches p% of all I/Os), so one process's P99 equals fio's.
"""

from __future__ import annotations

import glob

import math
from pathlib import Path
from typing import Any

from . import KernelError

PCT_LIST = [1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99]


def percentiles_from_bins(bins: list[tuple[int, int]], pcts: list[float] = PCT_LIST) -> list[list[float]]:
    """fio's calc_clat_percentiles on json+ bins (value ns, count), sorted by value."""
    total = sum(c for _, c in bins)
    if total == 0:
        return []
    out, cum, j = [], 0, 0
    for value, count in bins:
        cum += count
        while j < len(pcts) and cum >= pcts[j] / 100.0 * total:
            out.append([pcts[j], int(value)])
            j += 1
        if j == len(pcts):
            break
    return out


def merge_direction(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """One direction of several fio job entries as the simulator's DirectionResult."""
    ios = sum(int(e["total_ios"]) for e in entries)
    nbytes = sum(int(e["io_bytes"]) for e in entries)
    bins: dict[int, int] = {}
    n = 0
    s1 = s2 = 0.0
    lo, hi = None, 0
    have_bins = True
    for e in entries:
        clat = e.get("clat_ns") or {}
        cn = int(clat.get("N", 0))
        if cn == 0:
            continue
        if "bins" not in clat:
            have_bins = False
        for k, c in (clat.get("bins") or {}).items():
            bins[int(k)] = bins.get(int(k), 0) + int(c)
        mean, sd = float(clat["mean"]), float(clat["stddev"])
        n += cn
        s1 += cn * mean
        s2 += cn * (sd * sd + mean * mean)
        lo = int(clat["min"]) if lo is None else min(lo, int(clat["min"]))
        hi = max(hi, int(clat["max"]))
    mean = s1 / n if n else 0.0
    var = max(s2 / n - mean * mean, 0.0) if n else 0.0
    sorted_bins = sorted(bins.items())
    if have_bins:
        pcts = percentiles_from_bins(sorted_bins)
    elif len([e for e in entries if (e.get("clat_ns") or {}).get("N")]) == 1:
        only = next(e for e in entries if (e.get("clat_ns") or {}).get("N"))
        pcts = [[float(k), int(v)] for k, v in only["clat_ns"].get("percentile", {}).items()]
    else:
        raise KernelError("fio output has no latency bins (json+ needed) for a job with several processes")
    return {"ios": ios, "bytes": nbytes, "clat_min_ns": lo or 0, "clat_max_ns": hi, "clat_mean_ns": mean,
            "clat_stddev_ns": math.sqrt(var), "percentiles": pcts, "bins": [[v, c] for v, c in sorted_bins]}


def job_results(doc: dict[str, Any], names: list[str]) -> list[dict[str, Any]]:
    """Per spec job (in order): the fields results.job_rows and the summary read, from fio's output ``doc``."""
    by_name: dict[str, list[dict[str, Any]]] = {}
    for e in doc.get("jobs", []):
        if "jobname" in e:       # fio adds nameless entries for empty reporting groups
            by_name.setdefault(e["jobname"], []).append(e)
    out = []
    for name in names:
        entries = by_name.get(name)
        if not entries:
            raise KernelError(f"fio's output has no job {name!r}")
        errors = [e["error"] for e in entries if e.get("error")]
        if errors:
            raise KernelError(f"fio job {name!r} failed with error {errors[0]} ({_strerror(errors[0])})")
        window_ms = max(int(e[d].get("runtime", 0)) for e in entries for d in ("read", "write"))
        if window_ms == 0:
            window_ms = max(int(e.get("job_runtime", 0)) for e in entries)
        usr_ns = sum(float(e["usr_cpu"]) / 100.0 * int(e["job_runtime"]) * 1e6 for e in entries)
        sys_ns = sum(float(e["sys_cpu"]) / 100.0 * int(e["job_runtime"]) * 1e6 for e in entries)
        processes = [{"read": merge_direction([e["read"]]), "write": merge_direction([e["write"]]),
                      "usr_ns": int(float(e["usr_cpu"]) / 100.0 * int(e["job_runtime"]) * 1e6),
                      "sys_ns": int(float(e["sys_cpu"]) / 100.0 * int(e["job_runtime"]) * 1e6),
                      "context_switches": int(e.get("ctx", 0))} for e in entries]
        out.append({"name": name, "window_ns": window_ms * 1_000_000,
                    "read": merge_direction([e["read"] for e in entries]),
                    "write": merge_direction([e["write"] for e in entries]),
                    "usr_ns": int(usr_ns), "sys_ns": int(sys_ns),
                    "context_switches": sum(int(e.get("ctx", 0)) for e in entries),
                    "processes": processes, "fio_entries": len(entries)})
    return out


def _strerror(code: int) -> str:
    import os
    try:
        return os.strerror(int(code))
    except (ValueError, OverflowError):
        return "?"


def read_iops_logs(logs_dir: Path, prefix: str, name: str, interval_ms: int) -> list[dict[str, Any]]:
    """fio's averaged IOPS logs of one job (PREFIX_iops.N.log, a file per process) → time-series rows like the
    simulator's (source "job", metrics read_iops / write_iops), summed over processes per interval."""
    sums: dict[tuple[int, int], float] = {}
    for p in sorted(logs_dir.glob(f"{glob.escape(prefix)}_iops.*.log")):
        for line in p.read_text().splitlines():
            parts = [x.strip() for x in line.split(",")]
            if len(parts) < 3 or not parts[0].isdigit():
                continue
            t_ms, value, ddir = int(parts[0]), float(parts[1]), int(parts[2])
            if ddir not in (0, 1):
                continue
            bucket = max(1, round(t_ms / interval_ms))
            sums[(bucket, ddir)] = sums.get((bucket, ddir), 0.0) + value
    rows = []
    for bucket in sorted({b for b, _ in sums}):
        for ddir, metric in ((0, "read_iops"), (1, "write_iops")):
            rows.append({"t_ns": bucket * interval_ms * 1_000_000, "source": "job", "subject": name,
                         "metric": metric, "value": sums.get((bucket, ddir), 0.0)})
    return rows
