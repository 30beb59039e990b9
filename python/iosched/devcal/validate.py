"""`iosched validate`: the same spec on the kernel (a real device) and in the simulator (a calibrated preset),
compared per scheduler, with the device's drift from its preset measured before and after."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable

from .. import kernel_version, native, store
from ..backends.kernel.runner import Options, run_kernel
from ..errors import SpecError
from ..report.build import build
from ..spec import Overrides, ResolvedRun, expand_runs, load_experiment
from ..sweep import execute, tasks_for
from ..units import parse_time
from . import comparison
from .measure import measure_kernel, simulate_step
from .plan import Step, drift_steps, queue_geometry
from .presetfiles import PresetTree

# Output: echo(line) for stdout, echo(line, err=True) for stderr (click.echo's signature).
Echo = Callable[..., None]


def validate(spec: str, device_path: str, preset: str, *, host: str | None, duration: str | None,
             repeat: int | None, out: Path, drift_check: bool, echo: Echo) -> None:
    """Run ``spec`` (a sweep over scheduler.name) on ``device_path`` with the kernel backend and in the simulator
    with device preset ``preset`` (a name or a .toml file; ``host`` likewise), then write OUT/validation.md,
    validation.json, drift.json and the report; raises KernelError or state.Interrupted from the kernel backend."""
    tree = PresetTree(preset, host)
    drift: list[dict[str, Any]] = []
    try:
        exp_k = load_experiment(spec, Overrides(duration=duration, repeat=repeat))
        if "sweep" not in exp_k.data or "scheduler.name" not in exp_k.data.get("sweep", {}):
            raise SpecError(spec, "sweep", 'validate compares schedulers: expected a sweep over "scheduler.name"')
        exp_s = load_experiment(spec, Overrides(host=tree.host, device=tree.device, duration=duration,
                                                repeat=repeat))
        runs = expand_runs(exp_s)
        check = _DriftCheck(device_path, out, runs, duration, echo) if drift_check else None
        echo(f"kernel: {spec} on {device_path}")
        if check:
            drift += check("before")
        run_kernel(exp_k, Options(devices=[device_path], out=out),
                   echo=lambda s: echo(s, err=s.startswith(("note:", "error:"))))
        if check:
            drift += check("after")
        echo(f"simulator: {spec} with device preset {tree.device}" + (f", host {tree.host}" if tree.host else ""))
        experiment = runs[0].experiment
        version = kernel_of_runs(out, experiment)
        if version is not None:
            echo(f"simulator models the kernel the runs ran on: Linux {version}")
        for note in mirror_kernel(runs, version, kernel_tunables(out, experiment)):
            echo(f"simulator uses the kernel's tunables: {note}")
        tasks = tasks_for(runs)
        execute(out, tasks, jobs=1, title=exp_s.data.get("name", "runs"))
        store.record_spec(out, tasks[0].run.experiment, spec, exp_s.data, [(t.rid, t.run) for t in tasks])
    finally:
        tree.close()
    rows = comparison.validation_rows(out / "results.parquet")
    table = comparison.format_validation(rows)
    if drift:
        table += "\n\nDevice drift (the preset's QD-max ceilings against the device now):\n\n" + \
            comparison.format_drift(drift)
    store.write_file(out, "validation.md", (table + "\n").encode())
    store.write_file(out, "validation.json", (json.dumps(rows, indent=1) + "\n").encode())
    if drift:
        store.write_file(out, "drift.json", (json.dumps(drift, indent=1) + "\n").encode())
    build(out)
    echo(table)
    echo(f"wrote {out}/validation.md and {out}/report.html")


class _DriftCheck:
    """The preset's QD-max ceilings measured again on the device (before and after the runs), against the
    simulator's figures for the same steps (simulated once)."""

    def __init__(self, device_path: str, out: Path, runs: list[ResolvedRun], duration: str | None, echo: Echo):
        self.device_path, self.out, self.runs, self.echo = device_path, out, runs, echo
        self.steps: tuple[Step, ...] = drift_steps(queue_geometry(Path("/sys/class/block") / Path(device_path).name))
        self.seconds = comparison.DRIFT_SECONDS
        if duration is not None:    # a shortened validation shortens the drift check alike
            seconds = parse_time(duration, key="--duration") / 1e9
            self.seconds = (min(seconds, self.seconds[0]), min(seconds / 5, self.seconds[1]))
        self.simulated: dict[str, dict[str, dict[str, float]]] = {}

    def __call__(self, when: str) -> list[dict[str, Any]]:
        echo = self.echo
        echo(f"drift check ({when} the runs): the preset's QD-max ceilings, measured again")
        # Measured anew every time: a resumed validation must not reuse an earlier check's runs.
        shutil.rmtree(self.out / f"drift-{when}", ignore_errors=True)
        measured = measure_kernel(self.device_path, self.out / f"drift-{when}", *self.seconds, self.steps,
                                  echo=lambda s: echo("  " + s))
        if not self.simulated:
            host, device = self.runs[0].host, self.runs[0].devices[0]
            self.simulated.update({s.name: simulate_step(host, device, s) for s in self.steps})
        rows = comparison.drift_rows(when, measured, self.simulated, self.steps)
        for r in rows:
            if r["drifted"]:
                echo(f"warning: {r['what']}: {r['kernel_kiops']:,.1f} KIOPS now, the preset gives "
                     f"{r['sim_kiops']:,.1f} (sim/kernel {r['ratio']:.2f}): the device has moved since "
                     f"calibration; calibrate again for a fair comparison", err=True)
        return rows


def kernel_of_runs(out: Path, experiment: str | None, backend: str = "kernel") -> str | None:
    """The Linux version ("MAJOR.MINOR[.PATCH]") the ``backend`` runs of ``experiment`` (None: any) in ``out`` ran
    on: the more exact of the version they recorded (spec.json ``kernel``: MAJOR.MINOR only in runs recorded before
    patch levels were kept; the stable release where ``uname -r`` hides it, as Debian's 6.1 does) and the one their
    ``uname -r`` says (``host.kernel``); None if none recorded one."""
    for rid in store.finished_runs(out):
        doc = store.load_run_spec(out, rid)
        if doc.get("backend") != backend or (experiment is not None and doc.get("experiment") != experiment):
            continue
        recorded = doc.get("kernel")
        from_uname = kernel_version.from_release(str((doc.get("host") or {}).get("kernel", "")))
        # The first of the two with the most parts: a patch level says which backports the kernel carries.
        version = max((v for v in (recorded, from_uname) if v), key=lambda v: len(v.split(".")), default=None)
        if version:
            return version
    return None


def kernel_tunables(out: Path, experiment: str) -> dict[str, dict[str, int]]:
    """Per scheduler, the tunables the kernel's scheduler had during ``experiment``'s runs in ``out`` (the
    kernel backend records queue/iosched/* of the first device in each run's spec.json), integers only."""
    found: dict[str, dict[str, int]] = {}
    for rid in store.finished_runs(out):
        doc = store.load_run_spec(out, rid)
        if doc.get("backend") != "kernel" or doc.get("experiment") != experiment or not doc.get("queue_during"):
            continue
        found.setdefault(doc["scheduler"], integer_tunables(doc))
    return found


def integer_tunables(doc: dict) -> dict[str, int]:
    """The integer values of queue/iosched/* as a run recorded them (its spec.json's first device)."""
    values = {}
    for name, text in (doc["queue_during"][0].get("iosched") or {}).items():
        try:
            values[name] = int(text)
        except (TypeError, ValueError):
            pass
    return values


def mirror_kernel(runs: list, version: str | None, kernel: dict[str, dict[str, int]]) -> list[str]:
    """Give each simulated run the measured kernel: its version where the runs recorded one, then its tunables
    (`mirror_tunables`, whose defaults follow that version). Returns `mirror_tunables`' notes."""
    if version is not None:
        for r in runs:
            r.host["kernel"] = version
    return mirror_tunables(runs, kernel)


def mirror_tunables(runs: list, kernel: dict[str, dict[str, int]]) -> list[str]:
    """Give each simulated run the kernel's values of the tunables the simulator also has, where they differ from
    the simulator's defaults (which follow the run's kernel version, set to the measured one first: e.g.
    mq-deadline's async_depth default is 3/4 of nr_requests in Linux 6.3 and nr_requests since 6.11). Tunables the
    spec sets stay as set. Returns one note per scheduler changed."""
    notes = []
    for name, values in sorted(kernel.items()):
        defaults = dict(native.scheduler_tunables(name) or [])
        changed = {k: v for k, v in values.items() if k in defaults and defaults[k] != v}
        if not changed:
            continue
        for r in runs:
            if r.scheduler == name:
                r.tunables = dict(sorted({**changed, **r.tunables}.items()))
        notes.append(f"{name}: " + ", ".join(f"{k}={v} (simulator default {defaults[k]})"
                                             for k, v in sorted(changed.items())))
    return notes
