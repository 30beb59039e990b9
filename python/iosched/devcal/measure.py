"""A plan step measured: on the device through the kernel backend, or in the simulator with candidate presets."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pyarrow.parquet as pq

from .. import native, store
from ..backends.kernel.runner import Options, run_kernel
from ..errors import SpecError
from ..results import METRICS
from ..simconfig import jobs_config, named
from ..spec import Overrides, load_experiment
from .plan import PLAN, Step, spec_toml

def measure_kernel(device: str, out: Path, duration_s: float, ramp_s: float, steps: tuple[Step, ...] = PLAN,
                   echo: Callable[[str], None] = print) -> dict[str, dict[str, dict[str, float]]]:
    """Run the plan ``steps`` on ``device`` with the kernel backend; {step: {job: {metric: value}}}."""
    total = len(steps) * (duration_s + ramp_s)
    for i, step in enumerate(steps):
        echo(f"[{i + 1}/{len(steps)}] {step.what} ({duration_s + ramp_s:g} s; plan ~{total:.0f} s in all)")
        path = store.write_text(out, f"specs/{step.name}.toml", spec_toml(step, duration_s, ramp_s))
        run_kernel(load_experiment(str(path), Overrides()), Options(devices=[device], out=out / "kernel"),
                   echo=lambda s: echo("  " + s) if s.startswith(("note:", "error:")) else None)
    return measured_table(out / "kernel" / "results.parquet")


def reuse_measurements(work: Path, steps: tuple[Step, ...] = PLAN) -> dict[str, dict[str, dict[str, float]]]:
    """The plan's measurements from an earlier calibration's work folder (--reuse)."""
    parquet = work / "kernel" / "results.parquet"
    if not parquet.is_file():
        raise SpecError("--reuse", None, f"no earlier measurements: {parquet} does not exist")
    table = measured_table(parquet)
    missing = [s.name for s in steps if s.name not in table]
    if missing:
        raise SpecError("--reuse", None, f"{parquet} lacks plan steps {', '.join(missing)}: measure again")
    return table


def measured_table(parquet: Path) -> dict[str, dict[str, dict[str, float]]]:
    rows = pq.read_table(parquet).to_pylist()
    table: dict[str, dict[str, dict[str, float]]] = {}
    for r in rows:
        ios = (r["read_ios"] or 0) + (r["write_ios"] or 0)
        usr, cpu = r["usr_cpu"] or 0, (r["usr_cpu"] or 0) + (r["sys_cpu"] or 0)     # % of one CPU, over the window
        table.setdefault(r["experiment"], {})[r["job"]] = {
            "read_kiops": (r["read_iops"] or 0) / 1e3, "write_kiops": (r["write_iops"] or 0) / 1e3,
            "read_mean_us": (r["read_clat_mean_ns"] or 0) / 1e3, "read_p99_us": (r["read_clat_p99_ns"] or 0) / 1e3,
            "write_mean_us": (r["write_clat_mean_ns"] or 0) / 1e3,
            "write_p99_us": (r["write_clat_p99_ns"] or 0) / 1e3,
            "read_mb_s": (r["read_bw_bytes"] or 0) / 1e6, "write_mb_s": (r["write_bw_bytes"] or 0) / 1e6,
            "cpu_us_per_io": cpu / 100.0 * (r["window_ns"] or 0) / ios / 1e3 if ios else 0.0,
            "usr_share": usr / cpu if cpu > 0 else 0.0,
        }
    return table


def simulate_step(host_params: dict, device_params: dict, step: Step, runtime_s: float = 0.3,
                  ramp_s: float = 0.1) -> dict[str, dict[str, float]]:
    result = native.simulate(jobs_config(host_params, named(device_params), step.jobs, runtime_s, ramp_s,
                                         file="iosched.devcal"))
    out = {}
    for job in result["jobs"]:
        m = {k: f(job) for k, f in METRICS.items() if (k.startswith("read") and job["read"]["ios"])
             or (k.startswith("write") and job["write"]["ios"])}
        m.setdefault("read_kiops", 0.0)
        m.setdefault("write_kiops", 0.0)
        ios = job["read"]["ios"] + job["write"]["ios"]
        m["cpu_us_per_io"] = (job["usr_ns"] + job["sys_ns"]) / ios / 1e3 if ios else 0.0
        out[job["name"]] = m
    return out
