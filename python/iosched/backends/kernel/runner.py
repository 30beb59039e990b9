"""One ``iosched run --backend kernel`` invocation: checks, setup, every run, restore.

Order: refuse what cannot work before touching anything (root, fio, devices and their safety, schedulers, job
names, cgroups); restore what a killed run left; lock the devices; then, journalled for restore: debugfs,
preconditioning, filesystems, a dry application of every scheduler setting the runs use (so a bad tunable fails
before the first run), and each run:
  record the queue → fresh scheduler, nr_requests, tunables → cgroups → job file → sampler + fio → restore.
Everything is restored at the end, on error and on SIGINT/SIGTERM/SIGHUP (exit 130: iosched.interrupt),
and an interrupted run's temporary folder is removed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ... import kernel_version, presets, store
from ...errors import SpecError, show
from ...results import job_rows
from ...spec import (Experiment, RealSystem, ResolvedRun, check_filesystem_flag, device_names, expand_runs,
                    validate_spec)
from ...version import __version__
from . import KernelError, cgroups, fiofile, fioresult, fs, safety, state
from .blockdev import BlockDevice, elsewhere_hint
from .sampler import Sampler, ensure_debugfs

FIO_TERM_GRACE_S = 10.0


@dataclass
class Options:
    devices: list[str]
    out: Path
    destructive: bool = False
    filesystem: str | None = None
    precondition: bool = False


@dataclass
class Target:
    """What stands for the spec's device i."""
    spec_name: str
    device: BlockDevice
    path: str                    # what fio opens: the device, or the test file on a fresh filesystem
    capacity_bytes: int
    lbs: int
    mounted: fs.Mounted | None = None
    info: dict[str, Any] = field(default_factory=dict)


def find_fio() -> tuple[str, str]:
    exe = os.environ.get("IOSCHED_FIO") or shutil.which("fio")
    if not exe:
        raise KernelError("fio is not installed: apt-get install fio (Debian's fio 3.33 is what iosched is tested "
                          "with), or ./scripts/setup as root")
    r = subprocess.run([exe, "--version"], capture_output=True, text=True)
    if r.returncode != 0:
        raise KernelError(f"{exe} --version failed: {r.stderr.strip()}")
    return exe, r.stdout.strip()


def host_info() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    u = os.uname()
    return {"hostname": u.nodename, "kernel": u.release, "cpu_model": model, "cpus": os.cpu_count()}


def _writes_reason(runs: list[ResolvedRun], opts: Options) -> str | None:
    if opts.filesystem:
        return f"--filesystem {opts.filesystem}"
    if opts.precondition:
        return "--precondition"
    for r in runs:
        for j in r.jobs:
            if j.config["rw"] not in ("read", "randread"):
                return f'job "{j.config["name"]}" (rw={j.config["rw"]})'
    return None


def run_id(run: ResolvedRun, targets: list[Target], filesystem: str | None) -> str:
    """Same experiment, settings and devices → same id (a re-run into the same OUT skips it: delete
    OUT/runs/<id>/ or use another OUT to measure it again)."""
    blob = json.dumps(["kernel", [j.config for j in run.jobs], run.scheduler, run.tunables, run.nr_requests,
                       [[t.device.path, t.device.capacity_bytes] for t in targets], filesystem, run.experiment,
                       run.repetition, run.seed, run.sample_interval_ns, __version__],
                      sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _map_filenames(exp: Experiment, devices: list[BlockDevice], spec_names: list[str]) -> None:
    """A job may name the real devices (filename=/dev/loop0): map them to the spec's names before resolving."""
    real = {d.path: n for d, n in zip(devices, spec_names)}
    real.update({os.path.basename(d.path): n for d, n in zip(devices, spec_names)})
    for j in exp.jobs:
        fn = j.options.get("filename")
        if isinstance(fn, str):
            parts = re.split(r"(?<!\\):", fn)
            mapped = [real.get(os.path.realpath(p), p) if p.startswith("/dev/") else p for p in parts]
            j.options["filename"] = ":".join(mapped)


def _spec_device_names(exp: Experiment) -> list[str]:
    """The spec's device names (/dev/nvme0n1, ...), as the simulator names its devices, in order."""
    spec = validate_spec(exp.file, exp.data)
    interfaces = []
    for i, d in enumerate(spec.devices):
        p = presets.load_preset("device", d.preset, file=exp.file, key=f"devices[{i}].preset")
        interfaces += [p.params["interface"]] * d.count
    return device_names(interfaces)


def spec_filesystem(exp: Experiment, given: str | None) -> str | None:
    """The file system the runs go through: --filesystem, else the spec's devices' ``filesystem`` (one for all of
    them: the backend makes the same one on every device)."""
    named = {d.filesystem for d in validate_spec(exp.file, exp.data).devices}
    if given is not None:
        if given not in fs.FILESYSTEMS:
            raise SpecError("--filesystem", None, f"expected one of {', '.join(fs.FILESYSTEMS)}, got {show(given)}")
        check_filesystem_flag(given, named, exp.file)
        return given
    if len(named) > 1:
        raise SpecError(exp.file, "devices.filesystem", "a real kernel run makes one file system on every device: "
                        f"give the same one (or none) to all, not {', '.join(sorted(map(str, named)))}")
    return named.pop()


@dataclass
class Outcome:
    done: list[str] = field(default_factory=list)       # run ids measured now
    skipped: list[str] = field(default_factory=list)    # already in OUT (same run id): not measured again
    runs: list[tuple[str, ResolvedRun]] = field(default_factory=list)   # every run of the experiment, in order


def manifest_name(experiment: str) -> str:
    """The experiment's entry in OUT/manifest.json: apart from the simulator's entry of the same spec, so a kernel
    run and a simulated run of one spec into one OUT are both reported."""
    return f"{experiment}@kernel"


def run_kernel(exp: Experiment, opts: Options, echo: Callable[[str], None] = print) -> Outcome:
    """Run every run of ``exp`` on the real devices, skipping runs already in OUT (same run id: an interrupted
    sweep resumes).  OUT's manifest and combined tables are updated even when interrupted."""
    if os.geteuid() != 0:
        raise KernelError("the kernel backend needs root (it writes sysfs, makes cgroups, opens raw devices)")
    fio, fio_version = find_fio()
    problems = state.recover(echo=lambda s: echo(f"note: {s}"))
    if problems:
        raise KernelError("could not restore what an earlier run left behind: " + "; ".join(problems))
    devices = [BlockDevice.open(d) for d in opts.devices]
    seen: dict[tuple[int, int], str] = {}
    for d, given in zip(devices, opts.devices):
        if d.devno in seen:
            raise SpecError("--device", given, f"the same device as {seen[d.devno]}")
        seen[d.devno] = given
    opts = dataclasses.replace(opts, filesystem=spec_filesystem(exp, opts.filesystem))
    if opts.filesystem and (why := fs.unavailable(opts.filesystem)):
        raise KernelError(f"--filesystem {opts.filesystem}: {why}")

    _check_schedulers(exp, devices)
    spec_names = _spec_device_names(exp)
    if len(spec_names) != len(devices):
        raise SpecError("--device", None, f"{exp.file} has {len(spec_names)} device(s) ({', '.join(spec_names)}), "
                        f"mapped in order to the --device given; expected {len(spec_names)}, got {len(devices)}")
    _map_filenames(exp, devices, spec_names)
    cores = os.cpu_count() or 1
    runs = expand_runs(exp, RealSystem(cores, [(d.capacity_bytes, d.logical_block_bytes) for d in devices]))
    _check_runs(runs, devices)
    writes = _writes_reason(runs, opts)
    notes: list[str] = []
    for d in devices:
        notes += safety.check(d, writes=writes, destructive=opts.destructive)
    hierarchy = None
    groups = {j.config["cgroup"]: (j.config["cgroup_weight"], r.spec_file, f'job "{j.config["name"]}"')
              for r in runs for j in r.jobs if j.config["cgroup"]}
    if groups:
        hierarchy, why = cgroups.fio_hierarchy(cgroups.parse_proc_mounts(Path("/proc/mounts").read_text()))
        if hierarchy is None:
            raise KernelError(f"jobs use cgroups ({', '.join(groups)}), but {why}")
        cgroups.check_names(groups, hierarchy)
    for note in dict.fromkeys(notes + [n for r in runs for n in r.notes]):
        echo(f"note: {note}")
    if any(r.scheduler != "bfq" and any(j.config["cgroup"] and j.config["cgroup_weight"] != 100 for j in r.jobs)
           for r in runs):
        echo("note: cgroup weights take effect under bfq only (as in the simulator); none, mq-deadline and kyber "
             "ignore them")

    journal = state.Journal()
    outcome = Outcome()
    store.cleanup_tmp(opts.out)
    store.preload()       # what recording the runs needs, loaded now: an interruption then records at once
    with contextlib.ExitStack() as locks:
        for d in devices:
            locks.enter_context(state.device_lock(d.devno, d.path))
        with state.signals_raise():
            try:
                targets = _setup(devices, spec_names, opts, journal, runs, echo)
                if opts.filesystem:     # jobs address the test file: size them (and check them) against it
                    runs = expand_runs(exp, RealSystem(cores, [(t.capacity_bytes, t.lbs) for t in targets]))
                _dry_apply(runs, targets, journal)
                outcome.runs = [(run_id(r, targets, opts.filesystem), r) for r in runs]
                for i, (rid, r) in enumerate(outcome.runs):
                    if store.is_done(opts.out, rid):
                        outcome.skipped.append(rid)
                        continue
                    try:
                        _one_run(r, i, len(runs), targets, opts, journal, hierarchy, fio, fio_version, writes, echo)
                    except state.Interrupted:
                        # A failed run's folder stays for a look; an interrupted one is of no use: it goes now.
                        store.discard_run_dir(opts.out, rid)
                        raise
                    outcome.done.append(rid)
            finally:
                _record(exp, opts, outcome)
                with state.signals_blocked():
                    left = journal.undo_all()
                exc = sys.exc_info()[1]
                if isinstance(exc, state.Interrupted):
                    exc.restored = not left
                if left:
                    echo("error: could not restore: " + "; ".join(left))
                    echo(f"error: what is left is in {journal.path}; the next `iosched run --backend kernel` or "
                         "`iosched device recover` retries")
    return outcome


def _record(exp: Experiment, opts: Options, outcome: Outcome) -> None:
    """OUT/manifest.json's entry for this experiment and the combined tables (as `iosched run` does)."""
    if not outcome.runs or not opts.out.exists():
        return
    with state.signals_blocked():
        store.record_spec(opts.out, manifest_name(outcome.runs[0][1].experiment), exp.file, exp.data, outcome.runs,
                          mode="kernel", backend="kernel", devices=list(opts.devices), filesystem=opts.filesystem)


def _check_scheduler(name: object, file: str, key: str, devices: list[BlockDevice]) -> None:
    for d in devices:
        offered = d.schedulers()[0]
        if name not in offered:
            hint = elsewhere_hint(name) if isinstance(name, str) else ""
            raise SpecError(file, key, f"{show(name)} is not offered by this kernel for {d.path} "
                            f"(it offers: {', '.join(offered)}){hint}")


def _check_schedulers(exp: Experiment, devices: list[BlockDevice]) -> None:
    """Before the spec is resolved (where the simulator's own rules about schedulers apply): every scheduler the
    runs use must be one this kernel offers."""
    spec = validate_spec(exp.file, exp.data)
    _check_scheduler(spec.scheduler.name, exp.file, "scheduler.name", devices)
    for name in spec.sweep.get("scheduler.name", []):
        _check_scheduler(name, exp.file, 'sweep."scheduler.name"', devices)
    refuse_simulator_only_settings(exp.file, spec)


def refuse_simulator_only_settings(file: str, spec) -> None:
    """What only the simulator can do, refused for a real kernel (this backend and the VM lab): the legacy block
    layer, and measuring every job from start + ramp (real fio ends each job's ramp at its first completion)."""
    if spec.scheduler.block_layer == "legacy":
        raise SpecError(file, "scheduler.block_layer", "the legacy single-queue block layer left Linux in 5.0: "
                        "run it with --backend sim")
    if spec.ramp_end == "nominal":
        raise SpecError(file, "ramp_end", '"nominal" is the simulator\'s: real fio ends each job\'s ramp at its '
                        'first completion after ramp_time (remove it, or run with --backend sim)')


def _check_runs(runs: list[ResolvedRun], devices: list[BlockDevice]) -> None:
    for r in runs:
        fiofile.check_job_names(r)
        _check_scheduler(r.scheduler, r.spec_file, "scheduler.name", devices)


def _setup(devices: list[BlockDevice], spec_names: list[str], opts: Options, journal: state.Journal,
           runs: list[ResolvedRun], echo) -> list[Target]:
    if any(r.scheduler == "kyber" for r in runs):
        ensure_debugfs(journal)
    targets = []
    for i, (d, name) in enumerate(zip(devices, spec_names)):
        if opts.precondition:
            _precondition(d, opts.out, journal, echo)
        t = Target(name, d, d.path, d.capacity_bytes, d.logical_block_bytes, info=d.describe())
        if opts.filesystem:
            m = fs.make(d, opts.filesystem, i, journal, echo=echo, want_bytes=fs.addressed_bytes(runs, i) or None)
            t.path, t.capacity_bytes, t.mounted = str(m.file), m.capacity_bytes, m
        targets.append(t)
    return targets


def _precondition(d: BlockDevice, out: Path, journal: state.Journal, echo) -> None:
    fio, _ = find_fio()
    pdir = store.make_folder(out, f"precondition/{d.name}").absolute()
    store.write_text(pdir, "precondition.fio", fiofile.precondition_file(d.path, d.capacity_bytes,
                                                                         d.logical_block_bytes))
    echo(f"preconditioning {d.path} (seed 000 §2.1): sequential fill of {d.capacity_bytes >> 20} MiB, then random "
         f"4 KiB writes of twice that ...")
    t0 = time.monotonic()
    rc = _run_fio([fio, "--output-format=json", "--output=fio.json", "--eta=never", "precondition.fio"], pdir, journal)
    if rc != 0:
        raise KernelError(f"preconditioning {d.path}: fio exited {rc}: {_tail(pdir / 'fio.log')}")
    echo(f"preconditioned {d.path} in {time.monotonic() - t0:.1f} s (output in {pdir})")


def _dry_apply(runs: list[ResolvedRun], targets: list[Target], journal: state.Journal) -> None:
    """Apply each distinct scheduler setting once and put the queue back: a tunable the kernel refuses fails here,
    before any run, not in the middle of a sweep."""
    seen = set()
    for r in runs:
        key = (r.scheduler, r.nr_requests, tuple(r.tunables.items()))
        if key in seen:
            continue
        seen.add(key)
        for t in targets:
            aid = journal.add({"op": "queue", "device": t.device.path, "queue": str(t.device.queue),
                               "saved": t.device.snapshot(), "touched": list(r.tunables)})
            try:
                t.device.apply(r.scheduler, r.nr_requests, r.tunables, file=r.spec_file)
            finally:
                _undo_or_fail(journal, aid)


def _undo_or_fail(journal: state.Journal, aid: int) -> None:
    problems = journal.undo(aid)
    if problems:
        raise KernelError("could not restore: " + "; ".join(problems))


def _run_fio(cmd: list[str], cwd: Path, journal: state.Journal | None) -> int:
    """Run fio in its own session (a Ctrl-C reaches iosched, which stops fio and restores); returns its status."""
    with open(cwd / "fio.log", "wb") as log:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    aid = journal.add({"op": "session", "sid": proc.pid, "starttime": state.proc_starttime(proc.pid)}) \
        if journal else None
    try:
        # A signal may be delivered to another thread (pyarrow's, say): the main thread, blocked in waitpid, would
        # not run the handler until fio ends. Short waits bring it back to Python (and the handler) within 50 ms;
        # the handler raises Interrupted, and fio is stopped below.
        while True:
            try:
                rc = proc.wait(timeout=0.05)
                break
            except subprocess.TimeoutExpired:
                continue
    except BaseException:
        _stop_fio(proc)
        raise
    if journal and aid is not None:
        journal.forget(aid)
    return rc


def _stop_fio(proc: subprocess.Popen) -> None:
    with state.signals_blocked():
        for sig, wait in ((signal.SIGINT, FIO_TERM_GRACE_S), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        # fio's job processes are in its session: make sure none outlives it.
        state._kill_session(proc.pid, None, grace_s=2.0)


def _tail(path: Path, n: int = 6) -> str:
    with contextlib.suppress(OSError):
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
        return " | ".join(lines[-n:]) or "(no output)"
    return "(no output)"


def _read_fio_json(path: Path) -> dict[str, Any]:
    text = path.read_text(errors="replace")
    start = text.find("{")     # fio can print warnings before the document
    if start < 0:
        raise KernelError(f"{path} holds no JSON")
    try:
        return json.loads(text[start:])
    except ValueError as e:
        raise KernelError(f"{path}: not fio JSON ({e})") from None


def _one_run(run: ResolvedRun, index: int, total: int, targets: list[Target], opts: Options, journal: state.Journal,
             hierarchy: cgroups.Hierarchy | None, fio: str, fio_version: str, writes: str | None, echo) -> None:
    rid = run_id(run, targets, opts.filesystem)
    # fio runs in the run's temporary folder (runs/.tmp-<rid>-<pid>/), renamed to runs/<rid>/ once everything is
    # written: a run is either complete or absent, as the simulator's.  A failed run's folder stays for a look
    # (its fio.log and jobs.fio) until the next run in OUT cleans it up.
    rdir = store.new_run_dir(opts.out, rid).absolute()
    store.make_folder(rdir, "logs")
    queue_before, queue_during, queue_ids = [], [], []
    kernel_notes: list[str] = []
    rc_groups: cgroups.RunCgroups | None = None
    cg_ids: list[int] = []
    interval_ms = max(1, run.sample_interval_ns // 1_000_000)
    t_wall = time.monotonic()
    try:
        for t in targets:
            snap = t.device.snapshot()
            queue_before.append(snap)
            queue_ids.append(journal.add({"op": "queue", "device": t.device.path, "queue": str(t.device.queue),
                                          "saved": snap, "touched": list(run.tunables)}))
            queue_during.append(t.device.apply(run.scheduler, run.nr_requests, run.tunables, file=run.spec_file,
                                               notes=kernel_notes))
        groups = {j.config["cgroup"]: j.config["cgroup_weight"] for j in run.jobs if j.config["cgroup"]}
        if groups:
            n_before = len(journal.actions)
            # Only BFQ honours the weights (the note above): under the others a kernel without BFQ's weight files
            # still places the jobs in their cgroups.
            need = run.scheduler == "bfq" and any(w != 100 for w in groups.values())
            rc_groups = cgroups.create(hierarchy, groups, journal, need_weights=need)
            cg_ids = [a["id"] for a in journal.actions[n_before:]]
        kyber = [(t.device.path, Path("/sys/kernel/debug/block") / t.device.name) for t in targets] \
            if run.scheduler == "kyber" else []
        if kyber and not all((d / "sched" / "read_tokens").exists() for _, d in kyber):
            kyber = []
            kernel_notes.append("Kyber's domain token depths are not sampled: this kernel has no block-layer debugfs "
                                "(CONFIG_BLK_DEBUG_FS), /sys/kernel/debug/block/<device>/sched is missing")
        for note in kernel_notes:
            echo(f"note: {note}")
        text, notes = fiofile.job_file(run, [t.path for t in targets],
                                       {g: rc_groups.fio_name(g) for g in groups} if rc_groups else None,
                                       log_interval_ms=interval_ms)
        store.write_text(rdir, "jobs.fio", text)
        cmd = [fio, "--output-format=json+", "--output=fio.json", "--eta=never"]
        if writes is None:
            cmd.append("--readonly")
        cmd.append("jobs.fio")
        sampler = Sampler(run.sample_interval_ns, kyber)
        label = f"[{index + 1}/{total}] {run.experiment}"
        echo(f"{label}: {run.scheduler} on {', '.join(t.path for t in targets)} ...")
        ru0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
        sampler.start()
        try:
            rc = _run_fio(cmd, rdir, journal)
        finally:
            sampler.stop()
        ru1, fio_wall = resource.getrusage(resource.RUSAGE_SELF), time.monotonic() - t0
        # What iosched itself (sampler, waiting) cost while fio ran: its overhead on the machine.
        own_cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    finally:
        with state.signals_blocked():
            problems = []
            for aid in reversed(cg_ids):
                problems += journal.undo(aid)
            for aid in reversed(queue_ids):
                problems += journal.undo(aid)
        if problems:
            raise KernelError("could not restore: " + "; ".join(problems))
    wall = time.monotonic() - t_wall
    if rc != 0:
        raise KernelError(f"fio exited {rc} (run {rid}): {_tail(rdir / 'fio.log')}; job file {rdir / 'jobs.fio'}")
    doc = _read_fio_json(rdir / "fio.json")
    names = [j.config["name"] for j in run.jobs]
    jobs = fioresult.job_results(doc, names)
    ramp_end = min(j.config["start_ns"] + j.config["ramp_ns"] for j in run.jobs)
    window = max((j["window_ns"] for j in jobs), default=0)
    busy = sampler.core_busy(ramp_end)
    # The measurement in the simulator's SimResult shape (stored as result.json.gz, read by the report); lock time
    # is not measured on a real system.
    result = {"backend": "kernel", "window_ns": window,
              "cores": [{"busy_ns": b * window, "lock_ns": 0} for b in busy], "jobs": jobs, "events": 0}
    rows = job_rows(run, rid, result)
    fs_note = f" ({opts.filesystem})" if opts.filesystem else ""
    for row in rows:
        row.update(backend="kernel", host=host_info()["hostname"], kernel=host_info()["kernel"], lock_share=None,
                   sim_events=None, device="+".join(t.device.path + fs_note for t in targets))
    ts = list(sampler.rows)
    for i, (name, job) in enumerate(zip(names, run.jobs)):
        ts += fioresult.read_iops_logs(rdir / "logs", fiofile.iops_log_prefix(job, i), name, interval_ms)
    spec_doc = {
        "run_id": rid, "experiment": run.experiment, "spec_file": run.spec_file, "sweep_point": run.sweep_point,
        "repetition": run.repetition, "seed": run.seed, "backend": "kernel", "iosched_version": __version__,
        "host": host_info(), "kernel": kernel_version.running()[1],
        "fio": {"path": fio, "version": fio_version, "argv": cmd[1:]},
        "devices": [dict(t.info, spec_name=t.spec_name, target=t.path,
                         **({"filesystem": t.mounted.describe()} if t.mounted else {})) for t in targets],
        "scheduler": run.scheduler, "tunables": run.tunables, "nr_requests": run.nr_requests,
        "queue_before": queue_before, "queue_during": queue_during,
        "cgroups": rc_groups.describe() if rc_groups else None, "readonly": writes is None,
        "jobs": [{"name": j.config["name"], "group_reporting": j.group_reporting, "options": j.options,
                  "config": j.config} for j in run.jobs],
        "notes": run.notes + kernel_notes + notes + [f"sampler: {e}" for e in sampler.errors], "wall_s": round(wall, 3),
        "iosched_cpu_s_during_fio": round(own_cpu, 4), "fio_wall_s": round(fio_wall, 3),
    }
    store.write_measured_run(opts.out, rid, rdir, spec_doc, result, rows, ts)
    echo(format_summary(run, rid, jobs, busy, wall, targets))
    echo("")


def format_summary(run: ResolvedRun, rid: str, jobs: list[dict[str, Any]], busy: list[float], wall_s: float,
                   targets: list[Target]) -> str:
    from ...summary import run_and_job_lines

    lines = run_and_job_lines(run, rid, jobs, "kernel")
    if busy:
        lines.append("cores busy: " + " ".join(f"{i}:{100 * b:.0f}%" for i, b in enumerate(busy)))
    lines.append(f"measured on {', '.join(t.path for t in targets)} in {wall_s:.2f} s wall")
    return "\n".join(lines)
