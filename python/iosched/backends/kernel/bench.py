"""Measurements of the kernel backend (root; a test device such as `iosched device create-loop --size 4G`).

    python -m iosched.backends.kernel.bench overhead --device /dev/loopN [--pairs 5] [--duration 10s]
    python -m iosched.backends.kernel.bench table RESULTS_DIR

``overhead``: the same 4 KiB random-read QD 32 job, alternately through `iosched run --backend kernel` and by
hand (`fio` on the job file iosched generated, scheduler none either way), in pairs whose order alternates so
drift on a shared machine falls on both sides; prints each run's IOPS and the mean ratio.
``table``: a markdown table of a results folder (per scheduler and job: mean, min-max of IOPS and P99), as in
docs/kernel-backend.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SPEC = """\
name = "overhead"
duration = "{duration}"
ramp = "1s"
scheduler = {{ name = "none" }}
[[job]]
name = "rr"
rw = "randread"
bs = "4k"
iodepth = 32
"""


OWN_CPU: list[tuple[float, float]] = []     # (iosched's CPU seconds while fio ran, fio's wall seconds)


def _iosched_run(spec: Path, device: str, out: Path) -> tuple[float, Path]:
    r = subprocess.run([sys.executable, "-m", "iosched.cli", "run", str(spec), "--backend", "kernel", "--device",
                        device, "--out", str(out), "--no-report"], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"iosched run failed: {r.stderr}")
    import pyarrow.parquet as pq

    (row,) = pq.read_table(out / "results.parquet").to_pylist()
    meta = json.loads((out / "runs" / row["run_id"] / "spec.json").read_text())
    OWN_CPU.append((meta["iosched_cpu_s_during_fio"], meta["fio_wall_s"]))
    return row["read_iops"], out / "runs" / row["run_id"]


def _by_hand(rundir: Path, work: Path) -> float:
    if work.exists():
        shutil.rmtree(work)
    (work / "logs").mkdir(parents=True)
    shutil.copy(rundir / "jobs.fio", work / "jobs.fio")
    argv = json.loads((rundir / "spec.json").read_text())["fio"]["argv"]
    r = subprocess.run(["fio", *argv], cwd=work, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"fio failed: {r.stdout} {r.stderr}")
    doc = json.loads((work / "fio.json").read_text())
    return sum(j["read"]["iops"] for j in doc["jobs"])


def overhead(device: str, pairs: int, duration: str) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="iosched-overhead-"))
    spec = tmp / "overhead.toml"
    spec.write_text(SPEC.format(duration=duration))
    queue = Path("/sys/block") / os.path.basename(os.path.realpath(device)) / "queue" / "scheduler"
    a, b = [], []
    rundir = None
    print(f"| pair | order | iosched IOPS | by hand IOPS |\n|---|---|---|---|")
    for i in range(pairs):
        order = ("iosched", "hand") if i % 2 == 0 else ("hand", "iosched")
        got = {}
        for who in order:
            if who == "iosched":
                # a folder per pair: a re-run into the same folder would skip the finished run
                got[who], rundir = _iosched_run(spec, device, tmp / f"out-{i}")
            else:
                if rundir is None:     # the first pair starts by hand: iosched must have made the job file
                    _, rundir = _iosched_run(spec, device, tmp / "warm")
                before = queue.read_text()
                queue.write_text("none")
                try:
                    got[who] = _by_hand(rundir, tmp / "hand")
                finally:
                    sched = before.split("[")[1].split("]")[0]
                    queue.write_text(sched)
        a.append(got["iosched"])
        b.append(got["hand"])
        print(f"| {i + 1} | {' then '.join(order)} | {got['iosched']:,.0f} | {got['hand']:,.0f} |")
    ratio = statistics.mean(a) / statistics.mean(b)
    print(f"\niosched {statistics.mean(a):,.0f} ± {statistics.stdev(a) if len(a) > 1 else 0:,.0f} IOPS, "
          f"by hand {statistics.mean(b):,.0f} ± {statistics.stdev(b) if len(b) > 1 else 0:,.0f} IOPS: "
          f"iosched / by hand = {ratio:.3f}; per pair: " + ", ".join(f"{x / y:.3f}" for x, y in zip(a, b)))
    ratios = [x / y for x, y in zip(a, b)]
    if len(ratios) > 1:
        half = 1.96 * statistics.stdev(ratios) / len(ratios) ** 0.5
        print(f"mean of the pair ratios {statistics.mean(ratios):.3f} ± {half:.3f} (95% interval)")
    cpu = sum(c for c, _ in OWN_CPU)
    wall = sum(w for _, w in OWN_CPU)
    print(f"iosched's own CPU while fio ran: {cpu * 1e3:.0f} ms in {wall:.1f} s = {100 * cpu / wall:.2f}% of one "
          "core (sampler and waiting for fio)")
    shutil.rmtree(tmp, ignore_errors=True)


def table(results: str) -> None:
    """Per experiment, scheduler and job: the mean over the runs in the folder (e.g. one per --seed), with the
    smallest and largest value, of IOPS and P99 per direction."""
    import pyarrow.parquet as pq

    rows = pq.read_table(Path(results) / "results.parquet").to_pylist()
    order = {"none": 0, "mq-deadline": 1, "kyber": 2, "bfq": 3}
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["experiment"], order.get(r["scheduler"], 9), r["scheduler"], r["job"]), []).append(r)

    def cell(rs, col, scale, unit):
        vals = [r[col] / scale for r in rs]
        if not any(vals):
            return "-"
        return f"{statistics.mean(vals):,.0f}{unit} ({min(vals):,.0f}-{max(vals):,.0f})"

    print("| experiment | scheduler | job | runs | read IOPS | read P99 (µs) | write IOPS | write P99 (µs) |")
    print("|---|---|---|---|---|---|---|---|")
    for (exp, _, sched, job), rs in sorted(groups.items()):
        print(f"| {exp} | {sched} | {job} | {len(rs)} | {cell(rs, 'read_iops', 1, '')} | "
              f"{cell(rs, 'read_clat_p99_ns', 1e3, '')} | {cell(rs, 'write_iops', 1, '')} | "
              f"{cell(rs, 'write_clat_p99_ns', 1e3, '')} |")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m iosched.backends.kernel.bench")
    sub = ap.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("overhead")
    o.add_argument("--device", required=True)
    o.add_argument("--pairs", type=int, default=5)
    o.add_argument("--duration", default="10s")
    t = sub.add_parser("table")
    t.add_argument("results")
    args = ap.parse_args(argv)
    if args.cmd == "overhead":
        overhead(args.device, args.pairs, args.duration)
    else:
        table(args.results)


if __name__ == "__main__":
    main()
