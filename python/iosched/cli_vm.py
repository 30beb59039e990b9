"""The VM lab on the command line: ``iosched vm prepare|check|shell|clean|devices`` and ``iosched run --backend
vm`` (called from cli.run).  Kept apart from cli.py, which only registers the group and dispatches to run_vm."""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import click

from . import interrupt
from .errors import SpecError

_lab_option = click.option("--lab", "lab_dir", type=click.Path(file_okay=False), default=None,
                           help="The lab's cache folder (default: $IOSCHED_LAB_DIR, else ~/.cache/iosched/lab).")
_vm_option = click.option("--vm", "vm_opts", multiple=True, metavar="KEY=VALUE",
                          help="The guest: cpus=N (default 2), memory=SIZE (2G), accel=auto|kvm|tcg (auto), "
                               "idle=halt|poll (halt).")


def _no_trace(opts):
    """--vm trace=... records runs; a shell or a check has none (in a shell, docs/vm-lab.md shows the tracer)."""
    if opts.trace != "off":
        raise SpecError("--vm", f"trace={opts.trace}", "only for runs (iosched run or validate --backend vm)")
    return opts


def _fail(msg: str, code: int = 1):
    click.echo(f"error: {msg}", err=True)
    sys.exit(code)


def _echo(line: str) -> None:
    click.echo(line, err=line.startswith(("note:", "error:", "warning:")))


@click.group()
def vm():
    """The VM lab (--backend vm): the real Linux schedulers in a QEMU guest on null_blk and emulated NVMe, without
    root.  Start with `iosched vm prepare`."""


@vm.command()
@_lab_option
@click.option("--kernel", "pin", default=None, metavar="ABI",
              help="Debian kernel ABI to take instead of the pinned one: a 6.12 build (e.g. 6.12.115+deb12) or "
                   "bookworm's own 6.1 (e.g. 6.1.0-57; our scheduler modules are written for 6.12).")
@click.option("--rebuild", is_flag=True, help="Build the guest image (and our modules) again even if up to date.")
@click.option("--no-modules", is_flag=True, help="Do not build our scheduler modules (k2, kyber-fairness).")
def prepare(lab_dir, pin, rebuild, no_modules):
    """Fetch the guest's kernel, busybox and fio (with its libraries) from Debian's archive with apt-get download,
    and build the guest image, then our scheduler modules (iosched vm build-modules); offline and quick when the
    cache is current."""
    from .backends.vm import VmError, kmod, lab, packages

    folder = lab.lab_dir(lab_dir)
    try:
        lb = lab.prepare(folder, pin=pin or packages.KERNEL_PIN, echo=_echo, force=rebuild, asked=pin is not None)
    except VmError as e:
        _fail(str(e))
    k = lb.info["kernel"]
    sizes = lab.sizes(folder)
    click.echo(f"kernel {k['release']} ({k['package']} {k['version']}; {k['source_package']} {k['source_version']}"
               f"{'' if k['source_available'] else ' not in the archive'}), fio {lb.info['packages']['fio']}, "
               f"{len(lb.info['packages'])} packages")
    click.echo(f"cache {folder}: packages {sizes['debs'] / 2**20:.0f} MiB, built {sizes['build'] / 2**20:.0f} MiB")
    if not no_modules:
        # The stock schedulers need none of this: a module that does not build is a warning here, and an error
        # only for a run that names it.
        try:
            built = kmod.ensure_built(folder, lb.info, echo=_echo, force=rebuild)
            click.echo(f"modules: {', '.join(kmod.MODULES)} in {built.dir}")
        except VmError as e:
            click.echo(f"warning: the scheduler modules were not built: {e}", err=True)


@vm.command("build-modules")
@_lab_option
@click.option("--rebuild", is_flag=True, help="Build them again even if the cached build is current.")
def build_modules(lab_dir, rebuild):
    """Build our scheduler modules (kmod/: k2, kyber-fairness) for the lab's kernel: its headers packages and the
    private block/*.h of the matching linux-source are fetched once and cached; rebuilt when the sources, the
    kernel or the compiler change."""
    from .backends.vm import VmError, kmod, lab

    folder = lab.lab_dir(lab_dir)
    t0 = time.monotonic()
    try:
        lb = lab.load(folder, echo=_echo)
        built = kmod.ensure_built(folder, lb.info, echo=_echo, force=rebuild)
    except VmError as e:
        _fail(str(e))
    for name, m in kmod.MODULES.items():
        click.echo(f"{name}: {built.ko(name)}")
    click.echo(f"kernel {lb.release}, sources {built.info['sources']}, BTF {'yes' if built.info['btf'] else 'no'}"
               f" ({time.monotonic() - t0:.1f} s)")


@vm.command()
@_lab_option
@_vm_option
def check(lab_dir, vm_opts):
    """Check the lab: qemu, the cache, the accelerator (KVM probed again) and one boot's time."""
    from .backends.vm import VmError, lab, qemu
    from .backends.vm.runner import BOOT_ATTEMPTS, Options, parse_vm_options

    opts = _no_trace(parse_vm_options(vm_opts, Options(devices=[], out=Path("."))))
    folder = lab.lab_dir(lab_dir)
    try:
        exe = qemu.find_qemu()
        click.echo(f"qemu: {exe} {qemu.qemu_version(exe)}")
        lb = lab.load(folder, echo=_echo)
        d = lb.describe()
        sizes = lab.sizes(folder)
        click.echo(f"lab: {folder} (build {d['build_key']}): kernel {d['kernel_release']}, fio {d['fio']}, busybox "
                   f"{d['busybox']}; packages {sizes['debs'] / 2**20:.0f} MiB, built {sizes['build'] / 2**20:.0f} MiB")
        scratch = folder / "tmp" / f"{os.getpid()}-check"
        scratch.mkdir(parents=True, exist_ok=True)
        try:
            accel, how = qemu.choose_accel(opts.accel, lb, exe, scratch, _echo, reprobe=True)
            click.echo(f"accelerator: {accel} ({how})")
            boot = qemu.Boot(lb.kernel, lb.initramfs, accel, opts.cpus, opts.memory_mib, scratch / "results",
                             scratch / "console", idle_poll=opts.idle == "poll")
            # As a batch of runs does (runner.BOOT_ATTEMPTS): a TCG guest now and then panics while it boots.
            for attempt in range(1, BOOT_ATTEMPTS + 1):
                ok, secs, why = qemu.boot_ready(boot, exe, scratch, qemu.BOOT_TIMEOUT_S[accel])
                if ok or attempt == BOOT_ATTEMPTS or accel != "tcg":
                    break
                click.echo(f"note: the guest did not boot ({why}); booting once more (a TCG guest now and then "
                           "panics while it boots)")
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    except VmError as e:
        _fail(str(e))
    if not ok:
        _fail(f"the guest did not boot: {why}")
    click.echo(f"boot: power-on to init and off again in {secs:.1f} s ({accel}, {opts.cpus} vCPUs, "
               f"{opts.memory_mib} MiB)")


@vm.command()
@_lab_option
@_vm_option
@click.option("--device", multiple=True, help="Devices to make first, as for run (e.g. nullb:irqmode=2).")
def shell(lab_dir, vm_opts, device):
    """Boot the lab with a shell on this terminal (the devices made, /dev/iosched/dK); exit powers it off."""
    from .backends.vm import VmError, guest, lab, qemu
    from .backends.vm.devices import parse_devices, qemu_args
    from .backends.vm.runner import Options, _initrd, parse_vm_options

    opts = _no_trace(parse_vm_options(vm_opts, Options(devices=list(device), out=Path("."))))
    folder = lab.lab_dir(lab_dir)
    try:
        exe = qemu.find_qemu()
        lb = lab.load(folder, echo=_echo)
        devices = parse_devices(list(device))
        scratch = folder / "tmp" / f"{os.getpid()}-shell"
        scratch.mkdir(parents=True, exist_ok=True)
        try:
            accel, how = qemu.choose_accel(opts.accel, lb, exe, scratch, _echo)
            args = []
            for d in devices:
                img = None
                if d.kind != "nullb":
                    img = scratch / f"d{d.index}.img"
                    with open(img, "wb") as f:
                        f.truncate(d.capacity_bytes)
                args += qemu_args(d, str(img) if img else None)
            initrd = scratch / "initrd.img"
            kernel = _initrd(lb, {"main.sh": guest.main_script(devices, [], 0.1)}, initrd)
            boot = qemu.Boot(kernel, initrd, accel, opts.cpus, opts.memory_mib, scratch / "results",
                             scratch / "console", args, shell=True, idle_poll=opts.idle == "poll")
            click.echo(f"booting ({accel}); the console is this terminal (Ctrl-A X quits qemu)", err=True)
            with qemu.running(boot, exe, scratch / "qemu.err") as g:
                g.proc.wait()
            errors = [fr.text for fr in qemu.Channel(boot.results).poll() if fr.words[:1] == ["error"]]
            if errors:
                _fail("guest: " + "; ".join(errors))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    except VmError as e:
        _fail(str(e))


@vm.command()
@_lab_option
@click.option("--all", "everything", is_flag=True, help="Remove the whole cache (packages and builds).")
def clean(lab_dir, everything):
    """Remove what killed runs left in the lab's scratch folder (with --all: the whole cache)."""
    from .backends.vm import lab

    removed = lab.clean(lab.lab_dir(lab_dir), everything=everything)
    click.echo(f"removed {len(removed)} item(s)" + (f" from {lab.lab_dir(lab_dir)}" if removed else ""))


@vm.command()
def devices():
    """The --device syntax of the VM backend: kinds and keys."""
    from .backends.vm.devices import SYNTAX, docs_table

    click.echo(f"--device {SYNTAX}\n")
    click.echo(docs_table())


@vm.command("host-preset")
@click.argument("results", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--out", required=True, type=click.Path(dir_okay=False),
              help="The host preset to write (e.g. presets/hosts/lab-tcg-2vcpu.toml; the name is the file's stem).")
@click.option("--cores", type=click.IntRange(1, 64), default=2, show_default=True, help="The guest's vCPUs.")
@click.option("--timers-only", is_flag=True,
              help="Update only the timer lateness of the existing preset --out (lab-host-timers runs in RESULTS).")
@click.option("--filesystems-only", is_flag=True,
              help="Update only the file systems' costs of the existing preset --out (fs-dio-cost runs in RESULTS).")
def host_preset(results, out, cores, timers_only, filesystems_only):
    """Write the lab guest's host preset from the runs of experiments/validation/lab-host-*.toml (and
    fs-dio-cost.toml, raw and on each file system) in RESULTS (several folders: their runs pooled)."""
    from .devcal.labhost import update_filesystems, update_timer_lateness, write_lab_host

    if timers_only and filesystems_only:
        raise SpecError("--filesystems-only", None, "not with --timers-only (run the command once for each)")
    if (timers_only or filesystems_only) and not Path(out).is_file():
        flag = "--timers-only" if timers_only else "--filesystems-only"
        raise SpecError("--out", None, f"{out}: no such preset to update ({flag} keeps its other values)")
    if timers_only:
        figures = update_timer_lateness([Path(p) for p in results], Path(out))
    elif filesystems_only:
        figures = update_filesystems([Path(p) for p in results], Path(out))
    else:
        figures = write_lab_host([Path(p) for p in results], Path(out), cores)
    for k, v in figures.items():
        click.echo(f"{k}: {v}")
    click.echo(f"wrote {out}")


def lab_trace(spec_data: dict, trace: str, vm_opts) -> str:
    """The lab's tracing for a spec: --vm trace=... as given; else the spec's (or --trace's) request_trace as the
    blk tracer with sched events, the simulator's request trace's counterpart."""
    if spec_data.get("request_trace") and not any(o.strip().startswith("trace=") for o in vm_opts):
        return "blk+sched"
    return trace


def run_vm_command(spec, devices, devices_n, scheduler, sets, duration, seed, out, lab_dir, vm_opts,
                   no_report, static=False, request_trace=False, filesystem=None) -> None:
    """`iosched run SPEC --backend vm ...`.  ``request_trace`` (--trace, or the spec's ``request_trace``): the
    kernel's blk tracer with sched events, as --vm trace=blk+sched, unless --vm trace= says otherwise."""
    from .backends.kernel.state import Interrupted
    from .backends.vm import VmError
    from .backends.vm.runner import Options, parse_vm_options, run_vm
    from .spec import Overrides, load_experiment

    if seed is not None and seed < 0:
        raise SpecError("--seed", None, f"expected an integer >= 0, got {seed}")
    opts = parse_vm_options(vm_opts, Options(devices=list(devices), out=Path(out), lab=lab_dir,
                                             filesystem=filesystem))
    exp = load_experiment(spec, Overrides(devices=devices_n, scheduler=scheduler, sets=list(sets),
                                          duration=duration, seed=seed, request_trace=request_trace))
    opts.trace = lab_trace(exp.data, opts.trace, vm_opts)
    t0 = time.monotonic()
    try:
        outcome = run_vm(exp, opts, echo=_echo)
    except VmError as e:
        _fail(str(e))
    except Interrupted as e:
        interrupt.report(f"interrupted ({e}); the guest was stopped, finished runs are in {out}")
        interrupt.exit()
    if outcome.skipped:
        click.echo(f"{len(outcome.skipped)} run(s) already in {out} (same run id): skipped (delete "
                   f"{out}/runs/<id>/ or use another --out to measure them again)")
    if not no_report:
        from .report.build import build
        build(Path(out), static=static)
    for w in outcome.warnings:
        click.echo(f"warning: {w}", err=True)
    click.echo(f"wrote {len(outcome.done)} run(s) to {out}/results.parquet in {time.monotonic() - t0:.0f} s"
               + (f" (boot {outcome.boot_s:.1f} s)" if outcome.boot_s else "")
               + ("" if no_report else f"; report: {out}/report.html"))
