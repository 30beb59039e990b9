"""A small paper experiment for tests, and a results folder for it made from synthetic simulator results (no
simulator needed): the report, the figures and the browser test run on it."""

from __future__ import annotations

from pathlib import Path

from iosched import store
from iosched.papers import registry
from iosched.papers.registry import Check, Number, PaperExperiment, Results, Series
from iosched.report.figures import cdf, merge_bins
from iosched.report.figures import Figure, Heat, Panel, Table, Trace

SCHEDS = ["none", "kyber"]
DEPTHS = [1, 4, 16]


def _spec() -> dict:
    return {"duration": "1s", "ramp": "10ms", "repeat": 2, "seed": 5,
            "host": {"preset": "xeon-silver-4210r-10c"}, "devices": [{"preset": "samsung-980pro-1tb"}],
            "job": [{"name": "r", "rw": "randread", "iodepth": 1, "cpus_allowed": "0"}],
            "sweep": {"scheduler.name": SCHEDS, "job.r.iodepth": DEPTHS}}


def _kiops(r: dict) -> float:
    return r["jobs"][0]["read"]["ios"] / r["jobs"][0]["window_ns"] * 1e6


def checks(res: Results) -> list[Check]:
    k = {s: res.mean("qd", {"scheduler.name": s, "job.r.iodepth": 16}, _kiops) for s in SCHEDS}
    return [Check("T1", "kyber KIOPS at QD 16", "0.5", f"{k['kyber']:.2f}", k["kyber"] > 0, 0.5, k["kyber"], "Fig. 1"),
            Check("T2", "a shape that does not hold", "yes", "no", False)]


def figures(res: Results) -> list[Figure]:
    lines = Panel("KIOPS vs QD", "lines", [Trace(s, DEPTHS, [res.mean("qd", {"scheduler.name": s, "job.r.iodepth": d},
                                                                     _kiops) for d in DEPTHS]) for s in SCHEDS]
                  + [Trace("paper: kyber", [16], [0.5], paper=True)], xlabel="QD", ylabel="KIOPS", xlog=True)
    cdfs = []
    for s in SCHEDS:
        xs, ys = cdf(merge_bins([r["jobs"][0]["read"] for r in res.results("qd", {"scheduler.name": s})]))
        cdfs.append(Trace(s, xs, ys, marks=[(xs[-1], f"{s} max")]))
    heat = Panel("heatmap", "heatmap", heat=Heat(SCHEDS, [str(d) for d in DEPTHS],
                                                 [[1.0 + i + j for j in range(2)] for i in range(3)], zmin=0, zmax=4,
                                                 colorbar="x"))
    bars = Panel("bars", "bars", [Trace("iosched", ["a", "b"], [1.0, 2.0]), Trace("paper", ["a", "b"], [1.5, None],
                                                                                  paper=True)], xcategories=["a", "b"])
    scatter = Panel("scatter", "scatter", [Trace("P99", [1, 2], [3, 4], symbol="diamond")], ylog=True)
    return [Figure("toy-fig1", "Fig. 1", "Toy lines and CDFs", [lines, Panel("CDF", "cdf", cdfs, xlog=True)]),
            Figure("toy-fig2", "Fig. 2", "Toy heatmap, bars, scatter", [heat, bars, scatter])]


def tables(res: Results) -> list[Table]:
    return [Table("toy-table", "Table 1", "Toy table", ["a", "b"], [["1", "<2>"]])]


TOY = PaperExperiment(
    name="toy", seed="999", title="A toy experiment", refs=("Fig. 1", "Fig. 2", "Table 1"),
    series=(Series("qd", _spec()),), checks=checks, figures=figures, tables=tables,
    paper=(Number("Fig. 1", "kyber KIOPS at QD 16", 0.5, "KIOPS"),), quick={"duration": "100ms", "repeat": 1},
    notes=("Synthetic results.",))


def toy_reference() -> list:
    """A paper's plotted points for TOY: KIOPS per scheduler and depth (and one not simulated)."""
    from iosched.papers.scoring import RefPoint

    pts = [RefPoint("fig-1", s, "iodepth", str(d), "read_kiops", 1.0 + d / 2, "KIOPS", "", "yes", "toy")
           for s in SCHEDS for d in DEPTHS]
    return pts + [RefPoint("fig-1", "spdk", "iodepth", "1", "read_kiops", 2.0, "KIOPS", "", "yes", "toy")]


def toy_measure(res: Results) -> dict:
    from iosched.papers.scoring import Key

    return {Key("fig-1", s, str(d), "read_kiops"): res.mean("qd", {"scheduler.name": s, "job.r.iodepth": d}, _kiops)
            for s in SCHEDS for d in DEPTHS}


def scored_toy() -> PaperExperiment:
    """TOY scored point by point against toy_reference (SPDK not simulated)."""
    import dataclasses

    from iosched.papers.scoring import FINDING, NOT_SIMULATED, PointScoring

    return dataclasses.replace(TOY, points=PointScoring(
        toy_reference, ("fig-1",), toy_measure,
        lambda p: (NOT_SIMULATED, "no bypass") if p.series == "spdk" else (FINDING, ""), {"fig-1": "toy misses"}))


def make_results(out: Path, quick: bool = False) -> None:
    """A results folder for TOY from synthetic simulator results."""
    from iosched.reproduce import plan

    from .test_results import fake_result

    tasks, entries = plan([TOY], quick)
    for t in tasks:
        store.write_run_dir(out, t.run, t.rid, fake_result(t.run))
    store.record(out, entries, [t.rid for t in tasks])


def registered(exp: PaperExperiment | None = None):
    """Register TOY (or a variant of it under its name) for the duration of a test (a context manager)."""
    import contextlib

    @contextlib.contextmanager
    def cm():
        registry._load()
        registry.register(exp or TOY)
        try:
            yield exp or TOY
        finally:
            registry._REGISTRY.pop(TOY.name, None)
    return cm()
