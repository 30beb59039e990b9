"""DIR/report.html (self-contained: plotly.js inlined once, every figure interactive) and DIR/figures/*.png|svg|pdf,
rebuilt from the stored results alone; also DIR/checks.parquet and DIR/checks.md (paper vs iosched rows).

Nothing in the page depends on when or where it was built, so the same results give the same bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import store
from ..papers import registry
from ..safepath import file_name
from .figures import Figure, Panel, Table, Trace, cdf, fmt, render_static
from .sweep import RUNS_PER_PANEL, RunData, split_runs, sweep_figures


@dataclass
class Section:
    name: str
    title: str
    kind: str                                   # "paper" or "spec"
    seed: str = ""
    refs: tuple[str, ...] = ()
    mode: str = ""
    description: str = ""
    notes: tuple[str, ...] = ()
    checks: list[Any] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    paper: tuple[Any, ...] = ()
    specs: list[tuple[str, str]] = field(default_factory=list)     # (series, TOML)
    runs: list[dict[str, Any]] = field(default_factory=list)
    missing: int = 0
    error: str = ""
    points: list[Any] = field(default_factory=list)                # papers.scoring.Scored, every plotted point
    why: dict[str, str] = field(default_factory=dict)               # figure panel -> why its misses miss

    @property
    def counted(self) -> list[Any]:
        """The rows that count: the paper's findings and point shares, not the calibration inputs' rows nor those
        beyond the paper (shown, never counted: papers.registry.counted)."""
        return [c for c in self.checks if registry.counted(c)]

    @property
    def holds(self) -> int:
        return sum(bool(c.holds) for c in self.counted)

    @property
    def uncounted_text(self) -> str:
        """What the rows not counted give ("; calibration inputs (not counted): K of N within their band"), or ""."""
        out = ""
        cal = [c for c in self.checks if c.finding == registry.CALIBRATION]
        if cal:
            out += (f"; calibration inputs (not counted): {sum(bool(c.holds) for c in cal)} of {len(cal)} within "
                    "their band")
        beyond = [c for c in self.checks if c.finding.startswith(registry.BEYOND)]
        if beyond:
            out += f"; beyond the paper (not counted): {sum(bool(c.holds) for c in beyond)} of {len(beyond)} hold"
        return out


@dataclass
class Fidelity:
    """One paper's points against its own data, over all its experiments: shares per figure panel and overall,
    and the picture."""
    seed: str
    points: list[Any]
    shares: dict[str, Any]
    figure: Figure
    why: dict[str, str]


@dataclass
class Report:
    out: Path
    sections: list[Section]
    fidelity: list[Fidelity] = field(default_factory=list)

    @property
    def checks(self) -> list[tuple[Section, Any]]:
        return [(s, c) for s in self.sections for c in s.checks]


# ---------------------------------------------------------------- TOML for the specs shown

def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(type(v))


def _toml_key(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() else json.dumps(k)


def to_toml(spec: dict[str, Any]) -> str:
    """A spec dict as the TOML `iosched run` reads (so a reader can copy it and run it)."""
    lines = []
    tables = {k: v for k, v in spec.items() if k in ("job", "sweep")}
    for k, v in spec.items():
        if k not in tables:
            lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
    for job in tables.get("job", []):
        lines += ["", "[[job]]"] + [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in job.items()]
    if tables.get("sweep"):
        lines += ["", "[sweep]"] + [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in tables["sweep"].items()]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- sections

def _run_rows(out: Path, entry: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for r in entry.get("runs", []):
        done = store.is_done(out, r["id"])
        spec = store.load_run_spec(out, r["id"]) if done else {}
        host, devices = spec.get("host", ""), spec.get("devices", [])
        if spec.get("backend") in ("kernel", "vm"):  # measured: this machine (or its VM lab) and the devices
            host = f"{host.get('hostname', '?')} (kernel {host.get('kernel', '?')})" if isinstance(host, dict) else host
            if spec.get("backend") == "vm":
                host = f"VM lab ({spec.get('vm', {}).get('accel', '?')}) on {host}"
                devices = [d.get("given", "?") if isinstance(d, dict) else str(d) for d in devices]
            devices = [d.get("target", d.get("path", "?")) if isinstance(d, dict) else str(d) for d in devices]
        elif spec.get("kernel"):  # simulated: the preset's (or the spec's) kernel version, which selects behaviour
            host = f"{host} (Linux {spec['kernel']})"
        rows.append({"id": r["id"], "series": r.get("series", ""), "point": r.get("point", {}),
                     "repetition": r.get("repetition", 0), "seed": r.get("seed", spec.get("seed", "")),
                     "scheduler": spec.get("scheduler", ""), "tunables": spec.get("tunables", {}),
                     "code_version": spec.get("code_version", ""), "iosched_version": spec.get("iosched_version", ""),
                     "host": host, "devices": devices, "backend": spec.get("backend", "sim"), "done": done,
                     # Each simulated job's rw (None for a trace replay): the directions it does.
                     "job_rw": {c["name"]: None if "trace" in c else c.get("rw")
                                for c in (spec.get("sim_config") or {}).get("jobs", [])}})
    return rows


def paper_section(out: Path, name: str, entry: dict[str, Any]) -> Section:
    from ..papers import registry

    try:
        exp = registry.get(name)
    except Exception as e:  # noqa: BLE001 - a folder from another iosched version
        return Section(name, name, "paper", error=f"not a registered paper experiment here: {e}")
    res = registry.Results(out, name, entry)
    sec = Section(name, exp.title, "paper", exp.seed, exp.refs, res.mode, exp.description, exp.notes,
                  paper=exp.paper, runs=_run_rows(out, entry), missing=res.missing,
                  specs=[(s, to_toml(spec)) for s, spec in exp.specs(res.mode == "quick")])
    try:
        ref0 = exp.refs[0] if len(exp.refs) == 1 else ""
        sec.checks = [registry.as_check(c, ref0) for c in exp.checks(res)]
        if exp.points is not None:
            from ..papers import scoring

            sec.points = exp.points.score(res)
            sec.why = exp.points.notes(res)
            sec.checks += scoring.share_checks(sec.points)
        sec.tables = list(exp.tables(res))
        sec.figures = list(exp.figures(res))
    except registry.MissingRuns:
        sec.checks, sec.tables, sec.figures, sec.points = [], [], [], []
        sec.error = (f"incomplete: {res.missing} of {len(res.runs)} runs are missing (an interrupted sweep); "
                     "re-run the same command to finish them")
    return sec


CDF_RUNS_PER_PANEL = RUNS_PER_PANEL


def spec_section(out: Path, name: str, entry: dict[str, Any]) -> Section:
    """A user experiment (`iosched run`): a table of every run and job, and latency CDFs per job."""
    from ..results import directions, percentile

    runs = _run_rows(out, entry)
    kernel = entry.get("backend") in ("kernel", "vm")
    how = (f"`iosched run --backend {entry['backend']} {entry.get('spec_file', '')}`, measured on "
           f"{', '.join(entry.get('devices', []))}" + (f" ({entry['filesystem']})" if entry.get("filesystem") else "")
           if kernel else f"`iosched run {entry.get('spec_file', '')}`")
    sec = Section(name, name, "spec", mode=entry.get("mode", ""), runs=runs, description=how,
                  specs=[("spec", to_toml(entry["spec"]))] if entry.get("spec") else [])
    # The VM lab's warnings (guest CPU saturated, host CPU contention): the numbers of those runs say more about
    # the emulation than about the device.
    sec.notes = tuple(f"warning: run {r['id']}: {w}" for r in runs if r["done"] and r["backend"] == "vm"
                      for w in store.load_run_spec(out, r["id"]).get("warnings", []))
    done = [r for r in runs if r["done"]]
    sec.missing = len(runs) - len(done)
    cols = ["run", "sweep point", "rep", "scheduler", "job", "read KIOPS", "read P50 / P99 / P99.9 (µs)",
            "write KIOPS", "write P99 (µs)", "cores busy", "lock share"]
    table_rows = []
    per_job: dict[str, list[Trace]] = {}
    run_data = []
    for r in done:
        res = store.load_result(out, r["id"])
        run_data.append(RunData(r["id"], r["point"], r["repetition"], r["scheduler"], res))
        busy = sum(c["busy_ns"] for c in res["cores"]) / res["window_ns"] if res["window_ns"] else 0.0
        tot = sum(c["busy_ns"] for c in res["cores"])
        lock = sum(c["lock_ns"] for c in res["cores"]) / tot if tot else 0.0
        label = ", ".join(f"{k}={v}" for k, v in r["point"].items()) or r["scheduler"]
        if r["repetition"]:
            label += f" rep {r['repetition']}"
        for j in res["jobs"]:
            w = j["window_ns"] / 1e9 if j["window_ns"] else float("nan")
            rd, wr = j["read"], j["write"]
            # A direction the job does not do is blank, not 0 (a writer starved of its writes still shows 0).
            does = directions(r["job_rw"].get(j["name"]))
            read_cells = [fmt(rd["ios"] / w / 1e3), " / ".join(fmt(percentile(rd, p) / 1e3) for p in (50.0, 99.0, 99.9))] \
                if rd["ios"] or does[0] else ["", ""]
            write_cells = [fmt(wr["ios"] / w / 1e3), fmt(percentile(wr, 99.0) / 1e3)] \
                if wr["ios"] or does[1] else ["", ""]
            table_rows.append([r["id"], json.dumps(r["point"]) if r["point"] else "", str(r["repetition"]),
                               r["scheduler"], j["name"], *read_cells, *write_cells, f"{busy:.2f}",
                               "not measured" if res.get("backend") in ("kernel", "vm") else f"{lock:.0%}"])
            for d, dr in (("read", rd), ("write", wr)):
                if dr["ios"]:
                    xs, ys = cdf(dr["bins"])
                    p99 = percentile(dr, 99.0) / 1e3
                    per_job.setdefault(f"{j['name']} {d}", []).append(
                        Trace(label, xs, ys, marks=[(p99, f"P99 {fmt(p99)} µs")]))
    sec.tables = [Table(file_name(f"{name}-runs"), "", "Every run and job", cols, table_rows)]
    if per_job:
        # At most CDF_RUNS_PER_PANEL curves stay readable in one panel; a job with more runs gets more panels, so no
        # run is left out of the figure.
        panels = []
        for k, traces in per_job.items():
            for part, chunk in split_runs(traces):
                panels.append(Panel(f"{k}: completion latency{part}", "cdf", chunk, xlabel="latency (µs)",
                                    ylabel="CDF", xlog=True))
        # The figure's id names its files (figures/<id>.png) and its place in the page: made safe from the name.
        sec.figures = [Figure(file_name(f"{name}-latency-cdf"), "", "Completion latency CDFs, P99 marked", panels,
                              caption=f"At most {CDF_RUNS_PER_PANEL} runs per panel; a job with more runs has more "
                              "panels.", cols=min(2, len(panels)))]
    sec.figures += sweep_figures(name, run_data)
    return sec



def validation_section(out: Path) -> Section:
    """`iosched validate`'s comparison (DIR/validation.json): per scheduler, simulator against kernel."""
    from ..devcal import comparison

    rows = json.loads((out / "validation.json").read_text())
    sec = Section("validation", "Validation: simulator vs kernel", "spec",
                  description="`iosched validate`: the same spec on the real device (kernel backend) and in the "
                              "simulator with the calibrated preset; ratios are sim / kernel, ranks by the first "
                              "job's P99 (1 = lowest). Both backends' runs follow.")
    if not rows:
        sec.error = "no scheduler ran on both backends"
        return sec
    job = rows[0]["job"]
    cols = ["scheduler", "kernel IOPS", "sim IOPS", "IOPS sim/kernel", f"{job} P99 kernel (µs)", "sim (µs)",
            "P99 sim/kernel", "rank kernel", "rank sim"]
    sec.tables = [Table("validation", "", "Per scheduler", cols, [
        [r["scheduler"], fmt(r["kernel_iops"]), fmt(r["sim_iops"]), f"{r['iops_ratio']:.2f}", fmt(r["kernel_p99_us"]),
         fmt(r["sim_p99_us"]), f"{r['p99_ratio']:.2f}", str(r["kernel_rank"]), str(r["sim_rank"])] for r in rows])]
    drift = json.loads((out / "drift.json").read_text()) if (out / "drift.json").is_file() else []
    if drift:
        sec.tables.append(Table("drift", "", "Device drift: the preset's QD-max ceilings against the device, measured "
                                "again before and after the runs", ["when", "step", "kernel KIOPS",
                                                                    "preset (sim) KIOPS", "sim/kernel"],
                                [[d["when"], d["what"], f"{d['kernel_kiops']:,.1f}", f"{d['sim_kiops']:,.1f}",
                                  f"{d['ratio']:.2f}" + (" (drifted)" if d["drifted"] else "")] for d in drift]))
    within = [r["scheduler"] for r in rows if comparison.iops_within(r)]
    drifted = [d for d in drift if d["drifted"]]
    sec.notes = (f"IOPS within ±25%: {len(within)} of {len(rows)} schedulers",
                 f"ranking by {job}'s P99: " + ("agrees" if comparison.ranking_agrees(rows) else "DISAGREES"),
                 *([f"the device drifted since calibration: {len(drifted)} of {len(drift)} ceilings beyond "
                    f"±{comparison.DRIFT_TOLERANCE:.0%}"] if drifted else []))
    names = [r["scheduler"] for r in rows]
    panels = [Panel(f"{job} P99 (µs)", "bars", [Trace("kernel", names, [r["kernel_p99_us"] for r in rows]),
                                                 Trace("sim", names, [r["sim_p99_us"] for r in rows])],
                    ylabel="µs", xcategories=names),
              Panel("total IOPS", "bars", [Trace("kernel", names, [r["kernel_iops"] for r in rows]),
                                           Trace("sim", names, [r["sim_iops"] for r in rows])],
                    ylabel="IOPS", xcategories=names)]
    sec.figures = [Figure("validation", "", "Simulator vs kernel per scheduler", panels, cols=2)]
    return sec


def build(out: Path, *, static: bool = True) -> Report:
    """Recompute every check, table and figure from DIR's stored results and write the report files."""
    out = Path(out)
    manifest = store.read_manifest(out)
    sections = []
    for name, entry in manifest.get("experiments", {}).items():
        sections.append(paper_section(out, name, entry) if entry.get("kind") == "paper"
                        else spec_section(out, name, entry))
    if (out / "validation.json").is_file():
        sections.insert(0, validation_section(out))
    report = Report(out, sections, fidelity(sections))
    if static:
        for s in sections:
            for f in s.figures:
                render_static(f, out)
        for fd in report.fidelity:
            render_static(fd.figure, out)
    _write_checks(report)
    from .html import render_html

    store.write_file(out, "report.html", render_html(report, static=static).encode())
    return report


def fidelity(sections: list[Section]) -> list[Fidelity]:
    """Per seed whose experiments are scored point by point: every point, the shares, the picture."""
    from ..papers import scoring

    out = []
    for seed in sorted({s.seed for s in sections if s.points}):
        points = [p for s in sections if s.seed == seed for p in s.points]
        why = {k: v for s in sections if s.seed == seed for k, v in s.why.items()}
        fig = scoring.fidelity_figure(points, f"fidelity-seed{seed}",
                                      f"Seed {seed}: every plotted point, paper vs iosched")
        out.append(Fidelity(seed, points, scoring.shares(points), fig, why))
    return out


def _write_checks(report: Report) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("experiment", pa.string()), ("seed", pa.string()), ("mode", pa.string()),
                        ("ref", pa.string()), ("finding", pa.string()), ("what", pa.string()),
                        ("paper", pa.string()), ("iosched", pa.string()), ("paper_value", pa.float64()),
                        ("iosched_value", pa.float64()), ("ratio", pa.float64()), ("holds", pa.bool_()),
                        ("counted", pa.bool_())])
    rows = [{"experiment": s.name, "seed": s.seed, "mode": s.mode, "ref": c.ref, "finding": c.finding,
             "what": c.what, "paper": c.paper, "iosched": c.simulated, "paper_value": c.paper_value,
             "iosched_value": c.sim_value, "ratio": c.ratio, "holds": bool(c.holds),
             "counted": registry.counted(c)} for s, c in report.checks]
    import io

    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), buf)
    store.write_file(report.out, "checks.parquet", buf.getvalue())
    store.write_file(report.out, "checks.md", checks_markdown(report).encode())
    if any(s.points for s in report.sections):
        _write_points(report)


def _write_points(report: Report) -> None:
    """DIR/points.parquet: every plotted point of the papers' data with the simulated value, ratio, role, holds."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("experiment", pa.string()), ("seed", pa.string()), ("figure", pa.string()),
                        ("series", pa.string()), ("at", pa.string()), ("quantity", pa.string()),
                        ("unit", pa.string()), ("role", pa.string()), ("paper", pa.float64()),
                        ("iosched", pa.float64()), ("ratio", pa.float64()), ("x_paper", pa.float64()),
                        ("x_iosched", pa.float64()), ("holds", pa.bool_()), ("note", pa.string())])
    rows = [{"experiment": s.name, "seed": s.seed, "figure": p.point.figure, "series": p.point.series,
             "at": p.point.at, "quantity": p.point.y_name, "unit": p.point.y_unit, "role": p.role,
             "paper": p.paper, "iosched": p.sim, "ratio": p.ratio,
             "x_paper": float(p.point.x_value) if p.point.x_measured else None, "x_iosched": p.x_sim,
             "holds": p.holds, "note": p.note} for s in report.sections for p in s.points]
    import io

    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), buf)
    store.write_file(report.out, "points.parquet", buf.getvalue())


def checks_markdown(report: Report, *, heading: str = "###") -> str:
    """Per experiment: paper vs iosched with ratios and holds/NO, as markdown tables; for experiments scored point
    by point, the share of points within ±25% per figure, the calibration points and the points not counted."""
    from ..papers import scoring

    lines = []
    for s in report.sections:
        if s.kind != "paper":
            continue
        refs = ", ".join(s.refs)
        lines.append(f"{heading} {s.name}: {s.title} (seed {s.seed}, {refs})")
        lines.append("")
        if s.error:
            lines += [f"_{s.error}_", ""]
            continue
        lines.append(f"{s.holds} of {len(s.counted)} hold ({s.mode or 'full'} runs, "
                     f"{1 + max((r['repetition'] for r in s.runs), default=0)} repetition(s)){s.uncounted_text}.")
        lines.append("")
        lines.append("| ref | finding | what | paper | iosched | ratio | holds? |")
        lines.append("|---|---|---|---|---|---|---|")
        for c in s.checks:
            ratio = f"{c.ratio:.2f}" if c.ratio is not None else ""
            cells = [c.ref, c.finding, c.what, c.paper, c.simulated, ratio, "yes" if c.holds else "**NO**"]
            lines.append("| " + " | ".join(str(x).replace("|", "\\|") for x in cells) + " |")
        lines.append("")
        if s.points:
            lines.append(scoring.points_markdown(s.points, s.why, heading + "#"))
    return "\n".join(lines)
