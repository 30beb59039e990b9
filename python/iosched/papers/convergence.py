"""Have a paper experiment's measured quantities converged at its runtime? Run chosen points of its series with the
declared duration T and again with 2T (optionally a longer ramp too) and compare the values.

The seed papers ran minutes per point (ICPE'24: 30 s + 120 s for reads, 600 s + 600 s with writers); the simulated
runs are much shorter, which is sound only where the quantities the checks and the point scoring read no longer
move with the runtime. `python -m iosched.papers.seed000 --convergence` prints seed 000's table, which
docs/papers.md records.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable

from .. import native
from ..simconfig import run_config
from ..spec import expand_runs, experiment_from_data
from ..units import parse_time
from .registry import PaperExperiment, apply_overrides, spec_with_point


@dataclass(frozen=True)
class Pick:
    """A point of a series and a quantity of its result."""
    series: str
    point: dict[str, Any]
    label: str
    measure: Callable[[dict], float]


@dataclass(frozen=True)
class Row:
    experiment: str
    label: str
    runtime: str        # "T + ramp" of the shorter run, e.g. "1s + 50ms"
    at_t: float
    at_2t: float

    @property
    def change(self) -> float:
        """Relative change from T to 2T."""
        return abs(self.at_2t / self.at_t - 1) if self.at_t else float("inf")


def _seconds(value: Any) -> float:
    return parse_time(value, file="convergence", key="duration") / 1e9


def _simulate(exp: PaperExperiment, spec: dict[str, Any], pick: Pick) -> dict:
    data = copy.deepcopy(spec)
    data["sweep"] = {k: [v] for k, v in pick.point.items()}
    data["repeat"] = 1
    runs = expand_runs(experiment_from_data(f"{exp.name}/{pick.series}", data))
    return native.simulate(run_config(runs[0]))


def check(exp: PaperExperiment, picks: list[Pick], *, quick: bool = False, factor: float = 2.0,
          ramp_factor: float = 1.0) -> list[Row]:
    """Each pick at the experiment's runtime T (full mode, or --quick) and at factor x T (ramp x ramp_factor)."""
    specs = exp.specs(quick)
    rows = []
    for pick in picks:
        spec = spec_with_point(specs, pick.series, pick.point)
        t, ramp = _seconds(spec["duration"]), _seconds(spec.get("ramp", 0))
        longer = apply_overrides(spec, {"duration": f"{t * factor:g}s", "ramp": f"{ramp * ramp_factor:g}s"})
        for job in longer.get("job", []):
            # A job's own runtime (background apps outliving a late-started one) grows by as much as the run's.
            if "runtime" in job:
                job["runtime"] = f"{_seconds(job['runtime']) + t * (factor - 1):g}s"
        a = pick.measure(_simulate(exp, spec, pick))
        b = pick.measure(_simulate(exp, longer, pick))
        rows.append(Row(exp.name, pick.label, f"{t:g} s + {ramp:g} s", a, b))
    return rows


def markdown(rows: list[Row], tolerance: float = 0.05) -> str:
    lines = ["| experiment | quantity | runtime T + ramp | at T | at 2T | change |", "|---|---|---|---|---|---|"]
    for r in rows:
        flag = "" if r.change <= tolerance else " (over 5%)"
        lines.append(f"| {r.experiment} | {r.label} | {r.runtime} | {r.at_t:,.4g} | {r.at_2t:,.4g} | "
                     f"{r.change:.1%}{flag} |")
    return "\n".join(lines) + "\n"
