"""The figures of a user experiment's runs (`iosched run`), beyond the latency CDFs: each metric against a swept
variable per series (scheduler and the other swept values), bars per scheduler, heat maps of two-axis sweeps,
1 - CDF tails on log axes, and IOPS, latency and the scheduler's state over time. Every run is drawn: a panel holds
at most RUNS_PER_PANEL curves and more runs get more panels."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..safepath import file_name
from .figures import Figure, Heat, Panel, Trace, cdf, fmt

RUNS_PER_PANEL = 12


def split_runs(traces: list[Trace], numbered: bool = False):
    """The traces in panels of at most RUNS_PER_PANEL, each with what its title adds when there are several:
    " (runs 1-12 of 16)", or " (1)" with ``numbered``."""
    for i in range(0, len(traces), RUNS_PER_PANEL):
        chunk = traces[i:i + RUNS_PER_PANEL]
        if len(traces) <= RUNS_PER_PANEL:
            part = ""
        elif numbered:
            part = f" ({i // RUNS_PER_PANEL + 1})"
        else:
            part = f" (runs {i + 1}-{i + len(chunk)} of {len(traces)})"
        yield part, chunk


@dataclass
class RunData:
    """One finished run: its sweep point, repetition, scheduler and stored result (the simulator's shape)."""
    rid: str
    point: dict[str, Any]
    repetition: int
    scheduler: str
    result: dict[str, Any]


def _percentile(d: dict[str, Any], p: float) -> float | None:
    from ..results import percentile

    return percentile(d, p) if d["ios"] else None


def _job_metrics(res: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """Per job: IOPS (both directions), P99 and P99.9 of its busier direction (µs); and the run's cores busy."""
    cores = sum(c["busy_ns"] for c in res["cores"]) / res["window_ns"] if res.get("window_ns") else None
    out = {}
    for j in res["jobs"]:
        w = j["window_ns"] / 1e9 if j["window_ns"] else None
        rd, wr = j["read"], j["write"]
        main = rd if rd["ios"] >= wr["ios"] else wr
        p99, p999 = _percentile(main, 99.0), _percentile(main, 99.9)
        out[j["name"]] = {"IOPS": (rd["ios"] + wr["ios"]) / w if w else None,
                          "P99 (µs)": p99 / 1e3 if p99 is not None else None,
                          "P99.9 (µs)": p999 / 1e3 if p999 is not None else None,
                          "cores busy": cores}
    return out


def _mean(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return sum(vals) / len(vals) if vals else None


def _label(point: dict[str, Any], keys: list[str]) -> str:
    return ", ".join(f"{k.split('.')[-1] if k != 'scheduler.name' else 'scheduler'}={point[k]}" for k in keys
                     if k in point) or "all runs"


def _run_label(r: RunData, axes: list[str]) -> str:
    """One run's curve: its swept values (else its scheduler), and its repetition when not the first."""
    label = _label(r.point, axes) if axes else r.scheduler
    return label + (f" rep {r.repetition}" if r.repetition else "")


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def sweep_figures(name: str, runs: list[RunData]) -> list[Figure]:
    """The figures of ``runs`` (finished runs of one experiment)."""
    if not runs:
        return []
    figures: list[Figure] = []
    axes = list(dict.fromkeys(k for r in runs for k in r.point))
    metrics = {r.rid: _job_metrics(r.result) for r in runs}
    jobs = list(dict.fromkeys(j for m in metrics.values() for j in m))
    numeric = [k for k in axes if k != "scheduler.name" and all(_is_number(r.point.get(k)) for r in runs)]
    if numeric:
        figures.append(_against(name, runs, metrics, jobs, numeric[0], [k for k in axes if k != numeric[0]]))
    schedulers = list(dict.fromkeys(r.scheduler for r in runs))
    if len(schedulers) > 1:
        figures.append(_bars(name, runs, metrics, jobs, schedulers))
    if len(axes) == 2:
        figures.append(_heatmaps(name, runs, metrics, jobs[0], axes))
    tails = _tails(name, runs, axes)
    if tails:
        figures.append(tails)
    figures += _over_time(name, runs, axes)
    return figures


def _against(name, runs, metrics, jobs, x_axis, others) -> Figure:
    xs = sorted({r.point[x_axis] for r in runs})
    series: dict[str, dict[Any, list[RunData]]] = {}
    for r in runs:
        series.setdefault(_label(r.point, others) if others else r.scheduler, {}).setdefault(
            r.point[x_axis], []).append(r)
    panels = []
    for job in jobs:
        for metric in ("IOPS", "P99 (µs)", "P99.9 (µs)", "cores busy"):
            if metric == "cores busy" and job != jobs[0]:
                continue           # one per run: drawn once
            traces = [Trace(label, xs, [_mean([metrics[r.rid].get(job, {}).get(metric) for r in by_x.get(x, [])])
                                        for x in xs]) for label, by_x in series.items()]
            for part, chunk in split_runs(traces, numbered=True):
                title = (metric if metric == "cores busy" else f"{job}: {metric}") + part
                panels.append(Panel(title, "lines", chunk, xlabel=x_axis, ylabel=metric,
                                    xlog=all(x > 0 for x in xs) and max(xs) / min(xs) >= 16))
    return Figure(file_name(f"{name}-vs-{x_axis}"), "", f"Each job's IOPS and tail latency against {x_axis}",
                  panels, caption="Means over repetitions; one line per scheduler and the other swept values. The "
                                  "latency is the job's busier direction's completion latency.",
                  cols=min(2, len(panels)))


def _bars(name, runs, metrics, jobs, schedulers) -> Figure:
    panels = []
    for job in jobs:
        for metric in ("IOPS", "P99 (µs)"):
            ys = [_mean([metrics[r.rid].get(job, {}).get(metric) for r in runs if r.scheduler == s])
                  for s in schedulers]
            panels.append(Panel(f"{job}: {metric}", "bars", [Trace(metric, schedulers, ys)], ylabel=metric,
                                xcategories=schedulers))
    return Figure(file_name(f"{name}-by-scheduler"), "", "Per scheduler", panels,
                  caption="Means over every run of each scheduler (all sweep points and repetitions).",
                  cols=min(2, len(panels)))


def _heatmaps(name, runs, metrics, job, axes) -> Figure:
    ax_x, ax_y = axes
    xs = sorted({r.point[ax_x] for r in runs}, key=lambda v: (not _is_number(v), v if _is_number(v) else str(v)))
    ys = sorted({r.point[ax_y] for r in runs}, key=lambda v: (not _is_number(v), v if _is_number(v) else str(v)))
    panels = []
    for metric in ("IOPS", "P99 (µs)"):
        z = [[_mean([metrics[r.rid].get(job, {}).get(metric) for r in runs
                     if r.point[ax_x] == x and r.point[ax_y] == y]) for x in xs] for y in ys]
        text = [[fmt(v) if v is not None else "" for v in row] for row in z]
        panels.append(Panel(f"{job}: {metric}", "heatmap", heat=Heat([str(x) for x in xs], [str(y) for y in ys], z,
                                                                         text=text, colorbar=metric, own_scale=True),
                            xlabel=ax_x, ylabel=ax_y))
    return Figure(file_name(f"{name}-heatmap"), "", f"{job} over {ax_x} x {ax_y}", panels, cols=2)


def _tails(name, runs, axes) -> Figure | None:
    per_job: dict[str, list[Trace]] = {}
    for r in runs:
        label = _run_label(r, axes)
        for j in r.result["jobs"]:
            for d in ("read", "write"):
                dr = j[d]
                if not dr["ios"]:
                    continue
                xs, ys = cdf(dr["bins"])
                # 1 - CDF down to the last sample: the tail on a log axis (0 cannot be drawn there).
                pts = [(x, 1 - y) for x, y in zip(xs, ys) if 1 - y > 0]
                if pts:
                    per_job.setdefault(f"{j['name']} {d}", []).append(
                        Trace(label, [p[0] for p in pts], [p[1] for p in pts]))
    panels = []
    for key, traces in per_job.items():
        for part, chunk in split_runs(traces):
            panels.append(Panel(f"{key}: tail{part}", "tail", chunk, xlabel="latency (µs)",
                                ylabel="1 - CDF", xlog=True, ylog=True))
    if not panels:
        return None
    return Figure(file_name(f"{name}-tail"), "", "Latency tails (1 - CDF, log axes)", panels,
                  cols=min(2, len(panels)))


def _over_time(name, runs, axes) -> list[Figure]:
    """Per job, IOPS and mean completion latency over the run's time; then, per scheduler, its state (what it
    reports, as debugfs shows it), and the block layer's and device's; a metric that never changes in any run
    (a feature the workload does not use) is left out."""
    groups: dict[str, dict[str, list[Trace]]] = {}
    for r in runs:
        label = _run_label(r, axes)
        by_key: dict[tuple[str, str], dict[float, float]] = {}
        for s in r.result.get("timeseries", []):
            t_s = s["t_ns"] / 1e9
            if s["source"] == "job" and s["metric"] in ("read_iops", "write_iops"):
                d = by_key.setdefault(("jobs", f"{s['subject']}: IOPS"), {})
                d[t_s] = d.get(t_s, 0.0) + s["value"]
            elif s["source"] == "job" and s["metric"].endswith("_clat_mean_ns"):
                key = f"{s['subject']}: mean {s['metric'].split('_')[0]} latency (µs)"
                by_key.setdefault(("jobs", key), {})[t_s] = s["value"] / 1e3
            elif s["source"] == "scheduler":
                by_key.setdefault((r.scheduler, f"{s['subject']}: {s['metric']}"), {})[t_s] = s["value"]
            elif s["source"] in ("block", "device"):
                by_key.setdefault(("device", f"{s['subject']}: {s['metric']}"), {})[t_s] = s["value"]
        for (group, key), points in by_key.items():
            ts = sorted(points)
            groups.setdefault(group, {}).setdefault(key, []).append(Trace(label, ts, [points[t] for t in ts]))
    titles = {"jobs": "Over time: each job's IOPS and mean completion latency",
              "device": "Over time: the block layer's requests and tag sleepers, the device's buffer and space"}
    figures = []
    for group, series in groups.items():
        panels = []
        for key, traces in series.items():
            values = {v for t in traces for v in t.y}
            if group != "jobs" and len(values) <= 1:
                continue
            for part, chunk in split_runs(traces, numbered=True):
                panels.append(Panel(key + part, "lines", chunk, xlabel="time (s)",
                                    ylabel=key.split(": ", 1)[1]))
        if not panels:
            continue
        title = titles.get(group, f"Over time: {group}'s state (what it reports, as in debugfs)")
        figures.append(Figure(file_name(f"{name}-over-time-{group}"), "", title, panels,
                              caption="From the runs' samples, the ramp included; metrics that never change in any "
                                      "run are left out.", cols=min(2, len(panels))))
    return figures
