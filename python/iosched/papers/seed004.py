"""Seed 004 (Ozen & Yildirim, SAUJS 2019): Noop, Deadline, CFQ and BFQ on a SATA SSD under IOzone (Figs. 5-9).

The paper's setup (§3): an i7-3517U-class laptop (4 logical cores, 4 GB), a SanDisk U100 240 GB SATA SSD with ext4,
Linux 4.19; IOzone throughput mode with 3 processes, 64 KiB records, files of 64 KiB to 500 MB, the write, rewrite,
read and reread tests; throughput averaged over the file sizes. Findings (targets.md "Seed 004"): L1 noop best in
every test; L2 deadline's read lead over CFQ and BFQ, rewrite ~38% faster than write. The figures (5-8, one per test;
9, the average of all tests) are charts without numbers: the paper's numbers are the percentages in §4's text.

How it is simulated (docs/schedulers.md, "Legacy single-queue schedulers (seed 004)"): every run uses the presets i7-3517u-4c and
sandisk-u100-240gb-sata, nothing tuned per experiment. noop, deadline and cfq run on the legacy single-queue block
layer; BFQ on blk-mq, as mainline 4.19 only has BFQ there (the paper's reboots between schedulers fit switching
scsi_mod.use_blk_mq). IOzone's I/O is buffered (no -I in the paper, and its reread explanation is the OS cache):
3 psync processes, each with its own file (a contiguous region, offset_increment = file size), 64 KiB records.
One run per scheduler and size does IOzone's write then rewrite (stonewall: the rewrite starts when all writers are
done, with the dirty data and writeback they left); another does read then reread on a cold cache (the paper
reboots to remove cache effects; `invalidate=1` drops nothing there), the reread without invalidation.
Throughput per test: the three processes' bytes over the time until the last one finished; the paper's 10
repetitions are 3 here (seeds 1-3), averaged.

Each finding function turns the averages into `Check` rows; the experiment at the bottom declares the runs, the
paper's numbers, the figures and tables. `python -m iosched.papers.seed004` runs it in --quick mode and prints paper
vs iosched; `measure()` and `averages()` simulate directly (for tests); `test_seed004_findings.py` asserts the
shapes that hold.
"""

from __future__ import annotations

import sys
from functools import lru_cache
from typing import Any

from .. import native
from ..report.figures import Figure, Panel, Table, Trace
from ..simconfig import fio_jobs, preset_params, sim_config
from . import scoring
from .registry import Check, Number, PaperExperiment, Results, Series, one_row, register

SEED = "004"
HOST, DEVICE = "i7-3517u-4c", "sandisk-u100-240gb-sata"
SCHEDULERS = ("noop", "deadline", "cfq", "bfq")
TESTS = ("write", "rewrite", "read", "reread")
FIGURE_OF = {"write": "Fig. 5", "rewrite": "Fig. 6", "read": "Fig. 7", "reread": "Fig. 8"}
KIB, MIB = 1024, 1024 * 1024
# IOzone's automatic sizes: 64 KiB doubling to 256 MiB, then the paper's 500 MB maximum (IOzone's "m" is MiB).
FILE_SIZES = tuple(64 * KIB << i for i in range(13)) + (500 * MIB,)
PROCESSES = 3
RECORD = 64 * KIB


def size_label(size: int) -> str:
    return f"{size // MIB} MiB" if size >= MIB else f"{size // KIB} KiB"


def job_options(rw: str, file_bytes: int, *, stonewall: bool = False, invalidate: bool = True) -> dict[str, Any]:
    """One IOzone test as fio options: 3 buffered psync processes, each with its own file of `file_bytes`."""
    return {"rw": rw, "bs": RECORD, "ioengine": "psync", "direct": 0, "numjobs": PROCESSES, "size": file_bytes,
            "offset": "1g", "offset_increment": file_bytes, "invalidate": int(invalidate),
            "stonewall": int(stonewall), "runtime": "600s", "time_based": 0}


def pair_jobs(pair: str, file_bytes: int) -> list[tuple[str, dict[str, Any]]]:
    """An IOzone pair of tests: "write" (write, rewrite) or "read" (read, reread)."""
    first, second = ("write", "rewrite") if pair == "write" else ("read", "reread")
    rw = "write" if pair == "write" else "read"
    return [(first, job_options(rw, file_bytes)),
            (second, job_options(rw, file_bytes, stonewall=True, invalidate=False))]


def iozone_config(scheduler: str, file_bytes: int, pair: str, seed: int = 1) -> dict[str, Any]:
    """The SimConfig of one IOzone pair of tests: "write" (write, rewrite) or "read" (read, reread)."""
    host, device = preset_params(HOST, DEVICE)
    jobs = fio_jobs(pair_jobs(pair, file_bytes), host, [device], runtime_s=None, ramp_s=0, time_based=False,
                    page_cache=True, origin="fio", file="iosched.papers.seed004")
    return sim_config(seed=seed, host=host, devices=[device], jobs=jobs, scheduler=scheduler)


def throughput_mb_s(job: dict[str, Any], write: bool) -> float:
    d = job["write" if write else "read"]
    return d["bytes"] / (job["window_ns"] / 1e9) / 1e6


def tests_of(result: dict[str, Any]) -> dict[str, float]:
    """Throughput (MB/s) of the tests a pair's result holds, by test name."""
    return {j["name"]: throughput_mb_s(j, j["name"] in ("write", "rewrite")) for j in result["jobs"]}


@lru_cache(maxsize=None)
def measure(scheduler: str, file_bytes: int) -> dict[str, float]:
    """Throughput (MB/s) of the four tests for one scheduler and file size, simulated directly."""
    out: dict[str, float] = {}
    for pair in ("write", "read"):
        out.update(tests_of(native.simulate(iozone_config(scheduler, file_bytes, pair))))
    return out


Averages = dict[str, dict[str, float]]   # scheduler -> test -> MB/s averaged over the file sizes


def averages(sizes: tuple[int, ...] = FILE_SIZES) -> Averages:
    """Per scheduler and test: the mean throughput over the file sizes (as the paper averages its figures),
    simulated directly."""
    return {s: {t: sum(measure(s, size)[t] for size in sizes) / len(sizes) for t in TESTS} for s in SCHEDULERS}


def gain(a: float, b: float) -> float:
    return a / b - 1


def within(sim: float, paper: float) -> bool:
    """A gain of the paper's holds within [0.8, 1.25] of it (scoring.BAND; a gain of the opposite sign never does)."""
    return scoring.within(sim / paper) if paper else sim == 0


def _shown(avg: Averages, test: str) -> str:
    return " / ".join(f"{avg[s][test]:,.0f}" for s in SCHEDULERS)


# ================================================================ the findings' checks (averages -> rows)

# ---------------------------------------------------------------- L1: noop best in every test

L1_ROWS = (("write", "cfq", 0.10), ("rewrite", "cfq", 0.04), ("read", "deadline", 0.071), ("reread", "deadline", 0.102))


def l1_checks(avg: Averages) -> list[Check]:
    out = []
    for test, rival, paper in L1_ROWS:
        others = {s: avg[s][test] for s in SCHEDULERS if s != "noop"}
        best_other = max(others, key=others.get)
        g = gain(avg["noop"][test], avg[rival][test])
        order = avg["noop"][test] > others[best_other] and best_other == rival
        out.append(Check("L1", f"{test}: noop over {rival} (closest); mean MB/s " + " / ".join(SCHEDULERS),
                         f"{paper:+.1%}, noop best", f"{g:+.2%} (order {'yes' if order else 'no'}); "
                         f"{_shown(avg, test)}", order and within(g, paper), paper, g, FIGURE_OF[test]))
    return out


# ---------------------------------------------------------------- L2: deadline's read lead; rewrite vs write

L2_ROWS = (("read", "cfq", 0.029), ("read", "bfq", 0.067), ("reread", "cfq", 0.015), ("reread", "bfq", 0.079))
L2_REWRITE = 0.38


def l2_checks(avg: Averages) -> list[Check]:
    out = []
    for test, rival, paper in L2_ROWS:
        g = gain(avg["deadline"][test], avg[rival][test])
        order = avg["deadline"][test] > avg[rival][test]
        out.append(Check("L2", f"{test}: deadline over {rival}", f"{paper:+.1%}",
                         f"{g:+.2%} (order {'yes' if order else 'no'})", within(g, paper), paper, g, FIGURE_OF[test]))
    ratios = rewrite_gains(avg)
    mean = sum(ratios) / len(ratios)
    out.append(Check("L2", "rewrite over write, mean of schedulers (" + " / ".join(SCHEDULERS) + ")",
                     f"{L2_REWRITE:+.0%}", f"{mean:+.1%} (" + " / ".join(f"{r:+.1%}" for r in ratios) + ")",
                     within(mean, L2_REWRITE), L2_REWRITE, mean, "Fig. 6"))
    return out


def rewrite_gains(avg: Averages) -> list[float]:
    return [gain(avg[s]["rewrite"], avg[s]["write"]) for s in SCHEDULERS]


# ---------------------------------------------------------------- §3.4 and §4: the tests themselves

def text_checks(avg: Averages) -> list[Check]:
    """§3.4 and §4's statements about the tests themselves."""
    reread = min(avg[s]["reread"] / avg[s]["read"] for s in SCHEDULERS)
    above = all(min(avg[s]["read"], avg[s]["reread"]) > max(avg[s]["write"], avg[s]["rewrite"]) for s in SCHEDULERS)
    shown = "; ".join(f"{s} {avg[s]['read']:,.0f}/{avg[s]['reread']:,.0f} vs {avg[s]['write']:,.0f}/"
                      f"{avg[s]['rewrite']:,.0f}" for s in SCHEDULERS[:1])
    return [Check("§3.4", "reread faster than read: the data is cached (smallest ratio over schedulers)", "higher",
                  f"x{reread:.0f}", reread > 2, ref="§3.4, Fig. 8"),
            Check("§4", "read and reread faster than write and rewrite, every scheduler (MB/s, noop shown)", "yes",
                  shown, above, ref="§4, Figs. 7-8")]


# ================================================================ the experiment

def _series(pair: str, size: int) -> str:
    return f"{pair}-{size_label(size).replace(' ', '').lower()}"


def _spec(pair: str, size: int) -> dict[str, Any]:
    """One IOzone pair at one file size, every scheduler (the TOML `iosched run` reads, as a dict)."""
    return {"repeat": 3, "seed": 1, "host": {"preset": HOST}, "devices": [{"preset": DEVICE}],
            "scheduler": {"name": SCHEDULERS[0]}, "job": [{"name": n, **o} for n, o in pair_jobs(pair, size)],
            "sweep": {"scheduler.name": list(SCHEDULERS)}}


PerSize = dict[tuple[str, int], dict[str, float]]   # (scheduler, file size) -> test -> MB/s (mean of repetitions)


def per_size(res: Results) -> PerSize:
    out: PerSize = {}
    for s in SCHEDULERS:
        for size in FILE_SIZES:
            tests: dict[str, float] = {}
            for pair in ("write", "read"):
                runs = [tests_of(r) for r in res.results(_series(pair, size), {"scheduler.name": s})]
                for t in runs[0]:
                    tests[t] = sum(r[t] for r in runs) / len(runs)
            out[s, size] = tests
    return out


def averages_of(sizes: PerSize) -> Averages:
    return {s: {t: sum(sizes[s, size][t] for size in FILE_SIZES) / len(FILE_SIZES) for t in TESTS}
            for s in SCHEDULERS}


# One row per finding (registry.one_row): L1 and L2 hold only when each of their clauses does.
L1 = "noop best in every test: write +10% over CFQ, rewrite +4% over CFQ, read +7.1% and reread +10.2% over Deadline"
L2 = "Deadline reads +2.9% over CFQ and +6.7% over BFQ (rereads +1.5% and +7.9%); rewrite ~38% faster than write"


def iozone_checks(res: Results) -> list[Check]:
    avg = averages_of(per_size(res))
    return [one_row("L1", L1, l1_checks(avg)), one_row("L2", L2, l2_checks(avg))] + text_checks(avg)


def iozone_figures(res: Results) -> list[Figure]:
    sizes = per_size(res)
    avg = averages_of(sizes)
    halves = (FILE_SIZES[:7], FILE_SIZES[7:])
    figs = []
    for test in TESTS:
        panels = []
        for i, part in enumerate(halves):
            labels = [size_label(size) for size in part]
            panels.append(Panel(f"({'ab'[i]}) {labels[0]} - {labels[-1]}", "bars",
                                [Trace(s, labels, [sizes[s, size][test] for size in part]) for s in SCHEDULERS],
                                xlabel="file size", ylabel="MB/s", ylog=True, xcategories=labels))
        figs.append(Figure(f"seed004-fig{FIGURE_OF[test][5:]:0>2}", FIGURE_OF[test], f"{test.capitalize()} test "
                           "results", panels, caption="IOzone throughput mode, 3 processes, 64 KiB records; per file "
                           "size, every scheduler."))
    l1_cats = [t for t, _, _ in L1_ROWS]
    l2_cats = [f"{t}/{r}" for t, r, _ in L2_ROWS] + ["rewrite/write"]
    figs.append(Figure("seed004-fig09", "Fig. 9", "Average of all test results", [
        Panel("(a) mean over the file sizes", "bars", [Trace(s, list(TESTS), [avg[s][t] for t in TESTS])
                                                     for s in SCHEDULERS],
              xlabel="test", ylabel="MB/s", ylog=True, xcategories=list(TESTS)),
        Panel("(b) L1: noop over CFQ (writes) / Deadline (reads)", "bars", [
            Trace("iosched", l1_cats, [100 * gain(avg["noop"][t], avg[r][t]) for t, r, _ in L1_ROWS],
                  color="#4c72b0"),
            Trace("paper", l1_cats, [100 * p for *_, p in L1_ROWS], paper=True)],
            xlabel="test", ylabel="gain (%)", xcategories=l1_cats),
        Panel("(c) L2: Deadline over CFQ / BFQ; rewrite over write", "bars", [
            Trace("iosched", l2_cats, [100 * gain(avg["deadline"][t], avg[r][t]) for t, r, _ in L2_ROWS]
                  + [100 * sum(rewrite_gains(avg)) / len(SCHEDULERS)], color="#4c72b0"),
            Trace("paper", l2_cats, [100 * p for *_, p in L2_ROWS] + [100 * L2_REWRITE], paper=True)],
            xlabel="test/rival", ylabel="gain (%)", xcategories=l2_cats)],
        caption="Hatched: the paper's percentages (§4); its charts carry no numbers. Rewrite over write: the mean "
        "over the schedulers."))
    return figs


def iozone_tables(res: Results) -> list[Table]:
    sizes = per_size(res)
    avg = averages_of(sizes)
    rows = [[size_label(size), t] + [f"{sizes[s, size][t]:,.0f}" for s in SCHEDULERS]
            for size in FILE_SIZES for t in TESTS]
    return [
        Table("seed004-fig09", "Fig. 9", "Mean throughput over the file sizes (MB/s)", ["test", *SCHEDULERS],
              [[t] + [f"{avg[s][t]:,.1f}" for s in SCHEDULERS] for t in TESTS],
              caption="The averages the paper's Fig. 9 charts and its §4 percentages compare."),
        Table("seed004-figs5-8", "Figs. 5-8", "Throughput per file size and test (MB/s)",
              ["file size", "test", *SCHEDULERS], rows),
    ]


IOZONE = PaperExperiment(
    name="seed004-iozone", seed=SEED, title="Legacy schedulers on a SATA SSD under IOzone",
    refs=("Fig. 5", "Fig. 6", "Fig. 7", "Fig. 8", "Fig. 9"),
    description="IOzone throughput mode as the paper ran it: 3 buffered psync processes, 64 KiB records, files of "
    "64 KiB to 500 MiB; write then rewrite, and read then reread on a cold cache; noop, deadline, cfq (legacy block "
    "layer) and bfq (blk-mq).",
    series=tuple(Series(_series(pair, size), _spec(pair, size)) for pair in ("write", "read") for size in FILE_SIZES),
    quick={"repeat": 1}, checks=iozone_checks, figures=iozone_figures, tables=iozone_tables,
    paper=(Number("§4, Fig. 5", "write: noop over CFQ, its closest competitor", "+10%"),
           Number("§4, Fig. 6", "rewrite: noop over CFQ", "+4%"),
           Number("§4, Fig. 6", "rewrite over write, average of all schedulers", "+38%"),
           Number("§4, Figs. 7-8", "read / reread: noop over Deadline", "+7.1% / +10.2%"),
           Number("§4, Fig. 7", "read: Deadline over CFQ / BFQ", "+2.9% / +6.7%"),
           Number("§4, Fig. 8", "reread: Deadline over CFQ / BFQ", "+1.5% / +7.9%"),
           Number("§4", "read and reread faster than write and rewrite", "all schedulers"),
           Number("§3.1", "file sizes; record size; processes; repetitions", "64 KB-500 MB; 64 KB; 3; 10")),
    notes=("The paper's figures are charts without numbers; the checks test §4's percentages and statements.",
           "Buffered I/O through the page cache model; ext4 (metadata, journal) is not modelled.",
           "3 repetitions (seeds 1-3) instead of the paper's 10: runs differ by well under 0.1% between seeds."),
)

if __name__ != "__main__":  # run as a script, the registry imports (and registers) the module itself
    register(IOZONE)


def main(argv: list[str] | None = None) -> None:
    """Run seed 004's experiment in --quick mode (results in out/reproduce-quick) and print paper vs iosched."""
    from ..reproduce import print_quick

    print_quick(argv or ["seed004"])


if __name__ == "__main__":
    main(sys.argv[1:])
