"""Findings the simulator foundation must produce without further fitting (issue 2), under the `none` scheduler.

- Seed 003's baseline table on the Samsung 980 PRO: the mixed read/write rows (the single-workload rows are
  calibration inputs and live in iosched.papers.calibration_targets).
- Seed 000 F1 (Fig. 1c, O-3): 10 cores, 8 SSDs, 10 T-4KiB-apps under none: ~3.4 MIOPS with every core busy.
- Seed 000 F6 (Fig. 2), the none curve: one process on one core, QD 1 -> 256: P99 77-79 us at QD 1, ~807 us at
  QD 256, CPU-bound from QD ~32.

`python -m iosched.papers.foundation` prints paper vs simulated; tests check the shapes the issue names.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import native
from ..results import METRICS
from ..simconfig import Job, testbed_config

HOST, DEVICE = "xeon-silver-4210r-10c", "samsung-980pro-1tb"


@dataclass(frozen=True)
class Row:
    label: str
    source: str
    jobs: tuple[Job, ...]
    ssds: int = 1
    runtime_s: float = 1.0
    ramp_s: float = 2.0  # past the write buffer's fill, as in a long fio run on a preconditioned drive
    # Paper values: (job, metric) -> value
    paper: tuple[tuple[str, str, float], ...] = ()


R, W = "randread", "randwrite"
SEED003 = "seed 003 baseline"
ROWS: tuple[Row, ...] = (
    Row("R1+W1", SEED003, (Job("r", R, 1, [0]), Job("w", W, 1, [1])),
        paper=(("r", "read_kiops", 4.0), ("r", "read_p99_us", 1879), ("w", "write_kiops", 65.0))),
    Row("R1+W256", SEED003, (Job("r", R, 1, [0]), Job("w", W, 256, [1])),
        paper=(("r", "read_kiops", 0.3), ("r", "read_p99_us", 15218))),
    Row("R256+W1", SEED003, (Job("r", R, 256, [0]), Job("w", W, 1, [1])),
        paper=(("r", "read_kiops", 302.6), ("r", "read_p99_us", 3044))),
    Row("R256+W256", SEED003, (Job("r", R, 256, [0]), Job("w", W, 256, [1])),
        paper=(("r", "read_kiops", 83.2), ("w", "write_kiops", 93.1), ("r", "read_p99_us", 15300))),
    Row("F1: 10 apps, 8 SSDs", "seed 000 Fig. 1c", (Job("t", R, 128, list(range(10)), numjobs=10),), ssds=8,
        runtime_s=0.5, ramp_s=0.05, paper=(("t", "read_kiops", 3420.0),)),
    *(Row(f"F6 none QD{qd}", "seed 000 Fig. 2", (Job("r", R, qd, [0]),), runtime_s=0.3, ramp_s=0.05,
          paper={1: (("r", "read_p99_us", 78.0),), 256: (("r", "read_p99_us", 807.0),)}.get(qd, ()))
      for qd in (1, 8, 32, 64, 128, 256)),
)


def run(row: Row, seed: int = 1) -> dict:
    """Simulate a row; returns the SimResult dict."""
    return native.simulate(testbed_config(HOST, DEVICE, row.jobs, row.runtime_s, row.ramp_s,
                                          file="iosched.papers.foundation", seed=seed, ssds=row.ssds))


def metric(result: dict, job: str, name: str) -> float:
    return METRICS[name](next(j for j in result["jobs"] if j["name"] == job))


def cores_busy(result: dict) -> float:
    """Cores' busy time over the window, in cores (10.0 = all ten busy)."""
    return sum(c["busy_ns"] for c in result["cores"]) / result["window_ns"]


def main() -> None:
    print(f"| {'row':22} | {'source':17} | {'metric':16} | {'paper':>8} | {'iosched':>8} | cores busy |")
    print(f"|{'-' * 24}|{'-' * 19}|{'-' * 18}|{'-' * 10}|{'-' * 10}|{'-' * 12}|")
    for row in ROWS:
        result = run(row)
        shown = row.paper or tuple((j.name, "read_kiops", float("nan")) for j in row.jobs[:1])
        for job, name, paper in shown:
            value = metric(result, job, name)
            print(f"| {row.label:22} | {row.source:17} | {job + '.' + name:16} | {paper:8.1f} | {value:8.1f} "
                  f"| {cores_busy(result):10.1f} |")


if __name__ == "__main__":
    main()
