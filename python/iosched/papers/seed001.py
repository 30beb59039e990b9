"""Seed 001 (Kyber-fairness, Son, Oh and Ahn): proportional sharing among cgroups on the P4500 testbed.

Every run uses the seed-001 presets (2x-e5-2620-16c, intel-p4500-2tb) and the paper's fio setup (Table 2): libaio,
QD 32, direct I/O, one 10 GiB region per cgroup, 4 cgroups of 4 processes with weights 100, 250, 500 and 1000,
set through fio's own `cgroup` and `cgroup_weight` options. Processes are not pinned (fio's default). No preset
parameter depends on the experiment. Each finding function returns `Check` rows: the paper's value, the simulated
one, and whether the finding's shape holds by the criterion written next to it, fixed before measuring.
`python -m iosched.papers.seed001 [FINDING...]` prints the table; tests assert the shapes that hold.

The fairness index (FI) is Jain's index of each cgroup's throughput divided by its weight: 1 when the throughput
is exactly proportional to the weights; 4 equal shares under these weights give 0.60.

KF4 replays the four LUNs of the sample SYSTOR '17 trace (`traces/systor17-vdi-4lun.csv`, synthetic, shaped after
Table 4), one LUN per cgroup, with fio's trace replay instead of trace-replay (Table 3).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from ..fiojob import DeviceInfo, JobContext, RawJob, resolve_job
from ..presets import load_preset
from ..replay import traces_dir
from .seed000 import Check

HOST, DEVICE = "2x-e5-2620-16c", "intel-p4500-2tb"
WEIGHTS = (100, 250, 500, 1000)
THREADS, QD = 4, 32
REGION = 10 << 30  # Table 2: a 10 GB file per job


@dataclass(frozen=True)
class Cgroup:
    """One cgroup: a fio job of `numjobs` processes in it."""
    name: str
    weight: int
    rw: str
    bs: str
    numjobs: int = THREADS
    rwmixread: int = 50

    def io_options(self) -> dict[str, Any]:
        """The fio options that say what the job's processes do."""
        options: dict[str, Any] = {"rw": self.rw, "bs": self.bs}
        if self.rw == "randrw":
            options["rwmixread"] = self.rwmixread
        return options


TRACE = "systor17-vdi-4lun.csv"
LUNS = (0, 1, 2, 3)


@dataclass(frozen=True)
class TraceCgroup:
    """One cgroup replaying one LUN of a trace without timing (fio's `replay_no_stall`), again from its start
    whenever it ends (`time_based`): `numjobs` processes, each replaying the whole LUN (fio's way; seed 001's
    trace-replay tool shares one pass among its threads, which for these uniformly random samples issues the same
    mix)."""
    name: str
    weight: int
    lun: int
    numjobs: int = THREADS

    def io_options(self) -> dict[str, Any]:
        return {"read_iolog": str(traces_dir() / TRACE), "replay_lun": self.lun, "replay_no_stall": 1,
                "time_based": 1}


def cgroups(rw: str, bs: str, n: int = 4) -> list[Cgroup]:
    """n cgroups with the paper's weights (repeated in turn beyond four)."""
    return [Cgroup(f"cg{i}", WEIGHTS[i % len(WEIGHTS)], rw, bs) for i in range(n)]


def simulate(groups: Iterable[Cgroup | TraceCgroup], scheduler: str, *, runtime_s: float, ramp_s: float, seed: int = 1,
             tunables: Iterable[tuple[str, int]] = ()) -> dict[str, Any]:
    """One simulated fio run on the seed-001 testbed, jobs resolved from fio options; returns the SimResult dict."""
    from .. import _native

    host = dict(load_preset("host", HOST).params)
    device = dict(load_preset("device", DEVICE).params)
    device["name"] = "/dev/nvme0n1"
    context = JobContext(devices=[DeviceInfo(device["name"], device["capacity_bytes"], device["logical_block_bytes"])],
                         cores=host["cores"], default_runtime_ns=int(runtime_s * 1e9),
                         default_ramp_ns=int(ramp_s * 1e9), default_time_based=True)
    jobs = []
    for i, g in enumerate(groups):
        options = {**g.io_options(), "iodepth": QD, "numjobs": g.numjobs, "ioengine": "libaio", "direct": 1,
                   "cgroup": g.name, "cgroup_weight": g.weight, "size": REGION, "offset": i * REGION}
        jobs.append(resolve_job(RawJob(g.name, options, file="iosched.papers.seed001", label=f'job "{g.name}"',
                                       origin="toml"), context).config)
    config = {"seed": seed, "host": host, "devices": [device],
              "scheduler": {"name": scheduler, "tunables": [[k, int(v)] for k, v in tunables], "nr_requests": None},
              "sample_interval_ns": 100_000_000, "jobs": jobs}
    return json.loads(_native.simulate(json.dumps(config)))


def throughputs(result: dict) -> list[float]:
    """MB/s (10^6 bytes) per job, reads and writes together."""
    return [(j["read"]["bytes"] + j["write"]["bytes"]) / (j["window_ns"] / 1e9) / 1e6 for j in result["jobs"]]


def fairness_index(mbs: list[float], weights: Iterable[int]) -> float:
    """Jain's index of throughput / weight."""
    x = [m / w for m, w in zip(mbs, weights)]
    return sum(x) ** 2 / (len(x) * sum(v * v for v in x)) if any(x) else 0.0


@dataclass(frozen=True)
class Run:
    mbs: list[float]
    fi: float

    @property
    def total(self) -> float:
        return sum(self.mbs)


def measure(groups: list[Cgroup] | list[TraceCgroup], scheduler: str, runtime_s: float, ramp_s: float) -> Run:
    mbs = throughputs(simulate(groups, scheduler, runtime_s=runtime_s, ramp_s=ramp_s))
    return Run(mbs, fairness_index(mbs, [g.weight for g in groups]))


def ratio_ok(sim: float, paper: float, tolerance: float) -> bool:
    return abs(sim / paper - 1) <= tolerance


def shares(run: Run) -> str:
    return "/".join(f"{m:.0f}" for m in run.mbs)


# (runtime, ramp) in simulated seconds per workload, the same for every scheduler. BFQ serves one queue at a time
# for up to 125 ms (timeout_sync), so a window of 1 s spans several of its rounds over the 16 queues; Kyber-fairness
# settles within a few 100 ms periods. The fresh P4500 takes writes into its 128 MiB buffer at first, so the ramp
# also lets the buffer fill and the flash set the pace. 1 MiB requests at QD 32 x 16 take ~100-200 ms each, hence
# the longer ramp for the sequential workloads.
TIMES = {"randread": (1.0, 0.5), "randwrite": (1.0, 0.5), "randrw": (1.0, 0.5), "read": (1.5, 1.0),
         "write": (1.5, 1.0), "trace": (1.0, 0.5)}


# ---------------------------------------------------------------- KF1: BFQ shares, but slowly (Fig. 1)

def kf1_runs(times: dict[str, tuple[float, float]] = TIMES) -> dict[str, Run]:
    runtime, ramp = times["randrw"]
    return {s: measure(cgroups("randrw", "4k"), s, runtime, ramp) for s in ("none", "bfq")}


def kf1(runs: dict[str, Run] | None = None) -> list[Check]:
    runs = runs or kf1_runs()
    none, bfq = runs["none"], runs["bfq"]
    return [
        # Criterion: within 20% of the paper's ratio.
        Check("KF1", "BFQ total / none, 4 KiB random 50% reads", "0.38", f"{bfq.total / none.total:.2f}",
              ratio_ok(bfq.total / none.total, 0.38, 0.20)),
        # Criterion: Jain's index of throughput/weight >= 0.95.
        Check("KF1", "BFQ shares by weight (FI)", "by weight", f"FI {bfq.fi:.3f} ({shares(bfq)} MB/s)",
              bfq.fi >= 0.95),
        # Criterion: every cgroup within 10% of the mean.
        Check("KF1", "none ignores weights", "equal shares", f"FI {none.fi:.3f} ({shares(none)} MB/s)",
              max(abs(m / (none.total / 4) - 1) for m in none.mbs) <= 0.10),
        Check("KF1", "BFQ's weight-1000 cgroup below every cgroup under none", "yes",
              f"{bfq.mbs[3]:.0f} vs min {min(none.mbs):.0f} MB/s", bfq.mbs[3] < min(none.mbs)),
    ]


# ---------------------------------------------------------------- KF2: four fio workloads (Fig. 4)

KF2_WORKLOADS = (("randread", "4k", "random read"), ("randwrite", "4k", "random write"),
                 ("read", "1m", "sequential read"), ("write", "1m", "sequential write"))
KF2_PAPER_GAIN = {"randread": 2.68, "randwrite": 3.61}


def kf2_runs(workloads: Iterable[str] = tuple(w for w, _, _ in KF2_WORKLOADS),
             times: dict[str, tuple[float, float]] = TIMES) -> dict[str, dict[str, Run]]:
    out = {}
    for rw, bs, _ in KF2_WORKLOADS:
        if rw in workloads:
            runtime, ramp = times[rw]
            out[rw] = {s: measure(cgroups(rw, bs), s, runtime, ramp) for s in ("none", "kyber-fairness", "bfq")}
    return out


def kf2(runs: dict[str, dict[str, Run]] | None = None) -> list[Check]:
    runs = runs or kf2_runs()
    out = []
    for rw, _, label in KF2_WORKLOADS:
        if rw not in runs:
            continue
        none, kf, bfq = runs[rw]["none"], runs[rw]["kyber-fairness"], runs[rw]["bfq"]
        # Criterion: Kyber-fairness within 10% of none.
        out.append(Check("KF2", f"{label}: Kyber-fairness / none", "close to 1",
                         f"{kf.total / none.total:.2f} ({kf.total:.0f} / {none.total:.0f} MB/s)",
                         kf.total >= 0.9 * none.total))
        gain = kf.total / bfq.total
        if rw in KF2_PAPER_GAIN:
            # Criterion: within 20% of the paper's gain.
            out.append(Check("KF2", f"{label}: Kyber-fairness / BFQ", f"{KF2_PAPER_GAIN[rw]:.2f}",
                             f"{gain:.2f} (BFQ {bfq.total:.0f} MB/s)", ratio_ok(gain, KF2_PAPER_GAIN[rw], 0.20)))
        else:
            # Criterion: "not impressive": below 1.3x.
            out.append(Check("KF2", f"{label}: Kyber-fairness / BFQ", "small gain",
                             f"{gain:.2f} (BFQ {bfq.total:.0f} MB/s)", gain < 1.3))
        # Criterion: Kyber-fairness FI >= 0.95 and not below BFQ's (by more than 0.01).
        out.append(Check("KF2", f"{label}: FI Kyber-fairness, BFQ", "close to 1, above BFQ",
                         f"{kf.fi:.3f}, {bfq.fi:.3f} ({shares(kf)} MB/s)", kf.fi >= 0.95 and kf.fi >= bfq.fi - 0.01))
    return out


# ---------------------------------------------------------------- KF3: more cgroups, 1 KiB random reads (Fig. 6)

KF3_CGROUPS = (1, 2, 4, 8, 12, 16)


def kf3_runs(counts: Iterable[int] = KF3_CGROUPS,
             times: dict[str, tuple[float, float]] = TIMES) -> dict[str, list[tuple[int, Run]]]:
    """Per scheduler: (cgroups, run) with 1 KiB random reads, 4 processes per cgroup."""
    runtime, ramp = times["randread"]
    return {s: [(n, measure(cgroups("randread", "1k", n), s, runtime, ramp)) for n in counts]
            for s in ("none", "kyber-fairness", "bfq")}


def kf3(runs: dict[str, list[tuple[int, Run]]] | None = None) -> list[Check]:
    runs = runs or kf3_runs()
    none, kf, bfq = (runs[s] for s in ("none", "kyber-fairness", "bfq"))
    curve = lambda rs: " / ".join(f"{r.total:.0f}" for _, r in rs)  # noqa: E731
    counts = "/".join(str(n) for n, _ in none)
    worst = min(k.total / n.total for (_, k), (_, n) in zip(kf, none))
    return [
        # Criterion: Kyber-fairness within 10% of none at every count.
        Check("KF3", f"Kyber-fairness / none, {counts} cgroups (worst)", "close to 1",
              f"{worst:.2f} (MB/s {curve(kf)} vs {curve(none)})", worst >= 0.9),
        # Criterion: a sharp fall: BFQ at the most cgroups below 60% of BFQ with one.
        Check("KF3", f"BFQ, {counts} cgroups (MB/s)", "falls sharply",
              f"{curve(bfq)} (FI at {none[-1][0]}: Kyber-fairness {kf[-1][1].fi:.3f}, BFQ {bfq[-1][1].fi:.3f})",
              bfq[-1][1].total < 0.6 * bfq[0][1].total),
    ]


# ---------------------------------------------------------------- KF4: trace replay (Fig. 5)

def lun_cgroups(highest: int) -> list[TraceCgroup]:
    """The four LUNs as four cgroups, LUN `highest` with weight 1000. Fig. 5 gives each LUN in turn the highest
    weight; which weights the others get it does not say. Named assumption: the weights turn with it, the LUN after
    the highest gets 100, the next 250, the next 500 (LUN3 highest: 100, 250, 500, 1000 in LUN order)."""
    weight = {(highest + 1 + j) % len(LUNS): w for j, w in enumerate(WEIGHTS)}
    return [TraceCgroup(f"lun{lun}", weight[lun], lun) for lun in LUNS]


def kf4_runs(highest: Iterable[int] = LUNS,
             times: dict[str, tuple[float, float]] = TIMES) -> dict[str, dict[int, Run]]:
    """Per scheduler, per LUN given the highest weight: the run. none ignores weights, so one run of it serves every
    weighting (each with its own FI)."""
    runtime, ramp = times["trace"]
    highest = list(highest)
    none = throughputs(simulate(lun_cgroups(highest[0]), "none", runtime_s=runtime, ramp_s=ramp))
    out: dict[str, dict[int, Run]] = {"none": {}, "kyber-fairness": {}, "bfq": {}}
    for h in highest:
        weights = [g.weight for g in lun_cgroups(h)]
        out["none"][h] = Run(none, fairness_index(none, weights))
        for s in ("kyber-fairness", "bfq"):
            out[s][h] = measure(lun_cgroups(h), s, runtime, ramp)
    return out


def kf4(runs: dict[str, dict[int, Run]] | None = None) -> list[Check]:
    """KF4 (Fig. 5; Tables 3 and 4): four SYSTOR '17 LUN traces, one per cgroup, each replayed by 4 threads at QD 32
    without timing, each LUN in turn given the highest weight: Kyber-fairness up to 1.33x BFQ's throughput, the gap
    narrowest when LUN3 has the highest weight, and a slightly better FI than BFQ."""
    runs = runs or kf4_runs()
    none, kf, bfq = (runs[s] for s in ("none", "kyber-fairness", "bfq"))
    order = list(kf)
    gains = {h: kf[h].total / bfq[h].total for h in order}
    per = lambda values: " / ".join(values)  # noqa: E731
    luns = "/".join(f"LUN{h}" for h in order)
    kf_fi = sum(kf[h].fi for h in order) / len(order)
    bfq_fi = sum(bfq[h].fi for h in order) / len(order)
    worst = min(kf[h].total / none[h].total for h in order)
    out = [
        # Criterion: the largest gain within 20% of the paper's 1.33.
        Check("KF4", f"Kyber-fairness / BFQ, {luns} highest", "up to 1.33",
              f"{per(f'{gains[h]:.2f}' for h in order)} (MB/s {per(f'{kf[h].total:.0f}' for h in order)} vs "
              f"{per(f'{bfq[h].total:.0f}' for h in order)})", ratio_ok(max(gains.values()), 1.33, 0.20)),
    ]
    if 3 in gains:
        # Criterion: the gain with LUN3 highest is the smallest of the four.
        out.append(Check("KF4", "gap narrowest with LUN3 highest", "yes",
                         f"{gains[3]:.2f} vs min of the others {min(g for h, g in gains.items() if h != 3):.2f}",
                         gains[3] <= min(gains.values())))
    out += [
        # Criterion: Kyber-fairness's mean FI over the weightings at least BFQ's.
        Check("KF4", f"FI Kyber-fairness, BFQ ({luns} highest; mean)", "Kyber-fairness slightly better",
              f"{per(f'{kf[h].fi:.3f}' for h in order)}, {per(f'{bfq[h].fi:.3f}' for h in order)} "
              f"({kf_fi:.3f}, {bfq_fi:.3f}; LUN{order[-1]} highest: {shares(kf[order[-1]])} MB/s)", kf_fi >= bfq_fi),
        # Criterion: as KF2, Kyber-fairness within 10% of none (every weighting).
        Check("KF4", "Kyber-fairness / none (worst)", "close to 1 for FIO (§V); Fig. 5 not stated",
              f"{worst:.2f} (none {none[order[0]].total:.0f} MB/s, FI {none[order[-1]].fi:.3f} "
              f"with LUN{order[-1]} highest)", worst >= 0.9),
    ]
    return out


FINDINGS: dict[str, Callable[[], list[Check]]] = {"kf1": kf1, "kf2": kf2, "kf3": kf3, "kf4": kf4}


def main(argv: list[str] | None = None) -> None:
    names = argv if argv else list(FINDINGS)
    unknown = [n for n in names if n not in FINDINGS]
    if unknown:
        sys.exit(f"unknown finding(s) {', '.join(unknown)}: expected {', '.join(FINDINGS)}")
    print("| finding | what | paper | iosched | holds? |")
    print("|---|---|---|---|---|")
    for name in names:
        for c in FINDINGS[name]():
            print(f"| {c.finding} | {c.what} | {c.paper} | {c.simulated} | {'yes' if c.holds else 'NO'} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
