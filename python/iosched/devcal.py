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

from . import native
from .results import METRICS
from .errors import SpecError
from .presets import presets_dir, load_preset_file
from .simconfig import Job, jobs_config, named

ENGINE = "libaio"


@dataclass(frozen=True)
class Step:
    name: str          # experiment name of the kernel run, and the key of its measurement
    jobs: tuple[Job, ...]
    what: str          # for progress lines and provenance strings


def _job(name: str, rw: str, qd: int, bs: int = 4096, numjobs: int = 1) -> Job:
    return Job(name, rw, qd, [], bs_bytes=bs, numjobs=numjobs, ioengine=ENGINE)


READ_QDS = (1, 4, 16, 64)


def max_qd(geometry: dict[str, int]) -> int:
    """The 'high QD' of the plan: enough to fill every driver tag of the device (so the write ceiling is measured
    with the queue full, as several writers would keep it), at least 64 and at most 256."""
    tags = geometry.get("max_hw_queues", 1) * geometry.get("queue_depth", 64)
    return max(64, min(256, tags))


def plan(high_qd: int = 64) -> tuple[Step, ...]:
    read_qds = READ_QDS + ((high_qd,) if high_qd > READ_QDS[-1] else ())
    return (
        *(Step(f"cal-randread-qd{qd}", (_job("r", "randread", qd),), f"4 KiB random read, QD {qd}") for qd in read_qds),
        Step("cal-randwrite-qd1", (_job("w", "randwrite", 1),), "4 KiB random write, QD 1"),
        Step("cal-randwrite-qdmax", (_job("w", "randwrite", high_qd),), f"4 KiB random write, QD {high_qd}"),
        Step("cal-seqread-128k", (_job("r", "read", 32, bs=131072),), "128 KiB sequential read, QD 32"),
        Step("cal-seqwrite-128k", (_job("w", "write", 32, bs=131072),), "128 KiB sequential write, QD 32"),
        Step("cal-mixed", (_job("r", "randread", 1), _job("w", "randwrite", 32)),
             "mixed: 4 KiB random read QD 1 + 4 KiB random write QD 32"),
    )


PLAN = plan()

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


def measure_kernel(device: str, out: Path, duration_s: float, ramp_s: float, steps: tuple[Step, ...] = PLAN,
                   echo: Callable[[str], None] = print) -> dict[str, dict[str, dict[str, float]]]:
    """Run the plan ``steps`` on ``device`` with the kernel backend; {step: {job: {metric: value}}}."""
    from .backends.kernel.runner import Options, run_kernel
    from .spec import Overrides, load_experiment

    out.mkdir(parents=True, exist_ok=True)
    specs = out / "specs"
    specs.mkdir(exist_ok=True)
    total = len(steps) * (duration_s + ramp_s)
    for i, step in enumerate(steps):
        echo(f"[{i + 1}/{len(steps)}] {step.what} ({duration_s + ramp_s:g} s; plan ~{total:.0f} s in all)")
        path = specs / f"{step.name}.toml"
        path.write_text(spec_toml(step, duration_s, ramp_s))
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


def queue_geometry(sysfs: Path) -> dict[str, int]:
    """The block layer's view of the device: hardware queues and driver tags per queue (what the model's
    max_hw_queues and queue_depth are), from /sys/block/X/mq/*/nr_tags."""
    queues = sorted((sysfs / "mq").glob("*")) if (sysfs / "mq").is_dir() else []
    tags = [int((q / "nr_tags").read_text()) for q in queues if (q / "nr_tags").is_file()]
    if not tags:
        return {}
    return {"max_hw_queues": len(tags), "queue_depth": min(tags)}


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
    Fit("write_command_ns", "cal-randwrite-qdmax", "w", "write_kiops", False,
        "4 KiB random write IOPS with every driver tag in use (the front end's ceiling for writes)"),
    Fit("link_bytes_per_s", "cal-seqread-128k", "r", "read_kiops", True, "128 KiB sequential read bandwidth"),
)
# Discrete: the size of one program operation sets how long a read can wait behind one (no suspend), so it is
# chosen by the mixed run's reader P99; program_ns follows it at the measured drain bandwidth.
PROGRAM_UNIT_CANDIDATES = tuple(4096 << i for i in range(9))          # 4 KiB .. 1 MiB


def _get(params: dict, name: str) -> float:
    return params[name][0] if name == "read_ns_by_page_type" else params[name]


def _set(params: dict, name: str, value: float) -> None:
    v = max(1, int(round(value)))
    if name == "read_ns_by_page_type":
        params[name] = [v]
    else:
        params[name] = v


def _peak_qd(measured: dict) -> int:
    qds = [int(name.removeprefix("cal-randread-qd")) for name in measured if name.startswith("cal-randread-qd")]
    return max(sorted(qds), key=lambda qd: measured[f"cal-randread-qd{qd}"]["r"]["read_kiops"])


def _drain_program_ns(params: dict, write_bytes_per_s: float) -> int:
    """program_ns at which all units together program ``write_bytes_per_s`` (closed form: the drain rate)."""
    units = params["channels"] * params["units_per_channel"]
    return max(1, int(round(units * params["program_unit_bytes"] / max(write_bytes_per_s, 1.0) * 1e9)))


def initial_device(measured: dict, capacity_bytes: int, lbs: int, geometry: dict[str, int]) -> dict:
    """Closed-form starting points; the fit corrects them by simulation."""
    params = dict(BASE_DEVICE, capacity_bytes=capacity_bytes, logical_block_bytes=lbs, **geometry)
    r1 = measured["cal-randread-qd1"]["r"]
    w1 = measured["cal-randwrite-qd1"]["w"]
    _set(params, "read_ns_by_page_type", max(1000.0, r1["read_mean_us"] * 1e3 * 0.8))
    # Uniform jitter of J adds J/2 to the mean: at most half the mean, so a read time is left to fit.
    params["read_jitter_ns"] = int(min(2 * max(0.0, r1["read_p99_us"] - r1["read_mean_us"]),
                                       0.5 * r1["read_mean_us"]) * 1e3)
    _set(params, "command_ns", 1e6 / max(measured[f"cal-randread-qd{_peak_qd(measured)}"]["r"]["read_kiops"], 1e-3))
    _set(params, "write_command_ns", 1e6 / max(measured["cal-randwrite-qdmax"]["w"]["write_kiops"], 1e-3))
    _set(params, "write_ack_ns", max(1000.0, w1["write_mean_us"] * 1e3 * 0.8))
    params["write_ack_jitter_ns"] = int(min(2 * max(0.0, w1["write_p99_us"] - w1["write_mean_us"]),
                                            0.5 * w1["write_mean_us"]) * 1e3)
    params["program_ns"] = _drain_program_ns(params, measured["cal-seqwrite-128k"]["w"]["write_mb_s"] * 1e6)
    _set(params, "link_bytes_per_s", measured["cal-seqread-128k"]["r"]["read_mb_s"] * 1e6)
    return params


def fit_host(measured: dict, base_host: dict, device_params: dict, plan_steps: tuple[Step, ...],
             rounds: int = 3) -> dict:
    """Per-I/O CPU costs from fio's usr/sys time: libaio submit + complete (split as in the base preset) so the
    simulated peak-QD random reads cost the measured CPU per I/O, and usr_fraction from that run's usr/sys split.
    sleep_wake_ns stays the base's: fio's QD 1 CPU per I/O on a virtual machine includes idle-exit and
    halt-polling costs that are not the task's wake-up work, so it does not pin it (fit.md shows it).
    io_uring and psync are scaled by libaio's factor (named assumption: the plan runs libaio only)."""
    host = json.loads(json.dumps(base_host))
    steps = {s.name: s for s in plan_steps}
    peak = f"cal-randread-qd{_peak_qd(measured)}"
    target = measured[peak]["r"]["cpu_us_per_io"]
    if target <= 0:
        return host
    base_sum = host["libaio"]["submit_ns"] + host["libaio"]["complete_ns"]
    for _ in range(rounds):
        sim = simulate_step(host, device_params, steps[peak])["r"]["cpu_us_per_io"]
        if sim > 0:
            for key in ("submit_ns", "complete_ns"):
                host["libaio"][key] = max(1, int(round(host["libaio"][key] * target / sim)))
    host["libaio"]["usr_fraction"] = round(measured[peak]["r"]["usr_share"], 3)
    factor = (host["libaio"]["submit_ns"] + host["libaio"]["complete_ns"]) / base_sum
    for engine in ("io_uring", "psync"):
        for key in ("submit_ns", "complete_ns"):
            host[engine][key] = max(1, int(round(host[engine][key] * factor)))
    return host


def fit(measured: dict[str, dict[str, dict[str, float]]], host_params: dict, capacity_bytes: int, lbs: int,
        geometry: dict[str, int], plan_steps: tuple[Step, ...], rounds: int = 4,
        echo: Callable[[str], None] = print) -> tuple[dict, dict[str, tuple[float, float]]]:
    """Fit the device parameters to ``measured``, the measurements of ``plan_steps``; returns
    (params, {fit label: (kernel, simulated)})."""
    params = initial_device(measured, capacity_bytes, lbs, geometry)
    peak_qd = _peak_qd(measured)
    m = lambda f: measured[f.step.format(peak=peak_qd)][f.job][f.metric]
    steps = {s.name: s for s in plan_steps}
    write_bytes_per_s = measured["cal-seqwrite-128k"]["w"]["write_mb_s"] * 1e6
    mixed_p99 = measured["cal-mixed"]["r"]["read_p99_us"]

    def correct() -> None:
        # Multiplicative correction by simulation (host costs and queueing are in the simulated figure, so the
        # fitted device time is what is left after them); latencies carry a fixed host part: damp the step.
        for f in FITS:
            sim = simulate_step(host_params, params, steps[f.step.format(peak=peak_qd)])[f.job][f.metric]
            target = m(f)
            if sim <= 0 or target <= 0:
                continue
            ratio = target / sim if f.grows else sim / target
            _set(params, f.param, _get(params, f.param) * ratio ** 0.8)

    def choose_program_unit() -> None:
        best = None
        for unit_bytes in PROGRAM_UNIT_CANDIDATES:
            trial = dict(params, program_unit_bytes=unit_bytes)
            trial["program_ns"] = _drain_program_ns(trial, write_bytes_per_s)
            sim = simulate_step(host_params, trial, steps["cal-mixed"])["r"]["read_p99_us"]
            miss = abs(math.log(max(sim, 1e-3) / max(mixed_p99, 1e-3)))
            if best is None or miss < best[0] - 1e-9:
                best = (miss, unit_bytes, trial["program_ns"])
        params["program_unit_bytes"], params["program_ns"] = best[1], best[2]

    for rnd in range(rounds):
        correct()
        if rnd in (0, rounds - 1):
            choose_program_unit()
        echo(f"  fit round {rnd + 1}/{rounds} done")
    report: dict[str, tuple[float, float]] = {}
    for f in FITS:
        step = steps[f.step.format(peak=peak_qd)]
        report[f"{step.name} {f.metric}"] = (m(f), simulate_step(host_params, params, step)[f.job][f.metric])
    report["cal-mixed read_p99_us (program unit chosen)"] = (
        mixed_p99, simulate_step(host_params, params, steps["cal-mixed"])["r"]["read_p99_us"])
    for step, job, metric in (("cal-seqwrite-128k", "w", "write_kiops"), ("cal-mixed", "w", "write_kiops"),
                              ("cal-mixed", "r", "read_mean_us"), ("cal-randread-qd1", "r", "read_p99_us"),
                              ("cal-randread-qd4", "r", "read_kiops"), ("cal-randread-qd16", "r", "read_kiops"),
                              ("cal-randwrite-qdmax", "w", "write_p99_us"),
                              (f"cal-randread-qd{peak_qd}", "r", "cpu_us_per_io"),
                              ("cal-randread-qd1", "r", "cpu_us_per_io")):
        label = ("host fit: libaio submit + complete" if step == f"cal-randread-qd{peak_qd}"
                 and metric == "cpu_us_per_io" else "not fitted")
        report[f"{step} {metric} ({label})"] = (measured[step][job][metric],
                                                simulate_step(host_params, params, steps[step])[job][metric])
    params["_peak_qd"] = peak_qd
    return params, report


def provenance(measured: dict, peak_qd: int, device: str, when: str,
               geometry: dict[str, int] | None = None) -> dict[str, str]:
    prov = dict(BASE_PROVENANCE)
    src = f"iosched calibrate {device} ({when})"
    r1, w1 = measured["cal-randread-qd1"]["r"], measured["cal-randwrite-qd1"]["w"]
    prov.update({
        "capacity_bytes": f"measured: size of {device}",
        "logical_block_bytes": f"measured: logical block size of {device}",
        "read_ns_by_page_type": f"fit: cal-randread-qd1 mean {r1['read_mean_us']:.1f} us by simulation ({src})",
        "read_suspend_ns": "named assumption: no program suspend (the program unit is fitted to the mixed run instead)",
        "read_jitter_ns": f"fit: 2 x (P99 - mean), at most half the mean, of cal-randread-qd1 = 2 x ({r1['read_p99_us']:.1f} - "
                          f"{r1['read_mean_us']:.1f}) us ({src})",
        "command_ns": f"fit: cal-randread-qd{peak_qd}, the sweep's peak "
                      f"{measured[f'cal-randread-qd{peak_qd}']['r']['read_kiops']:.1f} KIOPS, by simulation ({src})",
        "write_command_ns": f"fit: cal-randwrite-qdmax {measured['cal-randwrite-qdmax']['w']['write_kiops']:.1f} KIOPS "
                            f"by simulation ({src})",
        "write_ack_ns": f"fit: cal-randwrite-qd1 mean {w1['write_mean_us']:.1f} us by simulation ({src})",
        "write_ack_jitter_ns": f"fit: 2 x (P99 - mean), at most half the mean, of cal-randwrite-qd1 = 2 x ({w1['write_p99_us']:.1f} - "
                               f"{w1['write_mean_us']:.1f}) us ({src})",
        "program_ns": f"fit: all units together drain cal-seqwrite-128k's {measured['cal-seqwrite-128k']['w']['write_mb_s']:.0f} MB/s "
                      f"(closed form, {src})",
        "program_unit_bytes": f"fit: of 4 KiB .. 1 MiB, the one whose simulated cal-mixed reader P99 is nearest the "
                              f"measured {measured['cal-mixed']['r']['read_p99_us']:.0f} us ({src})",
        "link_bytes_per_s": f"fit: cal-seqread-128k {measured['cal-seqread-128k']['r']['read_mb_s']:.0f} MB/s by "
                            f"simulation ({src})",
    })
    if geometry:
        prov["max_hw_queues"] = f"measured: hardware queues of {device} (sysfs mq/)"
        prov["queue_depth"] = f"measured: driver tags per hardware queue of {device} (sysfs mq/*/nr_tags)"
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
    lines = ["# Written by iosched calibrate; the method is in README.md, \"Calibrating and validating\".",
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
    """This machine as a host preset before fitting: its core count, the rest taken over from ``base``."""
    from .presets import load_preset

    p = load_preset("host", base)
    params = json.loads(json.dumps(p.params))
    params["cores"] = os.cpu_count() or 1
    prov = {"cores": "measured: os.cpu_count() on this machine"}
    for k in params:
        if k != "cores":
            prov[k] = f"named assumption: taken over from host preset {base}"
    return params, prov


def host_provenance(prov: dict[str, str], measured: dict, device: str, when: str,
                    base: str = "xeon-silver-4210r-10c") -> dict[str, str]:
    peak = f"cal-randread-qd{_peak_qd(measured)}"
    src = f"iosched calibrate {device} ({when})"
    busy, qd1 = measured[peak]["r"]["cpu_us_per_io"], measured["cal-randread-qd1"]["r"]["cpu_us_per_io"]
    out = dict(prov)
    out["libaio"] = (f"fit: submit_ns + complete_ns (split as in {base}) to fio's usr+sys {busy:.2f} us per I/O in "
                     f"{peak} by simulation, usr_fraction to that run's usr/(usr+sys); sleep_wake_ns and "
                     f"context_switch_ns named assumptions from {base} (fio's {qd1:.2f} us per I/O at QD 1 on this "
                     f"machine includes idle-exit costs) ({src})")
    for engine in ("io_uring", "psync"):
        out[engine] = (f"named assumption: {base}'s costs scaled by the factor fitted for libaio (the plan runs "
                       f"libaio only; {src})")
    return out


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


def kernel_tunables(out: Path, experiment: str) -> dict[str, dict[str, int]]:
    """Per scheduler, the tunables the kernel's scheduler had during ``experiment``'s runs in ``out`` (the
    kernel backend records queue/iosched/* of the first device in each run's spec.json), integers only."""
    from . import store

    found: dict[str, dict[str, int]] = {}
    for rid in store.finished_runs(out):
        doc = store.load_run_spec(out, rid)
        if doc.get("backend") != "kernel" or doc.get("experiment") != experiment or not doc.get("queue_during"):
            continue
        values = {}
        for name, text in (doc["queue_during"][0].get("iosched") or {}).items():
            try:
                values[name] = int(text)
            except (TypeError, ValueError):
                pass
        found.setdefault(doc["scheduler"], values)
    return found


def mirror_tunables(runs: list, kernel: dict[str, dict[str, int]]) -> list[str]:
    """Give each simulated run the kernel's values of the tunables the simulator also has, where they differ from
    the simulator's defaults (which follow the kernel version each scheduler's source was read from: e.g.
    mq-deadline's async_depth default is 3/4 of nr_requests in Linux 6.3 and nr_requests since 6.10). Tunables the
    spec sets stay as set. Returns one note per scheduler changed."""
    notes = []
    for name, values in sorted(kernel.items()):
        defaults = dict(native.scheduler_tunables(name) or [])
        changed = {k: v for k, v in values.items() if k in defaults and defaults[k] != v}
        if not changed:
            continue
        for r in runs:
            if r.scheduler == name:
                r.tunables = dict(sorted({**changed, **r.tunables}.items()))
        notes.append(f"{name}: " + ", ".join(f"{k}={v} (simulator default {defaults[k]})"
                                             for k, v in sorted(changed.items())))
    return notes


IOPS_TOLERANCE = 0.25       # issue 7's acceptance: IOPS within ±25%
DRIFT_TOLERANCE = 0.10      # a device that moved more than the calibration's own fit error (<= 10%) has drifted
DRIFT_SECONDS = (5.0, 1.0)  # runtime, ramp: the QD-max ceilings settle within a second on the devices tried


def drift_steps(geometry: dict[str, int]) -> tuple[Step, ...]:
    """The calibration steps `validate` measures again: the read and write ceilings at the plan's high QD, the two
    figures that set a loaded device's pace (command_ns and write_command_ns are fitted to them)."""
    qd = max_qd(geometry)
    return tuple(s for s in plan(qd) if s.name in (f"cal-randread-qd{qd}", "cal-randwrite-qdmax"))


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
