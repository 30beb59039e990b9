"""`iosched.run()`: an experiment from Python (a notebook), the same runs and results folder as `iosched run`."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import SpecError


@dataclass
class Results:
    """A finished experiment: its results folder, its run ids and its tables (pandas, with each swept variable as a
    column of its own, named as the sweep axis: ``scheduler.name``, ``job.bg.iodepth``)."""
    dir: Path
    experiment: str
    run_ids: list[str]

    @property
    def df(self):
        """One row per run and job (the columns of docs/results-folder.md, then the swept variables)."""
        return self.table("results")

    @property
    def timeseries(self):
        return self.table("timeseries")

    def table(self, name: str = "results"):
        from .store import load

        df = load(self.dir, name)
        if "run_id" in df.columns:
            df = df[df["run_id"].isin(self.run_ids)].reset_index(drop=True)
        return df

    @property
    def report(self) -> Path | None:
        path = self.dir / "report.html"
        return path if path.is_file() else None

    def __repr__(self) -> str:
        return f"Results({self.experiment!r}: {len(self.run_ids)} run(s) in {str(self.dir)!r})"


def run(spec: str | os.PathLike | dict[str, Any], *, out: str | os.PathLike | None = None, backend: str = "sim",
        scheduler: str | None = None, sets: dict[str, int] | None = None, duration: str | None = None,
        seed: int | None = None, host: str | None = None, device: str | list[str] | None = None,
        devices: int | None = None, jobs: int | None = 1, report: bool = True, progress: bool = True,
        vm: dict[str, Any] | None = None, lab: str | os.PathLike | None = None) -> Results:
    """Run an experiment and return its Results.

    ``spec``: a spec file (TOML) or fio job file, or a dict shaped as a TOML spec (``{"duration": "1s", "job":
    [{"name": "r", "rw": "randread"}], "sweep": {...}}``; a ``jobfile`` in it is relative to the working
    directory). ``out``: the results folder (default: a new temporary folder, kept). The keyword arguments are the
    command line's (``--scheduler``, ``--set`` as a dict, ``--duration``, ``--seed``, ``--host``, ``--device``,
    ``--devices``, ``--jobs``). ``backend``: "sim" (default), "kernel" (``device``: the block device(s); needs
    root and fio) or "vm" (the QEMU lab of ``iosched vm prepare``; ``device``: its device(s), e.g.
    ``"nullb:irqmode=2,completion_nsec=1ms"``; ``vm``: the guest as ``--vm`` sets it, ``{"cpus": 2, "memory":
    "2G", "accel": "tcg"}``; ``lab``: its cache folder). ``progress``: a tqdm bar (a widget in a notebook). Bad
    input raises SpecError, as the command line reports it; the lab's own failures raise VmError."""
    from .spec import Overrides, expand_runs, experiment_from_data, load_experiment

    if _in_spawned_main_script():
        # A worker of a sweep is starting by running the caller's script (Python's spawn), which calls run again.
        raise SpecError(None, "jobs", 'called while a worker process starts: a script that calls iosched.run with '
                                      'jobs > 1 must do so under `if __name__ == "__main__":`')

    if backend not in ("sim", "kernel", "vm"):
        raise SpecError(None, "backend", f'expected "sim", "kernel" or "vm", got {backend!r}')
    if backend != "vm" and (vm or lab):
        raise SpecError(None, "vm" if vm else "lab", 'only with backend="vm"')
    sets_list = [f"{k}={v}" for k, v in (sets or {}).items()]

    def out_folder() -> Path:
        # Made once the input has been checked: bad input leaves no empty temporary folder behind.
        return Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="iosched-run-"))

    if isinstance(spec, dict):
        label = str(Path.cwd() / f"{spec.get('name', 'experiment')}.toml")
        make = lambda ov: experiment_from_data(label, spec, "toml", ov)    # noqa: E731
    else:
        label = str(spec)
        make = lambda ov: load_experiment(label, ov)    # noqa: E731
    if backend == "kernel":
        from .backends.kernel.runner import Options
        from .running import run_on_kernel

        if not device:
            raise SpecError(None, "device", "the kernel backend needs the block device(s) to run on")
        if host is not None:
            raise SpecError(None, "host", "picks a simulated host; the kernel backend runs on this machine")
        ov = Overrides(devices=devices, scheduler=scheduler, sets=sets_list, duration=duration, seed=seed)
        if isinstance(spec, dict):
            raise SpecError(None, "spec", "the kernel backend takes a spec file (write the dict to a .toml)")
        make(ov)                                  # the spec's shape checked before any device is touched
        out_path = out_folder()
        options = Options(devices=[device] if isinstance(device, str) else list(device), out=out_path)
        run_on_kernel(label, ov, options, report=report, echo=_quiet)
        from .backends.kernel.runner import manifest_name
        from .store import read_manifest

        name = manifest_name(make(ov).data["name"])
        entry = read_manifest(out_path)["experiments"][name]
        return Results(out_path, name, [r["id"] for r in entry["runs"]])
    if backend == "vm":
        return _run_vm(make, device, host, Overrides(devices=devices, scheduler=scheduler, sets=sets_list,
                                                     duration=duration, seed=seed), vm or {}, lab, out_folder, report)
    from .running import run_simulated

    if isinstance(device, list):
        raise SpecError(None, "device", "the simulator takes one device preset here (several: devices in the spec)")
    ov = Overrides(host=host, device=device, devices=devices, scheduler=scheduler, sets=sets_list,
                   duration=duration, seed=seed)
    exp = make(ov)
    expand_runs(exp)                              # every run checked before a folder is made for them
    out_path = out_folder()
    rids = run_simulated(label, ov, out_path, jobs=jobs, cluster=None, report=report, echo=_quiet, experiment=exp,
                         progress="tqdm" if progress else False, summaries=False)
    return Results(out_path, exp.data["name"], rids)


def _in_spawned_main_script() -> bool:
    """Whether this call comes from the main script that multiprocessing's spawn runs again as a worker starts (its
    `_fixup_main_from_path`), not from a worker's task: a spawned worker may call iosched.run legitimately."""
    import sys

    spawn_py = os.path.join("multiprocessing", "spawn.py")
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name in ("_fixup_main_from_path", "_fixup_main_from_name") and code.co_filename.endswith(spawn_py):
            return True
        frame = frame.f_back
    return False


def _run_vm(make, device, host, ov, vm: dict[str, Any], lab, out_folder, report: bool) -> Results:
    from .backends.vm.runner import Options, manifest_name, parse_vm_options, run_vm

    if not device:
        raise SpecError(None, "device", 'the VM backend needs the lab\'s device(s), e.g. '
                                        '"nullb:irqmode=2,completion_nsec=1ms" (iosched vm devices)')
    if host is not None:
        raise SpecError(None, "host", "picks a simulated host; the VM backend runs the lab's guest")
    if ov.seed is not None and ov.seed < 0:
        raise SpecError(None, "seed", f"expected an integer >= 0, got {ov.seed}")
    devices = [device] if isinstance(device, str) else list(device)
    # `vm` as the command line's --vm KEY=VALUE items: one parser, one set of checks and messages.
    opts = parse_vm_options([f"{k}={v}" for k, v in vm.items()],
                            Options(devices=devices, out=Path("."), lab=None if lab is None else str(lab)))
    exp = make(ov)                                # the spec checked before the lab boots or a folder is made
    opts.out = out_folder()
    outcome = run_vm(exp, opts, echo=_quiet)
    for warning in outcome.warnings:
        _quiet(f"note: {warning}")
    if report:
        from .report.build import build

        build(opts.out, static=False)
    return Results(opts.out, manifest_name(exp.data["name"]), [rid for rid, _ in outcome.runs])


class IoschedNote(UserWarning):
    """A note the command line prints (e.g. "ioengine=sync is simulated as psync"), as a Python warning."""


def _quiet(line: str = "", *_args, **_kwargs) -> None:
    """Summaries go nowhere in Python (Results holds the numbers); notes become warnings."""
    if line.startswith("note: "):
        import warnings

        warnings.warn(line[len("note: "):], IoschedNote, stacklevel=2)
