"""The host preset of the VM lab's guest (`iosched vm host-preset RESULTS --out FILE`): per-I/O CPU costs from fio's
usr+sys time per I/O measured in the lab on a null_blk with no device time (irqmode=0: the request ends inside
queue_rq), by the specs experiments/validation/lab-host-engines.toml (each ioengine under none) and
lab-host-schedulers.toml (libaio under each scheduler); what each file system's direct-I/O path adds, from
fs-dio-cost.toml run raw and on each file system.  What the lab cannot separate is taken from a base host preset,
scaled by the measured libaio cost against the base's (a named assumption each)."""

from __future__ import annotations

import gzip
import itertools
import json
import statistics
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from .. import kernel_version, store
from ..errors import SpecError
from ..presets import ENGINES, load_preset
from .presetfiles import write_preset

ENGINES_EXPERIMENT = "lab-host-engines"
SCHEDULERS_EXPERIMENT = "lab-host-schedulers"
TIMERS_EXPERIMENT = "lab-host-timers"
FS_EXPERIMENT = "fs-dio-cost"
# The quantiles of fio's clat (its default percentile list) the timer lateness table keeps.
LATENESS_PERCENTILES = (1.0, 10.0, 50.0, 90.0, 99.0, 99.9)
BASE = "xeon-silver-4210r-10c"
MIN_SCHEDULER_NS = 100      # a scheduler whose measured extra cost is below the noise still runs its hooks


def cpu_per_io(rows: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[tuple[float, float]]]:
    """{(experiment, scheduler, ioengine point): [(CPU ns per I/O, usr share), one per run]} from result rows."""
    out: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
    for r in rows:
        ios = (r["read_ios"] or 0) + (r["write_ios"] or 0)
        cpu = (r["usr_cpu"] or 0) + (r["sys_cpu"] or 0)
        if not ios or cpu <= 0:
            continue
        point = r.get("sweep_point") or ""
        out.setdefault((r["experiment"], r["scheduler"], point), []).append(
            (cpu / 100.0 * r["window_ns"] / ios, (r["usr_cpu"] or 0) / cpu))
    return out


def lab_host_params(rows: list[dict[str, Any]], cores: int, source: str) -> tuple[dict, dict[str, str], dict]:
    """(params, provenance, the measured figures) of the lab's host preset from the calibration runs' rows."""
    base = load_preset("host", BASE)
    measured = cpu_per_io(rows)

    def runs_of(experiment: str, scheduler: str, engine: str | None = None) -> list[tuple[float, float]]:
        found = [v for (e, s, p), vs in measured.items() for v in vs
                 if e == experiment and s == scheduler and (engine is None or engine in p)]
        if not found:
            raise SpecError(source, None, f"no {experiment} run for {scheduler}" + (f" with {engine}" if engine else "")
                            + ": run the spec first (see docs/validation.md)")
        return found

    params: dict[str, Any] = {"cores": cores}
    prov: dict[str, str] = {"cores": "the lab guest's vCPUs (--vm cpus, default 2)"}
    kernels = sorted({k for k in (kernel_version.from_release(r.get("kernel") or "") for r in rows) if k})
    if len(kernels) == 1:        # the runs' own kernel (uname -r in the guest), as iosched calibrate records it
        params["kernel"] = kernels[0]
        prov["kernel"] = f"the lab guest's kernel during the calibration runs ({source})"
    figures: dict[str, Any] = {}
    for engine in ENGINES:
        runs = runs_of(ENGINES_EXPERIMENT, "none", engine)
        ns = statistics.median(v for v, _ in runs)
        usr = statistics.median(u for _, u in runs)
        b = base.params[engine]
        share = b["submit_ns"] / (b["submit_ns"] + b["complete_ns"])
        params[engine] = {"submit_ns": int(round(ns * share)), "complete_ns": int(round(ns * (1 - share))),
                          "usr_fraction": round(usr, 3), "sleep_wake_ns": 0}
        figures[engine] = {"ns_per_io": [round(v) for v, _ in runs], "median_ns": round(ns), "usr_share": round(usr, 3)}
        prov[f"{engine}.submit_ns"] = (f"measured: fio usr+sys per I/O, {engine} QD 1 4 KiB randread on null_blk "
                                       f"irqmode=0 in the lab (median of {[round(v) for v, _ in runs]} ns), split "
                                       f"submit:complete as {BASE}'s ({share:.2f})")
        prov[f"{engine}.complete_ns"] = f"measured: as {engine}.submit_ns"
        prov[f"{engine}.usr_fraction"] = f"measured: fio's usr share of usr+sys in the same runs"
    factor = (params["libaio"]["submit_ns"] + params["libaio"]["complete_ns"]) / \
        (base.params["libaio"]["submit_ns"] + base.params["libaio"]["complete_ns"])
    figures["factor_vs_base"] = round(factor, 2)
    scaled = f"named assumption: {BASE}'s value x {factor:.1f} (the measured libaio cost against {BASE}'s: TCG " \
             "emulates every instruction, so every kernel path is slower by about the same factor)"
    for engine in ENGINES:
        params[engine]["sleep_wake_ns"] = int(round(base.params[engine]["sleep_wake_ns"] * factor))
        prov[f"{engine}.sleep_wake_ns"] = scaled + " (QD 1 on irqmode=0 never sleeps, so the lab runs do not pin it)"
    for key in ("context_switch_ns", "lock_handoff_ns"):
        params[key] = int(round(base.params[key] * factor))
        prov[key] = scaled
    none_ns = statistics.median(v for v, _ in runs_of(SCHEDULERS_EXPERIMENT, "none"))
    costs: dict[str, dict[str, int]] = {}
    for sched, b in base.params["scheduler_costs"].items():
        runs = runs_of(SCHEDULERS_EXPERIMENT, sched)
        extra = statistics.median(v for v, _ in runs) - none_ns
        total_b = b["insert_ns"] + b["dispatch_ns"] + b["complete_ns"]
        used = max(extra, MIN_SCHEDULER_NS)
        costs[sched] = {k: int(round(used * b[k] / total_b)) for k in ("insert_ns", "dispatch_ns", "complete_ns")}
        figures[sched] = {"ns_per_io": [round(v) for v, _ in runs], "extra_ns": round(extra)}
        prov[f"scheduler_costs.{sched}"] = (
            f"measured: fio usr+sys per I/O under {sched} minus under none (libaio QD 1 on null_blk irqmode=0 in the "
            f"lab: {[round(v) for v, _ in runs]} vs none's median {round(none_ns)} ns = {round(extra)} ns"
            + (f", below the runs' noise: floored at {MIN_SCHEDULER_NS} ns" if extra < MIN_SCHEDULER_NS else "")
            + f"), split insert:dispatch:complete as {BASE}'s")
    params["scheduler_costs"] = costs
    figures["none_ns_per_io"] = round(none_ns)
    return params, prov, figures


def _sim_qd1_read(host_params: dict, completion_ns: int, runtime_s: float, ramp_s: float) -> dict[str, Any]:
    """The simulator's read statistics of the timers spec's QD-1 reader on a null_blk of ``completion_ns`` with
    these host parameters."""
    from .. import native
    from ..nullblk import device_params
    from ..simconfig import Job, jobs_config

    device = dict(device_params(f"nullb:irqmode=2,completion_nsec={completion_ns},hw_queue_depth=16"),
                  name="/dev/nvme0n1")
    config = jobs_config(host_params, device, [Job("cal", "randread", 1, [0], ioengine="libaio")], runtime_s, ramp_s,
                         file="iosched.devcal.labhost")
    return native.simulate(config)["jobs"][0]["read"]


def _sim_qd1_clat_ns(host_params: dict, completion_ns: int) -> float:
    """The simulator's clat of that reader with these host parameters and no timer lateness: the timer plus the
    modelled CPU path, the same for every read."""
    return _sim_qd1_read(host_params, completion_ns, 0.2, 0.0)["clat_mean_ns"]


def _traced_parts_ns(trace: Path, duration_ns: int) -> tuple[list[float], list[float]]:
    """From a lab-host-timers run's trace (``--vm trace=blk+sched``), per request: how late its timer ended it (D to
    C less completion_nsec), and how long after that C the reader, asleep for it, was switched in (the interrupt's
    rest, the halted vCPU's wake-up and the switch). The reader is the thread that queues the bios (Q)."""
    from .. import blktrace

    late: list[float] = []
    wake: list[float] = []
    issued: dict[tuple[str, str], float] = {}
    reader, done_at, woken = None, None, False
    with gzip.open(trace, "rt") as lines:
        for line in lines:
            m = blktrace._BLK.match(line)
            if m:
                t, key, act = float(m["t"]) * 1e9, (m["dev"], m["sector"]), m["act"]
                if act == "D":
                    issued[key] = t
                elif act == "C" and key in issued:
                    late.append(t - issued.pop(key) - duration_ns)
                    done_at, woken = t, False
                elif act == "Q":
                    reader = reader if reader is not None else int(m["pid"])
                    done_at = None         # it queued again without a traced sleep: no wake-up to time
                continue
            m = blktrace._SCHED.match(line)
            if not m or done_at is None or reader is None:
                continue
            if m["event"] == "sched_waking":
                pm = blktrace._PID.search(m["rest"])
                woken = woken or (pm is not None and int(pm.group(1)) == reader)
            else:
                sm = blktrace._SWITCH.search(m["rest"])
                if woken and sm and int(sm.group(3)) == reader:
                    wake.append(float(m["t"]) * 1e9 - done_at)
                    done_at = None
    return late, wake


def _quantiles_ns(values: list[float], sleep_wake_ns: int = 0) -> list[int]:
    """LATENESS_PERCENTILES of ``values`` (nearest rank) less ``sleep_wake_ns``, floored at 0, non-decreasing."""
    v = sorted(values)
    row = [max(0, int(round(v[min(len(v) - 1, int(p / 100 * len(v)))] - sleep_wake_ns))) for p in LATENESS_PERCENTILES]
    return list(itertools.accumulate(row, max))


def timer_lateness(results: Path | list[Path], rows: list[dict[str, Any]],
                   host_params: dict) -> tuple[dict, str, dict] | None:
    """The guest's timer lateness (HostConfig.timer_lateness), its provenance and figures, from the lab-host-timers
    runs in ``results`` (None without any), per null_blk completion_nsec. Traced runs (``--vm trace=blk+sched``)
    give it directly, each request's D to C less the timer, and with it the wake-up's lateness
    (HostConfig.wake_lateness, in the figures as ``wake_lateness`` with its provenance as ``wake_provenance``): how
    long after the C the reader was switched in, less the wake-up's modelled CPU work (libaio's sleep_wake_ns).
    Untraced runs give the two together: each kept quantile of the QD-1 reader's clat (the median over that
    duration's runs) less the simulator's clat of the same reader on ``host_params`` without lateness, floored at 0.
    All the runs traced or none."""
    by_duration: dict[int, list[list[float]]] = {}
    traced: dict[int, list[tuple[list[float], list[float]]]] = {}
    untraced = 0
    for r in rows:
        if r["experiment"] != TIMERS_EXPERIMENT:
            continue
        folder = _run_folder(results, r)
        try:
            null_blk = json.loads((folder / "spec.json").read_text())["devices"][0]["null_blk"]
            if null_blk["irqmode"] != "2":
                continue
            fio = json.loads((folder / "fio.json").read_text())
            pct = fio["jobs"][0]["read"]["clat_ns"]["percentile"]
            duration = int(null_blk["completion_nsec"])
            by_duration.setdefault(duration, []).append([float(pct[f"{p:.6f}"]) for p in LATENESS_PERCENTILES])
        except (OSError, KeyError, IndexError, ValueError) as e:
            raise SpecError(str(folder), None, f"a {TIMERS_EXPERIMENT} run without its null_blk timer or fio's "
                            f"clat percentiles ({e.__class__.__name__}: {e})") from None
        trace = folder / "blktrace.txt.gz"
        try:
            parts = _traced_parts_ns(trace, duration) if trace.is_file() else ([], [])
        except (OSError, EOFError, UnicodeDecodeError) as e:
            raise SpecError(str(trace), None, f"not a readable trace ({e})") from None
        if parts[0] and parts[1]:
            traced.setdefault(duration, []).append(parts)
        else:
            untraced += 1
    if not by_duration:
        return None
    if traced and untraced:
        raise SpecError(_named(results), None, f"{untraced} {TIMERS_EXPERIMENT} run(s) without a trace with sched "
                        "events beside traced ones: run them all with --vm trace=blk+sched, or none")
    if traced:
        return _traced_lateness(traced, by_duration, host_params)
    durations = sorted(by_duration)
    late, figures = [], {}
    for duration in durations:
        runs = by_duration[duration]
        lab = [statistics.median(run[q] for run in runs) for q in range(len(LATENESS_PERCENTILES))]
        base = _sim_qd1_clat_ns(host_params, duration)
        row = [max(0, int(round(v - base))) for v in lab]
        late.append(list(itertools.accumulate(row, max)))      # non-decreasing, as quantiles are
        figures[f"timer_{duration}ns"] = {"lab_clat_ns": [round(v) for v in lab], "sim_clat_ns": round(base),
                                          "runs": len(runs)}
    table = {"quantiles": [round(p / 100, 6) for p in LATENESS_PERCENTILES], "durations_ns": durations,
             "late_ns": late}
    prov = (f"measured: how late the guest's null_blk timer ends a QD-1 libaio read, by completion_nsec "
            f"({', '.join(f'{d / 1e6:g} ms' for d in durations)}; {TIMERS_EXPERIMENT} runs, "
            f"{'-'.join(sorted({str(len(v)) for v in by_duration.values()}))} per duration): "
            f"fio's clat at P{', P'.join(f'{p:g}' for p in LATENESS_PERCENTILES)} less the simulator's clat of the "
            "same reader on this preset without lateness (the timer and the CPU path)")
    return table, prov, figures


def _traced_lateness(traced: dict[int, list[tuple[list[float], list[float]]]],
                     clat: dict[int, list[list[float]]], host_params: dict) -> tuple[dict, str, dict]:
    """timer_lateness's result from traced runs: the timer's and the wake-up's lateness apart (the wake-up's table,
    keyed by the timer's duration, about how long the reader's vCPU was halted, rides in the figures), and, as a
    check that can fail, the simulator's QD-1 clat with both beside the lab's."""
    durations = sorted(traced)
    sleep_wake_ns = host_params["libaio"]["sleep_wake_ns"]
    quantiles = [round(p / 100, 6) for p in LATENESS_PERCENTILES]
    late, wake, figures = [], [], {}
    for d in durations:
        late.append(_quantiles_ns([x for run in traced[d] for x in run[0]]))
        wake.append(_quantiles_ns([x for run in traced[d] for x in run[1]], sleep_wake_ns))
    timer = {"quantiles": quantiles, "durations_ns": durations, "late_ns": late}
    woken = {"quantiles": quantiles, "durations_ns": durations, "late_ns": wake}
    with_both = dict(host_params, timer_lateness=timer, wake_lateness=woken)
    for d, t, w in zip(durations, late, wake):
        lab = [statistics.median(run[q] for run in clat[d]) for q in range(len(LATENESS_PERCENTILES))]
        figures[f"timer_{d}ns"] = {"timer_late_ns": t, "wake_late_ns": w,
                                   "requests": sum(len(run[0]) for run in traced[d]), "runs": len(traced[d]),
                                   "lab_clat_ns": [round(v) for v in lab],
                                   "sim_clat_ns": _sim_qd1_clat_pct_ns(with_both, d)}
    runs = "-".join(sorted({str(len(v)) for v in traced.values()}))
    where = (f"{', '.join(f'{d / 1e6:g} ms' for d in durations)}; {TIMERS_EXPERIMENT} runs with --vm "
             f"trace=blk+sched, {runs} per duration, every request pooled")
    prov = (f"measured: how late the guest's null_blk timer ends a QD-1 libaio read, by completion_nsec ({where}): "
            f"the blk trace's D to C less completion_nsec at P{', P'.join(f'{p:g}' for p in LATENESS_PERCENTILES)}")
    figures["wake_lateness"] = woken
    figures["wake_provenance"] = (
        f"measured: how long after its request's completion (C) the QD-1 reader asleep for it was switched in, less "
        f"libaio.sleep_wake_ns ({sleep_wake_ns} ns, the wake-up's modelled CPU work), at the same quantiles, by "
        f"completion_nsec, about how long its vCPU was halted ({where}; the trace's sched_waking and sched_switch)")
    return timer, prov, figures


def _sim_qd1_clat_pct_ns(host_params: dict, completion_ns: int) -> list[int]:
    """The simulator's clat of the timers spec's QD-1 reader at LATENESS_PERCENTILES, with these host parameters
    (their latenesses included), over 20 s simulated (1,250 reads at 16 ms)."""
    pct = dict(_sim_qd1_read(host_params, completion_ns, 20.0, 0.5)["percentiles"])
    return [round(pct[p]) for p in LATENESS_PERCENTILES]


def filesystem_costs(results: Path | list[Path],
                     rows: list[dict[str, Any]]) -> tuple[dict, dict[str, str], dict] | None:
    """The host's ``filesystems`` (each file system's added read_ns / write_ns per I/O), their provenance and
    figures, from the fs-dio-cost runs in ``results`` (None without any): the median of fio's CPU per I/O on a file
    on a fresh file system less the median on the raw device, reads and writes apart, floored at 0."""
    per: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        if r["experiment"] != FS_EXPERIMENT:
            continue
        folder = _run_folder(results, r)
        try:
            made = json.loads((folder / "spec.json").read_text())["devices"][0].get("filesystem")
        except (OSError, KeyError, IndexError, ValueError) as e:
            raise SpecError(str(folder), None, f"a {FS_EXPERIMENT} run without its spec.json's devices "
                            f"({e.__class__.__name__}: {e})") from None
        fs = made["filesystem"] if made else "raw"
        for rw in ("read", "write"):
            ios, cpu = r[f"{rw}_ios"] or 0, (r["usr_cpu"] or 0) + (r["sys_cpu"] or 0)
            if ios and cpu > 0:
                per.setdefault((fs, rw), []).append(cpu / 100.0 * r["window_ns"] / ios)
    if not per:
        return None
    for rw in ("read", "write"):
        if ("raw", rw) not in per:
            raise SpecError(_named(results), None, f"{FS_EXPERIMENT} runs on file systems but none with {rw}s on "
                            "the raw device to subtract: run the spec without --filesystem into it too")
    table: dict[str, dict[str, int]] = {}
    prov: dict[str, str] = {}
    figures: dict[str, Any] = {}
    raw_median = {rw: statistics.median(per[("raw", rw)]) for rw in ("read", "write")}
    for fs in sorted({f for f, _ in per} - {"raw"}):
        parts, words = {}, []
        for rw in ("read", "write"):
            runs, raw = per.get((fs, rw)), raw_median[rw]
            if not runs:
                raise SpecError(_named(results), None, f"{FS_EXPERIMENT} on {fs} has no {rw} runs")
            extra = statistics.median(runs) - raw
            parts[f"{rw}_ns"] = max(0, int(round(extra)))
            words.append(f"{rw}s {[round(v) for v in runs]} vs the raw device's median {round(raw)} ns = "
                         f"{round(extra)} ns ({extra / raw:+.0%})")
            figures[f"{fs}_{rw}"] = {"ns_per_io": [round(v) for v in runs], "raw_median_ns": round(raw),
                                     "extra_ns": round(extra)}
        table[fs] = parts
        prov[f"filesystems.{fs}"] = (
            f"host calibration input, measured: fio usr+sys per 4 KiB I/O (io_uring, QD 32, one vCPU) on a file on a "
            f"fresh {fs} over memory-backed null_blk irqmode=0 in the lab, less on the raw device ({FS_EXPERIMENT} "
            f"runs): {'; '.join(words)}")
    return table, prov, figures


def update_filesystems(results: Path | list[Path], preset_path: Path) -> dict:
    """Measure only the ``filesystems`` of the lab host preset at ``preset_path`` from the fs-dio-cost runs in
    ``results`` (one folder or several, pooled), keeping its other parameters."""
    from ..presets import load_preset_file

    preset = load_preset_file(preset_path, "host")
    found = filesystem_costs(results, _vm_rows(results))
    if found is None:
        raise SpecError(_named(results), None, f"no {FS_EXPERIMENT} run: run experiments/validation/"
                        f"{FS_EXPERIMENT}.toml into it, raw and with --filesystem (docs/validation.md)")
    table, fs_prov, figures = found
    params = dict(preset.params, filesystems=table)
    prov = {k: v for k, v in preset.provenance.items() if not k.startswith("filesystems.")}
    prov.update(fs_prov)
    write_preset(preset_path, "host", preset.description, preset.key_figures, params, prov)
    return figures


def _folders(results: Path | list[Path]) -> list[Path]:
    return [Path(p) for p in results] if isinstance(results, (list, tuple)) else [Path(results)]


def _named(results: Path | list[Path]) -> str:
    return ", ".join(str(p) for p in _folders(results))


def _run_folder(results: Path | list[Path], row: dict[str, Any]) -> Path:
    """The folder of a row's run: in the results folder it came from (``_vm_rows`` records it)."""
    return store.run_dir(Path(row.get("_folder") or _folders(results)[0]), row["run_id"])


def _vm_rows(results: Path | list[Path]) -> list[dict[str, Any]]:
    """The lab's result rows of every folder, each with the folder it came from."""
    rows = []
    for folder in _folders(results):
        parquet = folder / "results.parquet"
        if not parquet.is_file():
            raise SpecError(str(folder), None, "no results.parquet: run the lab-host specs into it first")
        rows += [dict(r, _folder=str(folder)) for r in pq.read_table(parquet).to_pylist() if r["backend"] == "vm"]
    return rows


def update_timer_lateness(results: Path | list[Path], preset_path: Path) -> dict:
    """Re-measure only the timer lateness of the lab host preset at ``preset_path`` from the lab-host-timers runs in
    ``results``, keeping its other parameters (the CPU costs' runs vary more between lab sessions than the timers
    need them to)."""
    from ..presets import load_preset_file

    preset = load_preset_file(preset_path, "host")
    params = {k: v for k, v in preset.params.items() if k not in ("timer_lateness", "wake_lateness")}
    timers = timer_lateness(results, _vm_rows(results), params)
    if timers is None:
        raise SpecError(_named(results), None, f"no {TIMERS_EXPERIMENT} run: run experiments/validation/"
                        f"{TIMERS_EXPERIMENT}.toml into it first (docs/validation.md)")
    params["timer_lateness"], lateness_prov, figures = timers
    prov = {k: v for k, v in preset.provenance.items() if k != "wake_lateness"}
    prov["timer_lateness"] = lateness_prov
    _take_wake_lateness(params, prov, figures)
    write_preset(preset_path, "host", preset.description, preset.key_figures, params, prov)
    return figures


def _take_wake_lateness(params: dict, prov: dict, figures: dict) -> None:
    """Move the wake-up lateness traced runs measured (timer_lateness's figures) into the preset's parameters."""
    if "wake_lateness" in figures:
        params["wake_lateness"] = figures.pop("wake_lateness")
        prov["wake_lateness"] = figures.pop("wake_provenance")


def lab_kernel_hz() -> int | None:
    """CONFIG_HZ of the prepared lab's guest kernel (the one its runs booted), or None without a prepared lab. Read
    from the recorded build, never rebuilding the image (the kernel package is the same either way)."""
    from ..backends.vm.lab import LAB_JSON, Lab, lab_dir

    folder = lab_dir()
    try:
        info = json.loads((folder / LAB_JSON).read_text())
    except (OSError, ValueError):
        return None
    return Lab(folder, info).config_hz() if isinstance(info, dict) and "key" in info else None


def _keep_timer_irq(out: Path, params: dict, prov: dict) -> None:
    """Carry the timer interrupt's time per completion (HostConfig.timer_irq_ns) over from the preset being
    rewritten: the lab-host runs do not measure it (it takes an elevator's completions coalesced into one late
    interrupt, and traced: docs/validation.md)."""
    import tomllib

    try:
        old = tomllib.loads(Path(out).read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return
    value = old.get("params", {}).get("timer_irq_ns")
    if isinstance(value, int):
        params["timer_irq_ns"] = value
        prov["timer_irq_ns"] = old.get("provenance", {}).get("timer_irq_ns", "kept from the preset this replaced")


def write_lab_host(results: Path | list[Path], out: Path, cores: int = 2) -> dict:
    rows = _vm_rows(results)
    params, prov, figures = lab_host_params(rows, cores, _named(results))
    timers = timer_lateness(results, rows, params)
    if timers is not None:
        params["timer_lateness"], prov["timer_lateness"], more = timers
        figures.update(more)
        _take_wake_lateness(params, prov, figures)
    fs = filesystem_costs(results, rows)
    if fs is not None:
        params["filesystems"], fs_prov, more = fs
        prov.update(fs_prov)
        figures.update(more)
    _keep_timer_irq(out, params, prov)
    hz = lab_kernel_hz()
    if hz is not None:
        params["hz"], prov["hz"] = hz, ("the lab guest kernel's CONFIG_HZ (its build configuration in the lab's "
                                        "cache, build/<key>/config: Debian's linux-image)")
    figures["hz"] = hz if hz is not None else "not found (no prepared lab): the simulator's default 1000"
    lib = params["libaio"]
    write_preset(out, "host", "The VM lab's guest: QEMU TCG, 2 vCPUs, Linux 6.12.117 (costs measured in the lab)",
                 {"libaio per I/O": f"{(lib['submit_ns'] + lib['complete_ns']) / 1e3:.1f} us (TCG: about "
                                    f"{figures['factor_vs_base']:.0f}x the Xeon preset's)"}, params, prov)
    return figures
