"""`iosched bench`: simulator speed per scheduler on 1 and 8 SSDs, its instructions per I/O (callgrind), and the
CLI's own cost (start-up, and a whole `iosched run` of the 8-SSD scenario)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from . import spec as spec_mod
from .fiojob import RawJob

SCHEDULERS = ("none", "mq-deadline", "kyber", "bfq")
SSDS = (1, 8)
# The function callgrind counts in: the simulation's event loop, so Python and config building are not counted.
# Instructions per I/O are the difference between two run lengths (what building and warming up cost cancels).
CALLGRIND_FUNCTION = "iosched_sim::sim::Simulation::run"
CALLGRIND_MS = (10, 30)


# The writers' scenario: where a reproduction spends its time (Figs. 11c-12b's writers on 8 drives; one run of
# Fig. 11c's 16 writers of 4 KiB takes over a minute), a path the readers' scenarios do not take (the drive's write
# buffer, garbage collection, its record of young rewrites). Fig. 11c's setup at N = 16 under none, without the L-app.
WRITERS = 16
WRITERS_SSDS = 8


def writers_scenario(name: str, duration_ns: int) -> spec_mod.ResolvedRun:
    """WRITERS unpinned processes of 4 KiB randwrite at QD 128 over WRITERS_SSDS drives, each clone a fio process of
    its own (so they write the same offsets, as the artifact's separate apps did), scheduler none."""
    data = _data(name, WRITERS_SSDS, duration_ns, "none")
    files = ":".join(spec_mod.device_names(["nvme"] * WRITERS_SSDS))
    jobs = [RawJob(name="w", options={"rw": "randwrite", "bs": "4k", "iodepth": 128, "ioengine": "io_uring",
                                      "numjobs": WRITERS, "separate_processes": True, "filename": files},
                   file="bench", label='job "w"', origin="toml")]
    exp = spec_mod.Experiment(file="bench", data=data, jobs=jobs, kind="toml")
    return spec_mod.resolve(exp, data, jobs, {}, 0)


def scenario(name: str, ssds: int, duration_ns: int, scheduler: str = "none") -> spec_mod.ResolvedRun:
    """10 processes, one per core, 4 KiB randread QD128 io_uring; each on all `ssds` devices."""
    return spec_mod.resolve(*_experiment(name, ssds, duration_ns, scheduler), {}, 0)


def _data(name: str, ssds: int, duration_ns: int, scheduler: str) -> dict[str, Any]:
    return {"name": f"bench-{name}", "duration": f"{duration_ns}ns", "seed": 1,
            "host": {"preset": "xeon-silver-4210r-10c"},
            "devices": [{"preset": "samsung-980pro-1tb", "count": ssds}], "scheduler": {"name": scheduler}}


def _experiment(name: str, ssds: int, duration_ns: int, scheduler: str):
    files = ":".join(spec_mod.device_names(["nvme"] * ssds))
    data = _data(name, ssds, duration_ns, scheduler)
    jobs = [RawJob(name=f"p{i}", options={"rw": "randread", "bs": "4k", "iodepth": 128, "ioengine": "io_uring",
                                          "cpus_allowed": str(i), "filename": files},
                   file="bench", label=f'job "p{i}"', origin="toml") for i in range(10)]
    exp = spec_mod.Experiment(file="bench", data=data, jobs=jobs, kind="toml")
    return exp, data, jobs


def spec_toml(ssds: int, duration_ns: int, scheduler: str = "none") -> str:
    """The scenario as a spec file, for timing a whole `iosched run`."""
    from .report.build import to_toml

    _, data, jobs = _experiment("cli", ssds, duration_ns, scheduler)
    return to_toml({**data, "job": [{"name": j.name, **j.options} for j in jobs]})


def _callgrind_script(ssds: int, scheduler: str, ms: int) -> str:
    make = (f"bench.writers_scenario('cg', {ms * 1_000_000})" if scheduler == "writers"
            else f"bench.scenario('cg', {ssds}, {ms * 1_000_000}, {scheduler!r})")
    return ("import json, sys\nfrom iosched import bench, native\nfrom iosched.simconfig import run_config\n"
            f"run = {make}\n"
            "r = json.loads(native.simulate_json(native.canonical_json(run_config(run))))\n"
            "print(r['ios_completed'])\n")


def instructions_per_io(ssds: int, scheduler: str) -> float | None:
    """Instructions the simulation's event loop executes per simulated I/O, by callgrind (repeatable where wall
    times are not); None when valgrind is not installed or the loop's symbol is not found. `scheduler` "writers":
    the writers' scenario (`ssds` is then its own)."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return None
    counts = []
    with tempfile.TemporaryDirectory(prefix="iosched-callgrind-") as tmp:
        for ms in CALLGRIND_MS:
            proc = subprocess.run([valgrind, "--tool=callgrind", f"--callgrind-out-file={tmp}/cg.out",
                                   f"--toggle-collect={CALLGRIND_FUNCTION}", sys.executable, "-c",
                                   _callgrind_script(ssds, scheduler, ms)],
                                  capture_output=True, text=True, timeout=600)
            collected = re.search(r"Collected : (\d+)", proc.stderr)
            if proc.returncode != 0 or collected is None or int(collected.group(1)) == 0:
                return None
            counts.append((int(proc.stdout.split()[-1]), int(collected.group(1))))
    (ios0, ir0), (ios1, ir1) = counts
    return (ir1 - ir0) / (ios1 - ios0) if ios1 > ios0 else None


def _wall(args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(args, check=True, capture_output=True, timeout=600)
    return time.perf_counter() - t0


def cli_costs(duration_ns: int) -> dict[str, Any]:
    """Wall time of `iosched --help` (start-up) and of a whole `iosched run` of the 8-SSD none scenario (start-up,
    config, simulation, results, report.html), each the best of three."""
    cli = [sys.executable, "-m", "iosched.cli"]
    startup = min(_wall([*cli, "--help"]) for _ in range(3))
    with tempfile.TemporaryDirectory(prefix="iosched-bench-") as tmp:
        spec = Path(tmp) / "bench.toml"
        spec.write_text(spec_toml(8, duration_ns))
        run_wall = min(_wall([*cli, "run", str(spec), "--out", f"{tmp}/out{i}"]) for i in range(3))
    # The run simulates the same I/Os as the 8-SSD none scenario (same spec and seed): run_bench adds the rate.
    return {"startup_s": startup, "run_wall_s": run_wall, "run_duration_s": duration_ns / 1e9,
            "run_ios_per_wall_s": None}


def run_bench(quick: bool = False, echo: Callable[[str], None] | None = print, *, schedulers=SCHEDULERS,
              ssds=SSDS, callgrind: bool | None = None, cli: bool = True) -> dict[str, Any]:
    """Every scheduler x SSD count: simulated I/Os per wall second, events per I/O, and (callgrind: None = when
    valgrind is installed and not quick) instructions per I/O; then the writers' scenario, measured alike; then the
    CLI's costs. Returns {"scenarios": [...], "writers": {...}, "cli": {...}}."""
    duration = 200_000_000 if quick else 1_000_000_000
    if callgrind is None:
        callgrind = not quick and shutil.which("valgrind") is not None
    rows = []
    for scheduler in schedulers:
        for n in ssds:
            row = {"scheduler": scheduler, "ssds": n,
                   **_speed(scenario(f"{scheduler}-{n}", n, duration, scheduler)),
                   "instructions_per_io": instructions_per_io(n, scheduler) if callgrind else None}
            rows.append(row)
            if echo:
                echo(_row_line(row))
    writers = {"processes": WRITERS, "ssds": WRITERS_SSDS, **_speed(writers_scenario("writers", duration)),
               "instructions_per_io": instructions_per_io(WRITERS_SSDS, "writers") if callgrind else None}
    if echo:
        echo(_writers_line(writers))
    none = {r["ssds"]: r for r in rows if r["scheduler"] == "none"}
    for r in rows:
        base = none.get(r["ssds"])
        r["instructions_vs_none"] = (r["instructions_per_io"] / base["instructions_per_io"]
                                     if base and r["instructions_per_io"] and base["instructions_per_io"] else None)
    out: dict[str, Any] = {"scenarios": rows, "writers": writers, "cli": None}
    if cli:
        costs = cli_costs(duration)
        b8 = none.get(8)
        if b8:
            costs["run_ios_per_wall_s"] = b8["ios"] / costs["run_wall_s"]
        out["cli"] = costs
        if echo:
            echo(f"CLI: start-up (iosched --help) {costs['startup_s']:.2f} s; `iosched run` of the 8-SSD none "
                 f"scenario ({duration / 1e9:g} s simulated): {costs['run_wall_s']:.2f} s wall"
                 + (f" = {costs['run_ios_per_wall_s'] / 1e6:.2f} M I/Os per wall s including start-up"
                    if costs["run_ios_per_wall_s"] else ""))
    return out


def _speed(run: spec_mod.ResolvedRun) -> dict[str, Any]:
    """Simulate `run` once: simulated and wall time, I/Os, I/Os per wall second, events per I/O."""
    from .backends.sim import simulate_config
    from .simconfig import run_config

    result, wall = simulate_config(run_config(run))
    ios = result["ios_completed"]
    return {"simulated_s": result["sim_time_ns"] / 1e9, "ios": ios, "wall_s": wall,
            "ios_per_wall_s": ios / wall if wall > 0 else 0.0,
            "events_per_io": result["events"] / ios if ios else 0.0}


def _row_line(row: dict[str, Any]) -> str:
    ins = row["instructions_per_io"]
    return (f"{row['scheduler']:<12} {row['ssds']} SSD(s): {row['ios']} I/Os in {row['wall_s']:.2f} s wall = "
            f"{row['ios_per_wall_s'] / 1e6:.2f} M I/Os per wall s; {row['events_per_io']:.2f} events per I/O"
            + (f"; {ins:,.0f} instructions per I/O" if ins else ""))


def _writers_line(row: dict[str, Any]) -> str:
    ins = row["instructions_per_io"]
    return (f"writers      {row['ssds']} SSD(s), {row['processes']} processes of 4 KiB randwrite, none: {row['ios']} "
            f"I/Os in {row['wall_s']:.2f} s wall = {row['ios_per_wall_s'] / 1e6:.2f} M I/Os per wall s; "
            f"{row['events_per_io']:.2f} events per I/O" + (f"; {ins:,.0f} instructions per I/O" if ins else ""))


def markdown_table(out: dict[str, Any]) -> str:
    """The results as the table docs/simulator.md shows."""
    lines = ["| scheduler | SSDs | M I/Os per wall s | events per I/O | instructions per I/O | vs none |",
             "|---|---|---|---|---|---|"]
    for r in out["scenarios"]:
        ins, rel = r["instructions_per_io"], r["instructions_vs_none"]
        lines.append(f"| {r['scheduler']} | {r['ssds']} | {r['ios_per_wall_s'] / 1e6:.2f} | "
                     f"{r['events_per_io']:.2f} | {f'{ins:,.0f}' if ins else 'n/a'} | "
                     f"{f'{rel:.2f}x' if rel else 'n/a'} |")
    w = out.get("writers")
    if w:
        ins = w["instructions_per_io"]
        lines += ["", f"Writers ({w['processes']} processes of 4 KiB random writes at QD 128 over {w['ssds']} SSDs, "
                      f"none): {w['ios_per_wall_s'] / 1e6:.2f} M I/Os per wall s, {w['events_per_io']:.2f} events "
                      f"per I/O" + (f", {ins:,.0f} instructions per I/O." if ins else ".")]
    return "\n".join(lines)
