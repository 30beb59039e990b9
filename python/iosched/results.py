"""What a run's result files hold, derived from the simulator's result: the rows of results.parquet (one per run
and job) and timeseries.parquet with their schemas, fio.json (fio's json+ shape) and spec.json.  Every value is a
function of the run alone (no wall-clock values), so identical runs give identical files; iosched.store writes
them.  This module's digest is part of the code version (iosched.version)."""

from __future__ import annotations

import json
from typing import Any, Callable

from .simconfig import run_config
from .spec import ResolvedRun
from .version import __version__, code_version

PCTS = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p99_9": 99.9, "p99_99": 99.99}
DIR_METRICS = ["ios", "iops", "bw_bytes", "clat_mean_ns"] + [f"clat_{k}_ns" for k in PCTS]


def schema():
    """results.parquet: one row per run and job."""
    import pyarrow as pa

    fields = [
        ("run_id", pa.string()), ("experiment", pa.string()), ("sweep_point", pa.string()),
        ("repetition", pa.int64()), ("backend", pa.string()), ("scheduler", pa.string()),
        ("tunables", pa.string()), ("seed", pa.uint64()), ("host", pa.string()), ("kernel", pa.string()),
        ("device", pa.string()),
        ("devices", pa.int64()), ("iosched_version", pa.string()), ("code_version", pa.string()),
        ("job", pa.string()), ("numjobs", pa.int64()),
        ("window_ns", pa.int64()),
    ]
    for d in ("read", "write"):
        fields += [(f"{d}_ios", pa.int64()), (f"{d}_iops", pa.float64()), (f"{d}_bw_bytes", pa.float64()),
                   (f"{d}_clat_mean_ns", pa.float64())]
        fields += [(f"{d}_clat_{k}_ns", pa.int64()) for k in PCTS]
    fields += [("usr_cpu", pa.float64()), ("sys_cpu", pa.float64()), ("core_busy", pa.list_(pa.float64())),
               ("lock_share", pa.float64()), ("sim_events", pa.int64())]
    return pa.schema(fields)


def timeseries_schema():
    """timeseries.parquet: one row per sample."""
    import pyarrow as pa

    return pa.schema([("run_id", pa.string()), ("t_ns", pa.int64()), ("source", pa.string()),
                      ("subject", pa.string()), ("metric", pa.string()), ("value", pa.float64())])


def percentile(d: dict[str, Any], p: float) -> int:
    for q, ns in d.get("percentiles", []):
        if abs(q - p) < 1e-9:
            return int(ns)
    return 0


# ---------------------------------------------------------------- metrics of one job of a SimResult

def _percentile(direction: dict[str, Any], pct: float) -> float:
    """A percentile of the direction's completion latencies; NaN when none completed in the window (a reader
    starved behind others for all of a short window has no P99, and neither 0 nor the window is its value)."""
    return dict((p, v) for p, v in direction["percentiles"]).get(pct, float("nan"))


# The figures calibration and the paper experiments read off a simulated job (rates per second of its window).
METRICS: dict[str, Callable[[dict[str, Any]], float]] = {
    "read_kiops": lambda job: job["read"]["ios"] / (job["window_ns"] / 1e9) / 1e3,
    "write_kiops": lambda job: job["write"]["ios"] / (job["window_ns"] / 1e9) / 1e3,
    "read_mean_us": lambda job: job["read"]["clat_mean_ns"] / 1e3,
    "read_p99_us": lambda job: _percentile(job["read"], 99.0) / 1e3,
    "write_mean_us": lambda job: job["write"]["clat_mean_ns"] / 1e3,
    "write_p99_us": lambda job: _percentile(job["write"], 99.0) / 1e3,
    # CPU time (usr + sys) per completed I/O, as the ICPE'24 artifact's cpu.csv computes it from fio's report.
    "cpu_us_per_io": lambda job: (job["usr_ns"] + job["sys_ns"]) / 1e3 / max(1, job["read"]["ios"] + job["write"]["ios"]),
}


def _per_s(n: float, window_ns: int) -> float:
    return n / (window_ns / 1e9) if window_ns > 0 else 0.0


def job_rows(run: ResolvedRun, rid: str, result: dict[str, Any]) -> list[dict[str, Any]]:
    window = result["window_ns"]
    cores = result["cores"]
    busy = sum(c["busy_ns"] for c in cores)
    lock = sum(c["lock_ns"] for c in cores)
    core_busy = [c["busy_ns"] / window if window > 0 else 0.0 for c in cores]
    uniq = list(dict.fromkeys(run.device_presets))
    rows = []
    for rj, jr in zip(run.jobs, result["jobs"]):
        w = jr["window_ns"]
        row: dict[str, Any] = {
            "run_id": rid, "experiment": run.experiment,
            "sweep_point": json.dumps(run.sweep_point, sort_keys=True), "repetition": run.repetition,
            "backend": "sim", "scheduler": run.scheduler,
            "tunables": json.dumps(dict(run.tunables, **({"nr_requests": run.nr_requests}
                                                         if run.nr_requests is not None else {}),
                                        **({"block_layer": run.block_layer} if run.block_layer else {})),
                                   sort_keys=True),
            "seed": run.seed, "host": run.host_preset, "kernel": run.kernel, "device": "+".join(uniq),
            "devices": len(run.devices),
            "iosched_version": __version__, "code_version": code_version(), "job": jr["name"], "numjobs": rj.config["numjobs"], "window_ns": w,
        }
        for d in ("read", "write"):
            dr = jr[d]
            row[f"{d}_ios"] = dr["ios"]
            row[f"{d}_iops"] = _per_s(dr["ios"], w)
            row[f"{d}_bw_bytes"] = _per_s(dr["bytes"], w)
            row[f"{d}_clat_mean_ns"] = float(dr["clat_mean_ns"])
            for k, p in PCTS.items():
                row[f"{d}_clat_{k}_ns"] = percentile(dr, p)
        row["usr_cpu"] = 100.0 * jr["usr_ns"] / w if w > 0 else 0.0
        row["sys_cpu"] = 100.0 * jr["sys_ns"] / w if w > 0 else 0.0
        row["core_busy"] = core_busy
        row["lock_share"] = lock / busy if busy > 0 else 0.0
        row["sim_events"] = result["events"]
        rows.append(row)
    return rows


# ---------------------------------------------------------------- fio json+

LAT_NS_US = [2, 4, 10, 20, 50, 100, 250, 500, 750, 1000]
LAT_MS = [2, 4, 10, 20, 50, 100, 250, 500, 750, 1000, 2000]


def _empty_dir() -> dict[str, Any]:
    return {"ios": 0, "bytes": 0, "clat_min_ns": 0, "clat_max_ns": 0, "clat_mean_ns": 0.0, "clat_stddev_ns": 0.0,
            "percentiles": [], "bins": []}


# fio's latency histogram (stat.h: FIO_IO_U_PLAT_BITS 6, 29 groups): values below 128 ns exact, above that 64
# buckets per power of two, each reported at the middle of its range (plat_idx_to_val).
PLAT_BITS, PLAT_GROUPS = 6, 29


def plat_index(ns: int) -> int:
    """fio's plat_val_to_idx."""
    msb = ns.bit_length() - 1 if ns > 0 else 0
    if msb <= PLAT_BITS:
        return ns
    error_bits = msb - PLAT_BITS
    index = ((error_bits + 1) << PLAT_BITS) + (((1 << PLAT_BITS) - 1) & (ns >> error_bits))
    return min(index, PLAT_GROUPS * (1 << PLAT_BITS) - 1)


def plat_value(index: int) -> int:
    """fio's plat_idx_to_val: the value json+ names a bucket by."""
    if index < (1 << (PLAT_BITS + 1)):
        return index
    error_bits = (index >> PLAT_BITS) - 1
    return int((1 << (error_bits + PLAT_BITS)) + ((index % (1 << PLAT_BITS)) + 0.5) * (1 << error_bits))


def fio_bins(bins: list[list[int]]) -> dict[str, int]:
    """The simulator's histogram (buckets within 1%) regrouped on fio's own bucket grid (within 1.6%), as json+
    lists "bins": each bucket's count under the value fio names it by, in ascending order."""
    out: dict[int, int] = {}
    for ns, count in bins:
        key = plat_value(plat_index(int(ns)))
        out[key] = out.get(key, 0) + count
    return {str(k): out[k] for k in sorted(out)}


def _fio_dir(d: dict[str, Any], window_ns: int, pct_list: list[float], clat_pcts: bool = True,
             lat_pcts: bool = False) -> dict[str, Any]:
    ios, nbytes = d["ios"], d["bytes"]
    bw = _per_s(nbytes, window_ns)

    # As fio writes json+: percentiles and bins of clat_ns (clat_percentiles, default on) and of lat_ns
    # (lat_percentiles, default off), and a direction without I/O has only the five statistics (fio's own
    # fio_jsonplus_clat2csv fails on an empty "bins"). An async engine's slat (the submission call) and lat (from
    # the call's start to completion) are the simulator's own; a sync engine's call is the I/O, so, as fio, it
    # has no slat_ns and its lat is its clat.
    def latency(src: dict[str, Any], listed: bool) -> dict[str, Any]:
        stats = {"min": src["clat_min_ns"], "max": src["clat_max_ns"], "mean": float(src["clat_mean_ns"]),
                 "stddev": float(src["clat_stddev_ns"]), "N": src["ios"]}
        if not (src["ios"] and listed):
            return stats
        return dict(stats, percentile={f"{p:f}": percentile(src, p) for p in pct_list}, bins=fio_bins(src["bins"]))

    out = {
        "io_bytes": nbytes, "io_kbytes": nbytes // 1024, "bw_bytes": int(bw), "bw": int(bw / 1024),
        "iops": _per_s(ios, window_ns), "runtime": window_ns // 1_000_000 if ios else 0, "total_ios": ios,
        "short_ios": 0, "drop_ios": 0,
    }
    if d.get("slat"):
        out["slat_ns"] = latency(d["slat"], False)
    out["clat_ns"] = latency(d, clat_pcts)
    out["lat_ns"] = latency(d.get("lat") or d, lat_pcts)
    out.update(_window_stats(d, bw))
    return out


def _window_stats(d: dict[str, Any], bw_bytes_per_s: float) -> dict[str, Any]:
    """fio's bw_* (KiB/s) and iops_* statistics from the simulator's one sample per statistics window (fio's
    iops_avg_time and bw_avg_time, 500 ms; log_avg_msec for a job that logs): integers for min and max as fio
    prints them, and bw_agg as fio computes it for one job, the mean's share of the job's bandwidth (a run shorter
    than one window has no samples: zeros, as fio writes)."""
    iops = d.get("iops_samples") or {}
    bw = d.get("bw_kib_samples") or {}
    bw_kib = bw_bytes_per_s / 1024
    return {
        "bw_min": int(round(bw.get("min", 0))), "bw_max": int(round(bw.get("max", 0))),
        "bw_agg": 100.0 * bw.get("mean", 0.0) / bw_kib if bw_kib > 0 and bw.get("samples") else 0.0,
        "bw_mean": float(bw.get("mean", 0.0)), "bw_dev": float(bw.get("stddev", 0.0)),
        "bw_samples": int(bw.get("samples", 0)),
        "iops_min": int(round(iops.get("min", 0))), "iops_max": int(round(iops.get("max", 0))),
        "iops_mean": float(iops.get("mean", 0.0)), "iops_stddev": float(iops.get("stddev", 0.0)),
        "iops_samples": int(iops.get("samples", 0)),
    }


def latency_buckets(dirs: list[dict[str, Any]]) -> tuple[dict, dict, dict]:
    """fio's latency_ns / latency_us / latency_ms: percentage of all I/Os per bucket, from the bins."""
    ns = {str(b): 0 for b in LAT_NS_US}
    us = {str(b): 0 for b in LAT_NS_US}
    ms = {str(b): 0 for b in LAT_MS}
    ms[">=2000"] = 0
    total = sum(c for d in dirs for _, c in d["bins"])
    if total == 0:
        return ({k: 0.0 for k in ns}, {k: 0.0 for k in us}, {k: 0.0 for k in ms})
    # fio's buckets: the label is an exclusive upper bound on the latency in whole units (io_u_mark_lat).
    for d in dirs:
        for lat, c in d["bins"]:
            if lat < 1000:
                ns[next(str(b) for b in LAT_NS_US if lat < b)] += c
            elif lat < 1_000_000:
                us[next(str(b) for b in LAT_NS_US if lat // 1000 < b)] += c
            else:
                ms[next((str(b) for b in LAT_MS if lat // 1_000_000 < b), ">=2000")] += c
    pct = lambda t: {k: 100.0 * v / total for k, v in t.items()}  # noqa: E731
    return pct(ns), pct(us), pct(ms)


DEPTH_LEVELS = ("1", "2", "4", "8", "16", "32", ">=64")
SUBMIT_LEVELS = ("0", "4", "8", "16", "32", "64", ">=64")


def _fio_job(name: str, options: dict[str, str], read: dict, write: dict, window_ns: int, ramp_ns: int,
             usr_ns: int, sys_ns: int, ctx: int, nproc: int, pct_list: list[float], clat_pcts: bool = True,
             lat_pcts: bool = False, depth_levels: list[int] | None = None, iodepth: int = 1,
             submit_levels: list[int] | None = None, complete_levels: list[int] | None = None) -> dict[str, Any]:
    """One job entry of fio's json+. What fio counts and the simulator does not (majf and minf, page faults) is
    left out rather than written as 0."""
    lat_ns, lat_us, lat_ms = latency_buckets([read, write])
    cpu_den = window_ns * nproc

    def shares(keys: tuple[str, ...], counts: list[int] | None) -> dict[str, float]:
        counts = list(counts or [0] * len(keys))
        total = sum(counts)
        return {k: 100.0 * n / total if total else 0.0 for k, n in zip(keys, counts)}

    # fio's io_u_map (the depth each submission brought the job to), io_u_submit (I/Os per submit call) and
    # io_u_complete (completions per reap).
    depth = shares(DEPTH_LEVELS, depth_levels)
    return {
        "jobname": name, "groupid": 0, "job_start": 0, "error": 0, "eta": 0,
        "elapsed": int(round((ramp_ns + window_ns) / 1e9)), "job options": options,
        "read": _fio_dir(read, window_ns, pct_list, clat_pcts, lat_pcts),
        "write": _fio_dir(write, window_ns, pct_list, clat_pcts, lat_pcts),
        "trim": _fio_dir(_empty_dir(), window_ns, pct_list),
        "sync": {"total_ios": 0, "lat_ns": {"min": 0, "max": 0, "mean": 0.0, "stddev": 0.0, "N": 0}},
        "job_runtime": window_ns // 1_000_000,
        "usr_cpu": 100.0 * usr_ns / cpu_den if cpu_den else 0.0,
        "sys_cpu": 100.0 * sys_ns / cpu_den if cpu_den else 0.0,
        "ctx": ctx, "iodepth_level": depth, "iodepth_submit": shares(SUBMIT_LEVELS, submit_levels),
        "iodepth_complete": shares(SUBMIT_LEVELS, complete_levels),
        "latency_ns": lat_ns, "latency_us": lat_us, "latency_ms": lat_ms,
        "latency_depth": iodepth, "latency_target": 0, "latency_percentile": 100.0, "latency_window": 0,
    }


def fio_json(run: ResolvedRun, result: dict[str, Any]) -> dict[str, Any]:
    """The run in fio's json+ shape (group_reporting: one entry per job; otherwise one per process)."""
    jobs = []
    for rj, jr in zip(run.jobs, result["jobs"]):
        pct_list = list(rj.percentiles or []) or [p for p, _ in jr["read"]["percentiles"] or
                                                  jr["write"]["percentiles"]] or \
            [1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99]
        ramp = rj.config["ramp_ns"]
        if rj.group_reporting or not jr["processes"]:
            jobs.append(_fio_job(jr["name"], rj.options, jr["read"], jr["write"], jr["window_ns"], ramp,
                                 jr["usr_ns"], jr["sys_ns"], jr["context_switches"],
                                 max(1, len(jr["processes"])), pct_list, rj.clat_percentiles, rj.lat_percentiles,
                                 jr.get("depth_levels"), rj.config["iodepth"], jr.get("submit_levels"),
                                 jr.get("complete_levels")))
        else:
            for pr in jr["processes"]:
                jobs.append(_fio_job(jr["name"], rj.options, pr["read"], pr["write"], jr["window_ns"], ramp,
                                     pr["usr_ns"], pr["sys_ns"], pr["context_switches"], 1, pct_list,
                                     rj.clat_percentiles, rj.lat_percentiles, pr.get("depth_levels"),
                                     rj.config["iodepth"], pr.get("submit_levels"),
                                     pr.get("complete_levels")))
    # No timestamp: a simulated run has no wall-clock time (same spec and seed, same bytes).
    return {"fio version": f"iosched-{__version__}", "global options": {}, "jobs": jobs, "disk_util": []}


LOG_FILES = {"bw": ("bw",), "iops": ("iops",), "lat": ("lat", "clat")}


def fio_logs(run: ResolvedRun, result: dict[str, Any]) -> dict[str, str]:
    """fio's averaged logs (write_bw_log, write_iops_log, write_lat_log with log_avg_msec) from the run's samples:
    file name (logs/PREFIX_KIND.N.log, N the job's first process's number among all, from 1) -> text, one line
    "time_ms, value, direction, 0, 0" per sample and direction the job does, as fio 3.33 writes them (bw in KiB/s,
    IOPS, mean latency in ns; the lat log holds clat's means too, the samples having no per-interval submission
    time, and there is no slat log)."""
    return log_files([(rj.config, rj.logs) for rj in run.jobs], result)


def log_files(jobs: list[tuple[dict[str, Any], dict[str, str]]], result: dict[str, Any]) -> dict[str, str]:
    """fio_logs for (job config, {kind: prefix}) pairs, in the run's job order (iosched export writes bench-fio's
    logs this way from a stored run)."""
    files: dict[str, str] = {}
    first = 1
    for c, logs in jobs:
        number, first = first, first + c["numjobs"]
        if not logs:
            continue
        start, end = c["start_ns"], c["start_ns"] + c["ramp_ns"] + c["runtime_ns"]
        by_t: dict[int, dict[str, float]] = {}
        for sample in result.get("timeseries", []):
            if sample["source"] == "job" and sample["subject"] == c["name"] and start < sample["t_ns"] <= end:
                by_t.setdefault(sample["t_ns"], {})[sample["metric"]] = sample["value"]
        does = directions(None if "trace" in c else c["rw"])
        directions_ = [(d, i) for i, d in enumerate(("read", "write")) if does[i]]
        for kind, prefix in logs.items():
            lines = []
            for t in sorted(by_t):
                for d, i in directions_:
                    metric = {"bw": f"{d}_bw_bytes", "iops": f"{d}_iops", "lat": f"{d}_clat_mean_ns"}[kind]
                    v = by_t[t].get(metric)
                    if v is None:
                        continue     # no completion in the window: fio writes no latency entry
                    value = v / 1024 if kind == "bw" else v
                    lines.append(f"{round((t - start) / 1e6)}, {int(round(value))}, {i}, 0, 0\n")
            for name in LOG_FILES[kind]:
                files[f"logs/{prefix}_{name}.{number}.log"] = "".join(lines)
    return files


def directions(rw: str | None) -> tuple[bool, bool]:
    """(reads, writes) a job of this rw does; None (a trace replay, or a run without its config): both."""
    if rw in ("read", "randread"):
        return True, False
    if rw in ("write", "randwrite"):
        return False, True
    return True, True


def run_spec(run: ResolvedRun, rid: str) -> dict[str, Any]:
    return {
        "run_id": rid, "experiment": run.experiment, "spec_file": run.spec_file, "sweep_point": run.sweep_point,
        "repetition": run.repetition, "seed": run.seed, "backend": "sim", "iosched_version": __version__,
        "code_version": code_version(),
        "host": run.host_preset, "kernel": run.kernel, "devices": run.device_presets, "scheduler": run.scheduler,
        "tunables": run.tunables, "nr_requests": run.nr_requests, "block_layer": run.block_layer,
        "jobs": [{"name": j.config["name"], "group_reporting": j.group_reporting, "options": j.options}
                 for j in run.jobs],
        "notes": run.notes, "sim_config": run_config(run),
    }
