"""Point-by-point scoring against a paper's own data: every plotted point of a figure or table cell, the simulated
value beside it, their ratio, and the share of points within ±25%.

A reference table is a paper artifact's `figure_points.csv` (one row per plotted point, see
papers/data/icpe24/README.md): `load_reference` reads it into `RefPoint`s; a paper without an artifact declares its
tables' numbers as `RefPoint`s itself (seed 003's baseline table). An experiment measures its stored runs
into a `Values` dict keyed like the reference (`Key`: figure panel, series, point on the line, quantity), and
`score` pairs every reference point with its measured value. A point holds when sim / paper is within `BAND`
([0.8, 1.25]), or, where an experiment opts in (`PointScoring.spread`), within the paper's repetitions' spread
where that is wider; where the x coordinate is itself measured (Fig. 1's IOPS), both coordinates must. Points have
a role: findings count; calibration inputs (the presets were fitted to them), points true by construction (a
normalisation base) and points of a path the simulator does not model (SPDK) are shown with their reason and never
counted. A point the experiment should have simulated but did not is reported as missing and counts as a miss.

Nothing here is specific to one paper: seed modules declare a `PointScoring` on their experiments, and the report
draws `fidelity_figure` (paper vs simulated, log-log, coloured by figure, the band shaded).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, NamedTuple

from ..report.figures import Figure, Panel, Trace
from .registry import Check, Results

BAND = (0.8, 1.25)
TARGET_SHARE = 0.85   # issue 17: at least 85% of a paper's points within the band
DATA = Path(__file__).parent / "data"

FINDING, CALIBRATION, CONSTRUCTION, NOT_SIMULATED = "finding", "calibration", "by construction", "not simulated"
# x quantities that are measured (the x of a point is then scored too), not a setting swept by the experiment.
MEASURED_X = frozenset({"read_kiops", "read_miops", "write_kiops"})


class Key(NamedTuple):
    """Where a value stands in a paper's figure: panel, line, point on the line, and the quantity."""
    figure: str     # "fig-7a", "table-2" (figure_points.csv's panel)
    series: str     # the line or row: "bfq", "4p", "ID0", "r_lat=0"
    at: str         # the point on it: the swept x value ("10", "2ms,10ms"), or its label ("qd=64") when x is measured
    quantity: str   # "read_kiops", "read_clat_p99", "cpu_cores", ...


Values = dict[Key, float]


@dataclass(frozen=True)
class RefPoint:
    """One row of a figure_points.csv."""
    figure: str
    series: str
    x_name: str
    x_value: str
    y_name: str
    y_value: float
    y_unit: str
    point_label: str
    plotted: str
    source: str
    y_err: float | None = None   # the spread over the paper's repetitions (an SD), where its data gives one

    @property
    def x_measured(self) -> bool:
        """The x coordinate is a measured number given with the point (then it is scored too)."""
        return self.x_name in MEASURED_X and self.x_value != ""

    @property
    def at(self) -> str:
        return self.point_label if self.x_name in MEASURED_X else self.x_value

    @property
    def key(self) -> Key:
        return Key(self.figure, self.series, self.at, self.y_name)

    @property
    def x_key(self) -> Key | None:
        return Key(self.figure, self.series, self.at, self.x_name) if self.x_measured else None

    @property
    def is_plotted(self) -> bool:
        return self.plotted == "yes"

    @property
    def label(self) -> str:
        """How the report names the point: "fig-7a bfq @ 10 (read_kiops)"."""
        return f"{self.figure} {self.series} @ {self.at} ({self.y_name})" if self.at else \
            f"{self.figure} {self.series} ({self.y_name})"


def load_reference(path: Path) -> list[RefPoint]:
    """Every row of a figure_points.csv (plotted or not: checks may read both; only plotted rows are scored)."""
    with open(path, newline="") as f:
        return [RefPoint(r["figure"], r["series"], r["x_name"], r["x_value"], r["y_name"], float(r["y_value"]),
                         r["y_unit"], r["point_label"], r["plotted"], r["source"],
                         float(r["y_err"]) if r.get("y_err") else None) for r in csv.DictReader(f)]


def reference_values(points: Iterable[RefPoint]) -> Values:
    """The paper's own numbers as measurements (y, and x where measured): what the negative controls start from."""
    out: Values = {}
    for p in points:
        out[p.key] = p.y_value
        if p.x_key is not None:
            out[p.x_key] = float(p.x_value)
    return out


def ratio_of(sim: float | None, paper: float | None) -> float | None:
    if sim is None or paper is None or paper == 0:
        return None
    r = sim / paper
    return r if math.isfinite(r) else None


def within(ratio: float | None, band: tuple[float, float] = BAND) -> bool:
    return ratio is not None and band[0] <= ratio <= band[1]


def band_with_spread(point: RefPoint) -> tuple[float, float]:
    """The band a point holds within where a paper's repetitions spread wider than ±25%: [0.8, 1.25] widened to
    the mean ± one SD of the repetitions (issue 23: "within its spread over repetitions where that is wider").
    E.g. a cell of 5.9 ± 3.5 KIOPS holds from 0.41x to 1.59x, one of 2.1 ± 0.0 from 0.8x to 1.25x."""
    if not point.y_err or point.y_value <= 0:
        return BAND
    rel = point.y_err / point.y_value
    return min(BAND[0], 1 - rel), max(BAND[1], 1 + rel)


@dataclass(frozen=True)
class Scored:
    """A reference point, its role, and the simulated value (None: missing, or not simulated)."""
    point: RefPoint
    role: str
    sim: float | None
    x_sim: float | None = None
    note: str = ""      # why the point is calibration / by construction / not simulated
    band: tuple[float, float] = BAND   # what sim / paper must be within (wider where the paper's repetitions spread)

    @property
    def paper(self) -> float:
        return self.point.y_value

    @property
    def ratio(self) -> float | None:
        return ratio_of(self.sim, self.paper)

    @property
    def x_ratio(self) -> float | None:
        return ratio_of(self.x_sim, float(self.point.x_value)) if self.point.x_measured else None

    @property
    def missing(self) -> bool:
        return self.role in (FINDING, CALIBRATION) and (self.sim is None
                                                        or (self.point.x_measured and self.x_sim is None))

    @property
    def holds(self) -> bool:
        return (self.role in (FINDING, CALIBRATION) and within(self.ratio, self.band)
                and (not self.point.x_measured or within(self.x_ratio)))

    @property
    def counted(self) -> bool:
        return self.role == FINDING


Classifier = Callable[[RefPoint], "tuple[str, str]"]


def score(points: Iterable[RefPoint], values: Values, classify: Classifier | None = None,
          spread: bool = False) -> list[Scored]:
    """Every plotted reference point with its simulated value; ``classify`` gives (role, note) (default: finding).
    A point whose value is absent from ``values`` is kept, as missing. ``spread``: a point also holds within its
    repetitions' spread where that is wider than the band (`band_with_spread`)."""
    out = []
    for p in points:
        if not p.is_plotted:
            continue
        role, note = classify(p) if classify else (FINDING, "")
        if role in (NOT_SIMULATED, CONSTRUCTION):
            out.append(Scored(p, role, None, None, note))
            continue
        out.append(Scored(p, role, values.get(p.key), values.get(p.x_key) if p.x_key else None, note,
                          band_with_spread(p) if spread else BAND))
    return out


@dataclass(frozen=True)
class Share:
    held: int
    total: int
    missing: int = 0

    @property
    def fraction(self) -> float | None:
        return self.held / self.total if self.total else None

    def text(self) -> str:
        f = self.fraction
        miss = f", {self.missing} missing" if self.missing else ""
        return f"{self.held} of {self.total}" + (f" ({f:.0%}){miss}" if f is not None else "")


ALL = "all"


def shares(scored: Iterable[Scored], group: Callable[[RefPoint], str] = lambda p: p.figure) -> dict[str, Share]:
    """Points within the band per group (default: per figure panel, in first-appearance order) and over all
    (key ``ALL``), counting findings only."""
    acc: dict[str, list[int]] = {}
    for s in scored:
        if not s.counted:
            continue
        for g in (group(s.point), ALL):
            a = acc.setdefault(g, [0, 0, 0])
            a[0] += s.holds
            a[1] += 1
            a[2] += s.missing
    order = sorted((g for g in acc if g != ALL), key=figure_order) + ([ALL] if ALL in acc else [])
    return {g: Share(*acc[g]) for g in order}


def panel_shares(scored: Iterable[Scored]) -> dict[str, Share]:
    """`shares` as the report's rows: per panel, and over all only where there are several (one panel's row is
    the total)."""
    by_panel = shares(scored)
    return {g: sh for g, sh in by_panel.items() if not (g == ALL and len(by_panel) == 2)}


def figure_order(figure: str) -> tuple:
    """Figures before tables, then by number, then by panel letter: "fig-2" < "fig-4a" < "fig-10" < "table-2"."""
    kind, _, rest = figure.partition("-")
    digits = "".join(ch for ch in rest if ch.isdigit())
    return (kind != "fig", int(digits) if digits else 0, rest)


def apart(scored: Iterable[Scored]) -> dict[str, list[Scored]]:
    """The points not counted, by role: calibration inputs, true by construction, not simulated."""
    out: dict[str, list[Scored]] = {}
    for s in scored:
        if not s.counted:
            out.setdefault(s.role, []).append(s)
    return out


def spread_text(scored: Iterable[Scored]) -> str:
    """How the band reads where some points hold within their repetitions' spread instead."""
    return " (or their repetitions' spread)" if any(x.band != BAND for x in scored) else ""


def points_markdown(scored: list[Scored], why: dict[str, str] | None = None, heading: str = "####") -> str:
    """The shares per figure panel (with why the misses miss), the calibration points with their ratios, and the
    points not counted with their reasons, as markdown."""
    lines = [f"{heading} Points within ±25%{spread_text(scored)} of the paper's data", "",
             "| figure | within ±25% | misses, and why |", "|---|---|---|"]
    for g, sh in panel_shares(scored).items():
        name = "**all**" if g == ALL else figure_label(g)
        note = (why or {}).get(g, "") if sh.held < sh.total else ""
        lines.append(f"| {name} | {sh.text()} | {note} |")
    groups = apart(scored)
    if groups.get(CALIBRATION):
        lines += ["", "Calibration inputs (the presets were fitted to them; shown, not counted):", "",
                  "| point | paper | iosched | ratio |", "|---|---|---|---|"]
        for s in groups[CALIBRATION]:
            r = f"{s.ratio:.2f}" if s.ratio is not None else "–"
            sim = f"{s.sim:.4g}" if s.sim is not None else "missing"
            lines.append(f"| {s.point.label} | {s.paper:.4g} {s.point.y_unit} | {sim} | {r} |")
    for role in (CONSTRUCTION, NOT_SIMULATED):
        if groups.get(role):
            reasons = sorted({s.note for s in groups[role]})
            lines += ["", f"{len(groups[role])} point(s) {role}, not counted: " + "; ".join(reasons) + "."]
    return "\n".join(lines) + "\n"


def figure_label(figure: str) -> str:
    """"fig-7a" -> "Fig. 7a", "table-2" -> "Table 2"."""
    kind, _, rest = figure.partition("-")
    return {"fig": "Fig.", "table": "Table"}.get(kind, kind) + " " + rest


def share_checks(scored: list[Scored], target: float = TARGET_SHARE) -> list[Check]:
    """One row per figure panel and, where there are several, one over them: plotted points within ±25% of the
    paper (calibration, points true by construction and points not simulated excluded). Holds at ``target`` or
    more."""
    rows = []
    spread = spread_text(scored)
    for g, sh in panel_shares(scored).items():
        name = "these figures" if g == ALL else figure_label(g)
        frac = sh.fraction
        what = f"{name}: plotted points within ±25%{spread} of the paper's data (calibration excluded)"
        rows.append(Check("points", what, f"{sh.total} points, >= {target:.0%} within", sh.text(),
                          frac is not None and frac >= target, None, frac, "all" if g == ALL else figure_label(g)))
    return rows


@dataclass(frozen=True)
class PointScoring:
    """How an experiment is scored point by point: the reference table (loaded on first use), the panels it
    reproduces, how its runs become values, how points are classified, and per panel why its misses miss (text,
    or a function of the measured values, so that a note quoting simulated numbers stays true as the model
    changes)."""
    reference: Callable[[], list[RefPoint]]
    figures: tuple[str, ...]
    measure: Callable[[Results], Values]
    classify: Classifier | None = None
    why: dict[str, str] | Callable[[Values], dict[str, str]] = field(default_factory=dict)
    spread: bool = False    # a point also holds within its repetitions' spread (`band_with_spread`)

    def notes(self, res: Results) -> dict[str, str]:
        return self.why(self.measure(res)) if callable(self.why) else dict(self.why)

    def points(self) -> list[RefPoint]:
        return [p for p in self.reference() if p.figure in self.figures]

    def score(self, res: Results) -> list[Scored]:
        return score(self.points(), self.measure(res), self.classify, self.spread)

    def score_values(self, values: Values) -> list[Scored]:
        return score(self.points(), values, self.classify, self.spread)


# ---------------------------------------------------------------- the picture

def _positive(v: float | None) -> bool:
    return v is not None and math.isfinite(v) and v > 0


# 20 distinguishable colours (matplotlib's tab20, dark shades first): one per figure of a paper.
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7",
           "#dbdb8d", "#9edae5"]


def figure_number(figure: str) -> str:
    """The figure a panel belongs to: "fig-7a" -> "Fig. 7", "table-3" -> "Table 3"."""
    label = figure_label(figure)
    return label.rstrip("abcdefgh") if label.startswith("Fig.") else label


def fidelity_figure(scored: list[Scored], fid: str, title: str, ref: str = "") -> Figure:
    """Paper vs simulated for every scored point, log-log, one colour per figure, the ±25% band shaded;
    calibration points hollow and grey. Points with no positive simulated value cannot be drawn on log axes and
    are counted in the caption. Fig. 1's points are drawn by their y (mean latency); their IOPS are scored too."""
    by_fig: dict[str, Trace] = {}
    calib = Trace("calibration (not counted)", [], [], hover=[], paper=True, color="#444444")
    undrawn = 0
    names = sorted({figure_number(s.point.figure) for s in scored if s.role == FINDING},
                   key=lambda n: figure_order(n.lower().replace(". ", "-").replace(" ", "-")))
    colour = {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}
    for s in scored:
        if s.role not in (FINDING, CALIBRATION):
            continue
        if not (_positive(s.sim) and _positive(s.paper)):
            undrawn += s.role == FINDING
            continue
        name = figure_number(s.point.figure)
        t = calib if s.role == CALIBRATION else by_fig.setdefault(name, Trace(name, [], [], hover=[],
                                                                              color=colour[name]))
        t.x.append(s.paper)
        t.y.append(s.sim)
        t.hover.append(f"{s.point.label}: paper {s.paper:.4g} {s.point.y_unit}, iosched {s.sim:.4g}, "
                       f"ratio {s.ratio:.2f}")
    traces = [by_fig[n] for n in names if n in by_fig] + ([calib] if calib.x else [])
    sh = shares(scored).get(ALL)
    caption = (f"Every plotted point of the paper's figures and tables (its own data) against the simulated value, "
               f"each in its figure's unit; the shaded band is ±25% (sim/paper in [{BAND[0]}, {BAND[1]}]). Within "
               f"it{spread_text(scored)}: {sh.text() if sh else 'no points'}, calibration inputs excluded.")
    if undrawn:
        caption += f" {undrawn} counted point(s) with a zero or missing simulated value are not drawn (log axes)."
    return Figure(fid, ref, title, [Panel("paper vs iosched", "scatter", traces, xlabel="paper (its own data)",
                                          ylabel="iosched (simulated)", xlog=True, ylog=True, band=BAND)],
                  caption=caption, cols=1, size=(7.5, 6.5))
