"""Fitting the device model (and this machine's per-I/O CPU costs) to the plan's measurements, by simulation, with
the provenance of every parameter."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any, Callable

from .. import kernel_version
from ..presets import load_preset
from .measure import simulate_step
from .plan import Step

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
    io_uring and psync are scaled by libaio's factor (named assumption: the plan runs libaio only), and so are the
    file systems' direct-I/O paths: the same shares of this machine's path as of the base's (presets/README.md)."""
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
    for path in host.get("filesystems", {}).values():
        for key in ("read_ns", "write_ns"):
            path[key] = max(1, int(round(path[key] * factor)))
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


def host_preset_params(base: str = "xeon-silver-4210r-10c") -> tuple[dict, dict[str, str]]:
    """This machine as a host preset before fitting: its core count, the rest taken over from ``base``."""
    p = load_preset("host", base)
    params = json.loads(json.dumps(p.params))
    params["cores"] = os.cpu_count() or 1
    prov = {"cores": "measured: os.cpu_count() on this machine"}
    release, version = kernel_version.running()
    if version is not None:
        params["kernel"] = version
        prov["kernel"] = f"measured: uname -r (and -v) on this machine ({release})"
    for k in params:
        if k not in prov:
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
    if "filesystems" in prov:
        out["filesystems"] = (f"named assumption: {base}'s file-system paths scaled by the factor fitted for libaio, "
                              f"the same shares of this machine's path (presets/README.md, \"File systems' direct-I/O "
                              f"path\"; scripts/fs-dio-cost measures them here; {src})")
    return out
