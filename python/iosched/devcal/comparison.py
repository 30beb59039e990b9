"""Validation's comparison: per scheduler, the simulator against the kernel (rows, ranks, the acceptance criteria,
tables), and the drift of a device from its preset."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from .plan import Step

IOPS_TOLERANCE = 0.25       # issue 7's acceptance: IOPS within ±25%
DRIFT_TOLERANCE = 0.10      # a device that moved more than the calibration's own fit error (<= 10%) has drifted
DRIFT_SECONDS = (5.0, 1.0)  # runtime, ramp: the QD-max ceilings settle within a second on the devices tried


def drift_rows(when: str, measured: dict, simulated: dict, steps: tuple[Step, ...]) -> list[dict[str, Any]]:
    """Per drift step: the kernel's IOPS now against the preset's simulated IOPS for the same step (``simulated``:
    {step: simulate_step(...)}, the same before and after the runs, so simulated once)."""
    rows = []
    for step in steps:
        job = step.jobs[0]
        metric = "write_kiops" if "write" in job.rw else "read_kiops"
        kernel = measured.get(step.name, {}).get(job.name, {}).get(metric, 0.0)
        sim = simulated[step.name][job.name][metric]
        ratio = sim / kernel if kernel else math.nan
        rows.append({"when": when, "step": step.name, "what": step.what, "kernel_kiops": kernel, "sim_kiops": sim,
                     "ratio": ratio, "drifted": not abs(ratio - 1) <= DRIFT_TOLERANCE})
    return rows


def format_drift(rows: list[dict[str, Any]]) -> str:
    lines = ["| when | step | kernel KIOPS | preset (sim) KIOPS | sim/kernel |", "|---|---|---|---|---|"]
    for r in rows:
        flag = f" (drifted: beyond ±{DRIFT_TOLERANCE:.0%})" if r["drifted"] else ""
        lines.append(f"| {r['when']} | {r['what']} | {r['kernel_kiops']:,.1f} | {r['sim_kiops']:,.1f} | "
                     f"{r['ratio']:.2f}{flag} |")
    return "\n".join(lines)


def iops_within(row: dict[str, Any]) -> bool:
    return abs(row["iops_ratio"] - 1) <= IOPS_TOLERANCE


def ranking_agrees(rows: list[dict[str, Any]]) -> bool:
    return all(r["kernel_rank"] == r["sim_rank"] for r in rows)


def validation_rows(parquet: Path) -> list[dict[str, Any]]:
    """Per scheduler: total IOPS and the first job's P99 (read if it reads) for sim and kernel, each the mean over
    repetitions, their ratios and ranks by that P99."""
    rows = pq.read_table(parquet).to_pylist()
    runs: dict[tuple[str, str, str], dict[str, Any]] = {}
    first_job: str | None = None
    for r in rows:
        first_job = first_job or r["job"]
    for r in rows:
        d = runs.setdefault((r["backend"], r["scheduler"], r["run_id"]), {"iops": 0.0, "p99_us": 0.0})
        d["iops"] += (r["read_iops"] or 0) + (r["write_iops"] or 0)
        if r["job"] == first_job:
            p99 = r["read_clat_p99_ns"] if (r["read_iops"] or 0) > 0 else r["write_clat_p99_ns"]
            d["p99_us"] = (p99 or 0) / 1e3
    by: dict[tuple[str, str], dict[str, Any]] = {}
    for (backend, sched, _), d in runs.items():
        acc = by.setdefault((backend, sched), {"iops": [], "p99_us": []})
        acc["iops"].append(d["iops"])
        acc["p99_us"].append(d["p99_us"])
    by = {k: {"iops": sum(v["iops"]) / len(v["iops"]), "p99_us": sum(v["p99_us"]) / len(v["p99_us"]),
              "repetitions": len(v["iops"]), "p99_range_us": (min(v["p99_us"]), max(v["p99_us"]))}
          for k, v in by.items()}
    scheds = sorted({s for b, s in by if b == "kernel"} & {s for b, s in by if b == "sim"})
    rank = {b: {s: i + 1 for i, s in enumerate(sorted(scheds, key=lambda s: by[(b, s)]["p99_us"]))}
            for b in ("kernel", "sim")}
    out = []
    for s in scheds:
        k, m = by[("kernel", s)], by[("sim", s)]
        out.append({"scheduler": s, "job": first_job, "repetitions": k["repetitions"],
                    "kernel_iops": k["iops"], "sim_iops": m["iops"],
                    "iops_ratio": m["iops"] / k["iops"] if k["iops"] else math.nan,
                    "kernel_p99_us": k["p99_us"], "sim_p99_us": m["p99_us"],
                    "kernel_p99_range_us": list(k["p99_range_us"]), "sim_p99_range_us": list(m["p99_range_us"]),
                    "p99_ratio": m["p99_us"] / k["p99_us"] if k["p99_us"] else math.nan,
                    "kernel_rank": rank["kernel"][s], "sim_rank": rank["sim"][s]})
    return out


def format_validation(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "no scheduler ran on both backends"
    agree = ranking_agrees(rows)
    lines = [f"| scheduler | kernel IOPS | sim IOPS | IOPS sim/kernel | {rows[0]['job']} P99 kernel (us) | "
             f"P99 sim (us) | P99 sim/kernel | rank kernel | rank sim |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        flag = "" if iops_within(r) else " (outside ±25%)"
        spread = lambda key: (f" ({r[key][0]:,.0f}-{r[key][1]:,.0f})" if r.get("repetitions", 1) > 1 else "")
        lines.append(f"| {r['scheduler']} | {r['kernel_iops']:,.0f} | {r['sim_iops']:,.0f} | "
                     f"{r['iops_ratio']:.2f}{flag} | {r['kernel_p99_us']:,.1f}{spread('kernel_p99_range_us')} | "
                     f"{r['sim_p99_us']:,.1f}{spread('sim_p99_range_us')} | "
                     f"{r['p99_ratio']:.2f} | {r['kernel_rank']} | {r['sim_rank']} |")
    lines.append("")
    reps = rows[0].get("repetitions", 1)
    lines.append(f"ranking by {rows[0]['job']}'s P99 (1 = lowest" + (f"; means of {reps} repetitions, ranges in "
                 "brackets" if reps > 1 else "") + "): " + ("agrees" if agree else "DISAGREES"))
    return "\n".join(lines)
