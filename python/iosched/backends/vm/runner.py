"""One ``iosched run --backend vm`` invocation: check everything on the host, boot the guest once for all the
runs not yet in OUT (a batch), and write each run's results as its folder arrives.

Order: the lab and qemu (a clear error when either is missing), the devices (``--device nullb:...``), the runs
sized for the guest, every scheduler and name checked; the accelerator (KVM probed once, else TCG); the batch
(job files from the kernel backend's fiofile, our scripts) appended to the cached initramfs; the boot; the
frames: each run's folder → results (the kernel backend's fio parsing) → OUT, as the kernel backend writes them.
Nothing is written outside the lab's cache and OUT; qemu never outlives iosched.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ... import store
from ...version import __version__
from ...errors import SpecError, show
from ...results import job_rows
from ...spec import Experiment, RealSystem, ResolvedRun, expand_runs, validate_spec
from ...units import parse_size
from ..kernel import fiofile
from ..kernel.blockdev import KERNEL_SCHEDULERS, simulator_only
from ..kernel.cgroups import NAME_RE as CGROUP_NAME_RE
from ..kernel.fs import addressed_bytes
from ..kernel.runner import _spec_device_names, host_info, refuse_simulator_only_settings, spec_filesystem
from ..kernel.state import signals_raise
from . import VmError, collect, guest, kmod, lab as labmod, qemu
from .cpio import CpioWriter
from .devices import LabDevice, parse_devices, qemu_args

LAB_SCHEDULERS = ("none",) + KERNEL_SCHEDULERS
# The kernel's own schedulers above, and ours (kmod/), built for the lab's kernel and loaded on demand.
SCHEDULERS = LAB_SCHEDULERS + tuple(kmod.MODULES)
# Schedulers that honour cgroup weights (bfq: io.bfq.weight; kyber-fairness: io.kyber_fairness.weight).
WEIGHTED = ("bfq", "kyber-fairness")
TUNABLE_RE = re.compile(r"[a-z0-9_]+")
VM_KEYS = {"cpus": "vCPUs of the guest (default 2)", "memory": "the guest's memory (default 2G)",
           "accel": "auto (probe KVM, else TCG), kvm or tcg (default auto)",
           "idle": "halt: an idle vCPU halts and qemu's thread sleeps until the host wakes it (default); poll: the "
                   "guest's kernel polls instead (idle=poll), so no vCPU waits for the host to wake its thread, at "
                   "the cost of a host core per vCPU (docs/vm-lab.md)",
           "trace": "blk: keep the kernel's blk tracer output of every run (blktrace.txt.gz: each request's Q/G/I/D/C "
                    "and BFQ's own messages; it costs guest CPU, so a traced run is a run of its own); blk+sched: "
                    "the same with the CPU scheduler's wake-ups and context switches in the same file (default off)"}
# Boots per batch: under TCG the lab's kernel now and then panics while it boots (seen in the test suite, where the
# same test then passed on a rerun); a guest that fails after its init reported in is not retried, except below.
# Three, not two: CI on 2026-12-03 saw a boot killed on purpose (a test) followed by a second boot that panicked on
# its own ("Fatal exception in interrupt" 2.9 s in). None of 60 boots as the lab boots (2 vCPUs, 24 of them beside two
# busy simulator processes) panicked here the same day, nor 60 with single-threaded TCG: the fault is rare, and a
# third failure in a row says something else is wrong.
BOOT_ATTEMPTS = 3
TRACE_MODES = ("off", "blk", "blk+sched")
IDLE_MODES = ("halt", "poll")
# The same emulation fault also hits a guest after its init reported in (the suite, 2026-11-30: "Oops: int3" at a
# patched jump site in kmem_cache_free, TCG's view of the kernel's live code patching, then "Kernel panic - not
# syncing: Fatal exception in interrupt"; in runs with and without our modules; reruns passed). Such a batch's
# unfinished runs get another boot (BOOT_ATTEMPTS in all) when the console shows the panic, the guest ran under TCG
# and the report does not run through our modules' code (a frame "[k2_iosched]" or "[kyber_fairness_iosched]": that
# one may be theirs and stays an error). Runs already written are kept.
PANIC_LINE = "Kernel panic - not syncing"
RUN_SLACK_S = 60.0            # beyond the runs' own time: fio's start and stop, sending the folder
TCG_SLOWDOWN = 3.0            # a TCG run's wall time against its fio time, generously
# A run still going this long before its deadline sends what the guest waits on (guest.stalled: blocked tasks and
# their kernel stacks, the queues' dispatch state, the kernel log); the host then waits this long for the report.
STALL_REPORT_S = 30.0
# With a file system, the test file takes at most this share of the device, when the jobs address more: mkfs leaves
# 88.5% (ext4), 89.9% (xfs) and 84.8% (f2fs) of a 1 GiB image free, f2fs 77% of a 512 MiB one (its reserved
# segments weigh more on a small device; measured in the guest, 2026-12-04). The kernel backend takes 90% of the
# free space it finds, which the host cannot know before the boot; the guest refuses a file that does not fit.
FILE_SHARE = 0.75


@dataclass
class Options:
    devices: list[str]
    out: Path
    lab: str | None = None
    cpus: int = 2
    memory_mib: int = 2048
    accel: str = "auto"
    trace: str = "off"
    filesystem: str | None = None   # --filesystem; the spec's devices' `filesystem` when not given
    idle: str = "halt"              # halt or poll (the guest kernel's idle=poll)


def parse_vm_options(items: list[str] | tuple[str, ...], opts: Options) -> Options:
    """``--vm KEY=VALUE`` (repeatable): cpus, memory, accel, trace, idle."""
    for item in items:
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or key not in VM_KEYS:
            raise SpecError("--vm", item, "expected KEY=VALUE with KEY one of: "
                            + "; ".join(f"{k}: {v}" for k, v in VM_KEYS.items()))
        if key == "cpus":
            if not value.isdigit() or not 1 <= int(value) <= 64:
                raise SpecError("--vm", item, f"cpus: expected 1..64, got {show(value)}")
            opts.cpus = int(value)
        elif key == "memory":
            b = parse_size(value, file="--vm", key="memory")
            if b < 256 << 20:
                raise SpecError("--vm", item, "memory: at least 256M (the guest unpacks ~90 MiB of initramfs)")
            opts.memory_mib = b >> 20
        elif key == "accel":
            if value not in ("auto", "kvm", "tcg"):
                raise SpecError("--vm", item, f"accel: expected auto, kvm or tcg, got {show(value)}")
            opts.accel = value
        elif key == "trace":
            if value not in TRACE_MODES:
                raise SpecError("--vm", item, f"trace: expected off, blk or blk+sched, got {show(value)}")
            opts.trace = value
        elif key == "idle":
            if value not in IDLE_MODES:
                raise SpecError("--vm", item, f"idle: expected halt or poll, got {show(value)}")
            opts.idle = value
    return opts


def trace_buffer_kib(opts: Options) -> int:
    """The tracer's ring per vCPU: an eighth of the guest's memory over its vCPUs, at most 64 MiB each (a 9 s run
    of four readers on a 1,000 IOPS null_blk wrote ~24 MB of text)."""
    return min(64 << 10, (opts.memory_mib << 10) // (8 * opts.cpus))


def run_id(run: ResolvedRun, devices: list[LabDevice], opts: Options, accel: str, release: str,
           module_sources: str | None = None) -> str:
    """Same experiment, settings, devices, guest and kernel → same id (a re-run into OUT skips it).  A run of one
    of our modules also names the modules' sources (``module_sources``): changed C code measures again."""
    parts = ["vm", [j.config for j in run.jobs], run.scheduler, run.tunables, run.nr_requests,
             [d.canonical for d in devices], opts.cpus, opts.memory_mib, accel, release, run.experiment,
             run.repetition, run.seed, run.sample_interval_ns, __version__]
    if run.scheduler in kmod.MODULES:
        parts.append(module_sources)
    if opts.trace != "off":
        parts.append(f"trace={opts.trace}")
    if opts.filesystem:
        parts.append(f"filesystem={opts.filesystem}")
    if opts.idle != "halt":
        parts.append(f"idle={opts.idle}")
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def manifest_name(experiment: str) -> str:
    return f"{experiment}@vm"


@dataclass
class Outcome:
    done: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    runs: list[tuple[str, ResolvedRun]] = field(default_factory=list)
    boot_s: float | None = None
    warnings: list[str] = field(default_factory=list)
    # Our modules in the boot: {"loaded": [...], "build": {...}}; after the last run, "unload": {module: rmmod's
    # exit status and words}, "tainted", "kernel_problems" (warnings, bugs, oopses in the boot's kernel log).
    modules: dict[str, Any] | None = None
    # With a file system: the test file's size on each device (its index → bytes), what the jobs address.
    file_bytes: dict[int, int] = field(default_factory=dict)


def _check_scheduler(name: object, file: str, key: str) -> None:
    if name not in SCHEDULERS:
        what = simulator_only().get(name) if isinstance(name, str) else None
        hint = f"; {name} is {what}: run it with --backend sim" if what else ""
        raise SpecError(file, key, f"{show(name)} is not a scheduler of the lab's kernel (it offers: "
                        f"{', '.join(LAB_SCHEDULERS)}, and builds and loads {', '.join(kmod.MODULES)}){hint}")


def check_runs(exp: Experiment, runs: list[ResolvedRun], cpus: int) -> None:
    """What the guest would refuse, refused before booting it."""
    spec = validate_spec(exp.file, exp.data)
    _check_scheduler(spec.scheduler.name, exp.file, "scheduler.name")
    for name in spec.sweep.get("scheduler.name", []):
        _check_scheduler(name, exp.file, 'sweep."scheduler.name"')
    refuse_simulator_only_settings(exp.file, spec)
    for r in runs:
        fiofile.check_job_names(r)
        _check_scheduler(r.scheduler, r.spec_file, "scheduler.name")
        for key in r.tunables:
            if not TUNABLE_RE.fullmatch(key):
                raise SpecError(r.spec_file, f"scheduler.{key}", "not a sysfs tunable name")
        for j in r.jobs:
            g = j.config["cgroup"]
            if g and (not CGROUP_NAME_RE.fullmatch(g) or g in (".", "..")):
                raise SpecError(r.spec_file, f'job "{j.config["name"]}": cgroup', f"{show(g)}: the VM backend "
                                "takes cgroup names of letters, digits and _ . + - only")


def job_file(run: ResolvedRun, n_devices: int, interval_ms: int,
             filesystem: str | None = None) -> tuple[str, list[str], dict[str, int]]:
    """The kernel backend's job file for the guest's devices (/dev/iosched/dK, or the test file on each with
    ``filesystem``); a job with a cgroup joins it through exec_prerun (guest.cgroup_prerun) instead of fio's
    cgroup=."""
    groups = {j.config["cgroup"]: j.config["cgroup_weight"] for j in run.jobs if j.config["cgroup"]}
    text, notes = fiofile.job_file(run, [guest.target(k, filesystem) for k in range(n_devices)],
                                   {g: g for g in groups}, log_interval_ms=interval_ms)
    lines = [f"exec_prerun={guest.cgroup_prerun(ln[len('cgroup='):])}" if ln.startswith("cgroup=") else ln
             for ln in text.splitlines()]
    # fio's default clock reads the TSC, which it cannot calibrate under emulation (it warns "clocksource=cpu may
    # not be reliable" and measures 1 ms null_blk completions as 11 us): the guest kernel's clock instead.
    head = [ln for ln in lines if ln.startswith(";")]
    body = lines[len(head):]
    return "\n".join(head + ["[global]", "clocksource=clock_gettime"] + body) + "\n", notes, groups


def expected_s(run: ResolvedRun) -> float:
    """An upper bound of fio's own time for a run: every job's start, ramp and runtime one after another."""
    return sum((j.config["start_ns"] + j.config["ramp_ns"] + j.config["runtime_ns"]) / 1e9 for j in run.jobs)


def run_deadline_s(run: ResolvedRun, accel: str) -> float:
    """How long the host waits for a run's folder after the run began."""
    return expected_s(run) * (TCG_SLOWDOWN if accel == "tcg" else 1.5) + RUN_SLACK_S


def batch_filesystem(exps: list[Experiment], given: str | None) -> str | None:
    """The file system of the boot's runs (one for every device and experiment, as the kernel backend makes)."""
    named = {spec_filesystem(e, given) for e in exps}
    if len(named) > 1:
        raise SpecError(exps[-1].file, "devices.filesystem", "one boot makes one file system on every device: "
                        f"the experiments give {', '.join(sorted(str(n) for n in named))}")
    return named.pop()


def sizes_of_test_files(devices: list[LabDevice], runs: list[ResolvedRun], opts: Options) -> dict[int, int]:
    """The test file on each device: what the jobs address there (their largest offset + size, rounded up to
    MiB), at most FILE_SHARE of the device (the guest checks that the file system has that room).  A null_blk
    device keeps a file system only with memory_backed=1, in the guest's memory."""
    out = {}
    for d in devices:
        if d.kind == "nullb" and d.value("memory_backed") != "1":
            raise SpecError("--device", d.given, f"a file system ({opts.filesystem}) needs memory_backed=1: without it "
                            "null_blk keeps no data, so mkfs's writes are lost")
        if d.kind == "nullb" and d.capacity_bytes > (opts.memory_mib << 20) // 2:
            raise SpecError("--device", d.given, f"a memory-backed null_blk with a file system keeps its data in the "
                            f"guest's memory: give it a size of at most half of it ({opts.memory_mib // 2}M), e.g. "
                            "size=512M")
        want = addressed_bytes(runs, d.index)
        cap = int(d.capacity_bytes * FILE_SHARE) >> 20 << 20
        out[d.index] = min(cap, -(-want >> 20) << 20) if want else cap
        if out[d.index] < 1 << 20:
            raise SpecError("--device", d.given, "too small for a file system and a test file on it")
    return out


def run_vm(exp: Experiment | list[Experiment], opts: Options, echo: Callable[[str], None] = print) -> Outcome:
    """Run the experiment(s) in one boot (several experiments: their runs one after another, as one batch; they
    must name as many devices as --device gives)."""
    exps = [exp] if isinstance(exp, Experiment) else list(exp)
    exe = qemu.find_qemu()
    folder = labmod.lab_dir(opts.lab)
    lab = labmod.load(folder, echo=lambda s: echo(s if s.startswith("note:") else f"note: {s}"))
    devices = parse_devices(opts.devices)
    if not devices:
        raise SpecError("--device", None, "the VM backend needs the lab's devices: --device nullb[:KEY=VALUE,...], "
                                          "nvme[:size=1G,...] or virtio[:...], one per device of the spec")
    spec_names: list[str] = []
    runs: list[ResolvedRun] = []
    owner: list[Experiment] = []
    opts = dataclasses.replace(opts, filesystem=batch_filesystem(exps, opts.filesystem))
    outcome = Outcome()
    on_devices = RealSystem(opts.cpus, [(d.capacity_bytes, d.logical_block_bytes) for d in devices])
    for e in exps:
        spec_names = _spec_device_names(e)
        if len(spec_names) != len(devices):
            raise SpecError("--device", None, f"{e.file} has {len(spec_names)} device(s) ({', '.join(spec_names)}), "
                            f"mapped in order to the --device given; expected {len(spec_names)}, got {len(devices)}")
        rs = expand_runs(e, on_devices)
        runs += rs
        owner += [e] * len(rs)
    if opts.filesystem:     # the jobs address the test file on each device: size them (and check them) by it
        outcome.file_bytes = sizes_of_test_files(devices, runs, opts)
        on_files = RealSystem(opts.cpus, [(outcome.file_bytes[d.index], d.logical_block_bytes) for d in devices])
        runs = [r for e in exps for r in expand_runs(e, on_files)]
    for e in exps:
        check_runs(e, [r for r, o in zip(runs, owner) if o is e], opts.cpus)
    for note in dict.fromkeys(n for r in runs for n in r.notes):
        echo(f"note: {note}")
    if any(r.scheduler not in WEIGHTED and any(j.config["cgroup"] and j.config["cgroup_weight"] != 100
                                               for j in r.jobs) for r in runs):
        echo("note: cgroup weights take effect under bfq and kyber-fairness only (as in the simulator); none, "
             "mq-deadline, kyber and k2 ignore them")
    built = None
    if any(r.scheduler in kmod.MODULES for r in runs):
        built = kmod.ensure_built(folder, lab.info, echo=lambda s: echo(f"note: {s}"))
    scratch_root = folder / "tmp"
    labmod.clean(folder, everything=False)
    scratch_root.mkdir(parents=True, exist_ok=True)
    scratch = Path(os.path.realpath(scratch_root)) / f"{os.getpid()}-{time.monotonic_ns() % 10**9}"
    scratch.mkdir()
    store.cleanup_tmp(opts.out)
    try:
        with signals_raise():
            accel, how = qemu.choose_accel(opts.accel, lab, exe, scratch, echo)
            echo(f"note: accelerator {accel}: {how}")
            sources = built.info["sources"] if built else None
            outcome.runs = [(run_id(r, devices, opts, accel, lab.release, sources), r) for r in runs]
            pending = []
            for i, (rid, r) in enumerate(outcome.runs):
                if store.is_done(opts.out, rid):
                    outcome.skipped.append(rid)
                else:
                    pending.append(i)
            for attempt in range(1, BOOT_ATTEMPTS + 1):
                if not pending:
                    break
                try:
                    _batch(exps[0], lab, exe, accel, how, devices, spec_names, pending, outcome, opts, scratch, echo,
                           built)
                    break
                except _GuestPanicked as e:
                    left = [i for i in pending if not store.is_done(opts.out, outcome.runs[i][0])]
                    ours = any(f"[{m.module}]" in e.report for m in kmod.MODULES.values())
                    if attempt == BOOT_ATTEMPTS or accel != "tcg" or ours:
                        raise VmError(str(e)) from None
                    echo(f"note: the guest's kernel panicked ({e.where}); booting once more for the {len(left)} "
                         "unfinished run(s)")
                    outcome.warnings.append(
                        f"the guest's kernel panicked ({e.where}; its console: {e.console}); the {len(left)} "
                        "unfinished run(s) ran in another boot (under TCG the lab's kernel now and then panics, an "
                        "emulation fault; the runs written before it are kept)")
                    pending = left
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        for e in exps:
            _record(e, opts, [pair for pair, o in zip(outcome.runs, owner) if o is e])
    return outcome


def _record(exp: Experiment, opts: Options, runs: list[tuple[str, ResolvedRun]]) -> None:
    if not runs or not opts.out.exists():
        return
    store.record_spec(opts.out, manifest_name(runs[0][1].experiment), exp.file, exp.data, runs,
                      mode="vm", backend="vm", devices=list(opts.devices),
                      vm={"cpus": opts.cpus, "memory_mib": opts.memory_mib})


def _initrd(lab: labmod.Lab, batch: dict[str, str | bytes], dest: Path) -> Path:
    """The cached initramfs, then a second archive with the batch (/batch/...): the kernel unpacks both.  The
    kernel is copied beside it (a `prepare` meanwhile may replace the build); returns the kernel's copy."""
    kernel = dest.parent / "vmlinuz"
    with labmod.locked(lab.dir, shared=True):
        shutil.copyfile(lab.initramfs, dest)
        shutil.copyfile(lab.kernel, kernel)
    with open(dest, "ab") as f:
        f.write(b"\0" * (-f.tell() % 4))
        w = CpioWriter(f)
        w.directory("batch")
        for name, data in sorted(batch.items()):
            w.parents(f"batch/{name}")
            w.file(f"batch/{name}", data if isinstance(data, bytes) else data.encode(),
                   0o755 if name.endswith(".sh") else 0o644)
        w.close()
    return kernel


def _batch(exp: Experiment, lab: labmod.Lab, exe: str, accel: str, how: str, devices: list[LabDevice],
           spec_names: list[str], pending: list[int], outcome: Outcome, opts: Options, scratch: Path, echo,
           built: kmod.Built | None = None) -> None:
    interval_ns = outcome.runs[pending[0]][1].sample_interval_ns
    brs, files, job_notes = [], {}, {}
    # Our modules go with every boot that runs one of them; the guest loads them first and unloads them last.
    mods = [kmod.MODULES[n] for n in sorted({outcome.runs[i][1].scheduler for i in pending} & set(kmod.MODULES))]
    for m in mods:
        files[f"kmod/{m.ko}"] = built.ko(m.elevator).read_bytes()
    if mods:
        outcome.modules = {"loaded": [m.module for m in mods], "build": built.describe()}
    for i in pending:
        _, r = outcome.runs[i]
        text, notes, groups = job_file(r, len(devices), max(1, r.sample_interval_ns // 1_000_000), opts.filesystem)
        br = guest.BatchRun(i, r, text, groups)
        brs.append(br)
        job_notes[i] = notes
        files[f"runs/{i}/jobs.fio"] = text
        files[f"runs/{i}/run.sh"] = guest.run_script(br, len(devices), r.sample_interval_ns / 1e9,
                                                     run_deadline_s(r, accel) - STALL_REPORT_S,
                                                     trace_buffer_kib(opts) if opts.trace != "off" else 0,
                                                     sched_events=opts.trace == "blk+sched")
    files["main.sh"] = guest.main_script(devices, brs, interval_ns / 1e9, [(m.ko, m.module) for m in mods],
                                         opts.filesystem, outcome.file_bytes)
    qargs: list[str] = []
    for d in devices:
        img = None
        if d.kind != "nullb":
            img = scratch / f"d{d.index}.img"
            with open(img, "wb") as f:
                f.truncate(d.capacity_bytes)
        qargs += qemu_args(d, str(img) if img else None)
    initrd = scratch / "initrd.img"
    kernel = _initrd(lab, files, initrd)
    boot = qemu.Boot(kernel, initrd, accel, opts.cpus, opts.memory_mib, scratch / "results.bin",
                     scratch / "console.log", qargs, idle_poll=opts.idle == "poll")
    echo(f"booting the lab ({accel}, {opts.cpus} vCPUs, {opts.memory_mib} MiB, kernel {lab.release}) for "
         f"{len(pending)} run(s) on {', '.join(f'{n} = {d.given}' for n, d in zip(spec_names, devices))} ...")
    for attempt in range(1, BOOT_ATTEMPTS + 1):
        try:
            _boot_and_collect(boot, exe, exp, lab, accel, how, devices, pending, outcome, opts, scratch, job_notes,
                              echo)
            return
        except _BootFailed as e:
            if attempt == BOOT_ATTEMPTS:
                raise VmError(str(e)) from None
            echo(f"note: {e}; booting once more (a TCG guest now and then panics while it boots)")


def _boot_and_collect(boot: qemu.Boot, exe: str, exp: Experiment, lab: labmod.Lab, accel: str, how: str,
                      devices: list[LabDevice], pending: list[int], outcome: Outcome, opts: Options, scratch: Path,
                      job_notes: dict[int, list[str]], echo) -> None:
    """One boot of the batch: follow the guest's frames, writing each run's results as it arrives, until the guest
    says it has ended. Raises _BootFailed if it stops or falls silent before its init reports in."""
    ch = qemu.Channel(boot.results)
    state: dict[str, Any] = {"setup": None, "begun": None, "current": None, "end": False}
    t_start = time.monotonic()
    deadline = t_start + qemu.BOOT_TIMEOUT_S[accel]
    n_done = 0
    with qemu.running(boot, exe, scratch / "qemu.err") as g:
        while not state["end"]:
            alive = g.alive()          # before reading: what a guest wrote before it stopped is then read
            frames = ch.poll()
            arrived = time.monotonic()      # the frames' arrival, before any of them is processed
            for fr in frames:
                w = fr.words
                if w[0] == "begin":
                    state["begun"] = time.monotonic()
                    outcome.boot_s = state["begun"] - t_start
                    echo(f"guest up in {outcome.boot_s:.1f} s")
                    deadline = time.monotonic() + qemu.BOOT_TIMEOUT_S[accel]
                elif w[0] == "error":
                    raise _guest_error(w, fr.text, devices, outcome, state, exp)
                elif w[0] == "stderr":
                    echo(f"note: guest: {fr.text[len('stderr '):]}")
                elif w[0] == "tar" and w[1] == "setup":
                    state["setup"] = _setup_info(fr.data, scratch / "setup")
                    deadline = time.monotonic() + 120.0
                elif w[0] == "stall":
                    echo(f"note: run {outcome.runs[int(w[1])][0]} overran its time; the guest reports what it "
                         "waits on")
                    deadline = time.monotonic() + STALL_REPORT_S
                elif w[0] == "tar" and w[1] == "stall":
                    raise _stalled(fr.data, g, outcome, state, opts.out)
                elif w[0] == "tar" and w[1] == "unload":
                    _unloaded(fr.data, scratch / "unload", outcome, echo)
                elif w[0] == "run-begin":
                    i = int(w[1])
                    state["current"] = (i, arrived)
                    state["cpu0"] = g.cpu_ns()
                    state["guest_begin"] = float(w[2]) if len(w) > 2 else None
                    _, r = outcome.runs[i]
                    deadline = time.monotonic() + run_deadline_s(r, accel)
                    n_done += 1
                    echo(f"[{n_done}/{len(pending)}] {r.experiment}: {r.scheduler} on "
                         f"{', '.join(d.given for d in devices)} ...")
                elif w[0] == "tar" and w[1].startswith("r"):
                    i = int(w[1][1:])
                    began = state["current"][1] if state["current"] and state["current"][0] == i else None
                    wall = arrived - began if began is not None else None
                    run_ns, wait_ns = qemu.cpu_delta(state.get("cpu0") or {}, g.cpu_ns())
                    _one_result(i, fr.data, outcome, devices, lab, accel, how, opts, state, job_notes[i],
                                wall, (run_ns, wait_ns), echo)
                    state["current"] = None
                    deadline = time.monotonic() + 120.0
                elif w[0] == "end":
                    state["end"] = True
            if state["end"]:
                break
            if not alive and state["begun"] is not None and PANIC_LINE in (console := g.console_text()):
                raise _GuestPanicked(f"the guest stopped before finishing ({_where(state, outcome)}): its kernel "
                                     f"panicked; console: {g.console_tail() or '(empty)'}{_kept_console(g, opts.out)}",
                                     _where(state, outcome), opts.out / "vm-console.log", console)
            if not alive:
                raise _failure(state)(f"the guest stopped before finishing ({_where(state, outcome)}): qemu exited "
                                  f"{g.proc.returncode}; {g.stderr_tail() or ''} console: "
                                  f"{g.console_tail() or '(empty)'}{_kept_console(g, opts.out)}")
            if time.monotonic() > deadline:
                raise _failure(state)(f"the guest did not answer in time ({_where(state, outcome)})"
                                      f"{_host_share(g, state)}; console: {g.console_tail() or '(empty)'}"
                                      f"{_kept_console(g, opts.out)}")
            time.sleep(0.1)
        with contextlib.suppress(Exception):
            g.proc.wait(timeout=30)


class _BootFailed(VmError):
    """The guest stopped or fell silent before its init reported in: worth another boot (up to BOOT_ATTEMPTS in all)."""


class _GuestPanicked(VmError):
    """The guest's kernel panicked after its init reported in (its console says so)."""

    def __init__(self, message: str, where: str, console: Path, report: str):
        super().__init__(message)
        self.where = where
        self.console = console
        self.report = report        # the console's text: the oops and its call trace


def _failure(state: dict) -> type[VmError]:
    """The error for a guest that stopped or fell silent: retried while it was still booting, final after."""
    return _BootFailed if state["begun"] is None else VmError


def _kept_console(g: qemu.Guest, out: Path) -> str:
    """The whole serial console of a boot that failed (a guest kernel's panic or oops is longer than the error's
    tail) kept as OUT/vm-console.log: the error's closing words naming it, or nothing when it cannot be kept."""
    try:
        text = g.boot.console.read_bytes()
        if not text:
            return ""
        path = store.write_file(out, "vm-console.log", text)
    except Exception:  # noqa: BLE001  (the error being raised matters more than this file)
        return ""
    return f" (the whole console: {path})"


def _stalled(data: bytes, g: qemu.Guest, outcome: Outcome, state: dict, out: Path) -> VmError:
    """The error for a run that overran its time, from the guest's stall report (kept as OUT/vm-stall/): its
    blocked tasks with where each waits, and how much of the time the host gave qemu a CPU (a starved TCG guest is
    slow, not stuck)."""
    blocked = kept = ""
    try:
        dest = store.make_folder(out, "vm-stall")
        collect.unpack(data, dest)
        heads = [ln[3:] for ln in (dest / "blocked.txt").read_text(errors="replace").splitlines()
                 if ln.startswith("== ")]
        blocked = (f"; {len(heads)} blocked task(s): {', '.join(heads[:6])}{' ...' if len(heads) > 6 else ''}"
                   if heads else "; no task was blocked in the kernel")
        kept = f" (its report: {dest})"
    except Exception:  # noqa: BLE001  (the error being raised matters more than the report's files)
        pass
    return VmError(f"the run did not finish in time ({_where(state, outcome)}){blocked}{_host_share(g, state)}"
                   f"{kept}{_kept_console(g, out)}")


def _host_share(g: qemu.Guest, state: dict) -> str:
    """How much CPU the host gave qemu since the current run began (nothing between runs)."""
    if not state["current"]:
        return ""
    run_ns, wait_ns = qemu.cpu_delta(state.get("cpu0") or {}, g.cpu_ns())
    return (f"; in the run's {time.monotonic() - state['current'][1]:.0f} s qemu ran {run_ns / 1e9:.1f} CPU-s and "
            f"waited {wait_ns / 1e9:.1f} s for a host CPU")


def _where(state: dict, outcome: Outcome) -> str:
    if state["current"]:
        return f"during run {outcome.runs[state['current'][0]][0]}"
    if state["begun"] is None:
        return "while booting"
    return "between runs"


def _guest_error(words: list[str], text: str, devices: list[LabDevice], outcome: Outcome, state: dict,
                 exp: Experiment) -> Exception:
    """An error frame (``error KEY message``) → a SpecError naming the spec key or device, else a VmError."""
    key = words[1] if len(words) > 1 else "-"
    msg = text.split(" ", 2)[2] if len(text.split(" ", 2)) > 2 else text
    if key.startswith("scheduler."):
        file = outcome.runs[state["current"][0]][1].spec_file if state["current"] else exp.file
        return SpecError(file, key, f"the lab's kernel refused it: {msg}")
    if key.isdigit() and int(key) < len(devices):
        return SpecError("--device", devices[int(key)].given, msg)
    return VmError(f"guest ({_where(state, outcome)}): {msg}")


def _unloaded(data: bytes, dest: Path, outcome: Outcome, echo) -> None:
    """The guest's report after the last run: rmmod's result per module, the taint flags and the boot's kernel log
    (what the runs' dmesg.txt did not take).  A failed unload or a warning, bug or oops is a warning of the boot
    (the runs' own dmesg.txt are checked as they arrive)."""
    dest.mkdir(parents=True, exist_ok=True)
    collect.unpack(data, dest)

    def rd(name: str) -> str:
        p = dest / name
        return p.read_text(errors="replace") if p.exists() else ""

    unload = {}
    for line in rd("rmmod").splitlines():
        name, _, rest = line.partition("=")
        status, _, words = rest.partition(" ")
        unload[name] = {"status": int(status) if status.strip().isdigit() else None, "output": words.strip()}
    left = [ln.split()[0] for ln in rd("proc_modules").splitlines()
            if ln.split() and ln.split()[0] in (outcome.modules or {}).get("loaded", [])]
    problems = collect.kernel_problems(rd("kernel.log"))
    info = outcome.modules if outcome.modules is not None else {}
    info.update(unload=unload, still_loaded=left, tainted=rd("tainted").strip(), kernel_problems=problems,
                kernel_log=rd("kernel.log"))
    outcome.modules = info
    bad = [f"{n} (rmmod exit {u['status']}: {u['output']})" for n, u in unload.items() if u["status"] != 0]
    if bad or left:
        msg = f"the scheduler module(s) did not unload: {', '.join(bad or left)}"
        echo(f"warning: {msg}")
        outcome.warnings.append(msg)
    if problems:
        msg = f"the guest kernel reported {len(problems)} problem line(s) during the boot: {problems[0]}"
        echo(f"warning: {msg}")
        outcome.warnings.append(msg)
    if not bad and not left and not problems:
        echo(f"modules {', '.join(unload)} unloaded; kernel log clean")


def _setup_info(data: bytes, dest: Path) -> dict[str, Any]:
    dest.mkdir(parents=True, exist_ok=True)
    collect.unpack(data, dest)

    def rd(name: str) -> str:
        p = dest / name
        return p.read_text(errors="replace").strip() if p.exists() else ""

    info: dict[str, Any] = {"kernel": rd("kernel"), "cpus": rd("cpus"), "meminfo": rd("meminfo"),
                            "modules": rd("modules").splitlines() or None,
                            "cmdline": rd("cmdline"), "fio_version": rd("fio_version"), "devices": []}
    k = 0
    while (dest / f"d{k}.name").exists():
        sectors = rd(f"d{k}.sectors")
        dev = {"guest_device": f"/dev/{rd(f'd{k}.name')}", "default_scheduler": rd(f"d{k}.default_scheduler"),
               "nr_requests_none": rd(f"d{k}.nr_requests"), "wbt_lat_usec": rd(f"d{k}.wbt") or None,
               "capacity_bytes": int(sectors) * 512 if sectors.isdigit() else None,
               "logical_block_bytes": int(rd(f"d{k}.lbs") or 0), "hw_queues": int(rd(f"d{k}.hw_queues") or 0)}
        if (dest / f"d{k}.configfs").exists():
            dev["null_blk"] = collect.read_kv(rd(f"d{k}.configfs"))
        if (dest / f"d{k}.fs").exists():
            made = collect.read_kv(rd(f"d{k}.fs"))
            dev["filesystem"] = {key: int(v) if key.endswith("_bytes") and v.isdigit() else v
                                 for key, v in made.items()}
        info["devices"].append(dev)
        k += 1
    return info


def _one_result(i: int, data: bytes, outcome: Outcome, devices: list[LabDevice], lab: labmod.Lab, accel: str,
                how: str, opts: Options, state: dict, job_notes: list[str], wall: float | None,
                qemu_cpu: tuple[int, int], echo) -> None:
    rid, run = outcome.runs[i]
    setup = state["setup"] or {"devices": []}
    rdir = store.new_run_dir(opts.out, rid).absolute()
    collect.unpack(data, rdir)
    guest_run_s = None
    if state.get("guest_begin") is not None and (rdir / "run.end").exists():
        guest_run_s = float((rdir / "run.end").read_text()) - state["guest_begin"]
    doc = collect.read_fio(rdir)
    names = [j.config["name"] for j in run.jobs]
    jobs = collect.job_results(doc, names)
    notes = list(run.notes) + list(job_notes)
    queue_during = []
    for d in devices:
        p = rdir / f"queue-d{d.index}.txt"
        snap = collect.queue_snapshot(p.read_text() if p.exists() else "")
        queue_during.append(snap)
        gdev = setup["devices"][d.index]["guest_device"] if d.index < len(setup["devices"]) else d.given
        notes += collect.setting_notes(snap, run.scheduler, run.nr_requests, run.tunables, gdev)
    groups = {j.config["cgroup"]: j.config["cgroup_weight"] for j in run.jobs if j.config["cgroup"]}
    cg_info = {}
    for g, weight in groups.items():
        written = collect.read_kv((rdir / f"cgroup-{g}.txt").read_text()) if (rdir / f"cgroup-{g}.txt").exists() else {}
        stat_text = (rdir / f"cgroup-{g}.io.stat").read_text() if (rdir / f"cgroup-{g}.io.stat").exists() else ""
        ios = collect.io_stat_ios(stat_text)
        cg_info[g] = {"weight": weight, "written": written, "io.stat": stat_text.strip(), "ios": ios}
        fio_ios = sum(jr["read"]["ios"] + jr["write"]["ios"] for jr, j in zip(jobs, run.jobs)
                      if j.config["cgroup"] == g)
        if fio_ios and not ios:
            raise VmError(f"run {rid}: cgroup {g}'s io.stat shows no I/O although its jobs did {fio_ios}: the jobs "
                          "did not join it")
    start_s = float((rdir / "fio.start").read_text()) if (rdir / "fio.start").exists() else 0.0
    end_s = float((rdir / "fio.end").read_text()) if (rdir / "fio.end").exists() else 0.0
    samples = collect.parse_stat_log((rdir / "stat.log").read_text()) if (rdir / "stat.log").exists() else []
    ramp_end = min(j.config["start_ns"] + j.config["ramp_ns"] for j in run.jobs)
    busy, cpu_rows = collect.guest_cpu(samples, start_s, ramp_end)
    warnings = [w for w in (collect.saturation_warning(busy, accel), collect.contention_warning(*qemu_cpu))
                if w]
    # What the device completed during fio (/sys/block/<dev>/stat) and the scheduler's own counters after it:
    # with our modules, the requests they saw, against what the device did.
    diskstats, sched_state = [], []
    for d in devices:
        before, after = rdir / f"diskstat-d{d.index}.before", rdir / f"diskstat-d{d.index}.after"
        diskstats.append(collect.diskstat_delta(before.read_text(), after.read_text())
                         if before.exists() and after.exists() else None)
        sched_state.append(collect.read_sched_state(rdir / f"sched-d{d.index}"))
    problems = collect.kernel_problems((rdir / "dmesg.txt").read_text(errors="replace")) \
        if (rdir / "dmesg.txt").exists() else []
    if problems:
        warnings.append(f"the guest kernel reported {len(problems)} problem line(s) during the run (dmesg.txt): "
                        f"{problems[0]}")
    window = max((j["window_ns"] for j in jobs), default=0)
    result = {"backend": "vm", "window_ns": window,
              "cores": [{"busy_ns": b * window, "lock_ns": 0} for b in busy], "jobs": jobs, "events": 0,
              "warnings": warnings}
    rows = job_rows(run, rid, result)
    hostname = host_info()["hostname"]
    guest_kernel = setup.get("kernel") or lab.release
    for row in rows:
        row.update(backend="vm", host=f"vm-{accel}@{hostname}", kernel=guest_kernel, lock_share=None,
                   sim_events=None, device="+".join(d.given for d in devices))
    interval_ms = max(1, run.sample_interval_ns // 1_000_000)
    ts = list(cpu_rows)
    for k, (name, job) in enumerate(zip(names, run.jobs)):
        from ..kernel import fiofile, fioresult
        ts += fioresult.read_iops_logs(rdir / "logs", fiofile.iops_log_prefix(job, k), name, interval_ms)
    fio_wall = end_s - start_s if end_s and start_s else None
    spec_doc = {
        "run_id": rid, "experiment": run.experiment, "spec_file": run.spec_file, "sweep_point": run.sweep_point,
        "repetition": run.repetition, "seed": run.seed, "backend": "vm", "iosched_version": __version__,
        "host": dict(host_info(), kernel=guest_kernel), "kernel": lab.kernel_version(guest_kernel),
        "vm": {"accel": accel, "accel_reason": how, "cpus": opts.cpus, "memory_mib": opts.memory_mib,
               "kernel": setup.get("kernel"), "cmdline": setup.get("cmdline"), "lab": lab.describe(),
               "qemu": qemu.qemu_version(qemu.find_qemu()), "boot_s": round(outcome.boot_s or 0, 2),
               "guest_cpu_busy": [round(b, 4) for b in busy], "qemu_cpu_s": round(qemu_cpu[0] / 1e9, 3),
               "qemu_wait_s": round(qemu_cpu[1] / 1e9, 3), "host_loadavg": _loadavg(),
               "modules": ({"loaded": outcome.modules["loaded"], "build": outcome.modules["build"],
                            "proc_modules": setup.get("modules")} if outcome.modules else None)},
        "fio": {"version": setup.get("fio_version"), "argv": ["--output-format=json+", "--output=fio.json",
                                                              "--eta=never", "jobs.fio"]},
        "devices": [dict(d.describe(), spec_name=n, target=guest.target(d.index, opts.filesystem),
                         **(setup["devices"][d.index] if d.index < len(setup["devices"]) else {}))
                    for d, n in zip(devices, _names_for(devices, run))],
        "scheduler": run.scheduler, "tunables": run.tunables, "nr_requests": run.nr_requests,
        "queue_during": queue_during, "cgroups": cg_info or None,
        "diskstats": diskstats, "scheduler_state": sched_state,
        "jobs": [{"name": j.config["name"], "group_reporting": j.group_reporting, "options": j.options,
                  "config": j.config} for j in run.jobs],
        "notes": notes + warnings, "warnings": warnings,
        "wall_s": round(wall, 3) if wall else None, "fio_wall_s": round(fio_wall, 3) if fio_wall else None,
        "guest_run_s": round(guest_run_s, 3) if guest_run_s else None,
    }
    store.write_measured_run(opts.out, rid, rdir, spec_doc, result, rows, ts)
    outcome.done.append(rid)
    from ...summary import run_and_job_lines
    lines = run_and_job_lines(run, rid, jobs, "vm")
    if busy:
        lines.append("guest vCPUs busy: " + " ".join(f"{i}:{100 * b:.0f}%" for i, b in enumerate(busy)))
    lines.append(f"measured in the lab ({accel}) on {', '.join(d.given for d in devices)}"
                 + (f" in {wall:.2f} s wall (fio {fio_wall:.2f} s)" if wall and fio_wall else ""))
    echo("\n".join(lines))
    for wmsg in warnings:
        echo(f"warning: {wmsg}")
        outcome.warnings.append(f"{rid}: {wmsg}")
    echo("")


def _loadavg() -> list[float] | None:
    with contextlib.suppress(OSError, ValueError):
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    return None


def _names_for(devices: list[LabDevice], run: ResolvedRun) -> list[str]:
    return [d["name"] for d in run.devices] if len(run.devices) == len(devices) else [""] * len(devices)
