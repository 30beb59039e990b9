"""`iosched calibrate` and `iosched validate`: fit a device preset from a real block device, then hold the simulator
against the kernel on that device.

Calibration runs a fixed measurement plan (PLAN) through the kernel backend with the `none` scheduler, then fits the
device model's main parameters one by one, each to one measurement, by simulating the measurement with the
candidate preset and correcting the parameter multiplicatively until the simulated figure matches (FITS). The
parameters that no measurement pins are named assumptions of a generic NVMe-like device (BASE_DEVICE). The method and
its limits are in README.md, "Calibrating and validating".
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pyarrow.parquet as pq

from .calibration import Job, METRICS
from .errors import SpecError
from .presets import presets_dir, load_preset_file

ENGINE = "libaio"


@dataclass(frozen=True)
class Step:
    name: str          # experiment name of the kernel run, and the key of its measurement
    jobs: tuple[Job, ...]
    what: str          # for progress lines and provenance strings


def _job(name: str, rw: str, qd: int, bs: int = 4096, numjobs: int = 1) -> Job:
    return Job(name, rw, qd, [], bs_bytes=bs, numjobs=numjobs, ioengine=ENGINE)


READ_QDS = (1, 4, 16, 64)
PLAN: tuple[Step, ...] = (
    *(Step(f"cal-randread-qd{qd}", (_job("r", "randread", qd),), f"4 KiB random read, QD {qd}") for qd in READ_QDS),
    Step("cal-randwrite-qd1", (_job("w", "randwrite", 1),), "4 KiB random write, QD 1"),
    Step("cal-randwrite-qd64", (_job("w", "randwrite", 64),), "4 KiB random write, QD 64"),
    Step("cal-seqread-128k", (_job("r", "read", 32, bs=131072),), "128 KiB sequential read, QD 32"),
    Step("cal-seqwrite-128k", (_job("w", "write", 32, bs=131072),), "128 KiB sequential write, QD 32"),
    Step("cal-mixed", (_job("r", "randread", 1), _job("w", "randwrite", 32)),
         "mixed: 4 KiB random read QD 1 + 4 KiB random write QD 32"),
)

# A generic NVMe-like device: what no measurement of PLAN pins. Fitted fields are overwritten by calibrate().
BASE_DEVICE: dict[str, Any] = {
    "interface": "nvme", "max_hw_queues": 128, "queue_depth": 1023, "link_bytes_per_s": 4_000_000_000,
    "controller_cores": 1, "command_ns": 2000, "read_pipeline_ns": 0, "write_ack_ns": 10000,
    "write_ack_jitter_ns": 0, "channels": 8, "units_per_channel": 8, "channel_bytes_per_s": 100_000_000_000,
    "flash_page_bytes": 4096, "read_ns_by_page_type": [50000], "read_jitter_ns": 0, "program_unit_bytes": 65536,
    "program_ns": 1_000_000, "erase_ns": 0, "read_suspend_ns": 0, "block_program_units": 64,
    "write_buffer_bytes": 16 * 1024 * 1024, "overprovision_bytes": 0, "gc_free_units_low": 2,
    "condition": "fresh", "trimmed_fraction": 0.0,
}
BASE_PROVENANCE = {
    "interface": "named assumption: modelled as one NVMe-like device (blk-mq, one hardware queue per core)",
    "max_hw_queues": "named assumption: one hardware queue per core",
    "queue_depth": "named assumption: deep enough never to bind in the plan",
    "controller_cores": "named assumption: one serial front end (command_ns is fitted on it)",
    "read_pipeline_ns": "named assumption: folded into the fitted read time",
    "channels": "named assumption: 8 x 8 units, enough parallelism that the fitted command time is the ceiling",
    "units_per_channel": "named assumption: see channels",
    "channel_bytes_per_s": "named assumption: never binds (the link is fitted instead)",
    "flash_page_bytes": "named assumption: 4 KiB pages, so a 4 KiB read is one page read",
    "erase_ns": "named assumption: no erase time (condition fresh: no garbage collection in the plan)",
    "block_program_units": "named assumption: 64 program units per block",
    "write_buffer_bytes": "named assumption: 16 MiB of write-back buffer, filled within the plan's ramp",
    "overprovision_bytes": "named assumption: none (condition fresh)",
    "gc_free_units_low": "named assumption: 2 free program units per unit",
    "condition": "named assumption: fresh (garbage collection is not measured by the plan)",
    "trimmed_fraction": "named assumption: 0",
    "program_unit_bytes": "named assumption: 64 KiB per program operation (program_ns is fitted with it)",
}


def spec_toml(step: Step, duration_s: float, ramp_s: float) -> str:
    lines = [f'name = "{step.name}"', f'duration = "{duration_s}s"', f'ramp = "{ramp_s}s"', "repeat = 1", "seed = 1",
             'scheduler = { name = "none" }', ""]
    for j in step.jobs:
        lines += ["[[job]]", f'name = "{j.name}"', f'rw = "{j.rw}"', f"bs = {j.bs_bytes}", f"iodepth = {j.iodepth}",
                  f'ioengine = "{j.ioengine}"', f"numjobs = {j.numjobs}", ""]
    return "\n".join(lines)


def measure_kernel(device: str, out: Path, duration_s: float, ramp_s: float,
                   echo: Callable[[str], None] = print) -> dict[str, dict[str, dict[str, float]]]:
    """Run PLAN on ``device`` with the kernel backend; {step: {job: {metric: value}}}."""
    from .backends.kernel.runner import Options, run_kernel
    from .spec import Overrides, load_experiment

    out.mkdir(parents=True, exist_ok=True)
    specs = out / "specs"
    specs.mkdir(exist_ok=True)
    total = len(PLAN) * (duration_s + ramp_s)
    for i, step in enumerate(PLAN):
        echo(f"[{i + 1}/{len(PLAN)}] {step.what} ({duration_s + ramp_s:g} s; plan ~{total:.0f} s in all)")
        path = specs / f"{step.name}.toml"
        path.write_text(spec_toml(step, duration_s, ramp_s))
        run_kernel(load_experiment(str(path), Overrides()), Options(devices=[device], out=out / "kernel"),
                   echo=lambda s: echo("  " + s) if s.startswith(("note:", "error:")) else None)
    return measured_table(out / "kernel" / "results.parquet")


def measured_table(parquet: Path) -> dict[str, dict[str, dict[str, float]]]:
    rows = pq.read_table(parquet).to_pylist()
    table: dict[str, dict[str, dict[str, float]]] = {}
    for r in rows:
        table.setdefault(r["experiment"], {})[r["job"]] = {
            "read_kiops": (r["read_iops"] or 0) / 1e3, "write_kiops": (r["write_iops"] or 0) / 1e3,
            "read_mean_us": (r["read_clat_mean_ns"] or 0) / 1e3, "read_p99_us": (r["read_clat_p99_ns"] or 0) / 1e3,
            "write_mean_us": (r["write_clat_mean_ns"] or 0) / 1e3,
            "write_p99_us": (r["write_clat_p99_ns"] or 0) / 1e3,
            "read_mb_s": (r["read_bw_bytes"] or 0) / 1e6, "write_mb_s": (r["write_bw_bytes"] or 0) / 1e6,
        }
    return table


def _sim_config(host_params: dict, device_params: dict, jobs: tuple[Job, ...], runtime_s: float, ramp_s: float,
                scheduler: str = "none") -> dict[str, Any]:
    from .fiojob import DeviceInfo, JobContext, RawJob, resolve_job

    dev = dict(device_params, name="/dev/nvme0n1")
    context = JobContext(devices=[DeviceInfo(dev["name"], dev["capacity_bytes"], dev["logical_block_bytes"])],
                         cores=host_params["cores"], default_runtime_ns=int(runtime_s * 1e9),
                         default_ramp_ns=int(ramp_s * 1e9), default_time_based=True)
    resolved = [resolve_job(RawJob(j.name, {"rw": j.rw, "bs": j.bs_bytes, "iodepth": j.iodepth, "numjobs": j.numjobs,
                                            "ioengine": j.ioengine}, file="iosched.devcal", label=f'job "{j.name}"',
                                   origin="toml"), context).config for j in jobs]
    return {"seed": 1, "host": host_params, "devices": [dev],
            "scheduler": {"name": scheduler, "tunables": [], "nr_requests": None, "block_layer": None},
            "sample_interval_ns": 100_000_000, "jobs": resolved}


def simulate_step(host_params: dict, device_params: dict, step: Step, runtime_s: float = 0.3,
                  ramp_s: float = 0.1) -> dict[str, dict[str, float]]:
    from . import _native

    result = json.loads(_native.simulate(json.dumps(_sim_config(host_params, device_params, step.jobs, runtime_s,
                                                                ramp_s))))
    out = {}
    for job in result["jobs"]:
        m = {k: f(job) for k, f in METRICS.items() if (k.startswith("read") and job["read"]["ios"])
             or (k.startswith("write") and job["write"]["ios"])}
        m.setdefault("read_kiops", 0.0)
        m.setdefault("write_kiops", 0.0)
        out[job["name"]] = m
    return out


@dataclass(frozen=True)
class Fit:
    param: str          # DeviceConfig field (read_ns_by_page_type: its single entry)
    step: str
    job: str
    metric: str
    grows: bool         # does the metric grow with the parameter?
    why: str


FITS: tuple[Fit, ...] = (
    Fit("read_ns_by_page_type", "cal-randread-qd1", "r", "read_mean_us", True,
        "QD 1 4 KiB random read mean latency"),
    Fit("command_ns", "cal-randread-qd{peak}", "r", "read_kiops", False,
        "the highest 4 KiB random read IOPS of the QD sweep (the serial front end's ceiling)"),
    Fit("write_ack_ns", "cal-randwrite-qd1", "w", "write_mean_us", True, "QD 1 4 KiB random write mean latency"),
    Fit("program_ns", "cal-randwrite-qd64", "w", "write_kiops", False,
        "QD 64 4 KiB random write IOPS, sustained after the write buffer filled (the flash drain rate)"),
    Fit("link_bytes_per_s", "cal-seqread-128k", "r", "read_kiops", True, "128 KiB sequential read bandwidth"),
    Fit("read_suspend_ns", "cal-mixed", "r", "read_p99_us", True,
        "the QD 1 reader's P99 under QD 32 random writes (how long a read waits behind a program)"),
)


def _get(params: dict, name: str) -> float:
    return params[name][0] if name == "read_ns_by_page_type" else params[name]


def _set(params: dict, name: str, value: float) -> None:
    v = max(1, int(round(value)))
    if name == "read_ns_by_page_type":
        params[name] = [v]
    else:
        params[name] = v


def fit(measured: dict[str, dict[str, dict[str, float]]], host_params: dict, capacity_bytes: int, lbs: int,
        rounds: int = 4, echo: Callable[[str], None] = print) -> tuple[dict, dict[str, tuple[float, float]]]:
    """Fit the device parameters to ``measured``; returns (params, {fit label: (kernel, simulated)})."""
    params = dict(BASE_DEVICE, capacity_bytes=capacity_bytes, logical_block_bytes=lbs)
    peak_qd = max(READ_QDS, key=lambda qd: measured[f"cal-randread-qd{qd}"]["r"]["read_kiops"])
    m = lambda f: measured[f.step.format(peak=peak_qd)][f.job][f.metric]
    # Starting points (closed form), then multiplicative correction by simulation (host costs and queueing are in
    # the simulated figure, so the fitted device time is what is left after them).
    r1 = measured["cal-randread-qd1"]["r"]
    w1 = measured["cal-randwrite-qd1"]["w"]
    _set(params, "read_ns_by_page_type", max(1000.0, r1["read_mean_us"] * 1e3 * 0.8))
    # Uniform jitter of J adds J/2 to the mean: at most half the mean, so a read time is left to fit.
    params["read_jitter_ns"] = int(min(2 * max(0.0, r1["read_p99_us"] - r1["read_mean_us"]),
                                       0.5 * r1["read_mean_us"]) * 1e3)
    _set(params, "command_ns", 1e6 / max(m(FITS[1]), 1e-3))
    _set(params, "write_ack_ns", max(1000.0, w1["write_mean_us"] * 1e3 * 0.8))
    params["write_ack_jitter_ns"] = int(min(2 * max(0.0, w1["write_p99_us"] - w1["write_mean_us"]),
                                            0.5 * w1["write_mean_us"]) * 1e3)
    _set(params, "read_suspend_ns", 20000)
    units = params["channels"] * params["units_per_channel"]
    wk = max(m(FITS[3]), 1e-3) * 1e3 * 4096      # bytes/s
    _set(params, "program_ns", units * params["program_unit_bytes"] / wk * 1e9)
    _set(params, "link_bytes_per_s", measured["cal-seqread-128k"]["r"]["read_mb_s"] * 1e6)
    steps = {s.name: s for s in PLAN}
    for rnd in range(rounds):
        for f in FITS:
            step = steps[f.step.format(peak=peak_qd)]
            sim = simulate_step(host_params, params, step)[f.job][f.metric]
            target = m(f)
            if sim <= 0 or target <= 0:
                continue
            ratio = target / sim if f.grows else sim / target
            # Latencies carry a fixed host part the parameter does not scale: damp the step.
            _set(params, f.param, _get(params, f.param) * ratio ** 0.8)
        echo(f"  fit round {rnd + 1}/{rounds} done")
    report: dict[str, tuple[float, float]] = {}
    for f in FITS:
        step = steps[f.step.format(peak=peak_qd)]
        report[f"{step.name} {f.metric}"] = (m(f), simulate_step(host_params, params, step)[f.job][f.metric])
    for step, job, metric in (("cal-seqwrite-128k", "w", "write_kiops"), ("cal-mixed", "w", "write_kiops"), ("cal-randread-qd1", "r", "read_p99_us")):
        report[f"{step} {metric} (not fitted)"] = (measured[step][job][metric],
                                                   simulate_step(host_params, params, steps[step])[job][metric])
    params["_peak_qd"] = peak_qd
    return params, report


def provenance(measured: dict, peak_qd: int, device: str, when: str) -> dict[str, str]:
    prov = dict(BASE_PROVENANCE)
    src = f"iosched calibrate {device} ({when})"
    r1, w1 = measured["cal-randread-qd1"]["r"], measured["cal-randwrite-qd1"]["w"]
    prov.update({
        "capacity_bytes": f"measured: size of {device}",
        "logical_block_bytes": f"measured: logical block size of {device}",
        "read_ns_by_page_type": f"fit: cal-randread-qd1 mean {r1['read_mean_us']:.1f} us by simulation ({src})",
        "read_suspend_ns": f"fit: cal-mixed reader P99 {measured['cal-mixed']['r']['read_p99_us']:.0f} us by "
                           f"simulation ({src})",
        "read_jitter_ns": f"fit: 2 x (P99 - mean), at most half the mean, of cal-randread-qd1 = 2 x ({r1['read_p99_us']:.1f} - "
                          f"{r1['read_mean_us']:.1f}) us ({src})",
        "command_ns": f"fit: cal-randread-qd{peak_qd}, the sweep's peak "
                      f"{measured[f'cal-randread-qd{peak_qd}']['r']['read_kiops']:.1f} KIOPS, by simulation ({src})",
        "write_ack_ns": f"fit: cal-randwrite-qd1 mean {w1['write_mean_us']:.1f} us by simulation ({src})",
        "write_ack_jitter_ns": f"fit: 2 x (P99 - mean), at most half the mean, of cal-randwrite-qd1 = 2 x ({w1['write_p99_us']:.1f} - "
                               f"{w1['write_mean_us']:.1f}) us ({src})",
        "program_ns": f"fit: cal-randwrite-qd64 {measured['cal-randwrite-qd64']['w']['write_kiops']:.1f} KIOPS "
                      f"sustained, by simulation ({src})",
        "link_bytes_per_s": f"fit: cal-seqread-128k {measured['cal-seqread-128k']['r']['read_mb_s']:.0f} MB/s by "
                            f"simulation ({src})",
    })
    return prov


def _toml_value(v: Any) -> str:
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def write_preset(path: Path, kind: str, description: str, key_figures: dict[str, str], params: dict,
                 prov: dict[str, str]) -> None:
    lines = [f"# Written by iosched calibrate; the method is in README.md, \"Calibrating and validating\".",
             f'kind = "{kind}"', f'name = "{path.stem}"', f"description = {_toml_value(description)}", "seeds = []",
             "", "[key_figures]"]
    lines += [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in key_figures.items()]
    tables = {k: v for k, v in params.items() if isinstance(v, dict)}
    lines += ["", "[params]"] + [f"{k} = {_toml_value(v)}" for k, v in params.items() if not isinstance(v, dict)]
    for name, table in tables.items():
        for sub, inner in ((name, table),) if not any(isinstance(x, dict) for x in table.values()) else \
                [(f'{name}.{json.dumps(k)}', x) for k, x in table.items()]:
            lines += ["", f"[params.{sub}]"] + [f"{k} = {_toml_value(v)}" for k, v in inner.items()]
    lines += ["", "[provenance]"] + [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in prov.items()]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def host_preset_params(base: str = "xeon-silver-4210r-10c") -> tuple[dict, dict[str, str]]:
    """This machine as a host preset: its core count, and per-I/O CPU costs taken over from ``base`` (NOT fitted:
    a named assumption, see README)."""
    from .presets import load_preset

    p = load_preset("host", base)
    params = json.loads(json.dumps(p.params))
    params["cores"] = os.cpu_count() or 1
    prov = {"cores": "measured: os.cpu_count() on this machine"}
    for k in params:
        if k != "cores":
            prov[k] = f"named assumption: taken over from host preset {base} (per-I/O CPU costs are not fitted yet)"
    return params, prov


# ---------------------------------------------------------------------------------------------------------------
# Presets given as a name or as a path: a temporary presets tree holding the shipped ones plus the given files.

class PresetTree:
    def __init__(self, device: str, host: str | None):
        self.tmp = Path(tempfile.mkdtemp(prefix="iosched-presets-"))
        root = presets_dir()
        for sub in ("devices", "hosts"):
            shutil.copytree(root / sub, self.tmp / sub)
        self.device = self._add(device, "device", "devices", "--preset")
        self.host = self._add(host, "host", "hosts", "--host") if host else None
        self.old = os.environ.get("IOSCHED_PRESETS")
        os.environ["IOSCHED_PRESETS"] = str(self.tmp)

    def _add(self, given: str, kind: str, sub: str, flag: str) -> str:
        if given.endswith(".toml") or "/" in given:
            path = Path(given)
            if not path.is_file():
                raise SpecError(flag, None, f"no such preset file: {given}")
            load_preset_file(path, kind)
            shutil.copy(path, self.tmp / sub / path.name)
            return path.stem
        return given

    def close(self) -> None:
        from . import presets as _p

        if self.old is None:
            os.environ.pop("IOSCHED_PRESETS", None)
        else:
            os.environ["IOSCHED_PRESETS"] = self.old
        _p._cache.clear()
        shutil.rmtree(self.tmp, ignore_errors=True)


def validation_rows(parquet: Path) -> list[dict[str, Any]]:
    """Per scheduler: total IOPS and the first job's P99 (read if it reads) for sim and kernel, their ratios and
    ranks by that P99."""
    rows = pq.read_table(parquet).to_pylist()
    by: dict[tuple[str, str], dict[str, Any]] = {}
    first_job: str | None = None
    for r in rows:
        first_job = first_job or r["job"]
    for r in rows:
        d = by.setdefault((r["backend"], r["scheduler"]), {"iops": 0.0, "p99_us": None})
        d["iops"] += (r["read_iops"] or 0) + (r["write_iops"] or 0)
        if r["job"] == first_job:
            p99 = r["read_clat_p99_ns"] if (r["read_iops"] or 0) > 0 else r["write_clat_p99_ns"]
            d["p99_us"] = (p99 or 0) / 1e3
    scheds = sorted({s for b, s in by if b == "kernel"} & {s for b, s in by if b == "sim"})
    rank = {b: {s: i + 1 for i, s in enumerate(sorted(scheds, key=lambda s: by[(b, s)]["p99_us"]))}
            for b in ("kernel", "sim")}
    out = []
    for s in scheds:
        k, m = by[("kernel", s)], by[("sim", s)]
        out.append({"scheduler": s, "job": first_job, "kernel_iops": k["iops"], "sim_iops": m["iops"],
                    "iops_ratio": m["iops"] / k["iops"] if k["iops"] else math.nan,
                    "kernel_p99_us": k["p99_us"], "sim_p99_us": m["p99_us"],
                    "p99_ratio": m["p99_us"] / k["p99_us"] if k["p99_us"] else math.nan,
                    "kernel_rank": rank["kernel"][s], "sim_rank": rank["sim"][s]})
    return out


def format_validation(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "no scheduler ran on both backends"
    agree = all(r["kernel_rank"] == r["sim_rank"] for r in rows)
    lines = [f"| scheduler | kernel IOPS | sim IOPS | IOPS sim/kernel | {rows[0]['job']} P99 kernel (us) | "
             f"P99 sim (us) | P99 sim/kernel | rank kernel | rank sim |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        flag = "" if abs(r["iops_ratio"] - 1) <= 0.25 else " (outside ±25%)"
        lines.append(f"| {r['scheduler']} | {r['kernel_iops']:,.0f} | {r['sim_iops']:,.0f} | "
                     f"{r['iops_ratio']:.2f}{flag} | {r['kernel_p99_us']:,.1f} | {r['sim_p99_us']:,.1f} | "
                     f"{r['p99_ratio']:.2f} | {r['kernel_rank']} | {r['sim_rank']} |")
    lines.append("")
    lines.append(f"ranking by {rows[0]['job']}'s P99 (1 = lowest): " + ("agrees" if agree else "DISAGREES"))
    return "\n".join(lines)
