"""Seed 003 (HotCloudPerf'24 slides, "A Systematic Configuration Space Exploration of the Linux Kyber I/O
Scheduler"): the baseline table of the Samsung 980 PRO under none, and the read/write configuration plots.

The baseline's single-workload rows (R1, R256, W1, W256) are calibration inputs of the 980 PRO preset; its mixed
rows are findings (read/write interference), as are the configuration plots' messages. The slides give no numbers
for the configuration plots (they are images), so their checks test the messages the slides state.
"""

from __future__ import annotations

from typing import Any

from ..report.figures import Figure, Heat, Panel, Table, Trace
from . import scoring
from .registry import Check, Number, PaperExperiment, Results, Series, register
from .seed000 import KYBER_SETTLE_S, MS, US, R, W, _lat_label, job, kyber_tokens, ratio_ok, spec, value

SEED = "003"

# Backup slide "Baseline Performance": workload -> (R KIOPS, W KIOPS, R P99 us, W P99 us); None where the slide
# has "-".
BASELINE: dict[str, tuple[float | None, float | None, float | None, float | None]] = {
    "R1": (17.0, None, 77.5, None),
    "R256": (364.3, None, 793.8, None),
    "W1": (None, 62.3, None, 23.1),
    "W256": (None, 70.0, None, 15794.2),
    "R1-W1": (4.0, 65.0, 1879.2, 26.8),
    "R1-W256": (0.3, 68.9, 15217.5, 15558.2),
    "R256-W1": (302.6, 61.5, 3044.1, 32.1),
    "R256-W256": (83.2, 93.1, 15283.0, 15938.4),
}
CALIBRATION = ("R1", "R256", "W1", "W256")


def _jobs(workload: str) -> list[dict]:
    out = []
    for part in workload.split("-"):
        rw, qd = (R, "r") if part[0] == "R" else (W, "w")
        out.append(job(qd, rw, int(part[1:]), "0" if rw == R else "1"))
    return out


def _baseline_spec(workload: str) -> dict[str, Any]:
    # 2 s of ramp: past the write buffer's fill and into garbage collection's steps, as in a long fio run on a
    # preconditioned drive.
    return spec(_jobs(workload), {}, duration="4s", ramp="2s")


METRIC = (("read_kiops", "r"), ("write_kiops", "w"), ("read_p99_us", "r"), ("write_p99_us", "w"))
LABELS = ("R KIOPS", "W KIOPS", "R P99 (µs)", "W P99 (µs)")


def _measure(res: Results) -> dict[str, tuple[float | None, ...]]:
    out = {}
    for w in BASELINE:
        vals = []
        for metric, jobname in METRIC:
            has_job = jobname in {j["name"] for j in _jobs(w)}
            vals.append(res.mean(w, {}, lambda r, m=metric, j=jobname: value(r, m, j)) if has_job else None)
        out[w] = tuple(vals)
    return out


def baseline_checks(res: Results) -> list[Check]:
    """The calibration rows, each within 10% (the presets were fitted to them). The mixed rows are scored point by
    point (`BASELINE_POINTS`): every number of the slides' table within ±25%."""
    m = _measure(res)
    out = []
    for w in CALIBRATION:
        for label, p, v in zip(LABELS, BASELINE[w], m[w]):
            if p is not None:
                out.append(Check("calibration", f"{w}: {label}", f"{p:,.1f}", f"{v:,.1f}", ratio_ok(v, p, 0.10), p, v,
                                 "baseline table"))
    return out


# The slides' baseline table as reference points, one per number: the mixed rows are findings, scored within
# ±25% (strict scoring, issue 18; this replaced twelve rows with criteria looser than the numbers, four of which
# could not fail: a writer at QD 256 runs at the drive's drain rate whatever reads do).
BASELINE_TABLE = "baseline-table"
QUANTITIES = ("read_kiops", "write_kiops", "read_p99_us", "write_p99_us")
UNITS = ("KIOPS", "KIOPS", "us", "us")


def baseline_reference() -> list[scoring.RefPoint]:
    return [scoring.RefPoint(BASELINE_TABLE, w, "", "", q, v, unit, "", "yes", "slides (backup 'Baseline Performance')")
            for w, vals in BASELINE.items() for q, unit, v in zip(QUANTITIES, UNITS, vals) if v is not None]


def baseline_values(m: dict[str, tuple[float | None, ...]]) -> scoring.Values:
    return {scoring.Key(BASELINE_TABLE, w, "", q): v for w, vals in m.items() for q, v in zip(QUANTITIES, vals)
            if v is not None}


def _classify(p: scoring.RefPoint) -> tuple[str, str]:
    if p.series in CALIBRATION:
        return scoring.CALIBRATION, "calibration input (targets.md: the single-workload rows)"
    return scoring.FINDING, ""


def _baseline_why(v: scoring.Values) -> dict[str, str]:
    def at(w: str, q: str) -> str:
        x = v.get(scoring.Key(BASELINE_TABLE, w, "", q))
        return "missing" if x is None else f"{x:,.0f}" if x >= 100 else f"{x:.3g}"
    return {BASELINE_TABLE: (
        f"R256-W256: the writer gets {at('R256-W256', 'write_kiops')} K (the slides 93.1 K, more than W256's 70.0 K "
        f"alone) and the reader {at('R256-W256', 'read_kiops')} K (83.2 K): the model's reads only share a drive "
        "whose writer is at its drain rate; what lets the real drive serve both faster is not established (issue "
        f"18's write path). A QD-1 reader beside writes: R1-W1 {at('R1-W1', 'read_kiops')} K (4.0 K), R1-W256 "
        f"{at('R1-W256', 'read_kiops')} K (0.3 K) with P99s near the slides': its mean wait is longer. R256-W1's "
        f"P99s: read {at('R256-W1', 'read_p99_us')} µs (3,044), write {at('R256-W1', 'write_p99_us')} µs (32.1)")}


BASELINE_POINTS = scoring.PointScoring(baseline_reference, (BASELINE_TABLE,),
                                       lambda res: res.memo("values", lambda r: baseline_values(_measure(r))),
                                       _classify, _baseline_why)


def baseline_tables(res: Results) -> list[Table]:
    m = _measure(res)
    rows = []
    for i, (w, paper) in enumerate(BASELINE.items(), 1):
        cells = [f"{v:,.1f} ({p:,.1f})" if p is not None else "-" for p, v in zip(paper, m[w])]
        rows.append([str(i), w] + cells)
    return [Table("seed003-baseline", "baseline table", "Samsung 980 PRO under none: iosched (paper)",
                  ["#", "Workload", "R TP (KIOPS)", "W TP (KIOPS)", "R P99 Lat (µs)", "W P99 Lat (µs)"], rows,
                  caption="R1/R256/W1/W256: one 4 KiB random reader or writer at QD 1 or 256 (calibration inputs); "
                  "mixed rows: a reader on core 0 and a writer on core 1 at once (findings).")]


def baseline_figures(res: Results) -> list[Figure]:
    m = _measure(res)
    reads = ["R1", "R1-W1", "R1-W256", "R256", "R256-W1", "R256-W256"]
    writes = ["W1", "R1-W1", "R256-W1", "W256", "R1-W256", "R256-W256"]

    def bars(ws: list[str], i: int, title: str, ylabel: str, log: bool) -> Panel:
        return Panel(title, "bars", [Trace("iosched", ws, [m[w][i] for w in ws], color="#4c72b0"),
                                     Trace("paper", ws, [BASELINE[w][i] for w in ws], paper=True)],
                     ylabel=ylabel, ylog=log, xcategories=ws)
    return [Figure("seed003-interference", "baseline table", "Read/write interference on the 980 PRO (none)", [
        bars(reads, 0, "(a) read throughput", "read KIOPS", True),
        bars(reads, 2, "(b) read P99", "read P99 (µs)", True),
        bars(writes, 1, "(c) write throughput", "write KIOPS", False)],
        caption="The slides: writes have a significant effect on read performance; reads have a less significant "
        "effect on writes. Hatched: the paper.")]


BASELINE_EXP = PaperExperiment(
    name="seed003-baseline", seed=SEED, title="Baseline performance of the Samsung 980 PRO under none",
    refs=("baseline table",),
    description="4 KiB random readers and writers at QD 1 and 256, alone and mixed (reader on core 0, writer on "
    "core 1), none scheduler, preconditioned drive.",
    series=tuple(Series(w, _baseline_spec(w)) for w in BASELINE),
    quick={"duration": "1s", "repeat": 1}, checks=baseline_checks, tables=baseline_tables, figures=baseline_figures,
    points=BASELINE_POINTS,
    paper=tuple(Number("backup slide 'Baseline Performance'", f"{w}: {label}", v)
                for w, vals in BASELINE.items() for label, v in zip(LABELS, vals) if v is not None),
    notes=("targets.md names the single-workload rows calibration inputs; the presets were fitted to R1's P99, W1, "
           "W256's throughput and seed 000's 1-core QD-64 point (presets/README.md), not to R1's throughput (seed 000 "
           "measured ~14.5 KIOPS at QD 1 on the same drive, seed 003 17.0) or W256's P99.",),
)


# ================================================================ read/write configuration plots

CONFIG_READ = (0, 100 * US, 2 * MS, 1000 * MS)
CONFIG_WRITE = (0, 100 * US, 10 * MS, 1000 * MS)
DEFAULT = (2 * MS, 10 * MS)
READS_FIRST, WRITES_FIRST = (0, 1000 * MS), (1000 * MS, 0)


def _config_spec(workload: str) -> dict[str, Any]:
    return spec(_jobs(workload), {"scheduler.read_lat_nsec": list(CONFIG_READ),
                                  "scheduler.write_lat_nsec": list(CONFIG_WRITE)},
                duration="4s", ramp=f"{KYBER_SETTLE_S:g}s", scheduler={"name": "kyber"})


def _at(res: Results, workload: str, rw: tuple[int, int], metric: str, jobname: str) -> float:
    return res.mean(workload, {"scheduler.read_lat_nsec": rw[0], "scheduler.write_lat_nsec": rw[1]},
                    lambda r: value(r, metric, jobname))


def config_checks(res: Results) -> list[Check]:
    """The slides' messages; "a < b" means by more than 5% (less is noise between runs)."""
    out = []
    p99 = {k: _at(res, "R1-W256", k, "read_p99_us", "r") / 1000 for k in (READS_FIRST, WRITES_FIRST)}
    out.append(Check("priority", "R1-W256: read P99 (ms), reads first (R 0, W 1 s) < writes first (R 1 s, W 0)",
                     "lower target -> lower latency", f"{p99[READS_FIRST]:.2f} < {p99[WRITES_FIRST]:.2f}",
                     p99[READS_FIRST] < 0.95 * p99[WRITES_FIRST], ref="L-app + T-app plot"))
    wk = {k: _at(res, "R1-W256", k, "write_kiops", "w") for k in (READS_FIRST, WRITES_FIRST)}
    out.append(Check("priority", "R1-W256: write KIOPS, reads first < writes first",
                     "prioritising reads costs write throughput", f"{wk[READS_FIRST]:.1f} < {wk[WRITES_FIRST]:.1f}",
                     wk[READS_FIRST] < 0.95 * wk[WRITES_FIRST], ref="L-app + T-app plot"))
    rk = {k: _at(res, "R256-W256", k, "read_kiops", "r") for k in (READS_FIRST, WRITES_FIRST)}
    out.append(Check("priority", "R256-W256: read KIOPS, reads first > writes first", "lower target -> higher "
                     "throughput", f"{rk[READS_FIRST]:.1f} > {rk[WRITES_FIRST]:.1f}",
                     rk[READS_FIRST] > 1.05 * rk[WRITES_FIRST], ref="T-app + T-app plot"))
    wk2 = {k: _at(res, "R256-W256", k, "write_kiops", "w") for k in (READS_FIRST, WRITES_FIRST)}
    out.append(Check("priority", "R256-W256: write KIOPS, writes first > reads first", "lower target -> higher "
                     "throughput", f"{wk2[WRITES_FIRST]:.1f} > {wk2[READS_FIRST]:.1f}",
                     wk2[WRITES_FIRST] > 1.05 * wk2[READS_FIRST], ref="T-app + T-app plot"))
    grid = [(r, w) for r in CONFIG_READ for w in CONFIG_WRITE]
    reads = [_at(res, "R256-W256", k, "read_kiops", "r") for k in grid]
    writes = [_at(res, "R256-W256", k, "write_kiops", "w") for k in grid]
    spread_r, spread_w = max(reads) / max(min(reads), 1e-9), max(writes) / max(min(writes), 1e-9)
    out.append(Check("sensitivity", "R256-W256: max/min over the configurations, read KIOPS > write KIOPS",
                     "read performance is more sensitive than write", f"{spread_r:.1f}x > {spread_w:.1f}x",
                     spread_r > 1.05 * spread_w, ref="T-app + T-app plot"))
    return out


def config_figures(res: Results) -> list[Figure]:
    ylabels = [_lat_label(r) for r in CONFIG_READ]
    xlabels = [_lat_label(w) for w in CONFIG_WRITE]
    panels = []
    for title, workload, metric, jobname, scale in (
            ("(a) L-app + T-app: read P99", "R1-W256", "read_p99_us", "r", 1e-3),
            ("(b) L-app + T-app: write throughput", "R1-W256", "write_kiops", "w", 1),
            ("(c) T-app + T-app: read throughput", "R256-W256", "read_kiops", "r", 1),
            ("(d) T-app + T-app: write throughput", "R256-W256", "write_kiops", "w", 1)):
        vals = [[_at(res, workload, (r, w), metric, jobname) * scale for w in CONFIG_WRITE] for r in CONFIG_READ]
        base = _at(res, workload, DEFAULT, metric, jobname) * scale
        unit = "ms" if metric.endswith("p99_us") else "KIOPS"
        panels.append(Panel(title, "heatmap", xlabel="write_lat_nsec", ylabel="read_lat_nsec", heat=Heat(
            xlabels, ylabels, [[v / base for v in row] for row in vals],
            text=[[f"{v:.2f} {unit}" if unit == "ms" else f"{v:.0f}" for v in row] for row in vals],
            zmin=0, zmax=2, colorbar="relative to the default (2 ms, 10 ms)")))
    return [Figure("seed003-kyber-config", "configuration plots", "Kyber's target latencies as a priority knob",
                   panels, cols=2,
                   caption="Cells: the value; colour: relative to the default (2 ms, 10 ms). The slides: a lower "
                   "target latency gives lower latency and higher throughput; reads are more sensitive to the "
                   "configuration than writes.")]


def config_tables(res: Results) -> list[Table]:
    rows = []
    for r in CONFIG_READ:
        for w in CONFIG_WRITE:
            p = {"scheduler.read_lat_nsec": r, "scheduler.write_lat_nsec": w}
            tok = res.mean("R256-W256", p, lambda x: kyber_tokens(x)[1])
            rows.append([_lat_label(r), _lat_label(w),
                         f"{_at(res, 'R1-W256', (r, w), 'read_p99_us', 'r') / 1000:.2f}",
                         f"{_at(res, 'R1-W256', (r, w), 'write_kiops', 'w'):.1f}",
                         f"{_at(res, 'R256-W256', (r, w), 'read_kiops', 'r'):.1f}",
                         f"{_at(res, 'R256-W256', (r, w), 'write_kiops', 'w'):.1f}", f"{tok:.0f}"])
    return [Table("seed003-kyber-config", "configuration plots", "Every configuration (iosched)",
                  ["R lat", "W lat", "R1-W256 read P99 (ms)", "R1-W256 write KIOPS", "R256-W256 read KIOPS",
                   "R256-W256 write KIOPS", "R256-W256 W tokens"], rows)]


CONFIG_EXP = PaperExperiment(
    name="seed003-kyber", seed=SEED, title="Kyber's read/write configuration on mixed workloads",
    refs=("configuration plots",),
    description="Kyber with read_lat_nsec x write_lat_nsec over {0, 100 µs, 2 ms, 1 s} x {0, 100 µs, 10 ms, 1 s}: "
    "an L-app (QD 1) against a T-app writer (QD 256), and a T-app reader against a T-app writer (QD 256 each).",
    series=(Series("R1-W256", _config_spec("R1-W256")), Series("R256-W256", _config_spec("R256-W256"))),
    quick={"duration": "1s", "repeat": 1}, checks=config_checks, figures=config_figures, tables=config_tables,
    paper=(Number("slide 'Read L-app + Write T-app'", "prioritising reads", "low read latency at the cost of write "
                  "throughput"),
           Number("slide 'Read T-app + Write T-app'", "lower target latency", "higher throughput"),
           Number("slide 'Conclusion'", "sensitivity", "read performance is more sensitive than write")),
    notes=("The slides' plots are images without numbers: the checks test the messages they state.",
           "The file-system part (ext4, xfs, f2fs) is not modelled: the simulator has no file system."),
)

register(BASELINE_EXP, CONFIG_EXP)
