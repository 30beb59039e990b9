"""Seed 000 (ICPE'24, "BFQ, Multiqueue-Deadline, or Kyber?"): Figs. 1-12 and Tables 2-4 as paper experiments.

Every run uses the paper's testbed presets (xeon-silver-4210r-10c, samsung-980pro-1tb) with no parameter that
depends on the experiment; the schedulers' costs are the host preset's, the policies are the kernel's. Each
finding function turns measurements into `Check` rows: the paper's value, the simulated one, and whether the
finding's shape holds by the criterion written next to it. The experiments at the bottom declare the runs (specs
with sweeps), the paper's numbers, the checks, and the figures and tables in the paper's form; `iosched reproduce
seed000` runs them all. `python -m iosched.papers.seed000` does the same in --quick mode and prints the table.
"""

from __future__ import annotations

import sys
from typing import Any, Iterable

from .. import native
from ..results import METRICS
from ..simconfig import Job, testbed_config
from ..report.figures import Figure, Heat, Panel, Table, Trace, cdf, fmt, merge_bins
from .registry import Check, Number, PaperExperiment, Results, Series, register

HOST, DEVICE = "xeon-silver-4210r-10c", "samsung-980pro-1tb"
SCHEDULERS = ("none", "kyber", "mq-deadline", "bfq")
R, W = "randread", "randwrite"
SEED = "000"


def simulate(jobs: Iterable[Job], scheduler: str, *, ssds: int = 1, tunables: Iterable[tuple[str, int]] = (),
             runtime_s: float = 0.2, ramp_s: float = 0.05, seed: int = 1) -> dict[str, Any]:
    """One simulated fio run on the seed-000 testbed; returns the SimResult dict (for tests and quick looks)."""
    return native.simulate(testbed_config(HOST, DEVICE, jobs, runtime_s, ramp_s, file="iosched.papers.seed000",
                                          seed=seed, scheduler=scheduler, tunables=tunables, ssds=ssds))


def total(result: dict, metric: str, job: str | None = None) -> float:
    """Sum of a rate metric over the jobs (or one job by name)."""
    return sum(METRICS[metric](j) for j in result["jobs"] if job is None or j["name"] == job)


def value(result: dict, metric: str, job: str) -> float:
    return METRICS[metric](next(j for j in result["jobs"] if j["name"] == job))


def cores_busy(result: dict) -> float:
    return sum(c["busy_ns"] for c in result["cores"]) / result["window_ns"]


def core_busy(result: dict, core: int) -> float:
    return result["cores"][core]["busy_ns"] / result["window_ns"]


def lock_share(result: dict) -> float:
    busy = sum(c["busy_ns"] for c in result["cores"])
    return sum(c["lock_ns"] for c in result["cores"]) / busy if busy else 0.0


def mean_read_latency_us(result: dict) -> float:
    ios = sum(j["read"]["ios"] for j in result["jobs"])
    return sum(j["read"]["clat_mean_ns"] * j["read"]["ios"] for j in result["jobs"]) / ios / 1000 if ios else 0.0


# Write-heavy runs measure after the 1 GiB write buffer has filled (~1 s) and Kyber has adapted: with a QD-1 reader
# its read histogram reaches 500 samples slowly, so a window closes once a second and each closes one x0.25 step of
# the write depth (128 -> 1 takes ~4 s). fio runs in the paper lasted much longer.
KYBER_SETTLE_S = 6.0


def t4k(n: int) -> Job:
    """n T-4KiB-apps (4 KiB random read, QD 128), one per core, wrapping over the 10 cores."""
    return Job("t", R, 128, [i % 10 for i in range(n)], numjobs=n)


def ratio_ok(sim: float, paper: float, tolerance: float) -> bool:
    return abs(sim / paper - 1) <= tolerance


def kyber_tokens(result: dict) -> tuple[float, float]:
    """Kyber's read and write depths at the end of the run (debugfs read_tokens / write_tokens)."""
    last: dict[str, float] = {}
    for sample in result["timeseries"]:  # in time order: keep the latest of each
        if sample["source"] == "scheduler" and sample["subject"].endswith("nvme0n1"):
            last[sample["metric"]] = sample["value"]
    return last.get("read_tokens", float("nan")), last.get("write_tokens", float("nan"))


# ================================================================ the findings' checks (measurements -> rows)

F2_APPS = (1, 2, 3, 5, 10, 15)


def scaling(ssds: int, apps: Iterable[int] = F2_APPS) -> dict[str, list[tuple[int, float, float, float]]]:
    """Per scheduler: (apps, KIOPS, cores busy, lock share) as T-4KiB-apps are added (direct simulation)."""
    return {s: [(n, total(r := simulate([t4k(n)], s, ssds=ssds), "read_kiops"), cores_busy(r), lock_share(r))
                for n in apps] for s in SCHEDULERS}


def f2_f3(curves: dict[str, list[tuple[int, float, float, float]]]) -> list[Check]:
    """F2 (Fig. 7) and F3 on one SSD (Fig. 8a) from the scaling curves of one SSD."""
    peak = {s: max(k for _, k, _, _ in curves[s]) for s in SCHEDULERS}
    lock = {s: max(l for *_, l in curves[s]) for s in SCHEDULERS}
    none = peak["none"]
    out = []
    for s, paper in (("kyber", 1.0), ("mq-deadline", 0.72), ("bfq", 0.40)):
        out.append(Check("F2", f"{s} peak / none, 1 SSD", f"{paper:.2f}", f"{peak[s] / none:.2f}",
                         ratio_ok(peak[s] / none, paper, 0.15), paper, peak[s] / none, "Fig. 7"))
    out.append(Check("F2", "order bfq < mq-deadline < kyber <= none", "holds",
                     " < ".join(f"{peak[s]:.0f}" for s in ("bfq", "mq-deadline", "kyber", "none")),
                     peak["bfq"] < peak["mq-deadline"] < peak["kyber"] <= none * 1.001, ref="Fig. 7"))
    for s, paper in (("mq-deadline", 0.78), ("bfq", 0.78), ("kyber", 0.147)):
        out.append(Check("F3", f"{s} max lock share, 1 SSD", f"{paper:.0%}", f"{lock[s]:.0%}",
                         abs(lock[s] - paper) <= 0.10, paper, lock[s], "Fig. 8a"))
    return out


F4_SSDS = (1, 2, 3, 4, 5, 6, 7, 8)


def f4_f5(by_ssds: dict[int, dict[str, tuple[float, float, float]]]) -> list[Check]:
    """F4 (Fig. 9), F5 (Fig. 10 peaks) and F3 with 8 SSDs (Fig. 8b): {ssds: {scheduler: (KIOPS, busy, lock)}}
    for 10 T-4KiB-apps."""
    out = []
    ssds = sorted(by_ssds)
    for s, one, eight in (("bfq", 286, 1250), ("mq-deadline", 489, 1900)):
        a, b = by_ssds[1][s][0], by_ssds[8][s][0]
        out.append(Check("F4", f"{s} 10 apps, 1 -> 8 SSDs (KIOPS)", f"{one} -> {eight}", f"{a:.0f} -> {b:.0f}",
                         ratio_ok(a, one, 0.2) and ratio_ok(b, eight, 0.2) and b < 8 * a, eight, b, "Fig. 9"))
    for s, at in (("kyber", 4), ("none", 5)):
        # "saturates the CPUs at k SSDs": the fewest SSDs at which all ten cores are busy
        sat = next((k for k in ssds if by_ssds[k][s][1] > 9.5), None)
        out.append(Check("F4", f"{s}: CPUs saturated from", f"{at} SSDs", f"{sat} SSDs" if sat else "never",
                         sat == at, at, sat, "Fig. 9"))
    paper = {"bfq": 1260, "mq-deadline": 1900, "kyber": 2670, "none": 3420}
    for s in SCHEDULERS:
        v = by_ssds[8][s][0]
        out.append(Check("F5", f"{s} 10 apps, 8 SSDs (KIOPS)", f"{paper[s]}", f"{v:.0f}", ratio_ok(v, paper[s], 0.2),
                         paper[s], v, "Fig. 10"))
    order = [by_ssds[8][s][0] for s in ("bfq", "mq-deadline", "kyber", "none")]
    out.append(Check("F5", "order bfq < mq-deadline < kyber < none, 8 SSDs", "holds",
                     " < ".join(f"{v:.0f}" for v in order), order == sorted(order) and len(set(order)) == 4,
                     ref="Fig. 10"))
    for s, paper_share in (("mq-deadline", 0.271), ("bfq", 0.271), ("kyber", 0.062)):
        v = by_ssds[8][s][2]
        out.append(Check("F3", f"{s} lock share, 10 apps, 8 SSDs", f"{paper_share:.0%}", f"{v:.0%}",
                         abs(v - paper_share) <= 0.10, paper_share, v, "Fig. 8b"))
    return out


def f6(p99: dict[tuple[str, int], float]) -> list[Check]:
    """F6 (Fig. 2): one process on one core; P99 (µs) by (scheduler, QD) for QD 1 and 256."""
    out = [Check("F6", "P99 at QD 1, all schedulers (us)", "77-79",
                 " / ".join(f"{p99[s, 1]:.0f}" for s in SCHEDULERS),
                 all(70 <= p99[s, 1] <= 90 for s in SCHEDULERS), 78.0, p99["none", 1], "Fig. 2a")]
    out.append(Check("F6", "P99 at QD 256 (us): " + " / ".join(SCHEDULERS), "807-1155",
                     " / ".join(f"{p99[s, 256]:.0f}" for s in SCHEDULERS),
                     max(p99[s, 256] for s in SCHEDULERS) == p99["bfq", 256], 1155.1, p99["bfq", 256], "Fig. 2e"))
    worst = p99["bfq", 256] / p99["none", 256] - 1
    out.append(Check("F6", "BFQ P99 over none at QD 256", "+43%", f"{worst:+.0%}", 0.25 <= worst <= 0.65,
                     1.432, 1 + worst, "Fig. 2e"))
    return out


def f7(p99: dict[str, float], busy: dict[str, float]) -> list[Check]:
    """F7 (Fig. 5): 256 QD-1 processes on 10 cores; P99 (µs) and cores busy per scheduler."""
    paper = {"bfq": 1810, "mq-deadline": 1155, "none": 1090, "kyber": 1073}
    out = [Check("F7", "256 QD-1 procs on 10 cores, P99 (us) " + " / ".join(SCHEDULERS),
                 " / ".join(str(paper[s]) for s in SCHEDULERS), " / ".join(f"{p99[s]:.0f}" for s in SCHEDULERS),
                 p99["bfq"] == max(p99.values()), paper["bfq"], p99["bfq"], "Fig. 5a")]
    out.append(Check("F7", "cores busy " + " / ".join(SCHEDULERS), "~7 / ~7 / 10 / 10",
                     " / ".join(f"{busy[s]:.1f}" for s in SCHEDULERS),
                     busy["bfq"] > 9.5 and busy["mq-deadline"] > 9.5 and busy["none"] < 9 and busy["kyber"] < 9,
                     7.0, busy["none"], "Fig. 5b"))
    return out


def f10(p99: dict[str, dict[tuple[str, int], float]]) -> list[Check]:
    """F10 (Fig. 11): the L-app's P99 (µs) by (scheduler, background apps), per background kind."""
    out = []
    worst_all = {}
    for label, panel in p99.items():
        backgrounds = sorted({n for _, n in panel})
        worst = {s: max(panel[s, n] for n in backgrounds) for s in SCHEDULERS}
        worst_all[label] = worst
        shown = " / ".join(f"{worst[s] / 1000:.2f}" for s in SCHEDULERS)
        ref = {"4 KiB readers": "Fig. 11a", "64 KiB readers": "Fig. 11b", "4 KiB writers": "Fig. 11c",
               "64 KiB writers": "Fig. 11d"}[label]
        if "writers" in label:
            what = f"L-app worst P99 (ms), {label}: " + " / ".join(SCHEDULERS)
            out.append(Check("F10", what + "; kyber bounds it (< none / 3)", "kyber low", shown,
                             worst["kyber"] < worst["none"] / 3, ref=ref))
            paper_bfq = "bfq low (2.9 ms vs 404.8 at 64 KiB)" if label.startswith("64") else "bfq low"
            out.append(Check("F10", what + "; bfq bounds it (< none / 3)", paper_bfq, shown,
                             worst["bfq"] < worst["none"] / 3,
                             2.9 if label.startswith("64") else None,
                             worst["bfq"] / 1000 if label.startswith("64") else None, ref))
            out.append(Check("F10", what + "; mq-deadline explodes (> 3x kyber)", "mq-deadline explodes", shown,
                             worst["mq-deadline"] > 3 * worst["kyber"], ref=ref))
        else:
            out.append(Check("F10", f"L-app worst P99 (ms), {label}: " + " / ".join(SCHEDULERS),
                             "kyber gives little benefit", shown, worst["kyber"] > 0.8 * worst["none"], ref=ref))
    # O-14: BFQ gives the lowest L-app P99 in most scenarios, all but 64 KiB readers (lowest by more than 5%).
    lowest = [label for label in ("4 KiB readers", "4 KiB writers", "64 KiB writers") if label in worst_all
              and all(worst_all[label]["bfq"] < 0.95 * v for s, v in worst_all[label].items() if s != "bfq")]
    out.append(Check("F10", "bfq lowest worst P99 with 4 KiB readers, 4 KiB writers, 64 KiB writers",
                     "3 of 3", f"{len(lowest)} of 3" + (f" ({', '.join(lowest)})" if lowest else ""),
                     len(lowest) >= 2, 3, len(lowest), "Fig. 11"))
    return out


def f11(fg: dict[tuple[str, int], float], bg: dict[tuple[str, int], float]) -> list[Check]:
    """F11 (Fig. 12a): a T-4KiB reader against N T-64KiB readers: fg KIOPS and per-background-app KIOPS."""
    ns = sorted({n for _, n in fg})
    share = {s: [fg[s, n] / (bg[s, n] / n) for n in ns if bg[s, n] > 0] for s in SCHEDULERS}
    even = all(0.5 <= x <= 2.0 for s in SCHEDULERS for x in share[s])
    out = [Check("F11", "fg IOPS / IOPS of each bg app, every N and scheduler (equal split: 1)", "~1",
                 f"{min(min(v) for v in share.values()):.2f}-{max(max(v) for v in share.values()):.2f}", even,
                 ref="Fig. 12a")]
    falls = {s: fg[s, ns[-1]] / fg[s, ns[0]] for s in SCHEDULERS}
    out.append(Check("F11", f"fg KIOPS at N={ns[-1]} / at N={ns[0]}: " + " / ".join(SCHEDULERS), "falls fast",
                     " / ".join(f"{falls[s]:.2f}" for s in SCHEDULERS), all(v < 0.25 for v in falls.values()),
                     ref="Fig. 12a"))
    return out


def f12(curves: dict[str, list[float]]) -> list[Check]:
    """F12 (Fig. 12b): fg read KIOPS against N = 1, ..., 32 64 KiB writers, per scheduler (in N order)."""
    out = []
    shown = {s: " ".join(f"{v:.0f}" for v in curves[s]) for s in SCHEDULERS}
    flat = {s: min(curves[s]) / max(curves[s]) for s in SCHEDULERS}
    out.append(Check("F12", "fg read KIOPS vs N 64 KiB writers (kyber)", "flat near 148", shown["kyber"],
                     flat["kyber"] > 0.6 and min(curves["kyber"]) > 50, 148, min(curves["kyber"]), "Fig. 12b"))
    out.append(Check("F12", "fg read KIOPS vs N 64 KiB writers (none)", "falls", shown["none"],
                     curves["none"][-1] < 0.5 * curves["kyber"][-1], ref="Fig. 12b"))
    out.append(Check("F12", "fg read KIOPS vs N 64 KiB writers (mq-deadline)", "falls", shown["mq-deadline"],
                     curves["mq-deadline"][-1] < 0.5 * curves["kyber"][-1], ref="Fig. 12b"))
    out.append(Check("F12", "fg read KIOPS vs N 64 KiB writers (bfq)", "flat, collapses past 16 (147.7 -> 1.2)",
                     shown["bfq"], min(curves["bfq"][:-1]) > 0.6 * max(curves["bfq"])
                     and curves["bfq"][-1] < 0.1 * max(curves["bfq"]), 147.7, curves["bfq"][-2], "Fig. 12b"))
    return out


MS, US = 1_000_000, 1_000
F13_TABLE = (  # (read_lat_nsec, write_lat_nsec) -> (R KIOPS, W KIOPS, R tokens, W tokens), seed 000 Table 2
    ((2 * MS, 10 * MS), (156.7, 103.4, 256, 93)),
    ((0, 10 * MS), (189.4, 79.4, 256, 54)),
    ((2 * MS, 0), (137.8, 114.8, 253, 128)),
    ((0, 0), (136.1, 118.5, 256, 128)),
    ((1000 * MS, 1000 * MS), (137.2, 113.6, 256, 128)),
    ((0, 1000 * MS), (219.9, 70.0, 256, 1)),
    ((1000 * MS, 0), (2.1, 118.8, 1, 128)),
)


def f13(measured: dict[tuple[int, int], tuple[float, float, float, float]]) -> list[Check]:
    """F13 (Table 2): (R lat, W lat) -> (R KIOPS, W KIOPS, R tokens, W tokens)."""
    out = []
    for (rlat, wlat), (pr, pw, prt, pwt) in F13_TABLE:
        rk, wk, rt, wt = measured[rlat, wlat]
        # Shape: writes throttled (W tokens well below 128) exactly where the paper's are, and reads gain then.
        holds = (wt < 100) == (pwt < 100) and (rt < 16) == (prt < 16)
        out.append(Check("F13", f"R {rlat / MS:g} ms, W {wlat / MS:g} ms: R/W KIOPS, R/W tokens",
                         f"{pr}/{pw}, {prt}/{pwt}", f"{rk:.1f}/{wk:.1f}, {rt:.0f}/{wt:.0f}", holds, pr, rk,
                         "Table 2"))
    return out


F14_READ = (0, 50 * US, 100 * US, 500 * US, 10 * MS, 100 * MS)
F14_WRITE = (0, 100 * US, 10 * MS, 20 * MS, 100 * MS)


def f14_f15(grid: dict[tuple[int, int], tuple[float, float, float]]) -> list[Check]:
    """F14 (Table 3) and F15 (Table 4): (R lat, W lat) -> (L-app P99 ms, writer KIOPS, W tokens).

    "Lower" means by more than 10% (the paper's gaps are 30-45%): equal values differing by noise do not count."""
    prioritised = [k for k in grid if k[0] <= 500 * US and k[1] >= 10 * MS]
    others = [k for k in grid if k[0] >= 10 * MS or k[1] <= 100 * US]
    p99_in = [grid[k][0] for k in prioritised]
    p99_out = [grid[k][0] for k in others]
    out = [Check("F14", "L-app P99 (ms) where reads prioritised (R <= 500us, W >= 10ms)", "1.4-1.9",
                 f"{min(p99_in):.2f}-{max(p99_in):.2f}", max(p99_in) < 0.9 * min(p99_out), 1.9, max(p99_in),
                 "Table 3"),
           Check("F14", "L-app P99 (ms) elsewhere (R >= 10ms or W <= 100us)", "2.8",
                 f"{min(p99_out):.2f}-{max(p99_out):.2f}", max(p99_in) < 0.9 * min(p99_out), 2.8, min(p99_out),
                 "Table 3")]
    w_in = [grid[k][1] for k in grid if k[0] <= 500 * US and k[1] >= 20 * MS]
    w_out = [grid[k][1] for k in others]
    out.append(Check("F15", "writer KIOPS where reads prioritised (R <= 500us, W >= 20ms)", "71-80",
                     f"{min(w_in):.1f}-{max(w_in):.1f}", max(w_in) < 0.9 * min(w_out), 80, max(w_in), "Table 4"))
    out.append(Check("F15", "writer KIOPS elsewhere", "120-135", f"{min(w_out):.1f}-{max(w_out):.1f}",
                     max(w_in) < 0.9 * min(w_out), 120, min(w_out), "Table 4"))
    return out


# ================================================================ specs

def job(name: str, rw: str, iodepth: int, cpus: str, bs: str = "4k", numjobs: int = 1, **opts: Any) -> dict:
    """A [[job]] table: fio's options; processes pinned one per listed core (split), wrapping."""
    return {"name": name, "rw": rw, "bs": bs, "iodepth": iodepth, "numjobs": numjobs, "cpus_allowed": cpus,
            "cpus_allowed_policy": "split", **opts}


def all_ssds(k: int) -> str:
    return ":".join(f"/dev/nvme{i}n1" for i in range(k))


def spec(jobs: list[dict], sweep: dict[str, list], *, duration: str, ramp: str = "50ms", repeat: int = 3,
         ssds: int = 1, scheduler: dict | None = None) -> dict[str, Any]:
    """A seed-000 testbed spec (the TOML `iosched run` reads, as a dict)."""
    return {"duration": duration, "ramp": ramp, "repeat": repeat, "seed": 1, "host": {"preset": HOST},
            "devices": [{"preset": DEVICE, "count": ssds}], "scheduler": scheduler or {"name": "none"},
            "job": jobs, **({"sweep": sweep} if sweep else {})}


SCHED = {"scheduler.name": list(SCHEDULERS)}
QUICK = {"duration": "200ms", "repeat": 1}
LEVELS = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def _kiops(res: dict) -> float:
    return total(res, "read_kiops")


# ================================================================ Fig. 1: none, CPU or SSD bound

FIG1_BS = ["512", "4k", "16k", "64k"]
FIG1_PROCS_1SSD = [1, 2, 4]
FIG1_PROCS_8SSD = [1, 2, 4, 8, 10]


def fig1_checks(res: Results) -> list[Check]:
    kiops = {qd: res.mean("a", {"job.r.bs": "4k", "job.r.iodepth": qd}, _kiops) for qd in LEVELS}
    peak = max(kiops.values())
    knee = next(qd for qd in LEVELS if kiops[qd] >= 0.95 * peak)
    small = max(res.mean("a", {"job.r.bs": "512", "job.r.iodepth": qd}, _kiops) for qd in LEVELS)
    four = max(res.mean("b", {"job.r.numjobs": 4, "job.r.iodepth": qd}, _kiops) for qd in LEVELS)
    c10 = {qd: (res.mean("c", {"job.r.numjobs": 10, "job.r.iodepth": qd}, _kiops),
                res.mean("c", {"job.r.numjobs": 10, "job.r.iodepth": qd}, cores_busy)) for qd in LEVELS}
    best = max(c10, key=lambda qd: c10[qd][0])
    one8 = max(res.mean("c", {"job.r.numjobs": 1, "job.r.iodepth": qd}, _kiops) for qd in LEVELS)
    return [
        Check("calibration", "1 core, 1 SSD, 4 KiB: KIOPS at QD 64", "370", f"{kiops[64]:.0f}",
              ratio_ok(kiops[64], 370, 0.10), 370, kiops[64], "Fig. 1a"),
        Check("O-1", "1 core, 4 KiB: saturation point (first QD within 5% of the peak)", "QD 64", f"QD {knee}",
              knee == 64, ref="Fig. 1a"),
        Check("O-1", "1 core: 512 B peak / 4 KiB peak (sizes <= 4 KiB alike)", "~1", f"{small / peak:.2f}",
              ratio_ok(small / peak, 1.0, 0.10), 1.0, small / peak, "Fig. 1a"),
        Check("calibration", "4 processes, 1 SSD: peak KIOPS", "774", f"{four:.0f}", ratio_ok(four, 774, 0.10), 774,
              four, "Fig. 1b"),
        Check("F1", "10 processes, 8 SSDs: peak KIOPS", "3,400", f"{c10[best][0]:.0f}",
              ratio_ok(c10[best][0], 3400, 0.15), 3400, c10[best][0], "Fig. 1c"),
        Check("F1", "10 processes, 8 SSDs: cores busy at the peak", "10 (all)", f"{c10[best][1]:.1f}",
              c10[best][1] > 9.5, 10, c10[best][1], "Fig. 1c"),
        Check("O-2", "1 process on 8 SSDs / on 1 SSD (CPU-bound: same)", "~1 (370 KIOPS/core)",
              f"{one8 / peak:.2f}", ratio_ok(one8 / peak, 1.0, 0.10), 1.0, one8 / peak, "Fig. 1c"),
    ]


def _hook(res: Results, series: str, point: dict, name: str) -> Trace:
    xs, ys = [], []
    for qd in LEVELS:
        p = dict(point, **{"job.r.iodepth": qd})
        xs.append(res.mean(series, p, _kiops))
        ys.append(res.mean(series, p, mean_read_latency_us))
    return Trace(name, xs, ys, text=[str(qd) for qd in LEVELS])


def fig1_figures(res: Results) -> list[Figure]:
    a = Panel("(a) 1 core, 1 SSD, by request size", "lines", xlabel="KIOPS", ylabel="mean latency (µs)", ylog=True,
              traces=[_hook(res, "a", {"job.r.bs": bs}, f"{bs} B" if bs.isdigit() else f"{bs[:-1]} KiB")
                      for bs in FIG1_BS]
              # Little's law at the paper's knee: mean latency = QD / IOPS
              + [Trace("paper: 4 KiB, QD 64", [370], [64 / 370e3 * 1e6], paper=True)])
    b = Panel("(b) 1 SSD, 4 KiB, by processes", "lines", xlabel="KIOPS", ylabel="mean latency (µs)", ylog=True,
              traces=[_hook(res, "b", {"job.r.numjobs": p}, f"{p}p") for p in FIG1_PROCS_1SSD]
              + [Trace("paper: 4p peak", [774], [None], paper=True)])
    c = Panel("(c) 8 SSDs, 4 KiB, by processes", "lines", xlabel="KIOPS", ylabel="mean latency (µs)", ylog=True,
              traces=[_hook(res, "c", {"job.r.numjobs": p}, f"{p}p") for p in FIG1_PROCS_8SSD]
              + [Trace("paper: 10p peak", [3400], [None], paper=True)])
    # The paper's peaks as hollow markers at the latency our curve has there (the paper's y is not transcribed).
    for panel, series, point in ((b, "b", {"job.r.numjobs": 4}), (c, "c", {"job.r.numjobs": 10})):
        panel.traces[-1].y = [res.mean(series, dict(point, **{"job.r.iodepth": 256}), mean_read_latency_us)]
    return [Figure("seed000-fig01", "Fig. 1", "Throughput and latency under none as the queue depth grows "
                   "(points: QD per process)", [a, b, c],
                   caption="Hook-shaped curves: IOPS grow with the queue depth until the CPU (or the SSD) saturates, "
                   "then only latency grows. Hollow markers: the paper's peaks (370 KIOPS at QD 64 on one core, "
                   "774 KIOPS with 4 processes, ~3.4 MIOPS with 10 processes on 8 SSDs). The SPDK lines of the "
                   "paper are not modelled.")]


FIG1 = PaperExperiment(
    name="seed000-fig1", seed=SEED, title="Where the CPU or the SSD is the bottleneck (none)", refs=("Fig. 1",),
    description="4 KiB (and 512 B-64 KiB) random reads under none, queue depth 1-256: one core and one SSD, "
    "1-4 processes on one SSD, 1-10 processes on 8 SSDs.",
    series=(
        Series("a", spec([job("r", R, 1, "0")], {"job.r.bs": FIG1_BS, "job.r.iodepth": LEVELS},
                         duration="1s")),
        Series("b", spec([job("r", R, 1, "0-3")], {"job.r.numjobs": FIG1_PROCS_1SSD, "job.r.iodepth": LEVELS},
                         duration="1s")),
        Series("c", spec([job("r", R, 1, "0-9", filename=all_ssds(8))],
                         {"job.r.numjobs": FIG1_PROCS_8SSD, "job.r.iodepth": LEVELS}, duration="1s", ssds=8)),
    ),
    quick=QUICK, checks=fig1_checks, figures=fig1_figures,
    paper=(Number("§3.1, Fig. 1a", "1 core, 1 SSD: saturates at QD 64", 370, "KIOPS"),
           Number("§3.2, Fig. 1b", "4 cores, 1 SSD: peak", 774, "KIOPS"),
           Number("§3.2, Fig. 1c", "10 cores, 8 SSDs, none: peak, all cores busy", 3400, "KIOPS"),
           Number("§3.3", "share of the SSDs' 6.2 MIOPS the Linux stack delivers", "51.6%")),
    notes=("The single-core and 4-process peaks are calibration inputs of the Samsung 980 PRO and Xeon presets "
           "(targets.md); F1 (10 processes, 8 SSDs) is a finding.", "SPDK (the paper's kernel-bypass lines) is "
           "not modelled."),
)


# ================================================================ Figs. 2-6: latency under concurrency

LAT_SERIES = {"intra": ("job.l.iodepth", "1 process on core 0, QD"), "inter1": ("job.l.numjobs", "QD-1 processes on "
              "core 0"), "inter10": ("job.l.numjobs", "QD-1 processes on 10 cores")}
CDF_LEVELS = [1, 16, 32, 64, 256]


def _p99_us(res: dict) -> float:
    return max(METRICS["read_p99_us"](j) for j in res["jobs"])


def _lat_point(series: str, s: str, n: int) -> dict:
    return {"scheduler.name": s, LAT_SERIES[series][0]: n}


def latency_checks(res: Results) -> list[Check]:
    p99 = {(series, s, n): res.mean(series, _lat_point(series, s, n), _p99_us)
           for series in LAT_SERIES for s in SCHEDULERS for n in LEVELS}
    out = f6({(s, n): p99["intra", s, n] for s in SCHEDULERS for n in (1, 256)})
    out += f7({s: p99["inter10", s, 256] for s in SCHEDULERS},
              {s: res.mean("inter10", _lat_point("inter10", s, 256), cores_busy) for s in SCHEDULERS})
    ratio = p99["inter1", "kyber", 256] / p99["intra", "kyber", 256]
    out.append(Check("O-6", "kyber P99 at 256: inter-process / intra-process, 1 core", "4.2 (4,227 / 1,004 us)",
                     f"{ratio:.1f} ({p99['inter1', 'kyber', 256]:.0f} / {p99['intra', 'kyber', 256]:.0f} us)",
                     ratio_ok(ratio, 4.21, 0.5), 4.21, ratio, "Figs. 2e, 3e"))
    for series, paper, ref in (("intra", 32, "Fig. 4a"), ("inter1", 16, "Fig. 4b")):
        sat = {s: next((n for n in LEVELS if res.mean(series, _lat_point(series, s, n),
                                                      lambda r: core_busy(r, 0)) >= 0.95), None) for s in SCHEDULERS}
        what = "QD" if series == "intra" else "processes"
        out.append(Check("O-4" if series == "intra" else "O-6",
                         f"core 0 saturated (>= 95% busy) from, {what}: " + " / ".join(SCHEDULERS),
                         f"{paper} (none)", " / ".join(str(sat[s]) for s in SCHEDULERS), sat["none"] == paper,
                         paper, sat["none"], ref))
    base = {series: p99[series, "none", 1] for series in LAT_SERIES}
    norm = {k: v / base[k[0]] for k, v in p99.items()}
    low = max(v for (series, s, n), v in norm.items() if n <= 8)
    out.append(Check("F8", "P99 / none at 1, concurrency <= 8, all three setups (max)", "slow growth (< 2)",
                     f"{low:.1f}x", low < 2.0, ref="Fig. 6"))
    hi = {s: norm["inter1", s, 256] for s in SCHEDULERS}
    out.append(Check("F8", "P99 / none at 1, 256 processes on 1 core: " + " / ".join(SCHEDULERS), "> 50x",
                     " / ".join(f"{hi[s]:.0f}x" for s in SCHEDULERS), all(v > 50 for v in hi.values()), 50,
                     min(hi.values()), "Fig. 6b"))
    return out


def _cdf_panel(res: Results, series: str, n: int, title: str) -> Panel:
    traces = []
    for s in SCHEDULERS:
        runs = res.results(series, _lat_point(series, s, n))
        bins = merge_bins([j["read"] for r in runs for j in r["jobs"]])
        xs, ys = cdf(bins)
        p99 = res.mean(series, _lat_point(series, s, n), _p99_us)
        traces.append(Trace(s, xs, ys, marks=[(p99, f"{s} P99 {fmt(p99)} µs")]))
    return Panel(title, "cdf", traces, xlabel="latency (µs)", ylabel="CDF", xlog=True)


def latency_figures(res: Results) -> list[Figure]:
    figs = []
    for fid, ref, series, what in (("seed000-fig02", "Fig. 2", "intra", "QD"),
                                   ("seed000-fig03", "Fig. 3", "inter1", "L-apps")):
        panels = [_cdf_panel(res, series, n, f"({chr(97 + i)}) {what} {n}") for i, n in enumerate(CDF_LEVELS)]
        title = ("Intra-process scalability: latency CDFs as the queue depth grows (1 core)" if series == "intra"
                 else "Inter-process scalability: latency CDFs with more QD-1 L-apps on 1 core")
        figs.append(Figure(fid, ref, title, panels, cols=3,
                           caption="Dotted lines: each scheduler's P99. Paper: P99 77.3-79.4 µs at 1, "
                           "806.9-1,155.1 µs at QD 256 (BFQ +43% over none); Kyber at 256: 1,003.5 µs intra-process, "
                           "4,227.1 µs inter-process."))
    cpu = []
    for i, series in enumerate(("intra", "inter1")):
        cpu.append(Panel(f"({'ab'[i]}) {LAT_SERIES[series][1]}", "lines", xlabel="concurrency", xlog=True,
                         ylabel="core 0 busy (%)",
                         traces=[Trace(s, LEVELS, [100 * res.mean(series, _lat_point(series, s, n),
                                                                  lambda r: core_busy(r, 0)) for n in LEVELS])
                                 for s in SCHEDULERS]))
    figs.append(Figure("seed000-fig04", "Fig. 4", "CPU usage for intra/inter-process concurrency", cpu,
                       caption="Paper: the core saturates at QD 32 (one process) and at 16 QD-1 processes."))
    figs.append(Figure("seed000-fig05", "Fig. 5", "256 QD-1 L-apps on 10 cores", [
        _cdf_panel(res, "inter10", 256, "(a) latency CDF, 256 L-apps"),
        Panel("(b) CPU usage", "lines", xlabel="processes", ylabel="cores busy", xlog=True,
              traces=[Trace(s, LEVELS, [res.mean("inter10", _lat_point("inter10", s, n), cores_busy)
                                        for n in LEVELS]) for s in SCHEDULERS]
              + [Trace("paper: none, kyber", [256], [7], paper=True),
                 Trace("paper: bfq, mq-deadline", [256], [10], paper=True, symbol="square")])],
        caption="Paper: P99 BFQ 1,810.4, MQ-Deadline 1,155.1, None 1,089.5, Kyber 1,073.2 µs; none and Kyber use "
        "~7 of 10 cores, BFQ and MQ-Deadline all 10."))
    panels = []
    for i, series in enumerate(LAT_SERIES):
        base = res.mean(series, _lat_point(series, "none", 1), _p99_us)
        z = [[res.mean(series, _lat_point(series, s, n), _p99_us) / base for s in SCHEDULERS] for n in LEVELS]
        panels.append(Panel(f"({'abc'[i]}) {LAT_SERIES[series][1]}", "heatmap", xlabel="scheduler",
                            ylabel="concurrency",
                            heat=Heat(list(SCHEDULERS), [str(n) for n in LEVELS], z,
                                      text=[[f"{v:.1f}" for v in row] for row in z], zmin=0, zmax=60,
                                      colorbar="P99 / none at 1")))
    figs.append(Figure("seed000-fig06", "Fig. 6", "P99 normalised to none at concurrency 1", panels, cols=3,
                       caption="Paper: slow growth up to 8; past 16 more than 50x for QD-1 processes on one core "
                       "(scale 0-60x)."))
    return figs


def _lat_spec(series: str) -> dict:
    cpus = "0-9" if series == "inter10" else "0"
    policy = {"cpus_allowed_policy": "shared"} if series == "inter10" else {}
    return spec([job("l", R, 1, cpus, **policy)],
                {LAT_SERIES[series][0]: LEVELS, **SCHED}, duration="1s")


LATENCY = PaperExperiment(
    name="seed000-latency", seed=SEED, title="Scheduler overheads on latency (L-apps)",
    refs=("Fig. 2", "Fig. 3", "Fig. 4", "Fig. 5", "Fig. 6"),
    description="4 KiB random reads: one process with QD 1-256 on core 0 (intra-process), 1-256 QD-1 processes on "
    "core 0 (inter-process), and 1-256 QD-1 processes free on all 10 cores; every scheduler.",
    series=tuple(Series(s, _lat_spec(s)) for s in LAT_SERIES),
    quick=QUICK, checks=latency_checks, figures=latency_figures,
    paper=(Number("Fig. 2a, §4.1", "P99 at QD 1, all schedulers", "77.3-79.4", "µs"),
           Number("Fig. 2e, §4.1", "P99 at QD 256", "806.9-1,155.1", "µs"),
           Number("§4.1 (O-5)", "BFQ P99 over none at QD 256", "+43.2%"),
           Number("§4.1 (O-6)", "Kyber P99 at 256, intra / inter-process (1 core)", "1,003.5 / 4,227.1", "µs"),
           Number("Fig. 4", "core saturated from: intra-process QD / inter-process processes", "32 / 16"),
           Number("Fig. 5a", "P99, 256 L-apps on 10 cores: BFQ / MQ-DL / None / Kyber", "1,810.4 / 1,155.1 / "
                  "1,089.5 / 1,073.2", "µs"),
           Number("Fig. 5b (O-8)", "cores used, 256 L-apps: none, Kyber / BFQ, MQ-DL", "7 / 10"),
           Number("Fig. 6 (O-9)", "P99 / none at 1, past 16 processes on one core", "> 50x")),
    notes=("Processes on all 10 cores are unpinned (cpus_allowed 0-9, shared), as the paper's 'no pinning' lets the "
           "kernel place them: the simulator spreads them over the cores at start, and wakes each on its previous "
           "core if idle, else on the next idle one (Linux's wake-up placement; README: How the simulator works).",),
)


# ================================================================ Figs. 7-10: throughput scaling

APPS = [1, 2, 3, 4, 5, 6, 8, 10, 12, 15]


def _t_spec(ssds: int, sweep: dict) -> dict:
    opts = {"filename": all_ssds(ssds)} if ssds > 1 else {}
    return spec([job("t", R, 128, "0-9", **opts)], sweep, duration="1s", ssds=ssds)


def _curves(res: Results, series: str) -> dict[str, list[tuple[int, float, float, float]]]:
    out = {}
    for s in SCHEDULERS:
        out[s] = []
        for n in APPS:
            p = {"scheduler.name": s, "job.t.numjobs": n}
            out[s].append((n, res.mean(series, p, _kiops), res.mean(series, p, cores_busy),
                           res.mean(series, p, lock_share)))
    return out


def _by_ssds(res: Results) -> dict[int, dict[str, tuple[float, float, float]]]:
    return {k: {s: (res.mean(f"ssds{k}", {"scheduler.name": s}, _kiops),
                    res.mean(f"ssds{k}", {"scheduler.name": s}, cores_busy),
                    res.mean(f"ssds{k}", {"scheduler.name": s}, lock_share)) for s in SCHEDULERS} for k in F4_SSDS}


def throughput_checks(res: Results) -> list[Check]:
    out = f2_f3(_curves(res, "1ssd")) + f4_f5(_by_ssds(res))
    c8 = _curves(res, "8ssd")
    at = {s: max(c8[s], key=lambda p: p[1])[0] for s in SCHEDULERS}
    out.append(Check("F5", "apps at the 8-SSD peak: " + " / ".join(SCHEDULERS), "10 (all)",
                     " / ".join(str(at[s]) for s in SCHEDULERS), all(v >= 10 for v in at.values()), ref="Fig. 10"))
    return out


def throughput_figures(res: Results) -> list[Figure]:
    c1, c8, by = _curves(res, "1ssd"), _curves(res, "8ssd"), _by_ssds(res)

    def lines(curves, idx, scale=1.0):
        return [Trace(s, [p[0] for p in curves[s]], [p[idx] * scale for p in curves[s]]) for s in SCHEDULERS]
    figs = [
        Figure("seed000-fig07", "Fig. 7", "T-4KiB-apps on 10 cores and 1 SSD", [
            Panel("(a) throughput", "lines", lines(c1, 1) + [
                Trace("paper: none, kyber peak", [3], [785.7], paper=True)], xlabel="T-4KiB-apps", ylabel="KIOPS"),
            Panel("(b) CPU usage", "lines", lines(c1, 2), xlabel="T-4KiB-apps", ylabel="cores busy")],
            caption="Paper: none and Kyber reach 785.7 KIOPS with 3 processes; peaks BFQ 315.3 KIOPS (0.40x), "
            "MQ-Deadline 569.2 KIOPS (0.72x)."),
        Figure("seed000-fig08", "Fig. 8", "Share of CPU time in lock functions", [
            Panel("(a) 1 SSD", "lines", lines(c1, 3, 100) + [
                Trace("paper: bfq, mq-deadline", [10], [78.0], paper=True),
                Trace("paper: kyber", [10], [14.7], paper=True, symbol="square")],
                xlabel="T-4KiB-apps", ylabel="lock share (%)"),
            Panel("(b) 8 SSDs", "lines", lines(c8, 3, 100) + [
                Trace("paper: bfq, mq-deadline", [10], [27.1], paper=True),
                Trace("paper: kyber", [10], [6.2], paper=True, symbol="square")],
                xlabel="T-4KiB-apps", ylabel="lock share (%)")],
            caption="Paper: up to 78.0% for BFQ and MQ-Deadline at 10-15 processes on one SSD, 27.1% with 8 SSDs; "
            "Kyber 14.7% and 6.2%."),
        Figure("seed000-fig09", "Fig. 9", "10 T-4KiB-apps on 10 cores, 1-8 SSDs", [
            Panel("(a) throughput", "lines", [Trace(s, list(F4_SSDS), [by[k][s][0] for k in F4_SSDS])
                                              for s in SCHEDULERS]
                  + [Trace("paper: bfq", [1, 8], [286, 1250], paper=True),
                     Trace("paper: mq-deadline", [1, 8], [489, 1900], paper=True),
                     Trace("paper: kyber", [8], [2630], paper=True), Trace("paper: none", [8], [3420], paper=True)],
                  xlabel="SSDs", ylabel="KIOPS"),
            Panel("(b) CPU usage", "lines", [Trace(s, list(F4_SSDS), [by[k][s][1] for k in F4_SSDS])
                                             for s in SCHEDULERS], xlabel="SSDs", ylabel="cores busy")],
            caption="Paper: BFQ 286 K -> 1.25 M, MQ-Deadline 489 K -> 1.90 M (sub-linear); Kyber saturates the "
            "CPUs at 4 SSDs, none at 5."),
        Figure("seed000-fig10", "Fig. 10", "T-4KiB-apps on 10 cores and 8 SSDs", [
            Panel("(a) throughput", "lines", lines(c8, 1) + [
                Trace(f"paper: {s}", [10], [v], paper=True)
                for s, v in (("bfq", 1260), ("mq-deadline", 1900), ("kyber", 2670), ("none", 3420))],
                xlabel="T-4KiB-apps", ylabel="KIOPS"),
            Panel("(b) CPU usage", "lines", lines(c8, 2), xlabel="T-4KiB-apps", ylabel="cores busy")],
            caption="Paper: peaks BFQ 1.26 M < MQ-Deadline 1.90 M < Kyber 2.67 M < none 3.42 M IOPS, at 10 "
            "processes."),
    ]
    return figs


THROUGHPUT = PaperExperiment(
    name="seed000-throughput", seed=SEED, title="Scheduler overheads on throughput (T-4KiB-apps)",
    refs=("Fig. 7", "Fig. 8", "Fig. 9", "Fig. 10"),
    description="T-4KiB-apps (4 KiB random read, QD 128, one per core, wrapping) on 1 and 8 SSDs, and 10 of them "
    "on 1-8 SSDs; every scheduler.",
    series=(Series("1ssd", _t_spec(1, {"job.t.numjobs": APPS, **SCHED})),
            Series("8ssd", _t_spec(8, {"job.t.numjobs": APPS, **SCHED})),
            *(Series(f"ssds{k}", _t_spec(k, {"job.t.numjobs": [10], **SCHED})) for k in F4_SSDS)),
    quick=QUICK, checks=throughput_checks, figures=throughput_figures,
    paper=(Number("Fig. 7, §4.2 (O-10)", "1 SSD peak: none, Kyber (3 processes)", 785.7, "KIOPS"),
           Number("Fig. 7 (O-10)", "1 SSD peak: BFQ / MQ-Deadline", "315.3 / 569.2", "KIOPS"),
           Number("Fig. 8 (O-11)", "lock share, 1 SSD: BFQ, MQ-DL / Kyber", "78.0% / 14.7%"),
           Number("Fig. 8b (O-11)", "lock share, 8 SSDs: BFQ, MQ-DL / Kyber", "27.1% / 6.2%"),
           Number("Fig. 9", "10 apps, 1 -> 8 SSDs: BFQ / MQ-DL", "286 -> 1,250 / 489 -> 1,900", "KIOPS"),
           Number("Fig. 9", "CPUs saturated from: Kyber / none", "4 / 5 SSDs"),
           Number("Fig. 10 (O-12)", "8 SSDs peak: BFQ / MQ-DL / Kyber / none", "1,260 / 1,900 / 2,670 / 3,420",
                  "KIOPS")),
    notes=("The SPDK reference lines are not modelled.", "O-13 (T-64KiB-apps, not shown in any figure of the paper) "
           "is not part of this experiment."),
)


# ================================================================ Figs. 11-12: interference

BG = [1, 2, 3, 4, 5, 6, 7, 8, 9]
FIG11 = {"4 KiB readers": (R, "4k"), "64 KiB readers": (R, "64k"), "4 KiB writers": (W, "4k"),
         "64 KiB writers": (W, "64k")}
FIG12_BG = [1, 2, 4, 8, 16, 32]


def _interference_spec(fg: dict, rw: str, bs: str, ns: list[int]) -> dict:
    writers = rw == W
    return spec([fg, job("t", rw, 128, "1-9", bs=bs)], {"job.t.numjobs": ns, **SCHED},
                duration="4s" if writers else "2s", ramp=f"{KYBER_SETTLE_S:g}s" if writers else "50ms")


def _series11(label: str) -> str:
    return "fig11-" + label.replace(" ", "-").lower()


def _lapp_p99(res: dict) -> float:
    return value(res, "read_p99_us", "l")


def interference_checks(res: Results) -> list[Check]:
    p99 = {label: {(s, n): res.mean(_series11(label), {"scheduler.name": s, "job.t.numjobs": n}, _lapp_p99)
                   for s in SCHEDULERS for n in BG} for label in FIG11}
    out = f10(p99)
    pt = lambda s, n: {"scheduler.name": s, "job.t.numjobs": n}  # noqa: E731
    fg = {(s, n): res.mean("fig12-readers", pt(s, n), lambda r: value(r, "read_kiops", "f"))
          for s in SCHEDULERS for n in FIG12_BG}
    bg = {(s, n): res.mean("fig12-readers", pt(s, n), lambda r: value(r, "read_kiops", "t"))
          for s in SCHEDULERS for n in FIG12_BG}
    out += f11(fg, bg)
    out += f12({s: [res.mean("fig12-writers", pt(s, n), lambda r: value(r, "read_kiops", "f")) for n in FIG12_BG]
                for s in SCHEDULERS})
    return out


def interference_figures(res: Results) -> list[Figure]:
    pt = lambda s, n: {"scheduler.name": s, "job.t.numjobs": n}  # noqa: E731
    panels = []
    for i, label in enumerate(FIG11):
        panels.append(Panel(f"({'abcd'[i]}) background {label}", "lines", xlabel="background apps",
                            ylabel="L-app P99 (ms)",
                            traces=[Trace(s, BG, [res.mean(_series11(label), pt(s, n), _lapp_p99) / 1000
                                                  for n in BG]) for s in SCHEDULERS]))
    panels12 = []
    for i, kind in enumerate(("readers", "writers")):
        traces = [Trace(s, FIG12_BG, [res.mean(f"fig12-{kind}", pt(s, n), lambda r: value(r, "read_kiops", "f"))
                                      for n in FIG12_BG]) for s in SCHEDULERS]
        if kind == "writers":
            traces.append(Trace("paper: bfq", [16, 32], [147.7, 1.2], paper=True))
        panels12.append(Panel(f"({'ab'[i]}) background 64 KiB {kind}", "lines", traces, xlabel="background "
                              "T-64KiB-apps", ylabel="foreground read KIOPS", ylog=True))
    return [
        Figure("seed000-fig11", "Fig. 11", "L-app tail latency with more interfering background apps", panels,
               cols=2, caption="Paper: BFQ lowest in most cases (up to 34.8% below none); with writers none and "
               "MQ-Deadline explode (none 404.8 ms vs BFQ 2.9 ms with 64 KiB writers; MQ-Deadline up to 32x with "
               "4 KiB and 4,142x with 64 KiB writers) while Kyber stays low; with readers Kyber helps little."),
        Figure("seed000-fig12", "Fig. 12", "Read IOPS of a T-4KiB-app with more background T-64KiB-apps",
               panels12, caption="Paper: (a) IOPS split equally, foreground falls fast; (b) Kyber and BFQ keep it "
               "flat, none and MQ-Deadline let it fall, BFQ collapses past 16 (147.7 K -> 1.2 K IOPS)."),
    ]


INTERFERENCE = PaperExperiment(
    name="seed000-interference", seed=SEED, title="Interference between latency and throughput apps",
    refs=("Fig. 11", "Fig. 12"),
    description="An L-app (4 KiB random read, QD 1, core 0) against 1-9 background T-apps (4 or 64 KiB, random "
    "read or write, QD 128, cores 1-9); a foreground T-4KiB-app reader against 1-32 T-64KiB-apps.",
    series=(*(Series(_series11(label), _interference_spec(job("l", R, 1, "0"), rw, bs, BG))
              for label, (rw, bs) in FIG11.items()),
            Series("fig12-readers", _interference_spec(job("f", R, 128, "0"), R, "64k", FIG12_BG)),
            Series("fig12-writers", _interference_spec(job("f", R, 128, "0"), W, "64k", FIG12_BG))),
    quick={"duration": "1s", "repeat": 1}, checks=interference_checks, figures=interference_figures,
    paper=(Number("Fig. 11 (O-14)", "BFQ L-app P99 below none, best case", "34.8% (212.0 vs 138.2 µs)"),
           Number("Fig. 11d", "L-app P99 with 64 KiB writers: none vs BFQ", "404.8 vs 2.9", "ms"),
           Number("Fig. 11c-d", "MQ-Deadline P99 growth with 4 KiB / 64 KiB writers", "32.4x / 4,142.2x"),
           Number("Fig. 12b (O-18)", "BFQ foreground read, 16 -> 32 writers", "147.7 -> 1.2", "KIOPS")),
    notes=("Writer runs measure after a 6 s ramp: the 1 GiB write buffer must fill and Kyber must adapt (its read "
           "histogram fills slowly with a QD-1 reader). The paper's fio runs lasted much longer.",
           "Background processes wrap over cores 1-9 (16 and 32 apps share cores)."),
)


# ================================================================ Tables 2-4: Kyber's configuration space

F14_TABLE3 = {  # (R lat, W lat) -> (P99 ms, W tokens), Table 3
    **{(0, w): v for w, v in zip(F14_WRITE, ((2.8, 128), (2.7, 119), (1.4, 10), (1.4, 1), (1.6, 1)))},
    **{(50 * US, w): v for w, v in zip(F14_WRITE, ((2.8, 128), (2.7, 119), (1.5, 17), (1.7, 1), (1.6, 1)))},
    **{(100 * US, w): v for w, v in zip(F14_WRITE, ((2.8, 128), (2.8, 116), (1.7, 39), (1.6, 1), (1.5, 1)))},
    **{(500 * US, w): v for w, v in zip(F14_WRITE, ((2.8, 128), (2.7, 118), (1.9, 50), (1.5, 1), (1.5, 1)))},
    **{(10 * MS, w): (2.8, 128) for w in F14_WRITE},
    **{(100 * MS, w): (2.8, 128) for w in F14_WRITE},
}
F15_TABLE4 = {  # (R lat, W lat) -> writer KIOPS, Table 4
    (r, w): v for r, row in zip(F14_READ, ((129.4, 103.4, 77.3, 73.6, 73.1), (116.5, 111.6, 80.3, 71.2, 73.3),
                                          (128.8, 128.0, 82.4, 73.2, 73.3), (122.2, 115.6, 96.0, 73.8, 73.5),
                                          (119.6, 130.9, 127.5, 125.4, 131.8), (135.0, 123.7, 119.7, 129.7, 118.0)))
    for w, v in zip(F14_WRITE, row)
}


def _lat_label(ns: int) -> str:
    if ns == 0:
        return "0 s"
    if ns >= 1000 * MS:
        return f"{ns / 1e9:g} s"
    return f"{ns / MS:g} ms" if ns >= MS else f"{ns / US:g} µs"


def _kyber_point(rlat: int, wlat: int) -> dict:
    return {"scheduler.read_lat_nsec": rlat, "scheduler.write_lat_nsec": wlat}


def _table2(res: Results) -> dict[tuple[int, int], tuple[float, float, float, float]]:
    out = {}
    for i, ((rlat, wlat), _) in enumerate(F13_TABLE):
        p = _kyber_point(rlat, wlat)
        out[rlat, wlat] = (res.mean(f"table2-id{i}", p, lambda r: value(r, "read_kiops", "r")),
                           res.mean(f"table2-id{i}", p, lambda r: value(r, "write_kiops", "w")),
                           res.mean(f"table2-id{i}", p, lambda r: kyber_tokens(r)[0]),
                           res.mean(f"table2-id{i}", p, lambda r: kyber_tokens(r)[1]))
    return out


def _grid(res: Results) -> dict[tuple[int, int], tuple[float, float, float]]:
    return {(r, w): (res.mean("grid", _kyber_point(r, w), lambda x: value(x, "read_p99_us", "l") / 1000),
                     res.mean("grid", _kyber_point(r, w), lambda x: value(x, "write_kiops", "w")),
                     res.mean("grid", _kyber_point(r, w), lambda x: kyber_tokens(x)[1]))
            for r in F14_READ for w in F14_WRITE}


def kyber_checks(res: Results) -> list[Check]:
    return f13(_table2(res)) + f14_f15(_grid(res))


def kyber_tables(res: Results) -> list[Table]:
    t2 = _table2(res)
    rows2 = []
    for i, ((rlat, wlat), (pr, pw, prt, pwt)) in enumerate(F13_TABLE):
        rk, wk, rt, wt = t2[rlat, wlat]
        rows2.append([str(i), _lat_label(rlat), _lat_label(wlat), f"{rk:.1f} ({pr})", f"{wk:.1f} ({pw})",
                      f"{rt:.0f} ({prt})", f"{wt:.0f} ({pwt})"])
    g = _grid(res)
    rows3 = [[_lat_label(r)] + [f"{g[r, w][0]:.2f} ({g[r, w][2]:.0f}) · paper {F14_TABLE3[r, w][0]} "
                                f"({F14_TABLE3[r, w][1]})" for w in F14_WRITE] for r in F14_READ]
    rows4 = [[_lat_label(r)] + [f"{g[r, w][1]:.1f} · paper {F15_TABLE4[r, w]}" for w in F14_WRITE]
             for r in F14_READ]
    head = ["R lat \\ W lat"] + [_lat_label(w) for w in F14_WRITE]
    return [
        Table("seed000-table2", "Table 2", "Kyber configuration: a 4 KiB reader and a 4 KiB writer (QD 128 each)",
              ["ID", "R lat", "W lat", "R KIOPS", "W KIOPS", "R tokens", "W tokens"], rows2,
              caption="iosched (paper). Tokens: Kyber's read/write depth at the end of the run."),
        Table("seed000-table3", "Table 3", "Kyber configuration: L-app read P99 in ms (W tokens), with a 4 KiB "
              "writer", head, rows3),
        Table("seed000-table4", "Table 4", "Kyber configuration: the writer's KIOPS, with an L-app", head, rows4),
    ]


def _kyber_spec(jobs: list[dict], sweep: dict) -> dict:
    return spec(jobs, sweep, duration="10s", ramp=f"{KYBER_SETTLE_S:g}s", scheduler={"name": "kyber"})


KYBER = PaperExperiment(
    name="seed000-kyber", seed=SEED, title="Kyber's configuration space (read_lat_nsec x write_lat_nsec)",
    refs=("Table 2", "Table 3", "Table 4"),
    description="Kyber with target latencies set through sysfs: a T-4KiB reader and writer (QD 128, own cores) for "
    "Table 2; an L-app and a T-4KiB writer over a 6 x 5 grid of targets for Tables 3 and 4.",
    series=(*(Series(f"table2-id{i}", _kyber_spec([job("r", R, 128, "0"), job("w", W, 128, "1")],
                                                  {k: [v] for k, v in _kyber_point(rl, wl).items()}))
              for i, ((rl, wl), _) in enumerate(F13_TABLE)),
            Series("grid", _kyber_spec([job("l", R, 1, "0"), job("w", W, 128, "1")],
                                       {"scheduler.read_lat_nsec": list(F14_READ),
                                        "scheduler.write_lat_nsec": list(F14_WRITE)}))),
    quick={"duration": "2s", "repeat": 1}, checks=kyber_checks, tables=kyber_tables,
    paper=(*(Number("Table 2", f"ID {i}: R {_lat_label(r)}, W {_lat_label(w)}: R/W KIOPS, R/W tokens",
                    f"{v[0]} / {v[1]}, {v[2]} / {v[3]}") for i, ((r, w), v) in enumerate(F13_TABLE)),
           Number("Table 3", "L-app P99 where R lat >= 10 ms or W lat = 0", 2.8, "ms"),
           Number("Table 3", "L-app P99 where R lat <= 500 µs and W lat >= 10 ms", "1.4-1.9", "ms"),
           Number("Table 4", "writer KIOPS where reads are not prioritised", "116-135"),
           Number("Table 4", "writer KIOPS where R lat <= 500 µs and W lat >= 20 ms", "71-74")),
    notes=("Measured after a 6 s ramp: Kyber adapts its depths once per closed latency window, and a QD-1 reader "
           "fills the read histogram slowly.",),
)

if __name__ != "__main__":  # run as a script, the registry imports (and registers) the module itself
    register(FIG1, LATENCY, THROUGHPUT, INTERFERENCE, KYBER)


def main(argv: list[str] | None = None) -> None:
    """Run seed 000's experiments (or the named ones) in --quick mode (results in out/reproduce-quick) and print
    paper vs iosched."""
    from ..reproduce import print_quick

    print_quick(argv or ["seed000"])


if __name__ == "__main__":
    main(sys.argv[1:])
