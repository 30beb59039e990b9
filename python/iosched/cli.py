"""The iosched command line.  Heavy modules (pyarrow, rich, the native simulator) are imported inside commands."""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

import click

from . import interrupt, native
from .errors import SpecError, one_line


def _fail(msg: str, code: int = 2):
    click.echo(f"error: {one_line(msg)}", err=True)
    sys.exit(code)


def _usage_error(e: click.UsageError):
    """A command-line mistake (an unknown option, a bad value) as one line, like every other error."""
    hint = f" (see `{e.ctx.command_path} --help`)" if e.ctx is not None else ""
    _fail(f"{e.format_message()}{hint}", e.exit_code)


class _Group(click.Group):
    def make_context(self, *args, **kwargs):
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as e:
            _usage_error(e)

    def invoke(self, ctx):
        # Every command under the one interrupt mechanism (iosched.interrupt): SIGINT, SIGTERM and SIGHUP unwind
        # and end in one "interrupted" line and exit 130.
        with interrupt.signals():
            try:
                return super().invoke(ctx)
            except click.UsageError as e:
                _usage_error(e)
            except SpecError as e:
                _fail(str(e))
            except native.NotBuilt as e:
                _fail(str(e), 1)
            except native.SimulatorPanic as e:
                _fail(f"internal error: the simulator panicked ({e}); please report it with the spec", 1)
            except KeyboardInterrupt:
                interrupt.report()
                interrupt.exit()


@click.group(cls=_Group)
@click.version_option(package_name="iosched", message="iosched %(version)s")
def main() -> None:
    """Linux I/O schedulers on NVMe SSDs: simulate an experiment from a TOML spec or a fio job file, or run it on
    real devices with the kernel's schedulers (--backend kernel)."""


def _need_native() -> None:
    if not native.available():
        raise native.NotBuilt()


@contextmanager
def _kernel_errors(interrupted: Callable[[Any], str] | None = None):
    """The kernel backend's failures as one line and exit 1; an interruption (with ``interrupted`` given) as its
    message and exit 130 (iosched.interrupt)."""
    from .backends.kernel import KernelError
    from .backends.kernel.state import Interrupted

    try:
        yield
    except KernelError as e:
        _fail(str(e), 1)
    except Interrupted as e:
        if interrupted is None:
            raise
        interrupt.report(interrupted(e))
        interrupt.exit()


def _interrupted_run(e) -> str:
    if e.restored:
        return f"interrupted ({e}); device settings and cgroups restored"
    return f"interrupted ({e}); not everything could be restored (see above)"


_jobs_option = click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
                            help="Runs in parallel on this machine (default: all cores; 1: in this process).")
_cluster_option = click.option("--cluster", metavar="tcp://HOST:PORT|slurm[:N]",
                               help="Run on a Dask cluster: a scheduler's address, or dask-jobqueue's SLURMCluster "
                                    "from the Dask config with N jobs. The same iosched must be installed on the "
                                    "workers.")


@main.command()
@click.argument("spec", metavar="SPEC.toml|JOBFILE.fio")
@click.option("--backend", type=click.Choice(["sim", "kernel", "vm"]), default="sim", show_default=True,
              help="sim: the simulator. kernel: the real Linux schedulers on real devices (root; fio). vm: the real "
                   "schedulers in a QEMU guest on null_blk/emulated NVMe (no root; `iosched vm prepare` first).")
@click.option("--host", help="Host preset (overrides the spec).")
@click.option("--device", multiple=True,
              help="sim: device preset of the first devices entry. kernel: a block device (/dev/X); repeat it for "
                   "specs with several devices (mapped in order). vm: a lab device, e.g. nullb:irqmode=2 or "
                   "nvme:size=1G (`iosched vm devices`).")
@click.option("--devices", type=int, help="Number of devices of the first devices entry.")
@click.option("--scheduler", help="Scheduler name.")
@click.option("--set", "sets", multiple=True, metavar="TUNABLE=VALUE",
              help="Scheduler tunable by sysfs name (integer); nr_requests too. Repeatable.")
@click.option("--duration", help="Default runtime of every job without its own (e.g. 2s, 500ms).")
@click.option("--seed", type=int, help="Root seed (repetition r uses seed + r).")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False), help="Results directory.")
@click.option("--destructive", is_flag=True,
              help="kernel: write to a device that holds data (a filesystem or other signature, partitions).")
@click.option("--filesystem", type=click.Choice(["ext4", "xfs", "f2fs"]),
              help="kernel and vm: make this filesystem on each device and run the jobs on a file inside it. sim: "
                   "every device's `filesystem` (the jobs on a file; the host preset prices the path).")
@click.option("--precondition", is_flag=True,
              help="kernel: first write each device sequentially, then randomly (4 KiB, twice its capacity).")
@click.option("--lab", "lab_dir", type=click.Path(file_okay=False), help="vm: the lab's cache folder.")
@click.option("--vm", "vm_opts", multiple=True, metavar="KEY=VALUE",
              help="vm: cpus=N, memory=SIZE, accel=auto|kvm|tcg, trace=blk|blk+sched, idle=halt|poll.")
@click.option("--trace", "request_trace", is_flag=True,
              help="Keep each run's request trace (runs/<id>/blktrace.txt.gz; `iosched trace-summary OUT`): sim "
                   "and vm (there: --vm trace=blk+sched).")
@_jobs_option
@_cluster_option
@click.option("--no-report", is_flag=True, help="Do not write OUT/report.html.")
@click.option("--static", is_flag=True,
              help="Also write the report's figures as PNG, SVG and PDF to OUT/figures/ (seconds per figure; "
                   "`iosched report OUT` writes them later).")
def run(spec, backend, host, device, devices, scheduler, sets, duration, seed, out, destructive, filesystem,
        precondition, lab_dir, vm_opts, request_trace, jobs, cluster, no_report, static):
    """Run every sweep point × repetition of an experiment (simulated, or on real devices with --backend kernel)
    and write results to OUT.

    Runs already in OUT (same run id) are skipped, so re-running an interrupted sweep resumes it."""
    from .running import run_simulated
    from .spec import Overrides

    if backend != "vm" and (lab_dir or vm_opts):
        raise SpecError("--lab" if lab_dir else "--vm", None, "only with --backend vm")
    if backend == "vm":
        for flag, given in (("--jobs", jobs), ("--cluster", cluster), ("--host", host), ("--destructive", destructive),
                            ("--precondition", precondition)):
            if given:
                raise SpecError(flag, None, "not with --backend vm (the lab boots one guest for the runs)")
        from .cli_vm import run_vm_command
        return run_vm_command(spec, device, devices, scheduler, sets, duration, seed, out, lab_dir, vm_opts,
                              no_report, static, request_trace=request_trace, filesystem=filesystem)
    if backend == "kernel":
        if request_trace:
            raise SpecError("--trace", None, "not with --backend kernel (it keeps no request trace; the simulator "
                                             "does, and --backend vm with the guest's blk tracer)")
        for flag, given in (("--jobs", jobs), ("--cluster", cluster)):
            if given:
                raise SpecError(flag, None, "only with --backend sim (the kernel backend measures one run at a "
                                            "time on the devices given)")
        return _run_kernel(spec, host, device, devices, scheduler, sets, duration, seed, out, destructive,
                           filesystem, precondition, no_report, static)
    for flag, given in (("--destructive", destructive), ("--precondition", precondition)):
        if given:
            raise SpecError(flag, None, "only with --backend kernel")
    if len(device) > 1:
        raise SpecError("--device", None, "the simulator takes one device preset here (several: devices = [...] "
                                          "in the spec)")
    device = device[0] if device else None
    if devices is not None and devices < 1:
        raise SpecError("--devices", None, f"expected an integer >= 1, got {devices}")
    if seed is not None and seed < 0:
        raise SpecError("--seed", None, f"expected an integer >= 0, got {seed}")
    ov = Overrides(host=host, device=device, devices=devices, scheduler=scheduler, sets=list(sets),
                   duration=duration, seed=seed, filesystem=filesystem, request_trace=request_trace)
    run_simulated(spec, ov, Path(out), jobs=jobs, cluster=cluster, report=not no_report, static=static,
                  echo=click.echo)


@main.command("trace-summary")
@click.argument("path", type=click.Path(exists=True))
def trace_summary(path):
    """Per submitting thread of traced runs (simulated with --trace, or in the lab with --vm trace=blk or
    blk+sched): its requests' waits for a tag, in the scheduler and in the driver; with sched events, how its
    tag sleeps ended; under BFQ, per queue how often it went busy and into service, why it was expired, its
    dispatches while weight-raised, and the depths allocations got.  PATH: a results folder (every traced run in
    it), a run's folder or its blktrace.txt.gz."""
    from . import blktrace

    p = Path(path)
    runs = sorted(p.glob("runs/*/blktrace.txt.gz")) if (p / "runs").is_dir() else [p]
    if p.is_dir() and not (p / "runs").is_dir() and not (p / "blktrace.txt.gz").is_file():
        _fail(f"{path}: no blktrace.txt.gz (run it with --trace, or --vm trace=blk in the lab)")
    if not runs:
        _fail(f"{path}: no traced run in runs/ (run with --trace, or --vm trace=blk in the lab)")
    for f in runs:
        try:
            s = blktrace.read(f)
        except (OSError, EOFError, UnicodeDecodeError) as e:
            _fail(f"{f}: not a readable trace ({e})")
        click.echo(f"{f}:" + ("" if s.threads else " no requests"))
        for row in blktrace.table(s):
            click.echo(row)
        if s.bfq.messages:
            click.echo("")
            for row in blktrace.bfq_table(s.bfq):
                click.echo(row)


@main.command()
@click.argument("names", nargs=-1, metavar="[NAME|seedNNN|all]...")
@click.option("--list", "list_", is_flag=True, help="List the paper experiments.")
@click.option("--quick", is_flag=True, help="Shorter simulated runs, one repetition: for CI and a first look.")
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Results directory (default: out/reproduce, or out/reproduce-quick with --quick).")
@_jobs_option
@_cluster_option
@click.option("--no-static", is_flag=True, help="Skip the PNG/SVG/PDF figures (report.html only).")
def reproduce(names, list_, quick, out, jobs, cluster, no_static):
    """Run the seed papers' experiments (figures and tables) and write OUT/report.html.

    Re-running the same command resumes: finished runs are kept and skipped."""
    from .papers import registry

    if list_ or not names:
        _list_experiments(registry.experiments())
        if not list_:
            click.echo("\nrun one with `iosched reproduce NAME [--quick]`, all with `iosched reproduce all`")
        return
    exps = registry.select(names)
    for e in exps:  # validate every spec before running anything
        e.runs(quick)
    _need_native()
    from .reproduce import reproduce as run_reproduce

    out_dir = Path(out or ("out/reproduce-quick" if quick else "out/reproduce"))
    try:
        report = run_reproduce([e.name for e in exps], quick=quick, out=out_dir, jobs=jobs, cluster=cluster,
                               static=not no_static, echo=lambda s: click.echo(s, err=True))
    except KeyboardInterrupt:
        interrupt.report(f"interrupted: finished runs are in {out_dir}; run the same command again to resume")
        interrupt.exit()
    _print_checks(report)
    click.echo(f"report: {out_dir}/report.html")


def _list_experiments(exps) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table("name", "seed", "reproduces", "runs (quick / full)", "what")
    t.columns[0].no_wrap = True
    for e in exps:
        nq, nf = len(e.runs(True)), len(e.runs(False))
        t.add_row(e.name, e.seed, ", ".join(e.refs), f"{nq} / {nf}", e.title)
    Console().print(t)


def _print_checks(report) -> None:
    for s in report.sections:
        if s.kind != "paper":
            continue
        click.echo(f"\n{s.name} ({', '.join(s.refs)}): "
                   + (s.error or f"{s.holds} of {len(s.counted)} hold{s.uncounted_text}"))
        for c in s.checks:
            ratio = f" (x{c.ratio:.2f})" if c.ratio is not None else ""
            if len(c.clauses) > 1:
                # A finding of several clauses: its statement, then a line per clause.
                click.echo(f"  {'yes' if c.holds else 'NO '}  {c.ref:9} {c.finding:11} {c.statement}")
                for k in c.clauses:
                    kr = f" (x{k.ratio:.2f})" if k.ratio is not None else ""
                    click.echo(f"         {'yes' if k.holds else 'NO '}  {k.what}: paper {k.paper}, "
                               f"iosched {k.simulated}{kr}")
                continue
            click.echo(f"  {'yes' if c.holds else 'NO '}  {c.ref:9} {c.finding:11} {c.what}: paper {c.paper}, "
                       f"iosched {c.simulated}{ratio}")
    for fd in report.fidelity:
        overall = fd.shares.get("all")
        click.echo(f"\nseed {fd.seed}: plotted points within ±25% of the paper's data (calibration excluded): "
                   f"{overall.text() if overall else 'none scored'}")


@main.command()
@click.argument("dir", type=click.Path(file_okay=False))
@click.option("--results-md", type=click.Path(dir_okay=False), default=None,
              help="Also rewrite the generated part of this Markdown file (docs/results.md) from the checks.")
@click.option("--no-static", is_flag=True, help="Skip the PNG/SVG/PDF figures (report.html only).")
def report(dir, results_md, no_static):
    """Rebuild DIR/report.html, DIR/figures/ and DIR/checks.* from the stored results (no simulation)."""
    from . import store
    from .report.build import build

    if not (Path(dir) / store.MANIFEST).exists():
        raise SpecError(dir, None, "no manifest.json: not a results folder of `iosched run` or `iosched reproduce`")
    rep = build(Path(dir), static=not no_static)
    if results_md:
        from .report.results_doc import update_results_doc
        update_results_doc(Path(results_md), rep, Path(dir))
        click.echo(f"updated the reproduced results in {results_md}")
    click.echo(f"report: {Path(dir) / 'report.html'}")


@main.command()
@click.argument("dir", type=click.Path(file_okay=False))
@click.argument("sql")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table")
def query(dir, sql, fmt):
    """Run SQL (DuckDB) over DIR's results. Tables: results (one row per run and job), timeseries, runs
    (experiment, series, sweep point of each run) and checks (paper vs iosched rows)."""
    from . import store

    try:
        df = store.query(Path(dir), sql)
    except FileNotFoundError as e:
        raise SpecError(dir, None, "no such results folder") from e
    except Exception as e:  # noqa: BLE001 - DuckDB's errors: one line for the user
        if type(e).__module__.startswith("duckdb") or type(e).__module__ == "_duckdb":
            raise SpecError(None, None, f"query: {str(e).splitlines()[0]}") from None
        raise
    if fmt == "csv":
        click.echo(df.to_csv(index=False), nl=False)
    elif fmt == "json":
        click.echo(df.to_json(orient="records", indent=1))
    else:
        import pandas as pd

        with pd.option_context("display.max_rows", 200, "display.max_columns", 50, "display.width", 200):
            click.echo(df.to_string(index=False))


def _run_kernel(spec, host, device, devices, scheduler, sets, duration, seed, out, destructive, filesystem,
                precondition, no_report, static=False):
    from .backends.kernel.runner import Options
    from .running import run_on_kernel
    from .spec import Overrides

    if not device:
        raise SpecError("--device", None, "the kernel backend needs the block device(s) to run on: --device /dev/X "
                                          "(a test device: iosched device create-loop --size 4G)")
    if host is not None:
        raise SpecError("--host", None, "picks a simulated host; the kernel backend runs on this machine")
    if seed is not None and seed < 0:
        raise SpecError("--seed", None, f"expected an integer >= 0, got {seed}")
    ov = Overrides(devices=devices, scheduler=scheduler, sets=list(sets), duration=duration, seed=seed)
    options = Options(devices=list(device), out=Path(out), destructive=destructive, filesystem=filesystem,
                      precondition=precondition)
    with _kernel_errors(_interrupted_run):
        run_on_kernel(spec, ov, options, report=not no_report, static=static, echo=click.echo)


from .cli_vm import vm as _vm_group  # noqa: E402  (the `iosched vm` commands live in cli_vm.py)

main.add_command(_vm_group)


@main.group()
def device():
    """Test devices for the kernel backend (loop devices over files), and restoring after a killed run."""


def _recover_first() -> None:
    from .backends.kernel import state

    problems = state.recover(echo=lambda s: click.echo(f"note: {s}", err=True))
    if problems:
        click.echo("error: could not restore: " + "; ".join(problems), err=True)


@device.command("create-loop")
@click.option("--size", required=True, help="Size of the device (e.g. 4G).")
@click.option("--backing", type=click.Path(dir_okay=False),
              help="The backing file (created if missing); default a new file in /var/tmp.")
def create_loop(size, backing):
    """Make a loop device over a file, with direct I/O and its data written once; prints /dev/loopN."""
    from .backends.kernel.loop import create_loop as make
    from .units import parse_size

    nbytes = parse_size(size, file="--size")
    with _kernel_errors():
        _recover_first()
        dev = make(nbytes, backing, echo=lambda s: click.echo(s, err=True))
    click.echo(dev.path)


@device.command("remove-loop")
@click.argument("loop_device", metavar="/dev/loopN")
def remove_loop(loop_device):
    """Detach a loop device (and delete its backing file if create-loop made it)."""
    from .backends.kernel.loop import remove_loop as rm

    with _kernel_errors():
        _recover_first()
        rm(loop_device, echo=click.echo)


@device.command("list")
def list_loops():
    """Loop devices made by create-loop."""
    from .backends.kernel.loop import list_loops as ls

    for rec in ls():
        state = "attached" if rec["attached"] else "detached"
        click.echo(f"{rec['device']}\t{rec['size'] >> 20} MiB\t{rec['backing']}\t{state}")


@device.command("recover")
def recover():
    """Restore what a killed kernel-backend run left behind (also done at the start of every such run)."""
    from .backends.kernel import state

    if not state.stale_records():
        click.echo("nothing to recover")
        return
    problems = state.recover(echo=click.echo)
    if problems:
        _fail("could not restore: " + "; ".join(problems), 1)
    click.echo("restored")


@main.command()
@click.argument("dir_a", type=click.Path(file_okay=False))
@click.argument("dir_b", type=click.Path(file_okay=False))
@click.option("--format", "fmt", type=click.Choice(["table", "markdown", "csv"]), default="table",
              show_default=True)
@click.option("--backend-a", type=click.Choice(["sim", "kernel", "vm"]),
              help="Only DIR_A's runs of this backend (needed when it holds both).")
@click.option("--backend-b", type=click.Choice(["sim", "kernel", "vm"]),
              help="Only DIR_B's runs of this backend (needed when it holds both).")
def compare(dir_a, dir_b, fmt, backend_a, backend_b):
    """The same spec's results from two result folders (e.g. --backend sim and kernel) side by side; DIR_A and
    DIR_B may be one folder holding both (then --backend-a sim --backend-b kernel)."""
    from . import compare as cmp

    rows_a = cmp.load_rows(dir_a, backend_a, "--backend-a")
    rows_b = cmp.load_rows(dir_b, backend_b, "--backend-b")
    lines, only_a, only_b = cmp.compare(rows_a, rows_b)
    header = list(cmp.HEADER)
    header[5] = f"A ({cmp.backends(rows_a)})"
    header[6] = f"B ({cmp.backends(rows_b)})"
    body = cmp.table_rows(lines)
    if not lines:
        _fail(f"no runs in common (matched on {', '.join(cmp.KEY)})", 1)
    if fmt == "markdown":
        click.echo(cmp.render_markdown(header, body))
    elif fmt == "csv":
        click.echo(cmp.render_csv(header, body))
    else:
        from rich.console import Console
        from rich.table import Table

        t = Table(*header)
        for r in body:
            t.add_row(*r)
        Console(width=None if sys.stdout.isatty() else 160).print(t)    # piped: no 80-column squeeze
    for warning in cmp.preset_warnings(rows_a, rows_b):
        click.echo(f"warning: {warning}", err=True)
    for side, keys in (("A", only_a), ("B", only_b)):
        if keys:
            click.echo(f"note: {len(keys)} job(s) only in {side}: "
                       + ", ".join(f"{k[0]}/{k[2]}/{k[4]}" for k in keys[:8]) + (" ..." if len(keys) > 8 else ""),
                       err=True)


@main.command()
@click.argument("dir", type=click.Path(file_okay=False))
@click.option("--bench-fio", "bench_fio", required=True, type=click.Path(file_okay=False), metavar="OUT",
              help="Write DIR's runs into OUT in bench-fio's layout (OUT/<experiment>/<variant>/<bs>/ with "
                   "<rw>-<iodepth>-<numjobs>.json and fio's logs), which fio-plot reads.")
def export(dir, bench_fio):
    """Export a results folder for other tools (fio-plot)."""
    from .export import export_bench_fio

    written, left_out = export_bench_fio(Path(dir), Path(bench_fio))
    folders = sorted({str(p.parent) for p in written})
    click.echo(f"wrote {len(written)} run(s) in bench-fio's layout: " + ", ".join(folders[:6])
               + (" ..." if len(folders) > 6 else ""))
    for why, n in left_out.items():
        click.echo(f"note: {n} run(s) left out: {why}", err=True)


@main.command()
@click.argument("name", required=False)
def presets(name):
    """List presets, or show every parameter of preset NAME with its value and provenance."""
    from rich.console import Console
    from rich.table import Table

    from . import presets as p

    console = Console()
    if name:
        pr = p.find_preset(name)
        console.print(f"[bold]{pr.name}[/bold] ({pr.kind}): {pr.description}")
        if pr.seeds:
            console.print(f"seeds: {', '.join(pr.seeds)}")
        t = Table("parameter", "value", "provenance")
        t.columns[0].no_wrap = True
        for k, v in pr.leaves():
            t.add_row(k, json.dumps(v), pr.provenance_for(k) or "")
        console.print(t)
        return
    all_p = p.list_presets()
    if not all_p:
        console.print(f"no presets in {p.presets_dir()}")
        return
    t = Table("kind", "name", "description", "seeds", "key figures")
    t.columns[1].no_wrap = True
    for pr in all_p:
        t.add_row(pr.kind, pr.name, pr.description, ", ".join(pr.seeds),
                  "\n".join(f"{k}: {v}" for k, v in pr.key_figures.items()))
    console.print(t)


@main.command()
@click.argument("file", required=False)
@click.option("--format", "fmt", help="systor17, msr or blkparse (default: told from the first line).")
@click.option("--lun", help="Only this LUN, disk number or blkparse device major,minor.")
@click.option("--action", default="D", show_default=True, help="blkparse: replay D or Q events.")
def trace(file, fmt, lun, action):
    """Check a trace as a replay reads it and summarise it; without FILE, list the sample traces."""
    from . import replay

    if file is None:
        for p in replay.sample_traces():
            click.echo(f"{p.name}\t{p.stat().st_size // 1024} KiB")
        click.echo(f"(in {replay.traces_dir()}; see README.md there)")
        return
    if fmt is not None and fmt not in replay.FORMATS:
        raise SpecError("--format", None, f"expected one of {', '.join(replay.FORMATS)}, got {fmt!r}")
    if action not in replay.BLKPARSE_ACTIONS:
        raise SpecError("--action", None, f"expected D or Q, got {action!r}")
    path = replay.find_trace(file, Path("."))
    if path is None:
        raise SpecError(file, None, "no such file (nor a sample trace of that name)")
    _need_native()
    s = replay.summarize(path, file, fmt, lun, action)
    total = s.read_bytes + s.write_bytes
    span_s = (s.last_ns - s.first_ns) / 1e9
    luns = ", ".join(s.luns) + (", ..." if s.luns_truncated else "")
    click.echo(f"{file}: {s.format}, LUNs {luns or 'none'}" + (f"; LUN {lun}:" if lun else ":"))
    click.echo(f"  {s.records} I/Os: {s.reads} reads ({s.read_bytes} B), {s.writes} writes ({s.write_bytes} B); "
               f"{s.skipped} records skipped")
    if s.records:
        rw = f"{s.reads / s.writes:.3f}" if s.writes else "all reads"
        bw = f"{total / span_s / 2**20:.2f} MiB/s" if span_s > 0 else "-"
        click.echo(f"  average {total / s.records / 1024:.2f} KiB, largest {s.max_bytes} B, R:W {rw}; "
                   f"span {span_s * 1e3:.3f} ms, bandwidth as recorded {bw}")


@main.command()
@click.option("--quick", is_flag=True, help="0.2 s simulated instead of 1 s, and no callgrind.")
@click.option("--callgrind/--no-callgrind", default=None,
              help="Count instructions per I/O with valgrind's callgrind (default: when installed, not with --quick).")
@click.option("--no-cli", is_flag=True, help="Skip timing the CLI (start-up and a whole `iosched run`).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--markdown", is_flag=True, help="Also print the scenarios as a Markdown table.")
def bench(quick, callgrind, no_cli, as_json, markdown):
    """Measure simulator speed: 10 processes × QD128 4 KiB randread under none, mq-deadline, kyber and bfq on 1 and
    8 SSDs (I/Os per wall second, events and instructions per I/O), and the CLI's start-up and run cost."""
    from .bench import markdown_table, run_bench

    _need_native()
    out = run_bench(quick=quick, echo=None if as_json else click.echo, callgrind=callgrind, cli=not no_cli)
    if as_json:
        click.echo(json.dumps(out, indent=2))
    if markdown:
        click.echo(markdown_table(out))


@main.command()
@click.argument("device_path", metavar="/dev/X")
@click.option("--out", required=True, type=click.Path(dir_okay=False),
              help="The device preset to write (e.g. presets/devices/NAME.toml; the name is the file's stem).")
@click.option("--host", default=None,
              help="Also write the host preset the device was fitted with: presets/hosts/NAME.toml next to --out's "
                   "folder (cores measured; libaio's per-I/O CPU costs fitted to fio's usr/sys times). Pass it "
                   "to validate's --host.")
@click.option("--duration", type=float, default=15.0, show_default=True, help="Seconds measured per plan step.")
@click.option("--ramp", type=float, default=3.0, show_default=True, help="Seconds of ramp per plan step.")
@click.option("--work", type=click.Path(file_okay=False), default=None,
              help="Where the kernel runs are kept (default: a folder next to --out, NAME.calibration/).")
@click.option("--reuse", is_flag=True,
              help="Fit again from the kernel runs already in the work folder instead of measuring.")
def calibrate(device_path, out, host, duration, ramp, work, reuse):
    """Measure /dev/X with the kernel backend (scheduler none) and fit a device preset to it."""
    from .devcal.calibrate import calibrate as run_calibration

    _need_native()
    out_path = Path(out)
    if out_path.suffix != ".toml":
        raise SpecError("--out", None, f"expected a .toml file, got {out}")
    if host is not None:
        from .devcal.calibrate import host_preset_path

        host_preset_path(out_path, host)       # a bad name fails before anything is measured
    work_dir = Path(work) if work else out_path.with_suffix(".calibration")
    with _kernel_errors(lambda e: f"interrupted ({e})"):
        run_calibration(device_path, out_path, host=host, duration_s=duration, ramp_s=ramp, work=work_dir,
                        reuse=reuse, echo=click.echo)


@main.command()
@click.argument("spec", type=click.Path(exists=True, dir_okay=False), required=False)
@click.option("--device", "device_path", help="The block device (/dev/X) to run the kernel side on.")
@click.option("--preset", help="Device preset for the simulator: a name, or a .toml file.")
@click.option("--matrix", type=click.Path(exists=True, dir_okay=False),
              help="Instead of SPEC: a validation matrix (e.g. experiments/validation/matrix.toml), with --backend vm.")
@click.option("--backend", type=click.Choice(["kernel", "vm"]), default="kernel", show_default=True,
              help="The real side: kernel (--device /dev/X) or vm (the lab, with --matrix).")
@click.option("--lab", "lab_dir", default=None, help="vm: the lab's cache folder.")
@click.option("--vm", "vm_opts", multiple=True, help="vm: KEY=VALUE guest settings (cpus, memory, accel, trace).")
@click.option("--host", default=None, help="Host preset for the simulator: a name or a .toml file (default: the spec's).")
@click.option("--duration", default=None, help="Override every job's runtime (both backends).")
@click.option("--repeat", type=click.IntRange(min=1), default=None,
              help="Repetitions per scheduler (overrides the spec's repeat); ranks use the means.")
@click.option("--out", type=click.Path(file_okay=False), default="results/validate", show_default=True)
@click.option("--drift-check/--no-drift-check", default=True, show_default=True,
              help="Before and after the runs, measure the device's QD-max read and write IOPS again (5 s + 1 s ramp "
                   "each, shorter with a shorter --duration) and warn where the preset is off by more than 10%.")
def validate(spec, device_path, preset, matrix, backend, lab_dir, vm_opts, host, duration, repeat, out,
             drift_check):
    """Run SPEC under each scheduler on the kernel (--device) and in the simulator (--preset); compare.  With
    --matrix FILE --backend vm: every workload of the matrix under its schedulers in the VM lab and in the
    simulator, on the matrix's null_blk (docs/validation.md)."""
    from .devcal.validate import validate as run_validation

    _need_native()
    if matrix or backend == "vm":
        return _validate_matrix(matrix, spec, backend, device_path, preset, host, repeat, lab_dir, vm_opts, duration,
                                out)
    if not spec or not device_path or not preset:
        raise SpecError("validate", None, "expected SPEC --device /dev/X --preset NAME (or --matrix FILE "
                                          "--backend vm)")
    with _kernel_errors(lambda e: f"interrupted ({e})"):
        run_validation(spec, device_path, preset, host=host, duration=duration, repeat=repeat, out=Path(out),
                       drift_check=drift_check, echo=click.echo)


def _validate_matrix(matrix, spec, backend, device_path, preset, host, repeat, lab_dir, vm_opts, duration, out):
    from .backends.kernel.state import Interrupted
    from .backends.vm import VmError
    from .devcal.matrix import load_matrix, run_matrix

    if not matrix or backend != "vm":
        raise SpecError("--matrix" if not matrix else "--backend", None,
                        "a validation matrix runs with --matrix FILE --backend vm")
    for flag, given in (("SPEC", spec), ("--device", device_path), ("--preset", preset), ("--host", host),
                        ("--repeat", repeat)):
        if given:
            raise SpecError(flag, None, "not with --matrix (the matrix file names the device, host and repetitions)")
    m = load_matrix(matrix)
    try:
        run_matrix(m, Path(out), lab=lab_dir, vm_opts=tuple(vm_opts), duration=duration,
                   echo=lambda s, err=False: click.echo(s, err=err))
    except VmError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    except Interrupted as e:
        interrupt.report(f"interrupted ({e}); the guest was stopped, finished runs are in {out}")
        interrupt.exit()


if __name__ == "__main__":  # pragma: no cover - after every command, so `python -m iosched.cli` has them all
    main()
