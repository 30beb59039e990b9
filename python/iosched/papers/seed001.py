"""Seed 001 (Kyber-fairness, Son, Oh and Ahn): proportional sharing among cgroups on the P4500 testbed.

Every run uses the seed-001 presets (2x-e5-2620-16c, intel-p4500-2tb) and the paper's fio setup (Table 2): libaio,
QD 32, direct I/O, one 10 GiB region per cgroup, 4 cgroups of 4 processes with weights 100, 250, 500 and 1000,
set through fio's own `cgroup` and `cgroup_weight` options. Processes are not pinned (fio's default). No preset
parameter depends on the experiment. Each finding function returns `Check` rows: the paper's value, the simulated
one, and whether the finding's shape holds by the criterion written next to it, fixed before measuring.
The experiments at the bottom declare the runs of Figs. 1, 4, 5 and 6 (specs with sweeps), the paper's numbers,
the checks on the stored runs, and the figures in the paper's form; `iosched reproduce seed001` runs them, and
`python -m iosched.papers.seed001 [EXPERIMENT...]` runs them in --quick mode and prints the table. The `kfN_runs()`
functions simulate directly (for tests); tests assert the shapes that hold.

The fairness index (FI) is Jain's index of each cgroup's throughput divided by its weight: 1 when the throughput
is exactly proportional to the weights; 4 equal shares under these weights give 0.60.

KF4 replays the four LUNs of the sample SYSTOR '17 trace (`traces/systor17-vdi-4lun.csv`, synthetic, shaped after
Table 4), one LUN per cgroup, with fio's trace replay instead of trace-replay (Table 3).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Iterable

from .. import native
from ..replay import traces_dir
from ..report.figures import Figure, Panel, Table, Trace
from ..simconfig import fio_jobs, preset_params, sim_config
from .registry import Check, Number, PaperExperiment, Results, Series, one_row, register
from .scoring import within

SEED = "001"
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


def job_options(i: int, g: Cgroup | TraceCgroup) -> dict[str, Any]:
    """The fio options of cgroup number `i` (Table 2): libaio at QD 32, direct, its own 10 GiB region."""
    return {**g.io_options(), "iodepth": QD, "numjobs": g.numjobs, "ioengine": "libaio", "direct": 1,
            "cgroup": g.name, "cgroup_weight": g.weight, "size": REGION, "offset": i * REGION}


def simulate(groups: Iterable[Cgroup | TraceCgroup], scheduler: str, *, runtime_s: float, ramp_s: float, seed: int = 1,
             tunables: Iterable[tuple[str, int]] = ()) -> dict[str, Any]:
    """One simulated fio run on the seed-001 testbed, jobs resolved from fio options; returns the SimResult dict."""
    host, device = preset_params(HOST, DEVICE)
    jobs = fio_jobs(((g.name, job_options(i, g)) for i, g in enumerate(groups)), host, [device],
                    runtime_s=runtime_s, ramp_s=ramp_s, file="iosched.papers.seed001")
    return native.simulate(sim_config(seed=seed, host=host, devices=[device], jobs=jobs, scheduler=scheduler,
                                      tunables=tunables))


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


def ratio_ok(sim: float, paper: float) -> bool:
    """A number of the paper's holds within [0.8, 1.25] of it (scoring.BAND)."""
    return within(sim / paper)


def shares(run: Run) -> str:
    return "/".join(f"{m:.0f}" for m in run.mbs)


# (runtime, ramp) in simulated seconds per workload, the same for every scheduler. BFQ serves one queue at a time
# for up to 125 ms (timeout_sync), so a window of 1 s spans several of its rounds over the 16 queues; Kyber-fairness
# settles within a few 100 ms periods. The fresh P4500 takes writes into its 128 MiB buffer at first, so the ramp
# also lets the buffer fill and the flash set the pace. 1 MiB requests at QD 32 x 16 take ~100-200 ms each, hence
# the longer ramp for the sequential workloads.
TIMES = {"randread": (1.0, 0.5), "randwrite": (1.0, 0.5), "randrw": (1.0, 0.5), "read": (1.5, 1.0),
         "write": (1.5, 1.0), "trace": (1.0, 0.5)}


# Each finding is one row of the report (registry.one_row): it holds when every clause below holds. The clause
# functions (kf1 ... kf4) stay separate for the tests and for reading which clause fails.
KF1 = "4 cgroups, 4 KiB random 50% reads: BFQ shares by weight at ~0.38x none's throughput, none ignores weights"
KF2 = ("Kyber-fairness close to none for all four workloads, 2.68x / 3.61x BFQ for random read / write, a small gain "
       "for sequential ones, its FI close to 1 and above BFQ's")
KF3 = "1 KiB random reads over more cgroups: Kyber-fairness stays close to none, BFQ falls sharply"
KF4 = "four LUN traces, one per cgroup: Kyber-fairness up to 1.33x BFQ's throughput, with a slightly better FI"


# ---------------------------------------------------------------- KF1: BFQ shares, but slowly (Fig. 1)

def kf1_runs(times: dict[str, tuple[float, float]] = TIMES) -> dict[str, Run]:
    runtime, ramp = times["randrw"]
    return {s: measure(cgroups("randrw", "4k"), s, runtime, ramp) for s in ("none", "bfq")}


def kf1(runs: dict[str, Run] | None = None) -> list[Check]:
    runs = runs or kf1_runs()
    none, bfq = runs["none"], runs["bfq"]
    return [
        # Criterion: within [0.8, 1.25] of the paper's ratio.
        Check("KF1", "BFQ total / none, 4 KiB random 50% reads", "0.38", f"{bfq.total / none.total:.2f}",
              ratio_ok(bfq.total / none.total, 0.38), 0.38, bfq.total / none.total),
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
            # Criterion: within [0.8, 1.25] of the paper's gain.
            out.append(Check("KF2", f"{label}: Kyber-fairness / BFQ", f"{KF2_PAPER_GAIN[rw]:.2f}",
                             f"{gain:.2f} (BFQ {bfq.total:.0f} MB/s)", ratio_ok(gain, KF2_PAPER_GAIN[rw]),
                             KF2_PAPER_GAIN[rw], gain))
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
        # Criterion: the largest gain within [0.8, 1.25] of the paper's 1.33.
        Check("KF4", f"Kyber-fairness / BFQ, {luns} highest", "up to 1.33",
              f"{per(f'{gains[h]:.2f}' for h in order)} (MB/s {per(f'{kf[h].total:.0f}' for h in order)} vs "
              f"{per(f'{bfq[h].total:.0f}' for h in order)})", ratio_ok(max(gains.values()), 1.33), 1.33,
              max(gains.values())),
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


# ================================================================ the paper experiments (Figs. 1, 4, 5, 6)

# --quick: shorter windows, long enough for the shapes (a few Kyber-fairness periods and BFQ rounds). KF1 (randrw)
# keeps the full window: fio's processes have no ioprio, so BFQ gives their queues weight 40 and weight-raises them
# at first, and its total over none falls from 0.46 (0.3 s after a 0.2 s ramp) to 0.45 (0.6 s), 0.43 (1 s) and 0.43
# (2 s, 4 s), the weight-1000 cgroup from 351 to 338, 340, 326 and 325 MB/s (none: 348-349). BFQ is lock-bound
# there too: with each dispatch call booked where the queue runs, 0.3 s (about two of BFQ's 125 ms rounds) left
# KF1's fairness index at 0.88 (0.97 at 0.4 s, 0.99 in full mode).
QUICK_TIMES = {"randread": (0.4, 0.3), "randwrite": (0.4, 0.4), "randrw": (1.0, 0.5), "read": (0.8, 0.8),
               "write": (0.8, 0.8), "trace": (0.3, 0.2)}
SCHEDULERS = ("none", "kyber-fairness", "bfq")


def _spec_job(i: int, g: Cgroup | TraceCgroup) -> dict[str, Any]:
    options = job_options(i, g)
    if "read_iolog" in options:
        options["read_iolog"] = TRACE  # a shipped sample, found by name (the spec does not depend on the checkout)
    return {"name": g.name, **options}


def _spec(groups: list[Cgroup] | list[TraceCgroup], kind: str, schedulers: Iterable[str]) -> dict[str, Any]:
    """The seed-001 testbed spec (the TOML `iosched run` reads, as a dict): one job per cgroup, every scheduler."""
    runtime, ramp = TIMES[kind]
    schedulers = list(schedulers)
    return {"duration": f"{runtime:g}s", "ramp": f"{ramp:g}s", "ramp_end": "nominal", "repeat": 3, "seed": 1,
            "host": {"preset": HOST},
            "devices": [{"preset": DEVICE}], "scheduler": {"name": schedulers[0]},
            "job": [_spec_job(i, g) for i, g in enumerate(groups)],
            **({"sweep": {"scheduler.name": schedulers}} if len(schedulers) > 1 else {})}


def _series(name: str, groups: list[Cgroup] | list[TraceCgroup], kind: str,
            schedulers: Iterable[str] = SCHEDULERS) -> Series:
    runtime, ramp = QUICK_TIMES[kind]
    return Series(name, _spec(groups, kind, schedulers), quick={"duration": f"{runtime:g}s", "ramp": f"{ramp:g}s"})


def stored_run(res: Results, series: str, scheduler: str, weights: Iterable[int]) -> Run:
    """A Run from the stored repetitions: each cgroup's mean MB/s, and the FI of those means."""
    point = {"scheduler.name": scheduler} if res.values(series, "scheduler.name") else {}
    per_rep = [throughputs(r) for r in res.results(series, point)]
    mbs = [sum(col) / len(col) for col in zip(*per_rep)]
    return Run(mbs, fairness_index(mbs, list(weights)))


def _cg_labels(groups: list[Cgroup] | list[TraceCgroup]) -> list[str]:
    return [f"{g.name} ({g.weight})" for g in groups]


# ---------------------------------------------------------------- Fig. 1: BFQ shares, but slowly (KF1)

def _fig1_runs(res: Results) -> dict[str, Run]:
    weights = [g.weight for g in cgroups("randrw", "4k")]
    return {s: stored_run(res, "randrw", s, weights) for s in ("none", "bfq")}


def fig1_figures(res: Results) -> list[Figure]:
    runs = _fig1_runs(res)
    cats = _cg_labels(cgroups("randrw", "4k"))
    return [Figure("seed001-fig01", "Fig. 1", "none and BFQ, four weighted cgroups, 4 KiB random 50% reads", [
        Panel("(a) throughput per cgroup (weight)", "bars", [Trace(s, cats, runs[s].mbs) for s in ("none", "bfq")],
              xlabel="cgroup (weight)", ylabel="MB/s", xcategories=cats),
        Panel("(b) total throughput / none", "bars", [
            Trace("iosched", ["none", "bfq"], [1.0, runs["bfq"].total / runs["none"].total], color="#4c72b0"),
            Trace("paper", ["none", "bfq"], [1.0, 0.38], paper=True)], ylabel="relative to none",
            xcategories=["none", "bfq"])],
        caption="Paper: none ignores the weights, BFQ shares by weight but reaches ~0.38x none's total, its "
        "weight-1000 cgroup below every cgroup under none. Hatched: the paper.")]


FIG1 = PaperExperiment(
    name="seed001-bfq", seed=SEED, title="BFQ's proportional sharing and its cost", refs=("Fig. 1",),
    description="Four cgroups of 4 processes (weights 100, 250, 500, 1000), fio libaio QD 32, direct, 4 KiB random "
    "I/O with 50% reads; none and BFQ.",
    series=(_series("randrw", cgroups("randrw", "4k"), "randrw", ("none", "bfq")),),
    quick={"repeat": 1}, checks=lambda res: [one_row("KF1", KF1, kf1(_fig1_runs(res)))], figures=fig1_figures,
    paper=(Number("§III, Fig. 1", "BFQ's aggregate throughput / none's", 0.38),
           Number("§III, Fig. 1", "BFQ's weight-1000 cgroup vs every cgroup under none", "lower"),
           Number("§III, Fig. 1", "shares: none / BFQ", "ignores weights / by weight")),
    notes=("Runs are 1 s after a 0.5 s ramp (the paper: 60 s); BFQ serves one queue for up to 125 ms, so the window "
           "spans several of its rounds.",),
)


# ---------------------------------------------------------------- Fig. 4: four fio workloads (KF2)

def _fig4_runs(res: Results) -> dict[str, dict[str, Run]]:
    return {rw: {s: stored_run(res, rw, s, WEIGHTS) for s in SCHEDULERS} for rw, _, _ in KF2_WORKLOADS}


def fig4_figures(res: Results) -> list[Figure]:
    runs = _fig4_runs(res)
    cats = [label.replace("random", "rand.").replace("sequential", "seq.") for _, _, label in KF2_WORKLOADS]
    rws = [rw for rw, _, _ in KF2_WORKLOADS]
    return [Figure("seed001-fig04", "Fig. 4", "Four cgroups with synthetic workloads", [
        Panel("(a) total I/O throughput", "bars", [Trace(s, cats, [runs[rw][s].total for rw in rws])
                                                   for s in SCHEDULERS], ylabel="MB/s", xcategories=cats),
        Panel("(b) fairness index", "bars", [Trace(s, cats, [runs[rw][s].fi for rw in rws]) for s in SCHEDULERS],
              ylabel="FI", xcategories=cats),
        Panel("(c) Kyber-fairness / BFQ", "bars", [
            Trace("iosched", cats, [runs[rw]["kyber-fairness"].total / runs[rw]["bfq"].total for rw in rws],
                  color="#4c72b0"),
            Trace("paper", cats[:2], [KF2_PAPER_GAIN[rw] for rw in rws[:2]], paper=True)],
            ylabel="throughput ratio", xcategories=cats)],
        caption="Paper: Kyber-fairness close to none for every workload, 2.68x BFQ for random reads and 3.61x for "
        "random writes, little gain for sequential ones; FI close to 1. Random: 4 KiB, sequential: 1 MiB.")]


def fig4_tables(res: Results) -> list[Table]:
    runs = _fig4_runs(res)
    rows = [[label, s, f"{runs[rw][s].total:,.0f}", f"{runs[rw][s].fi:.3f}", shares(runs[rw][s])]
            for rw, _, label in KF2_WORKLOADS for s in SCHEDULERS]
    return [Table("seed001-fig04", "Fig. 4", "Throughput and shares per workload and scheduler",
                  ["workload", "scheduler", "total MB/s", "FI", "MB/s per cgroup (weights 100/250/500/1000)"], rows)]


FIG4 = PaperExperiment(
    name="seed001-fio", seed=SEED, title="Kyber-fairness, BFQ and none on four fio workloads", refs=("Fig. 4",),
    description="Four cgroups of 4 processes (weights 100, 250, 500, 1000), fio libaio QD 32, direct: 4 KiB random "
    "read and write, 1 MiB sequential read and write; none, Kyber-fairness, BFQ.",
    series=tuple(_series(rw, cgroups(rw, bs), rw) for rw, bs, _ in KF2_WORKLOADS),
    quick={"repeat": 1}, checks=lambda res: [one_row("KF2", KF2, kf2(_fig4_runs(res)))], figures=fig4_figures,
    tables=fig4_tables,
    paper=(Number("§V, Fig. 4a", "Kyber-fairness / BFQ: random read / random write", "2.68x / 3.61x"),
           Number("§V, Fig. 4a", "Kyber-fairness vs none, every workload", "close"),
           Number("§V, Fig. 4a", "Kyber-fairness / BFQ, sequential", "not impressive"),
           Number("§V, Fig. 4b", "Kyber-fairness FI", "close to 1"),
           Number("Table 2", "fio: engine; block size; cgroups; file", "libaio QD 32; 4 KB random, 1 MB sequential; "
                  "4 x 4 threads; 10 GB, 60 s")),
    notes=("Runs are 1 s after 0.5 s (random) and 1.5 s after 1 s (sequential) instead of 60 s.",),
)


# ---------------------------------------------------------------- Fig. 5: trace replay (KF4)

def _fig5_runs(res: Results) -> dict[str, dict[int, Run]]:
    """As kf4_runs(): none once (it ignores weights), each weighting's FI from its weights."""
    out: dict[str, dict[int, Run]] = {s: {} for s in SCHEDULERS}
    none = stored_run(res, "none", "none", [g.weight for g in lun_cgroups(0)]).mbs
    for h in LUNS:
        weights = [g.weight for g in lun_cgroups(h)]
        out["none"][h] = Run(none, fairness_index(none, weights))
        for s in ("kyber-fairness", "bfq"):
            out[s][h] = stored_run(res, f"lun{h}", s, weights)
    return out


def fig5_figures(res: Results) -> list[Figure]:
    runs = _fig5_runs(res)
    cats = [f"LUN{h}" for h in LUNS]
    return [Figure("seed001-fig05", "Fig. 5", "Four cgroups replaying the SYSTOR '17 LUNs (each LUN in turn "
                   "highest weight)", [
        Panel("(a) total I/O throughput", "bars", [Trace(s, cats, [runs[s][h].total for h in LUNS])
                                                   for s in SCHEDULERS], xlabel="highest weight", ylabel="MB/s",
              xcategories=cats),
        Panel("(b) fairness index", "bars", [Trace(s, cats, [runs[s][h].fi for h in LUNS]) for s in SCHEDULERS],
              xlabel="highest weight", ylabel="FI", xcategories=cats),
        Panel("(c) Kyber-fairness / BFQ", "bars", [
            Trace("iosched", cats, [runs["kyber-fairness"][h].total / runs["bfq"][h].total for h in LUNS],
                  color="#4c72b0")], xlabel="highest weight", ylabel="throughput ratio", xcategories=cats)],
        caption="Paper: Kyber-fairness up to 1.33x BFQ's throughput, the gap narrowest with LUN3 highest, and a "
        "slightly better FI. The traces are the synthetic samples shaped after Table 4 (traces/README.md).")]


FIG5 = PaperExperiment(
    name="seed001-traces", seed=SEED, title="Kyber-fairness and BFQ replaying four LUN traces", refs=("Fig. 5",),
    description="The four LUNs of the sample SYSTOR '17 trace, one per cgroup, each replayed by 4 processes at QD 32 "
    "without timing (fio read_iolog, replay_no_stall, time_based); each LUN in turn weight 1000, the others 100, "
    "250, 500 in turn after it; none (once), Kyber-fairness, BFQ.",
    series=(_series("none", lun_cgroups(0), "trace", ("none",)),
            *(_series(f"lun{h}", lun_cgroups(h), "trace", ("kyber-fairness", "bfq")) for h in LUNS)),
    quick={"repeat": 1}, checks=lambda res: [one_row("KF4", KF4, kf4(_fig5_runs(res)))], figures=fig5_figures,
    paper=(Number("§V, Fig. 5a", "Kyber-fairness / BFQ throughput", "up to 1.33x"),
           Number("§V, Fig. 5a", "narrowest gap", "LUN3 highest"),
           Number("§V, Fig. 5b", "Kyber-fairness FI vs BFQ's", "slightly better"),
           Number("Table 4", "LUN0 / LUN1 / LUN2 / LUN3: average request, MB/s, R:W",
                  "31.1 KB, 462.45, 3.44:1 / 24.8 KB, 540.66, 3.19:1 / 50.4 KB, 364.98, 2.78:1 / 63.7 KB, 476.54, "
                  "1.60:1"),
           Number("Table 3", "trace-replay: I/O depth; threads per cgroup; runtime", "32; 4; 60 s")),
    notes=("The traces are synthetic samples shaped after Table 4 (sizes, mix, rates; uniform offsets), not the "
           "SNIA originals.", "Which weights the other LUNs get is a named assumption (the paper does not say).",
           "fio's replay: every thread replays the whole LUN (seed 001's trace-replay shares one pass)."),
)


# ---------------------------------------------------------------- Fig. 6: more cgroups (KF3)

def _fig6_runs(res: Results) -> dict[str, list[tuple[int, Run]]]:
    return {s: [(n, stored_run(res, f"{n}cg", s, [g.weight for g in cgroups("randread", "1k", n)]))
                for n in KF3_CGROUPS] for s in SCHEDULERS}


def fig6_figures(res: Results) -> list[Figure]:
    runs = _fig6_runs(res)
    ns = list(KF3_CGROUPS)
    return [Figure("seed001-fig06", "Fig. 6", "Scalability with the number of cgroups (1 KiB random reads)", [
        Panel("(a) total I/O throughput", "lines", [Trace(s, ns, [r.total for _, r in runs[s]]) for s in SCHEDULERS],
              xlabel="cgroups (4 processes each)", ylabel="MB/s"),
        Panel("(b) fairness index", "lines", [Trace(s, ns, [r.fi for _, r in runs[s]]) for s in SCHEDULERS],
              xlabel="cgroups (4 processes each)", ylabel="FI")],
        caption="Paper: Kyber-fairness close to none as the cgroups increase, BFQ falls sharply (a chart without "
        "numbers).")]


FIG6 = PaperExperiment(
    name="seed001-cgroups", seed=SEED, title="Scalability with more cgroups", refs=("Fig. 6",),
    description="1 KiB random reads, 1-16 cgroups of 4 processes (weights 100, 250, 500, 1000 repeated), fio libaio "
    "QD 32, direct; none, Kyber-fairness, BFQ.",
    series=tuple(_series(f"{n}cg", cgroups("randread", "1k", n), "randread") for n in KF3_CGROUPS),
    quick={"repeat": 1}, checks=lambda res: [one_row("KF3", KF3, kf3(_fig6_runs(res)))], figures=fig6_figures,
    paper=(Number("§V, Fig. 6", "Kyber-fairness as cgroups increase", "close to none"),
           Number("§V, Fig. 6", "BFQ as cgroups increase", "decreases sharply")),
    notes=("Processes per cgroup (4) and the weights of more than four cgroups are named assumptions.",),
)

if __name__ != "__main__":  # run as a script, the registry imports (and registers) the module itself
    register(FIG1, FIG4, FIG5, FIG6)


def main(argv: list[str] | None = None) -> None:
    """Run seed 001's experiments (or the named ones) in --quick mode (results in out/reproduce-quick) and print
    paper vs iosched."""
    from ..reproduce import print_quick

    print_quick(argv or ["seed001"])


if __name__ == "__main__":
    main(sys.argv[1:])
