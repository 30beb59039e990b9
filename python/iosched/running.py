"""`iosched run`: every sweep point x repetition of an experiment, simulated or measured on real devices, into a
results folder (its runs, manifest entry, combined tables and report)."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Callable

from . import native, store
from .backends.kernel.runner import Options, run_kernel
from .errors import SpecError
from .report.build import build
from .spec import Experiment, Overrides, expand_runs, load_experiment
from .summary import format_summary
from .sweep import execute, tasks_for

# Output: echo(line) for stdout, echo(line, err=True) for stderr (click.echo's signature).
Echo = Callable[..., None]


def run_simulated(spec_file: str, overrides: Overrides, out: Path, *, jobs: int | None, cluster: str | None,
                  report: bool, echo: Echo, static: bool = False, experiment: Experiment | None = None,
                  progress: bool | str | None = None, summaries: bool = True) -> list[str]:
    """Simulate every run of the experiment not yet in ``out`` (a single run in this process), print each run's
    summary (``summaries``), and record the experiment (also when interrupted); raises native.NotBuilt before
    touching ``out`` when the simulator is not built. ``experiment``: already loaded (iosched.run's dict specs).
    Returns the experiment's run ids."""
    exp = experiment or load_experiment(spec_file, overrides)
    runs = expand_runs(exp)           # everything validated before OUT is touched
    if not native.available():
        raise native.NotBuilt()
    for note in dict.fromkeys(n for r in runs for n in r.notes):
        echo(f"note: {note}", err=True)
    tasks = tasks_for(runs)

    def show(task, result, wall):
        if summaries:
            echo(format_summary(task.run, task.rid, result, wall))
            echo("")

    single = len(tasks) == 1 and not cluster
    preparing = _prepare_report_in_background() if report else None
    try:
        outcome = execute(out, tasks, jobs=1 if single else jobs, cluster=cluster, on_result=show,
                          title=exp.data.get("name", "runs"), progress=progress,
                          echo=None if progress is not False else (lambda _line: None))
    finally:
        if out.exists():
            store.record_spec(out, tasks[0].run.experiment, spec_file, exp.data, [(t.rid, t.run) for t in tasks])
    if outcome.skipped:
        if len(tasks) <= 8:  # a small experiment: show the stored runs as if just run
            for t in tasks:
                if t.rid in outcome.skipped:
                    show(t, store.load_result(out, t.rid), None)
        echo(f"{len(outcome.skipped)} run(s) already in {out} (same run id): skipped")
    if preparing is not None:
        preparing.join()
    _finish(out, len(outcome.done), report, echo, static)
    return list(dict.fromkeys(t.rid for t in tasks))


def run_on_kernel(spec_file: str, overrides: Overrides, options: Options, *, report: bool, echo: Echo,
                  static: bool = False) -> None:
    """Measure every run of the experiment not yet in ``options.out`` with the kernel's schedulers on the devices
    given; raises KernelError or state.Interrupted from the kernel backend."""
    exp = load_experiment(spec_file, overrides)
    if exp.data.get("request_trace"):
        raise SpecError(spec_file, "request_trace", "the kernel backend keeps no request trace (the simulator does, "
                                                    "and --backend vm with the guest's blk tracer)")
    outcome = run_kernel(exp, options, echo=lambda line: echo(line, err=line.startswith(("note:", "error:"))))
    out = options.out
    if outcome.skipped:
        echo(f"{len(outcome.skipped)} run(s) already in {out} (same run id): skipped (delete "
             f"{out}/runs/<id>/ or use another --out to measure them again)")
    _finish(out, len(outcome.done), report, echo, static)


def _prepare_report_in_background() -> threading.Thread:
    """The report's slow first steps (report.html.prepare, ~0.25 s) in a thread, overlapping the simulation, which
    runs without the GIL; a failure there shows again, with its error, where the report is drawn."""
    from .report import html

    def prepare() -> None:
        with contextlib.suppress(Exception):
            html.prepare()

    thread = threading.Thread(target=prepare, name="iosched-report-prepare", daemon=True)
    thread.start()
    return thread


def _finish(out: Path, done: int, report: bool, echo: Echo, static: bool) -> None:
    if report:
        build(out, static=static)
    echo(f"wrote {done} run(s) to {out}/results.parquet" + (f"; report: {out}/report.html" if report else ""))
