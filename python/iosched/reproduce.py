"""`iosched reproduce`: run registered paper experiments into a results folder and build its report."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable

from . import store, sweep
from .backends.sim import run_id
from .papers import registry
from .report.build import build


def plan(experiments: list[registry.PaperExperiment], quick: bool) -> tuple[list[sweep.Task], dict[str, dict]]:
    """Every run of the experiments (validated), and their manifest entries."""
    tasks: list[sweep.Task] = []
    entries: dict[str, dict] = {}
    for exp in experiments:
        runs = []
        for series, run in exp.runs(quick):
            t = sweep.Task(run, run_id(run), exp.name)
            tasks.append(t)
            runs.append({"id": t.rid, "series": series, "point": run.sweep_point, "repetition": run.repetition,
                         "seed": run.seed})
        entries[exp.name] = {"kind": "paper", "seed": exp.seed, "mode": "quick" if quick else "full", "runs": runs}
    return tasks, entries


def reproduce(names: Iterable[str], *, quick: bool = False, out: str | Path = "out/reproduce",
              jobs: int | None = None, cluster: str | None = None, progress: bool | None = None,
              static: bool = True, echo: Callable[[str], None] | None = None):
    """Run (or resume) the named experiments into ``out`` and rebuild the report; returns the Report.

    On Ctrl-C every finished run stays in ``out`` (and in its combined tables) and KeyboardInterrupt propagates."""
    exps = registry.select(names)
    tasks, entries = plan(exps, quick)
    out = Path(out)
    try:
        sweep.execute(out, tasks, jobs=jobs, cluster=cluster, progress=progress, echo=echo,
                      title=", ".join(e.name for e in exps) if len(exps) <= 2 else f"{len(exps)} experiments")
    finally:  # also on Ctrl-C: the manifest says what the command was, the tables hold what finished
        out.mkdir(parents=True, exist_ok=True)
        store.record(out, entries, [t.rid for t in tasks])
    return build(out, static=static)


def print_quick(names: Iterable[str], out: str = "out/reproduce-quick") -> None:
    """`python -m iosched.papers.seedNNN [NAME...]`: run the experiments in --quick mode (results in ``out``,
    resumed like `iosched reproduce`) and print paper vs iosched as a markdown table, then, for experiments scored
    point by point, the share of points within ±25% per figure and overall, and the calibration points."""
    chosen = {e.name for e in registry.select(names)}
    report = reproduce(sorted(chosen), quick=True, out=out, static=False)
    print("| ref | finding | what | paper | iosched | holds? |")
    print("|---|---|---|---|---|---|")
    for sec, c in report.checks:
        if sec.name in chosen:
            print(f"| {c.ref} | {c.finding} | {c.what} | {c.paper} | {c.simulated} | {'yes' if c.holds else 'NO'} |")
    from .papers import scoring

    points = [p for sec in report.sections if sec.name in chosen for p in sec.points]
    if points:
        why = {k: v for sec in report.sections if sec.name in chosen for k, v in sec.why.items()}
        print()
        print(scoring.points_markdown(points, why, "###"), end="")
