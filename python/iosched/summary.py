"""A short fio-like text summary of one simulated run."""

from __future__ import annotations

from typing import Any

from .results import percentile
from .spec import ResolvedRun
from .units import format_bytes_iec, format_bytes_si, format_count


def _us(ns: float) -> str:
    v = ns / 1000
    return f"{v:.0f}" if v >= 100 else f"{v:.2f}"


def _direction(name: str, d: dict[str, Any], window_ns: int) -> list[str]:
    if d["ios"] == 0:
        return []
    secs = window_ns / 1e9 if window_ns else 0
    iops = d["ios"] / secs if secs else 0.0
    bw = d["bytes"] / secs if secs else 0.0
    pcts = ", ".join(f"{p:.2f}th=[{_us(percentile(d, p))}]" for p in (50.0, 90.0, 99.0, 99.9, 99.99))
    return [
        f"  {name}: IOPS={format_count(iops)}, BW={format_bytes_iec(bw)}/s ({format_bytes_si(bw)}/s)"
        f"({format_bytes_iec(d['bytes'])}/{window_ns // 1_000_000}msec)",
        f"    clat (usec): min={_us(d['clat_min_ns'])}, max={_us(d['clat_max_ns'])}, "
        f"avg={_us(d['clat_mean_ns'])}, stdev={_us(d['clat_stddev_ns'])}",
        f"    clat percentiles (usec): {pcts}",
    ]


def run_and_job_lines(run: ResolvedRun, rid: str, jobs: list[dict[str, Any]], backend: str) -> list[str]:
    """The run's header line, then per job (in the simulator's result shape, which the kernel backend's results
    share) its fio-like block: both backends' summaries start so."""
    point = " ".join(f"{k}={v}" for k, v in run.sweep_point.items())
    lines = [f"== {run.experiment} run {rid}  scheduler={run.scheduler} seed={run.seed}"
             + (f" rep={run.repetition}" if run.repetition else "") + (f"  [{point}]" if point else "")]
    for jr in jobs:
        nproc = max(1, len(jr["processes"]))
        w = jr["window_ns"]
        lines.append(f"{jr['name']}: (groupid=0, jobs={nproc}): err= 0: backend={backend}")
        lines += _direction("read", jr["read"], w)
        lines += _direction("write", jr["write"], w)
        usr = 100.0 * jr["usr_ns"] / (w * nproc) if w else 0.0
        sys_ = 100.0 * jr["sys_ns"] / (w * nproc) if w else 0.0
        lines.append(f"  cpu          : usr={usr:.2f}%, sys={sys_:.2f}%, ctx={jr['context_switches']}")
    return lines


def format_summary(run: ResolvedRun, rid: str, result: dict[str, Any], wall_s: float | None) -> str:
    """``wall_s`` None: a stored result (the run was already in the results folder)."""
    lines = run_and_job_lines(run, rid, result["jobs"][:len(run.jobs)], "sim")
    window = result["window_ns"]
    cores = result["cores"]
    if cores and window:
        busy = " ".join(f"{i}:{100.0 * c['busy_ns'] / window:.0f}%" for i, c in enumerate(cores))
        lines.append(f"cores busy: {busy}")
        tb = sum(c["busy_ns"] for c in cores)
        tl = sum(c["lock_ns"] for c in cores)
        lines.append(f"lock share of CPU: {100.0 * tl / tb if tb else 0.0:.1f}%")
    sim_s = result["sim_time_ns"] / 1e9
    if wall_s is None:
        lines.append(f"simulated {sim_s:.3f} s (stored: already in the results folder), {result['ios_completed']} "
                     f"I/Os, {result['events']} events")
    else:
        ratio = f" ({sim_s / wall_s:.2f}x real time)" if wall_s > 0 else ""
        lines.append(f"simulated {sim_s:.3f} s in {wall_s:.2f} s wall{ratio}, {result['ios_completed']} I/Os, "
                     f"{result['events']} events")
    return "\n".join(lines)
