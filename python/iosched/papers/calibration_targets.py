"""The calibration targets of the seed papers' presets: each preset pair's calibration inputs, as runnable scenarios.

Each target is a number a seed paper measured and that ../shared/reference/targets.md lists as a calibration input
for that paper's hardware. `measure()` runs the scenarios in the simulator; the preset tests assert each lands
within its tolerance, and `python -m iosched.papers.calibration_targets` prints the table used in presets/README.md.
Findings (everything not listed here) are never fitted: they live with the paper experiments. (Calibrating a preset
from a real device is iosched.devcal.)
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import native
from ..results import METRICS
from ..simconfig import Job, testbed_config
from ..units import parse_time
from . import seed000, seed003


@dataclass(frozen=True)
class Target:
    name: str
    source: str
    host: str
    device: str
    jobs: tuple[Job, ...]
    metric: str  # a results.METRICS name of `job` ("read_kiops", "read_p99_us", ...), or one of RUN_METRICS
    job: str
    paper_value: float
    tolerance: float = 0.10
    runtime_s: float = 0.3
    ramp_s: float = 0.05
    ssds: int = 1                                   # every job on this many copies of the device
    device_options: tuple[tuple[str, object], ...] = ()   # a drive state over the preset's parameters
    scheduler: str = "none"
    tunables: tuple[tuple[str, int], ...] = ()


# Quantities of the whole run rather than of one job: the share of the cores' busy time in lock functions, in %, as
# seed 000's Fig. 8 scores it.
RUN_METRICS = {
    "lock_pct": lambda result: 100 * seed000.lock_share(result),
}

_980 = ("xeon-silver-4210r-10c", "samsung-980pro-1tb")
_SEED000_STATE = tuple(seed000.DRIVE_STATE.items())   # the 980 PRO in seed 000's state (its runs' device options)
_GRID_STATE = tuple(seed003.GRID_DRIVE_STATE.items())  # ... and in the state of seed 003's raw grids
_TABLES_STATE = tuple(seed000.TABLES_DRIVE_STATE.items())  # ... and in that of seed 000's Tables 2-4


def _kyber_targets(read_ns: int, write_ns: int) -> tuple[tuple[str, int], ...]:
    return (("read_lat_nsec", read_ns), ("write_lat_nsec", write_ns))


def _seconds(time: str) -> float:
    return parse_time(time) / 1e9
_970 = ("i5-4590-4c", "samsung-970evo-250gb")
_P4500 = ("2x-e5-2620-16c", "intel-p4500-2tb")

TARGETS: tuple[Target, ...] = (
    Target("QD1 randread mean", "seed 000 §2.1", *_980, (Job("r", "randread", 1, [0]),), "read_mean_us", "r", 66.0),
    Target("QD1 randread P99", "seed 000 §2.1", *_980, (Job("r", "randread", 1, [0]),), "read_p99_us", "r", 78.3),
    Target("1 core QD64 randread", "seed 000 §3.1", *_980, (Job("r", "randread", 64, [0]),), "read_kiops", "r", 370.0),
    Target("4 cores randread", "seed 000 §3.2", *_980,
           (Job("r", "randread", 128, [0, 1, 2, 3], numjobs=4),), "read_kiops", "r", 774.0),
    # Writes over 6 s: the drive reclaims in steps (gc_step_copies), ~55 a second under W256, so each run sees
    # hundreds of them whatever its starting place in the cycle; W1 must keep its rate through them.
    Target("W1 randwrite IOPS", "seed 003 baseline", *_980, (Job("w", "randwrite", 1, [0]),), "write_kiops", "w", 62.3,
           runtime_s=6.0, ramp_s=1.0),
    Target("W1 randwrite P99", "seed 003 baseline", *_980, (Job("w", "randwrite", 1, [0]),), "write_p99_us", "w", 23.1,
           runtime_s=6.0, ramp_s=1.0),
    # Sustained: the write buffer fills in the ramp.
    Target("W256 randwrite sustained", "seed 003 baseline", *_980, (Job("w", "randwrite", 256, [0]),),
           "write_kiops", "w", 70.0, runtime_s=6.0, ramp_s=2.0),
    Target("W256 randwrite P99", "seed 003 baseline", *_980, (Job("w", "randwrite", 256, [0]),),
           "write_p99_us", "w", 15794.0, runtime_s=6.0, ramp_s=2.0),
    # Seed 002 Table I (measured column), Samsung 970 EVO 250 GB half trimmed. Sequential figures are stated in KIOPS
    # of 128 KiB (the datasheet's transfer size): 3,070 MB/s = 23.42 KIOPS, 320 MB/s = 2.441 KIOPS.
    # The 980 PRO's normal page read (page_read_extra_ns), fitted to its one added read input: the ICPE'24
    # artifact's 8 KiB random reads at QD 1 on one core (Fig. 1a bs=8k, pinned to CPU 2), mean total latency.
    Target("8K QD1 randread mean", "ICPE'24 artifact", *_980, (Job("r", "randread", 1, [2], bs_bytes=8192),),
           "read_mean_us", "r", 113.95, runtime_s=1.0,
           device_options=_SEED000_STATE),
    # The host's wake-up into an idle package (package_idle_wake_ns), fitted to its added input: the ICPE'24
    # artifact's CPU per I/O of one process reading 4 KiB at QD 1 on CPU 2 (cpu.csv, Fig. 1a bs=4k QD 1; not plotted).
    Target("QD1 randread CPU per I/O", "ICPE'24 artifact", *_980, (Job("r", "randread", 1, [2]),), "cpu_us_per_io", "r",
           7.269),
    # The host's cost per page of a transfer (io_page_ns), fitted to its added input: the ICPE'24 artifact's 64 KiB
    # reader of Fig. 11b with one background app, QD 128 over 8 SSDs under none (results.csv: usr + sys 97.68% of a
    # core at 234.6 KIOPS; its CPU is not plotted).
    Target("64K randread CPU per I/O", "ICPE'24 artifact", *_980, (Job("t", "randread", 128, [], bs_bytes=65536),),
           "cpu_us_per_io", "t", 4.163, ssds=8,
           device_options=_SEED000_STATE),
    # The host's uncontended lock call (uncontended_lock_ns), fitted to its added input: the ICPE'24 artifact's share
    # of cycles in lock functions with one unpinned QD-128 reader under none on one SSD (Fig. 8a none at 1,
    # lock_overhead.csv), where no lock is ever waited on.
    Target("QD128 randread lock share", "ICPE'24 artifact", *_980, (Job("t", "randread", 128, []),), "lock_pct", "t",
           2.74),
    # The schedulers' hook costs on this host (scheduler_costs), each fitted to its added input: the ICPE'24 artifact's
    # CPU per I/O of one unpinned QD-128 4 KiB reader on one SSD under that scheduler (Fig. 8a's runs with one process,
    # lock_overhead.csv: IOPS at 1.0 cores; Fig. 8a plots their lock share, Fig. 7a the same workload in other runs).
    *(Target(f"QD128 CPU per I/O, {scheduler}", "ICPE'24 artifact", *_980, (Job("t", "randread", 128, []),),
             "cpu_us_per_io", "t", cpu_us, scheduler=scheduler)
      for scheduler, cpu_us in (("bfq", 4.181), ("mq-deadline", 3.254), ("kyber", 3.407))),
    # The host's cache refill (cache_refill_ns), fitted to its added input: the ICPE'24 artifact's CPU per I/O of 256
    # QD-1 processes sharing CPU 1 under none (cpu.csv, the run behind Figs. 3, 4b and 6b at 256; not plotted: Fig. 4b
    # plots its cores, 1.0).
    Target("256 QD1 on 1 core CPU/IO", "ICPE'24 artifact", *_980,
           (Job("l", "randread", 1, [1], numjobs=256),), "cpu_us_per_io", "l", 8.208,
           device_options=_SEED000_STATE),
    # The raw grids' drive state, fitted to the writer of one grid cell (seed003.GRID_STATE_TARGETS: Kyber at R 100
    # ms / W 1 ms), a QD-1 reader on CPU 1 beside a QD-256 writer on CPU 2, measured as the grid's runs are.
    Target("grid state: R1-W256 writer", "seed 003 artifact grid", *_980,
           (Job("r", "randread", 1, [1]), Job("w", "randwrite", 256, [2])), "write_kiops", "w",
           seed003.GRID_STATE_INPUT_KIOPS, runtime_s=_seconds(seed003.grid_duration(seed003.GRID_STATE_WORKLOAD)),
           ramp_s=_seconds(seed003.GRID_RAMP), device_options=_GRID_STATE, scheduler="kyber",
           tunables=_kyber_targets(*seed003.GRID_STATE_TARGETS)),
    # Seed 000's Tables 2-4 drive state, fitted to an unplotted cell of Table 4 (seed000.TABLES_STATE_TARGETS: Kyber
    # at R 1 s / W 10 ms), the L-app on CPU 1 beside a QD-128 writer on CPU 2, measured as the tables' runs are.
    Target("tables state: Table 4 writer", "seed 000 artifact Table 4", *_980,
           (Job("l", "randread", 1, [1]), Job("w", "randwrite", 128, [2])), "write_kiops", "w",
           seed000.TABLES_STATE_INPUT_KIOPS, runtime_s=_seconds(seed000.KYBER_FULL["duration"]),
           ramp_s=_seconds(seed000.KYBER_FULL["ramp"]), device_options=_TABLES_STATE, scheduler="kyber",
           tunables=_kyber_targets(*seed000.TABLES_STATE_TARGETS)),
    Target("970 QD1 randread", "seed 002 Table I", *_970, (Job("r", "randread", 1, [0]),), "read_kiops", "r", 12.7),
    Target("970 QD32x4 randread", "seed 002 Table I", *_970,
           (Job("r", "randread", 32, [0, 1, 2, 3], numjobs=4),), "read_kiops", "r", 195.0),
    Target("970 QD1 randwrite", "seed 002 Table I", *_970, (Job("w", "randwrite", 1, [0]),), "write_kiops", "w", 80.0),
    Target("970 QD32x4 randwrite burst", "seed 002 Table I", *_970,
           (Job("w", "randwrite", 32, [0, 1, 2, 3], numjobs=4),), "write_kiops", "w", 344.0),
    # Sustained: the 13 GB TurboWrite buffer fills in ~12 s at the burst rate, so measure after that.
    Target("970 QD32x4 randwrite sust.", "seed 002 Table I", *_970,
           (Job("w", "randwrite", 32, [0, 1, 2, 3], numjobs=4),), "write_kiops", "w", 73.0, runtime_s=2.0, ramp_s=14.0),
    Target("970 seq read 128K (KIOPS)", "seed 002 Table I", *_970,
           (Job("r", "read", 32, [0], bs_bytes=131072),), "read_kiops", "r", 23.42),
    # The burst: the first second, while the TurboWrite region takes data at its program rate (1,500 MB/s = 11.44
    # KIOPS of 128 KiB).
    Target("970 seq write burst 128K", "seed 002 Table I", *_970,
           (Job("w", "write", 32, [0], bs_bytes=131072),), "write_kiops", "w", 11.44, runtime_s=1.0, ramp_s=0.05),
    Target("970 seq write sust. 128K", "seed 002 Table I", *_970,
           (Job("w", "write", 32, [0], bs_bytes=131072),), "write_kiops", "w", 2.441, runtime_s=2.0, ramp_s=14.0),
    # Seed 001's calibration inputs: the Intel DC P4500 2 TB datasheet (sequential in KIOPS of 128 KiB: 3.2 GB/s =
    # 24.41 KIOPS, 1.05 GB/s = 8.011 KIOPS). The preset is fresh (seed 001's setup), so the datasheet's steady-state
    # 38 KIOPS random write, a preconditioned figure, is checked by hand only (presets/README.md).
    Target("P4500 QD1 randread mean", "P4500 datasheet", *_P4500, (Job("r", "randread", 1, [0], ioengine="libaio"),),
           "read_mean_us", "r", 85.0),
    Target("P4500 QD1 randwrite mean", "P4500 datasheet", *_P4500, (Job("w", "randwrite", 1, [0], ioengine="libaio"),),
           "write_mean_us", "w", 20.0),
    Target("P4500 QD256 randread", "P4500 datasheet", *_P4500,
           (Job("r", "randread", 64, [0, 1, 2, 3], numjobs=4, ioengine="libaio"),), "read_kiops", "r", 490.0),
    Target("P4500 seq read 128K (KIOPS)", "P4500 datasheet", *_P4500,
           (Job("r", "read", 32, [0], bs_bytes=131072, ioengine="libaio"),), "read_kiops", "r", 24.41),
    # Sustained: measured after the 128 MiB write cache has filled (well under 0.5 s).
    Target("P4500 seq write 128K (KIOPS)", "P4500 datasheet", *_P4500,
           (Job("w", "write", 32, [0], bs_bytes=131072, ioengine="libaio"),), "write_kiops", "w", 8.011, runtime_s=1.0, ramp_s=0.5),
)


def measure(target: Target, seed: int = 1) -> float:
    config = testbed_config(target.host, target.device, target.jobs, target.runtime_s, target.ramp_s,
                            file="iosched.papers.calibration_targets", seed=seed, ssds=target.ssds,
                            device_options=dict(target.device_options), scheduler=target.scheduler,
                            tunables=target.tunables)
    result = native.simulate(config)
    if target.metric in RUN_METRICS:
        return RUN_METRICS[target.metric](result)
    job = next(j for j in result["jobs"] if j["name"] == target.job)
    return METRICS[target.metric](job)


def main() -> None:
    print(f"| {'target':28} | {'source':18} | {'paper':>8} | {'iosched':>8} | {'ratio':>6} |")
    print(f"|{'-' * 30}|{'-' * 20}|{'-' * 10}|{'-' * 10}|{'-' * 8}|")
    for target in TARGETS:
        value = measure(target)
        ratio = value / target.paper_value
        flag = "" if abs(ratio - 1) <= target.tolerance else "  OUT"
        print(f"| {target.name:28} | {target.source:18} | {target.paper_value:8.1f} | {value:8.1f} | {ratio:6.3f} |{flag}")


if __name__ == "__main__":
    main()
