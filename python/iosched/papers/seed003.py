"""Seed 003 (HotCloudPerf'24 slides, "A Systematic Configuration Space Exploration of the Linux Kyber I/O
Scheduler"): the baseline table of the Samsung 980 PRO under none, and the read/write configuration plots.

The baseline's single-workload rows (R1, R256, W1, W256) are calibration inputs of the 980 PRO preset; its mixed
rows are findings (read/write interference), as are the configuration plots' messages. The slides give no numbers
for the configuration plots (they are images), so their checks test the messages the slides state.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Callable

from ..report.figures import CYCLE, Figure, Heat, Panel, Table, Trace
from . import scoring
from .registry import CALIBRATION as CALIBRATION_FINDING
from .registry import Check, Number, PaperExperiment, Results, Series, one_row, register
from .seed000 import MS, US, R, W, fio, job, kyber_mean_tokens, ratio_ok, spec, value

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
                out.append(Check(CALIBRATION_FINDING, f"{w}: {label}", f"{p:,.1f}", f"{v:,.1f}", ratio_ok(v, p, 0.10),
                                 p, v, "baseline table"))
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
        f"{at('R1-W256', 'read_kiops')} K (0.3 K): its mean wait is longer; R1-W1's read P99 "
        f"{at('R1-W1', 'read_p99_us')} µs (1,879): a QD-1 writer never fills the buffer, so the units program page "
        "by page and a read waits for at most one program. R256-W1's "
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


# ================================================================ Kyber's target grids, as the artifact ran them

# The artifact's raw-device grids (../shared/reference/kyber-config-artifact/README.md): read_lat_nsec x
# write_lat_nsec, the QD-256 writer's grids with 100 ms in both, the QD-1 writer's without.
GRID_READ = (50 * US, 100 * US, 250 * US, 500 * US, 1 * MS, 2 * MS, 5 * MS, 10 * MS, 100 * MS)
GRID_WRITE = (20 * US, 50 * US, 100 * US, 250 * US, 500 * US, 1 * MS, 2 * MS, 5 * MS, 10 * MS, 100 * MS)
GRIDS = ("R1-W1", "R1-W256", "R256-W1", "R256-W256")
READS_FIRST, WRITES_FIRST = (50 * US, 100 * MS), (100 * MS, 20 * US)
GRID_QUANTITIES = ("read_kiops", "write_kiops", "read_clat_p99", "write_clat_p99")
TOKEN_QUANTITIES = ("read_tokens", "write_tokens")
# Each of the artifact's runs reloaded Kyber (depths back to 256 read, 128 write) and measured 360 s after a 360 s
# ramp. The model's Kyber moves its depths every 100 ms window and the drive is in garbage collection from the start
# (preconditioned): 4 s of ramp, then 2 s measured, 8 s where the reader has QD 1 (its P99 needs the samples: ~1,000
# reads a second beside a QD-256 writer). Against 10 s + 5 s (20 s measured for QD 1), IOPS moved by at most 1.5%
# and P99s by at most 3% (docs/papers.md, seed 003).
GRID_RAMP = "4s"
GRID_QUICK = {"duration": "500ms", "ramp": "2s"}
# The raw grids' drive state. The artifact's raw runs never erased or preconditioned the drive (its README): they saw
# whatever its earlier use left, weeks after the slides' baseline table, and the unthrottled QD-256 writer gets 112-162
# K beside a reader where the slides' W256 alone got 70 K (the preset's default state): a writer cannot get more beside
# a reader than alone on one state. The state is fitted to the grids' ONE measured input (issue 18 allows one per drive
# state): the writer of a cell that is as near a lone writer as the grids have, R1-W256 at R 100 ms (reads are never
# over target, so Kyber never throttles the writes) and W 1 ms (writes always over it, so their depth stays at Kyber's
# 128): 131.3 K over 5 repetitions (SD 9.8 K). The row's other cells from W 20 µs to 10 ms are alike (121.6-132.7 K);
# W 1 ms is taken because W 20 µs is the writes-first corner that the slides' messages compare (grid_checks_from),
# which must stay a prediction. Scored as calibration, not counted. Solved by simulation (`calibration_targets`): a
# freed fraction of 0.095 gives 133.9 K (0.09: 125.9 K, 0.10: 135.9 K; with garbage collection's first-order formula
# before 2026-12-05, 0.09 gave 129.9 K). What the freed fraction stands for is seed 000's named
# assumption (presets/README.md, "drive states"): more spare area than a greedy-GC model of a full drive has.
GRID_DRIVE_STATE = {"condition": "preconditioned", "trimmed_fraction": 0.095}
# That input's cell (Kyber's read and write targets in R1-W256) and its value; calibration_targets fits to the same.
GRID_STATE_WORKLOAD, GRID_STATE_TARGETS = "R1-W256", (100 * MS, 1 * MS)
GRID_STATE_INPUT_KIOPS = 131.34


def _grid_classify(p: scoring.RefPoint) -> tuple[str, str]:
    """The raw grids' drive-state input is a calibration input (shown apart, not counted); every other cell is a
    finding."""
    if p.key == grid_key(GRID_STATE_WORKLOAD, *GRID_STATE_TARGETS, "write_kiops"):
        return scoring.CALIBRATION, ("calibration input (the raw grids' drive state, seed003.GRID_DRIVE_STATE): the "
                                     "unthrottled QD-256 writer beside the QD-1 reader")
    return scoring.FINDING, ""


def grid_duration(workload: str) -> str:
    return "8s" if workload.startswith("R1-") else "2s"


def grid_targets(workload: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The read and write targets of a workload's grid (without 100 ms where the writer has QD 1)."""
    if workload.endswith("-W1"):
        return GRID_READ[:-1], GRID_WRITE[:-1]
    return GRID_READ, GRID_WRITE


def target_label(ns: int) -> str:
    """A target in the artifact's words: 50000 -> "50us", 2000000 -> "2ms"."""
    return f"{ns // MS}ms" if ns % MS == 0 else f"{ns // US}us"


def _grid_jobs(workload: str) -> list[dict]:
    """One fio process, two jobs: the reader on CPU 1, the writer on CPU 2 (io_uring, direct, norandommap, the
    whole device), at the workload's depths."""
    reader, writer = workload.split("-")
    return [fio("r", R, int(reader[1:]), cpus="1"), fio("w", W, int(writer[1:]), cpus="2")]


def _grid_spec(workload: str) -> dict[str, Any]:
    reads, writes = grid_targets(workload)
    return _on_grid_drive(spec(_grid_jobs(workload), {"scheduler.read_lat_nsec": list(reads),
                                                      "scheduler.write_lat_nsec": list(writes)},
                               repeat=1, scheduler={"name": "kyber"}, duration=grid_duration(workload),
                               ramp=GRID_RAMP))


def _on_grid_drive(out: dict[str, Any]) -> dict[str, Any]:
    """The spec with its drive in the raw grids' state (GRID_DRIVE_STATE)."""
    out["devices"] = [dict(out["devices"][0], **GRID_DRIVE_STATE)]
    return out


@lru_cache(maxsize=1)
def grid_reference() -> list[scoring.RefPoint]:
    """The artifact's raw-device grids (papers/data/kyber-config/grid_points.csv, written by
    scripts/kyber-config-grid-points): per cell the mean over the repetitions and their SD."""
    return scoring.load_reference(scoring.DATA / "kyber-config" / "grid_points.csv")


@lru_cache(maxsize=1)
def grid_units() -> dict[tuple[str, str], str]:
    """(grid, quantity) -> the reference's unit: P99s in ms, but µs for the QD-1 writer's."""
    return {(p.figure, p.y_name): p.y_unit for p in grid_reference()}


def grid_key(workload: str, read_ns: int, write_ns: int, quantity: str) -> scoring.Key:
    """Where a cell's value stands in grid_points.csv."""
    return scoring.Key(f"grid-{workload}", f"R={target_label(read_ns)}", target_label(write_ns), quantity)


def _unit_scale(unit: str) -> float:
    """From the simulator's µs (P99s) or KIOPS to the reference's unit."""
    return {"ms": 1e-3, "us": 1.0, "KIOPS": 1.0}[unit]


def grid_values(res: Results) -> scoring.Values:
    """Every grid cell's simulated value, keyed like grid_points.csv and in its units."""
    out: scoring.Values = {}
    for workload in GRIDS:
        reads, writes = grid_targets(workload)
        for rl in reads:
            for wl in writes:
                point = {"scheduler.read_lat_nsec": rl, "scheduler.write_lat_nsec": wl}
                for q, metric, jobname in (("read_kiops", "read_kiops", "r"), ("write_kiops", "write_kiops", "w"),
                                           ("read_clat_p99", "read_p99_us", "r"),
                                           ("write_clat_p99", "write_p99_us", "w")):
                    scale = _unit_scale(grid_units()[f"grid-{workload}", q])
                    out[grid_key(workload, rl, wl, q)] = res.mean(
                        workload, point, lambda r, m=metric, j=jobname: value(r, m, j)) * scale
                for i, q in enumerate(TOKEN_QUANTITIES):
                    out[grid_key(workload, rl, wl, q)] = res.mean(workload, point,
                                                                   lambda r, i=i: kyber_mean_tokens(r)[i])
    return out


def _grid_measure(res: Results) -> scoring.Values:
    return res.memo("grid-values", grid_values)


def _corner(v: scoring.Values, workload: str, rw: tuple[int, int], q: str) -> float:
    return v[grid_key(workload, rw[0], rw[1], q)]


def tokens_hold(sim: float | None, paper: float) -> bool:
    """Kyber's mean depth of a cell: within ±25% of the artifact's, or within one token (issue 23)."""
    return sim is not None and (abs(sim - paper) <= 1.0 or scoring.within(sim / paper if paper else None))


PRIORITY = ("a relatively lower target latency gives lower latency and higher throughput (block layer): reads first "
            "(R 50 µs, W 100 ms) against writes first (R 100 ms, W 20 µs)")


def grid_checks_from(v: scoring.Values, ref: scoring.Values) -> list[Check]:
    """The slides' messages on the grids' corners (reads first: R 50 µs, W 100 ms; writes first: R 100 ms,
    W 20 µs), "a < b" by more than 5%; and Kyber's depths cell by cell. ``ref``: the artifact's own values."""
    def pair(workload: str, q: str) -> tuple[float, float, float, float]:
        """Reads first and writes first, simulated, then the artifact's."""
        return (_corner(v, workload, READS_FIRST, q), _corner(v, workload, WRITES_FIRST, q),
                _corner(ref, workload, READS_FIRST, q), _corner(ref, workload, WRITES_FIRST, q))

    out: list[Check] = []
    s_rf, s_wf, p_rf, p_wf = pair("R1-W256", "read_clat_p99")
    out.append(Check("priority", "R1-W256: read P99 (ms), reads first (R 50 µs, W 100 ms) < writes first (R 100 ms, "
                     "W 20 µs)", f"{p_rf:.2f} < {p_wf:.2f}", f"{s_rf:.2f} < {s_wf:.2f}", s_rf < 0.95 * s_wf,
                     ref="L-app + T-app plot"))
    s_rf, s_wf, p_rf, p_wf = pair("R1-W256", "write_kiops")
    out.append(Check("priority", "R1-W256: write KIOPS, reads first < writes first",
                     f"{p_rf:.1f} < {p_wf:.1f}", f"{s_rf:.1f} < {s_wf:.1f}", s_rf < 0.95 * s_wf,
                     ref="L-app + T-app plot"))
    s_rf, s_wf, p_rf, p_wf = pair("R256-W256", "read_kiops")
    out.append(Check("priority", "R256-W256: read KIOPS, reads first > writes first", f"{p_rf:.1f} > {p_wf:.1f}",
                     f"{s_rf:.1f} > {s_wf:.1f}", s_rf > 1.05 * s_wf, ref="T-app + T-app plot"))
    s_rf, s_wf, p_rf, p_wf = pair("R256-W256", "write_kiops")
    out.append(Check("priority", "R256-W256: write KIOPS, writes first > reads first", f"{p_wf:.1f} > {p_rf:.1f}",
                     f"{s_wf:.1f} > {s_rf:.1f}", s_wf > 1.05 * s_rf, ref="T-app + T-app plot"))

    # The slides' first claim is one finding: its four clauses are one row (registry.one_row).
    out = [one_row("priority", PRIORITY, out)]

    def spread(values: scoring.Values, q: str) -> float:
        xs = [x for k, x in values.items() if k.figure == "grid-R256-W256" and k.quantity == q]
        return max(xs) / max(min(xs), 1e-9)
    s_r, s_w, p_r, p_w = spread(v, "read_kiops"), spread(v, "write_kiops"), spread(ref, "read_kiops"), \
        spread(ref, "write_kiops")
    out.append(Check("sensitivity", "R256-W256: max/min over the grid, read KIOPS > write KIOPS",
                     f"{p_r:.1f}x > {p_w:.1f}x", f"{s_r:.1f}x > {s_w:.1f}x", s_r > 1.05 * s_w,
                     ref="T-app + T-app plot"))
    out.append(tokens_check(v, ref, "grid-", "every cell of the four grids"))
    return out


def tokens_check(v: scoring.Values, ref: scoring.Values, figures: str, cells_named: str) -> Check:
    """Kyber's depths of the grids whose names start with ``figures``: the share within ±25% or one token."""
    cells = [(k, x) for k, x in ref.items() if k.quantity in TOKEN_QUANTITIES and k.figure.startswith(figures)]
    held = sum(tokens_hold(v.get(k), x) for k, x in cells)
    return Check("tokens", f"Kyber's mean read and write depth over the measured window, {cells_named}: within ±25% "
                 "of the artifact's or within one token (kyber_tokens.csv)",
                 f"{len(cells)} depths, >= {scoring.TARGET_SHARE:.0%} within", f"{held} of {len(cells)}",
                 held >= scoring.TARGET_SHARE * len(cells), ref="kyber_adjust trace")


def grid_reference_values() -> scoring.Values:
    return scoring.reference_values(grid_reference())


def grid_checks(res: Results) -> list[Check]:
    return grid_checks_from(_grid_measure(res), grid_reference_values())


LOG_QUANTITIES = {"read_kiops", "read_clat_p99", "write_clat_p99"}


def _heat_panels(v: scoring.Values, ref: scoring.Values, workload: str, q: str, unit: str) -> list[Panel]:
    """Paper | iosched | ratio for one quantity of one grid; the two value maps on one colour scale."""
    reads, writes = grid_targets(workload)
    xs, ys = [target_label(w) for w in writes], [target_label(r) for r in reads]
    paper = [[ref.get(grid_key(workload, r, w, q)) for w in writes] for r in reads]
    sim = [[v.get(grid_key(workload, r, w, q)) for w in writes] for r in reads]
    log = q in LOG_QUANTITIES
    tf = (lambda x: math.log10(x) if x and x > 0 else None) if log else (lambda x: x)  # noqa: E731
    both = [z for row in paper + sim for z in map(tf, row) if z is not None]
    lo, hi = (min(both), max(both)) if both else (0.0, 1.0)
    fmt = lambda x: "" if x is None else f"{x:.3g}"  # noqa: E731
    bar = f"log10 {unit}" if log else unit

    def heat(rows: list[list[float | None]]) -> Heat:
        return Heat(xs, ys, [[tf(x) for x in row] for row in rows], text=[[fmt(x) for x in row] for row in rows],
                    zmin=lo, zmax=hi, colorbar=bar, own_scale=True)
    ratio = [[(s / p if s is not None and p else None) for s, p in zip(srow, prow)] for srow, prow in zip(sim, paper)]
    name = q.replace("_clat_p99", " P99").replace("_kiops", " KIOPS").replace("_", " ")
    return [Panel(f"{name} ({unit}): artifact", "heatmap", heat=heat(paper), xlabel="write_lat_nsec",
                  ylabel="read_lat_nsec"),
            Panel(f"{name}: iosched", "heatmap", heat=heat(sim), xlabel="write_lat_nsec", ylabel="read_lat_nsec"),
            Panel(f"{name}: iosched / artifact", "heatmap", xlabel="write_lat_nsec", ylabel="read_lat_nsec",
                  heat=Heat(xs, ys, [[None if x is None else math.log2(x) for x in row] for row in ratio],
                            text=[[fmt(x) for x in row] for row in ratio], zmin=-2, zmax=2,
                            colorbar="log2 ratio (0: equal)", own_scale=True))]


def grid_figures(res: Results) -> list[Figure]:
    v, ref = _grid_measure(res), grid_reference_values()
    figs = []
    for workload in GRIDS:
        fig = f"grid-{workload}"
        panels = [p for q in GRID_QUANTITIES for p in _heat_panels(v, ref, workload, q, grid_units()[fig, q])]
        figs.append(Figure(f"seed003-{fig}", "configuration plots", f"Kyber's target grid, {workload}: the "
                           "artifact, iosched and their ratio", panels, cols=3,
                           caption="Rows: read_lat_nsec (50 µs at the bottom); columns: write_lat_nsec. Artifact: "
                           "the mean over its repetitions (kyber-config artifact, raw device). A cell holds within "
                           "±25% of the artifact's mean, or within its repetitions' SD where that is wider."))
    return figs


def _grid_why(v: scoring.Values) -> dict[str, str]:
    ref = grid_reference_values()

    def span(workload: str, q: str, values: scoring.Values) -> str:
        xs = [x for k, x in values.items() if k.figure == f"grid-{workload}" and k.quantity == q]
        return f"{min(xs):.3g}-{max(xs):.3g}" if xs else "missing"
    return {
        "grid-R1-W1": (f"a QD-1 reader beside a QD-1 writer: the model's reader gets {span('R1-W1', 'read_kiops', v)} "
                       f"KIOPS over the grid, the artifact's {span('R1-W1', 'read_kiops', ref)} (bimodal over time in "
                       "the artifact, its cells' SD 50-67% of their mean; docs/papers.md)"),
        "grid-R1-W256": (f"the L-app: read KIOPS {span('R1-W256', 'read_kiops', v)} against "
                         f"{span('R1-W256', 'read_kiops', ref)}, read P99 {span('R1-W256', 'read_clat_p99', v)} ms "
                         f"against {span('R1-W256', 'read_clat_p99', ref)}: its reads wait out the flash's programs "
                         "(up to two, with the cache register loaded) and garbage collection's copies in full (the "
                         "preset cannot suspend), most of the time, where the artifact's wait as long but less often "
                         "(docs/papers.md); write KIOPS "
                         f"{span('R1-W256', 'write_kiops', v)} against {span('R1-W256', 'write_kiops', ref)}"),
        "grid-R256-W1": (f"read KIOPS {span('R256-W1', 'read_kiops', v)} against "
                         f"{span('R256-W1', 'read_kiops', ref)} (one repetition in the artifact), read P99 "
                         f"{span('R256-W1', 'read_clat_p99', v)} ms against {span('R256-W1', 'read_clat_p99', ref)}: "
                         "the model's reads spread too little at the low end (their P10 over twice the artifact's: "
                         "fewer of them wait at the flash at a time) and, beside a QD-1 writer that never fills the "
                         "buffer, wait for at most one program (units cache-program only while writes back up), "
                         "short of the artifact's top; the QD-1 writer's P99 "
                         f"{span('R256-W1', 'write_clat_p99', v)} µs against "
                         f"{span('R256-W1', 'write_clat_p99', ref)}: "
                         "its tail is a uniform jitter fitted to the writer alone (docs/papers.md)"),
        "grid-R256-W256": (f"read KIOPS {span('R256-W256', 'read_kiops', v)} against "
                           f"{span('R256-W256', 'read_kiops', ref)}, read P99 "
                           f"{span('R256-W256', 'read_clat_p99', v)} ms against "
                           f"{span('R256-W256', 'read_clat_p99', ref)}, write KIOPS "
                           f"{span('R256-W256', 'write_kiops', v)} against {span('R256-W256', 'write_kiops', ref)}: "
                           "where they miss, the model's QD-256 reader still gets more and waits less beside the same "
                           "write rate (where Kyber throttles the writer, its buffer does not fill and the units "
                           "program page by page, so a read waits for one program)"),
    }


GRID_POINTS = scoring.PointScoring(grid_reference, tuple(f"grid-{w}" for w in GRIDS), _grid_measure,
                                   classify=_grid_classify, why=_grid_why, spread=True)


def grid_tables(res: Results) -> list[Table]:
    v, ref = _grid_measure(res), grid_reference_values()
    rows = []
    for workload in GRIDS:
        reads, writes = grid_targets(workload)
        for rw in ((reads[0], writes[-1]), (reads[-1], writes[0])):
            rows.append([workload, target_label(rw[0]), target_label(rw[1])]
                        + [f"{_corner(v, workload, rw, q):.3g} ({_corner(ref, workload, rw, q):.3g})"
                           for q in GRID_QUANTITIES + TOKEN_QUANTITIES])
    return [Table("seed003-kyber-corners", "configuration plots", "The grids' corners: iosched (artifact)",
                  ["workload", "R lat", "W lat", "R KIOPS", "W KIOPS", "R P99", "W P99", "R tokens", "W tokens"],
                  rows, caption="Reads first (R 50 µs, W 100 ms) and writes first (R 100 ms, W 20 µs); 10 ms for "
                  "100 ms beside the QD-1 writer, whose grids stop there. P99s in the artifact's units: ms, but µs "
                  "for the QD-1 writer's.")]


CONFIG_EXP = PaperExperiment(
    name="seed003-kyber", seed=SEED, title="Kyber's target grids on the raw drive, as the artifact ran them",
    refs=("configuration plots",),
    description="Kyber with read_lat_nsec x write_lat_nsec over the artifact's grids (read 50 µs-100 ms, write "
    "20 µs-100 ms; without 100 ms beside a QD-1 writer): one fio process, a 4 KiB random reader on CPU 1 and a 4 KiB "
    "random writer on CPU 2 (io_uring), at QD 1 or 256 each (R1-W1, R1-W256, R256-W1, R256-W256), on the raw 980 PRO "
    "in the grids' drive state (GRID_DRIVE_STATE: preconditioned, 9% freed, fitted to one cell's writer).",
    series=tuple(Series(w, _grid_spec(w)) for w in GRIDS),
    quick=GRID_QUICK, checks=grid_checks, figures=grid_figures, tables=grid_tables, points=GRID_POINTS,
    paper=(Number("slide 'Read L-app + Write T-app'", "prioritising reads", "low read latency at the cost of write "
                  "throughput"),
           Number("slide 'Read T-app + Write T-app'", "lower target latency", "higher throughput"),
           Number("slide 'Conclusion'", "sensitivity", "read performance is more sensitive than write")),
    notes=("Scored cell by cell against the artifact's heat maps (papers/data/kyber-config, from the public "
           "kyber-config artifact): read and write KIOPS and P99 of every cell of the four raw-device grids; a cell "
           "holds within ±25% of the artifact's mean over its repetitions, or within their SD where that is wider.",
           "One simulated run per cell (the artifact: 5 repetitions, 1 for R256-W1).",
           "The drive is in the grids' own state, fitted to ONE of their measured inputs: the writer of R1-W256 at "
           "R 100 ms / W 1 ms (131.3 K), shown as calibration and not counted (presets/README.md, drive states).",
           "The file-system grids (ext4, xfs, f2fs) are experiment seed003-fs."),
)


# ================================================================ the same workloads on ext4, xfs and f2fs

# The artifact's file-system runs (kyber-config-artifact README, "File-system runs"): before every run the drive was
# secure-erased, a new file system made and mounted with defaults, and one 50 GiB file written sequentially; fio then
# ran R1-W256 and R256-W256 on that file (direct=1, size=100%) with Kyber at the 2 x 2 corner targets, and under None
# (xfs R256-W256 None left no results). The drive state is therefore not the raw grids': fresh, with ~5% of the LBA
# space holding data (the README's figure: FS_DRIVE_STATE), the writes confined to the file. That data fits the
# drive's SLC cache, so the model runs it in SLC mode (docs/simulator.md, device).
FILESYSTEMS = ("ext4", "xfs", "f2fs")
FS_WORKLOADS = ("R1-W256", "R256-W256")
FS_TARGETS = (50 * US, 100 * MS), (20 * US, 100 * MS)
FS_FILE_BYTES = 53_687_091_200
FS_DRIVE_STATE = {"condition": "fresh", "trimmed_fraction": 0.95}
FS_NONE = (("ext4", "R1-W256"), ("xfs", "R1-W256"), ("f2fs", "R1-W256"), ("ext4", "R256-W256"), ("f2fs", "R256-W256"))
# The fresh drive has no garbage collection to converge through: 2 s of ramp, 2 s measured (4 s for the QD-1 reader's
# P99, ~15,000 reads a second).
FS_RAMP = "2s"
FS_QUICK = GRID_QUICK


def fs_duration(workload: str) -> str:
    return "4s" if workload.startswith("R1-") else "2s"


def fs_figure(fs: str, workload: str) -> str:
    """The grid's name in grid_points.csv: "fs-ext4-R1-W256"; fs "raw": the raw grid's."""
    return f"grid-{workload}" if fs == "raw" else f"fs-{fs}-{workload}"


def _fs_spec(fs: str, workload: str, scheduler: str) -> dict[str, Any]:
    """The workload on a 50 GiB file on a fresh (secure-erased) drive; fs "raw": the raw grids' drive, jobs and
    runtimes (seed003-kyber's cells)."""
    sweep = ({"scheduler.read_lat_nsec": list(FS_TARGETS[0]), "scheduler.write_lat_nsec": list(FS_TARGETS[1])}
             if scheduler == "kyber" else {})
    if fs == "raw":
        return _on_grid_drive(spec(_grid_jobs(workload), sweep, repeat=1, scheduler={"name": scheduler},
                                   duration=grid_duration(workload), ramp=GRID_RAMP))
    jobs = [dict(j, size=str(FS_FILE_BYTES)) for j in _grid_jobs(workload)]
    out = spec(jobs, sweep, repeat=1, scheduler={"name": scheduler}, duration=fs_duration(workload), ramp=FS_RAMP)
    out["devices"] = [dict(out["devices"][0], **FS_DRIVE_STATE, filesystem=fs)]
    return out


def _fs_series() -> tuple[Series, ...]:
    kyber = [Series(f"{fs}-{w}", _fs_spec(fs, w, "kyber")) for w in FS_WORKLOADS for fs in FILESYSTEMS]
    none = [Series(f"{fs}-{w}-none", _fs_spec(fs, w, "none")) for fs, w in FS_NONE]
    # Claim 3 sets the file systems beside the raw device's R1-W256 corners: the same cells as seed003-kyber's.
    return (*kyber, *none, Series("raw-R1-W256", _fs_spec("raw", "R1-W256", "kyber")))


def fs_values(res: Results) -> scoring.Values:
    """Every file-system cell's simulated value (and the raw R1-W256 corners), keyed like grid_points.csv."""
    out: scoring.Values = {}
    cells = [(fs, w, {"scheduler.read_lat_nsec": rl, "scheduler.write_lat_nsec": wl}, (rl, wl))
             for fs in FILESYSTEMS for w in FS_WORKLOADS for rl in FS_TARGETS[0] for wl in FS_TARGETS[1]]
    cells += [("raw", "R1-W256", {"scheduler.read_lat_nsec": rl, "scheduler.write_lat_nsec": wl}, (rl, wl))
              for rl in FS_TARGETS[0] for wl in FS_TARGETS[1]]
    cells += [(fs, w, {}, None) for fs, w in FS_NONE]
    for fs, workload, point, targets in cells:
        series = f"{fs}-{workload}" + ("-none" if targets is None else "")
        figure = fs_figure(fs, workload)

        def key(q: str) -> scoring.Key:
            if targets is None:
                return scoring.Key(figure, "none", "none", q)
            return scoring.Key(figure, f"R={target_label(targets[0])}", target_label(targets[1]), q)
        for q, metric, jobname in (("read_kiops", "read_kiops", "r"), ("write_kiops", "write_kiops", "w"),
                                   ("read_clat_p99", "read_p99_us", "r"), ("write_clat_p99", "write_p99_us", "w")):
            scale = _unit_scale(grid_units()[figure, q])
            out[key(q)] = res.mean(series, point, lambda r, m=metric, j=jobname: value(r, m, j)) * scale
        if targets is not None:
            for i, q in enumerate(TOKEN_QUANTITIES):
                out[key(q)] = res.mean(series, point, lambda r, i=i: kyber_mean_tokens(r)[i])
    return out


def _fs_measure(res: Results) -> scoring.Values:
    return res.memo("fs-values", fs_values)


def _fs_cell(v: scoring.Values, fs: str, workload: str, rw: tuple[int, int], q: str) -> float:
    return v[grid_key(workload, rw[0], rw[1], q)._replace(figure=fs_figure(fs, workload))]


FS_PAIRS = ((50 * US, 20 * US), READS_FIRST, WRITES_FIRST, (100 * MS, 100 * MS))


def fs_checks_from(v: scoring.Values, ref: scoring.Values) -> list[Check]:
    """The slides' file-system claims (summary.md (c) 3-6), each one row over the file systems it names, and Kyber's
    depths on the file systems. ``ref``: the artifact's own values (for the expected column)."""
    cell = _fs_cell
    out: list[Check] = []

    def claim(rule: Callable[[scoring.Values], tuple[bool, str]], what: str, slide: str) -> None:
        """One row: the rule on the simulated values, its text on the artifact's as the expected column."""
        (ok, text), (_, expected) = rule(v), rule(ref)
        out.append(Check("file systems", what, expected, text, ok, ref=slide))

    # 3: every file system's R1-W256 read P99 below the raw device's, at each of the four pairs (artifact: 9-17x).
    def claim3(values: scoring.Values) -> tuple[bool, str]:
        ratios = [cell(values, "raw", "R1-W256", rw, "read_clat_p99") * 1e3
                  / cell(values, fs, "R1-W256", rw, "read_clat_p99") for fs in FILESYSTEMS for rw in FS_PAIRS]
        return min(ratios) > 1 / 0.95, f"raw / file system {min(ratios):.1f}x-{max(ratios):.1f}x"
    claim(claim3, "R1-W256: read P99 lower on ext4, xfs and f2fs than on the raw device, at each "
          "of the four target pairs", "L-app + T-app with file system")

    # 4: on each file system, reads first gives the lowest read P99 and the lowest write KIOPS of the four pairs.
    def claim4(values: scoring.Values) -> tuple[bool, str]:
        oks, parts = [], []
        for fs in FILESYSTEMS:
            p99 = {rw: cell(values, fs, "R1-W256", rw, "read_clat_p99") for rw in FS_PAIRS}
            kiops = {rw: cell(values, fs, "R1-W256", rw, "write_kiops") for rw in FS_PAIRS}
            others = [rw for rw in FS_PAIRS if rw != READS_FIRST]
            oks.append(p99[READS_FIRST] < 0.95 * min(p99[rw] for rw in others)
                       and kiops[READS_FIRST] < 0.95 * min(kiops[rw] for rw in others))
            # the other pairs' lowest beside it: a near miss reads as one
            parts.append(f"{fs} {p99[READS_FIRST]:.0f} µs / {kiops[READS_FIRST]:.0f} K (others from "
                         f"{min(p99[rw] for rw in others):.0f} µs / {min(kiops[rw] for rw in others):.0f} K)")
        return all(oks), "; ".join(parts)
    claim(claim4, "R1-W256: reads first (R 50 µs, W 100 ms) gives the lowest read P99 and the "
          "lowest write KIOPS of the four pairs, on each file system", "L-app + T-app with file system")

    # 5: ext4 and xfs as the raw device: reads first gives more read KIOPS, writes first more write KIOPS.
    def claim5(values: scoring.Values) -> tuple[bool, str]:
        oks, parts = [], []
        for fs in ("ext4", "xfs"):
            r = [cell(values, fs, "R256-W256", rw, "read_kiops") for rw in (READS_FIRST, WRITES_FIRST)]
            w = [cell(values, fs, "R256-W256", rw, "write_kiops") for rw in (READS_FIRST, WRITES_FIRST)]
            oks.append(r[0] > 1.05 * r[1] and w[1] > 1.05 * w[0])
            parts.append(f"{fs} R {r[0]:.0f} vs {r[1]:.0f}, W {w[1]:.0f} vs {w[0]:.0f}")
        return all(oks), "; ".join(parts)
    claim(claim5, "R256-W256 on ext4 and xfs: reads first gives more read KIOPS than writes first, "
          "writes first more write KIOPS than reads first", "T-app + T-app with file system")

    # 6: f2fs: reads first gives slightly more read KIOPS (at most +25%) but much less write KIOPS (below 0.8x).
    def claim6(values: scoring.Values) -> tuple[bool, str]:
        r = [cell(values, "f2fs", "R256-W256", rw, "read_kiops") for rw in (READS_FIRST, WRITES_FIRST)]
        w = [cell(values, "f2fs", "R256-W256", rw, "write_kiops") for rw in (READS_FIRST, WRITES_FIRST)]
        rr, wr = r[0] / r[1], w[0] / w[1]
        # The read KIOPS are shown beside their ratio: a tie (a CPU-bound reader in both corners) reads as one.
        return 1.0 < rr <= 1.25 and wr < 0.8, f"read {rr:.2f}x ({r[0]:.1f} vs {r[1]:.1f} K), write {wr:.2f}x"
    claim(claim6, "R256-W256 on f2fs: reads first over writes first gives slightly more read KIOPS "
          "(1-1.25x) and much less write KIOPS (< 0.8x)", "T-app + T-app with file system")

    out.append(tokens_check(v, ref, "fs-", "every file-system cell"))
    return out


def fs_checks(res: Results) -> list[Check]:
    return fs_checks_from(_fs_measure(res), grid_reference_values())


FS_BARS = (("R1-W256", "read_clat_p99", "(a) read P99"), ("R1-W256", "write_kiops", "(b) write KIOPS"),
           ("R256-W256", "read_kiops", "(c) read KIOPS"), ("R256-W256", "write_kiops", "(d) write KIOPS"))


def fs_figures(res: Results) -> list[Figure]:
    """The slides' bar chart (four panels; bars per file system and target pair), the artifact's bars hollow."""
    v, ref = _fs_measure(res), grid_reference_values()
    pairs = [f"{target_label(r)}/{target_label(w)}" for r, w in FS_PAIRS] + ["none"]
    panels = []
    for workload, q, title in FS_BARS:
        traces = []
        for fs in FILESYSTEMS:
            def ys(values: scoring.Values, fs: str = fs) -> list[float | None]:
                keys = [grid_key(workload, r, w, q)._replace(figure=fs_figure(fs, workload)) for r, w in FS_PAIRS]
                return [values.get(k) for k in keys] + [values.get(scoring.Key(fs_figure(fs, workload), "none",
                                                                                "none", q))]
            color = CYCLE[FILESYSTEMS.index(fs)]
            traces += [Trace(f"{fs}: artifact", pairs, ys(ref), paper=True, color=color),
                       Trace(f"{fs}: iosched", pairs, ys(v), color=color)]
        unit = grid_units()[fs_figure("ext4", workload), q]
        panels.append(Panel(f"{title}, {workload}", "bars", traces, xlabel="read / write target",
                            ylabel=unit, xcategories=pairs))
    return [Figure("seed003-fs", "file-system plots", "Kyber on ext4, xfs and f2fs: the artifact and iosched",
                   panels, cols=2, size=(14.0, 8.5), caption="R1-W256 and R256-W256 on a 50 GiB file of a freshly secure-erased drive "
                   "(kyber-config artifact), Kyber at the four corner targets and None. Artifact: the mean over its 5 "
                   "repetitions (hollow); xfs R256-W256 None has no run.")]


def _fs_why(v: scoring.Values) -> dict[str, str]:
    ref = grid_reference_values()

    def num(x: float) -> str:
        return f"{x:.0f}" if x >= 100 else f"{x:.3g}"

    def span(figure: str, q: str, values: scoring.Values) -> str:
        xs = [x for k, x in values.items() if k.figure == figure and k.quantity == q]
        return f"{num(min(xs))}-{num(max(xs))}" if xs else "missing"
    # What is known about the misses, by file system and workload (the spans above say where they are).
    known = {
        "f2fs": "f2fs's direct-I/O path is ext4's scaled by f2fs's cost over ext4's as the VM lab measured them "
                "(x1.16 per read, x4.08 per write; presets/README.md), a carry-over from an emulated CPU (the "
                "artifact's f2fs writer is the slowest of the three: None, R1-W256, 136 K against ext4's 166 K and "
                "xfs's 195 K)",
        "R256-W256": "the QD-256 reader, alone on its core and CPU-bound, completes at an even pace in the model "
                     "(its P99 about 256 / its rate), where the artifact's, at the same rate, spreads to ~2 ms at the "
                     "P99 (not explained); at R 100 ms / W 20 µs the artifact's Kyber changed the read depth only 1-6 "
                     "times per run and then kept it, the depth it kept (mean 1-76) setting the read rate (93 ± 59 "
                     "K on ext4, 133 ± 31 on xfs: the artifact's README), which the model's Kyber does not",
    }
    out = {}
    for fs in FILESYSTEMS:
        for w in FS_WORKLOADS:
            f = fs_figure(fs, w)
            out[f] = "; ".join([
                f"read KIOPS {span(f, 'read_kiops', v)} against {span(f, 'read_kiops', ref)}, write KIOPS "
                f"{span(f, 'write_kiops', v)} against {span(f, 'write_kiops', ref)}, read P99 "
                f"{span(f, 'read_clat_p99', v)} against {span(f, 'read_clat_p99', ref)}",
                *(known[k] for k in (fs, w) if k in known)])
    return out


FS_POINTS = scoring.PointScoring(grid_reference, tuple(fs_figure(fs, w) for fs in FILESYSTEMS for w in FS_WORKLOADS),
                                 _fs_measure, why=_fs_why, spread=True)

FS_EXP = PaperExperiment(
    name="seed003-fs", seed=SEED, title="Kyber on ext4, xfs and f2fs, as the artifact ran them",
    refs=("file-system plots",),
    description="R1-W256 and R256-W256 (a 4 KiB random reader on CPU 1 at QD 1 or 256, a QD-256 random writer on "
    "CPU 2, io_uring) on one 50 GiB file of a freshly secure-erased 980 PRO with ext4, xfs or f2fs: Kyber at read "
    "target 50 µs or 100 ms x write target 20 µs or 100 ms, and None; beside them the raw device's R1-W256 corners.",
    series=_fs_series(), quick=FS_QUICK, checks=fs_checks, figures=fs_figures, points=FS_POINTS,
    paper=(Number("slide 'Read L-app + Write T-app, with File System'", "file systems vs block layer",
                  "lower read latency on all three"),
           Number("slide 'Read T-app + Write T-app, with File System'", "f2fs, prioritising reads",
                  "slightly higher read, much lower write throughput")),
    notes=("Scored cell by cell against the artifact's file-system heat maps and its None runs (papers/data/"
           "kyber-config); a cell holds within ±25% of the artifact's mean over its 5 repetitions, or within their "
           "SD where that is wider.",
           "The file system is modelled as the CPU cost of its direct-I/O path on the submitting core (the host "
           "preset's filesystems, measured on the kernel backend); the file is one extent, so the device sees the "
           "4 KiB random I/O confined to its 50 GiB. Journals, metadata writes and f2fs's own cleaning are not "
           "modelled (docs/simulator.md).",
           "The drive is fresh (secure-erased, no garbage collection within a run), as before each artifact run."),
)

register(BASELINE_EXP, CONFIG_EXP, FS_EXP)
