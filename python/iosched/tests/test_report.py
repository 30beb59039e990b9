"""Reports from stored results (synthetic ones: no simulator needed): the page, the figures' bytes, the generated part
of docs/results.md, queries over the results."""

import json
import os
import subprocess
import sys
import tomllib
from html import unescape
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from iosched import load, store
from iosched.cli import main
from iosched.papers import registry
from iosched.report.build import build, to_toml
from iosched.report.figures import render_static
from iosched.report.results_doc import BEGIN, END, update_results_doc

from . import toy
from .conftest import DATA, native_or_skip


@pytest.fixture
def toy_dir(tmp_path):
    out = tmp_path / "res"
    with toy.registered():
        toy.make_results(out)
        yield out


def test_report_page_is_self_contained(toy_dir):
    report = build(toy_dir)
    html = (toy_dir / "report.html").read_text()
    # plotly.js inlined exactly once, nothing fetched from the network
    assert html.count("plotly.js v") == 1 and "<script src" not in html and 'src="http' not in html
    for fid in ("toy-fig1", "toy-fig2"):
        assert html.count(f'id="fig-{fid}"') == 1
        for ext in ("png", "svg", "pdf"):
            assert (toy_dir / "figures" / f"{fid}.{ext}").stat().st_size > 1000
    # the paper-vs-iosched table, the paper's numbers, each run's spec, seeds and versions
    sec = report.sections[0]
    assert [c.finding for c in sec.checks] == ["T1", "T2"] and sec.holds == 1
    assert sec.checks[1].ratio is None and sec.checks[0].ratio == pytest.approx(2.0)  # 1000 I/Os in 1 s vs 0.5
    assert "Paper vs iosched" in html and "kyber KIOPS at QD 16" in html and '<span class="nope">NO</span>' in html
    assert "&lt;2&gt;" in html  # table cells are escaped
    assert '"job.r.iodepth" = [1, 4, 16]' in unescape(html)  # the series spec as TOML
    runs = toy_dir / "runs"
    rid = sorted(p.name for p in runs.iterdir())[0]
    spec = json.loads((runs / rid / "spec.json").read_text())
    assert f"<code>{rid}</code>" in html and spec["code_version"] in html
    assert f'<td class="num">{spec["seed"]}</td>' in html
    assert len(sec.runs) == 12  # 2 schedulers x 3 depths x 2 repetitions
    checks = pd.read_parquet(toy_dir / "checks.parquet")
    assert list(checks["finding"]) == ["T1", "T2"] and list(checks["holds"]) == [True, False]
    assert list(checks["counted"]) == [True, True]   # findings, not calibration rows
    assert "**NO**" in (toy_dir / "checks.md").read_text()


def test_same_results_same_bytes_in_fresh_processes(toy_dir, tmp_path):
    """Figures and the page are byte-identical across processes (different hash seeds), so results can be diffed."""
    script = ("import sys; from pathlib import Path; from iosched.tests import toy; from iosched.report.build import "
              "build\nwith toy.registered(): build(Path(sys.argv[1]))")
    digests = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed, IOSCHED_PRESETS=str(DATA / "presets"))
        subprocess.run([sys.executable, "-c", script, str(toy_dir)], check=True, env=env)
        digests.append({p.name: p.read_bytes() for p in [toy_dir / "report.html",
                                                          *sorted((toy_dir / "figures").iterdir())]})
    assert digests[0].keys() == digests[1].keys() and len(digests[0]) == 7
    for name in digests[0]:
        assert digests[0][name] == digests[1][name], name


def test_run_writes_static_figures_only_when_asked(tmp_path):
    """`iosched run` writes report.html; the PNG/SVG/PDF copies of its figures (seconds each) only with --static."""
    spec = tmp_path / "s.toml"
    spec.write_text('duration = "5ms"\n[[job]]\nname = "r"\nrw = "randread"\n')
    for flags, figures in (([], False), (["--static"], True)):
        out = tmp_path / f"out{len(flags)}"
        res = CliRunner().invoke(main, ["run", str(spec), "--out", str(out), *flags])
        assert res.exit_code == 0, res.output
        html = (out / "report.html").read_text()
        assert (out / "figures").is_dir() == figures and ('href="figures/' in html) == figures
        if figures:
            assert {p.suffix for p in (out / "figures").iterdir()} == {".png", ".svg", ".pdf"}


def test_static_figure_has_no_dates(tmp_path):
    fig = toy.TOY.figures(_results(tmp_path))[1]
    paths = render_static(fig, tmp_path / "f")
    for p in paths:
        data = p.read_bytes()
        assert b"CreationDate" not in data and b"Matplotlib v" not in data and b"<dc:date>" not in data, p


def test_a_figure_of_many_rows_renders_interactively(tmp_path):
    """17 panels in 2 columns (a job file of one reader and sixteen writers) are 9 rows: the row spacing shrinks to
    fit plotly's limit of 1 / (rows - 1) (a fixed 0.16 raised its ValueError after the runs had finished); so does it
    for 40 rows, and one row keeps its margin."""
    from iosched.report.figures import Figure, Panel, Trace, render_plotly

    for n in (1, 2, 17, 80):
        panels = [Panel(title=f"job {i}", traces=[Trace(name="bfq", x=[1, 2], y=[1.0, 2.0])]) for i in range(n)]
        html = render_plotly(Figure(id=f"many-{n}", ref="", title="many", panels=panels, cols=2))
        assert f"job {n - 1}" in html


def _results(tmp_path):
    out = tmp_path / "r"
    toy.make_results(out)
    return registry.Results(out, "toy", store.read_manifest(out)["experiments"]["toy"])


def test_interrupted_sweep_is_reported_as_incomplete(toy_dir):
    rid = store.read_manifest(toy_dir)["experiments"]["toy"]["runs"][3]["id"]
    import shutil
    shutil.rmtree(toy_dir / "runs" / rid)
    report = build(toy_dir, static=False)
    sec = report.sections[0]
    assert sec.missing == 1 and not sec.checks and "incomplete: 1 of 12 runs" in sec.error
    assert "incomplete" in (toy_dir / "report.html").read_text()


def test_report_command_needs_a_results_folder(tmp_path):
    res = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert res.exit_code == 2 and "no manifest.json" in res.output


def test_results_doc_is_rewritten_between_markers(toy_dir, tmp_path):
    report = build(toy_dir, static=False)
    doc = tmp_path / "results.md"
    doc.write_text(f"# x\n\n## Reproduced results\n\n{BEGIN}\nold numbers\n{END}\n\n## Next\n")
    update_results_doc(doc, report, toy_dir)
    text = doc.read_text()
    assert "old numbers" not in text and text.endswith("## Next\n") and text.count(BEGIN) == 1
    assert "| 999 | [toy](#toy) | Fig. 1, Fig. 2, Table 1 | 1 of 2 | – |" in text
    assert "| Fig. 1 | T1 | kyber KIOPS at QD 16 | 0.5 | 1.00 | 2.00 | yes |" in text
    assert "--results-md docs/results.md" in text and "--readme" not in text
    update_results_doc(doc, report, toy_dir)
    assert doc.read_text() == text  # idempotent
    plain = tmp_path / "PLAIN.md"
    plain.write_text("# y\n")
    update_results_doc(plain, report, toy_dir)
    assert "## Reproduced results" in plain.read_text() and END in plain.read_text()
    # The begin marker's earlier wording (when the section lived in README.md) is found and replaced, not duplicated.
    old = tmp_path / "OLD.md"
    old_begin = "<!-- reproduced-results:begin (generated by `iosched report DIR --readme README.md`; do not edit) -->"
    old.write_text(f"# z\n\nintro\n\n{old_begin}\nold numbers\n{END}\n")
    update_results_doc(old, report, toy_dir)
    assert old.read_text().startswith("# z\n\nintro\n\n" + BEGIN) and "old numbers" not in old.read_text()
    assert old.read_text().count("reproduced-results:begin") == 1 and old.read_text().endswith(END + "\n")
    # A begin marker without its end is not a block: the section is appended, the text before kept as it was.
    half = tmp_path / "HALF.md"
    half.write_text(f"# h\n\n{old_begin}\nold numbers\n")
    update_results_doc(half, report, toy_dir)
    assert half.read_text().startswith(f"# h\n\n{old_begin}\nold numbers\n\n## Reproduced results\n")


def test_report_command_creates_a_missing_results_doc_and_refuses_a_missing_folder(toy_dir, tmp_path):
    """A results file not there yet is created; one in a folder that is not there is one clear line (exit 2), after
    the report itself was rebuilt."""
    new = tmp_path / "NEW.md"
    res = CliRunner().invoke(main, ["report", str(toy_dir), "--no-static", "--results-md", str(new)])
    assert res.exit_code == 0, res.output
    assert new.read_text().startswith("# Reproduced results\n\n" + BEGIN) and new.read_text().endswith(END + "\n")
    lost = tmp_path / "no-such-folder" / "R.md"
    res = CliRunner().invoke(main, ["report", str(toy_dir), "--no-static", "--results-md", str(lost)])
    assert res.exit_code == 2, res.output
    assert f"{lost}: --results-md: not a file in an existing folder" in res.output
    assert "Traceback" not in res.output and not lost.parent.exists()
    binary = tmp_path / "BIN.md"
    binary.write_bytes(b"\xff\xfe\x00 not text")
    res = CliRunner().invoke(main, ["report", str(toy_dir), "--no-static", "--results-md", str(binary)])
    assert res.exit_code == 2 and f"{binary}: --results-md: cannot read it (UnicodeDecodeError)" in res.output
    assert binary.read_bytes() == b"\xff\xfe\x00 not text"


def test_report_command_rewrites_the_results_doc(toy_dir, tmp_path):
    """`iosched report DIR --results-md FILE` on a copy of the project's docs/results.md: only the generated part
    changes (its header is kept)."""
    shipped = Path(__file__).resolve().parents[3] / "docs" / "results.md"
    if not shipped.is_file():
        pytest.skip("not running from a checkout (no docs/results.md)")
    doc = tmp_path / "results.md"
    doc.write_text(shipped.read_text())
    res = CliRunner().invoke(main, ["report", str(toy_dir), "--no-static", "--results-md", str(doc)])
    assert res.exit_code == 0, res.output
    assert f"updated the reproduced results in {doc}" in res.output
    head = shipped.read_text().split("<!-- reproduced-results:begin")[0]
    text = doc.read_text()
    assert text.startswith(head + BEGIN) and text.count(END) == 1 and text.endswith(END + "\n")
    assert "| 999 | [toy](#toy) |" in text and "seed000-fig1" not in text


def test_specs_shown_as_toml_read_back_identically():
    for exp in registry.experiments() + [toy.TOY]:
        for _, spec in exp.specs(quick=False):
            assert tomllib.loads(to_toml(spec)) == spec


def test_query_and_load(toy_dir):
    df = load(toy_dir)
    assert len(df) == 12 and {"run_id", "scheduler", "read_iops", "read_clat_p99_ns", "code_version"} <= set(df.columns)
    n = store.query(toy_dir, "SELECT scheduler, count(*) AS n FROM results GROUP BY scheduler ORDER BY scheduler")
    assert n.to_dict("records") == [{"scheduler": "kyber", "n": 6}, {"scheduler": "none", "n": 6}]
    runs = load(toy_dir, "runs")
    assert set(runs["series"]) == {"qd"} and len(runs) == 12
    build(toy_dir, static=False)
    assert list(load(toy_dir, "checks")["holds"]) == [True, False]
    res = CliRunner().invoke(main, ["query", str(toy_dir), "SELECT count(DISTINCT run_id) AS runs FROM results",
                                    "--format", "csv"])
    assert res.exit_code == 0 and res.output == "runs\n12\n"
    bad = CliRunner().invoke(main, ["query", str(toy_dir), "SELECT nope FROM results"])
    assert bad.exit_code == 2 and bad.output.startswith("error: query: ") and len(bad.output.splitlines()) == 1


def test_a_scored_experiment_reports_its_points_shares_and_picture(tmp_path):
    out = tmp_path / "res"
    with toy.registered(toy.scored_toy()):
        toy.make_results(out)
        report = build(out)
    sec = report.sections[0]
    assert len(sec.points) == 7 and sum(p.counted for p in sec.points) == 6
    shares = [c for c in sec.checks if c.finding == "points"]
    # One panel: its share row is the experiment's (no second "all" row saying the same).
    assert [c.ref for c in shares] == ["Fig. 1"] and shares[0].paper.startswith("6 points")
    (fd,) = report.fidelity
    assert fd.seed == "999" and fd.shares["all"].total == 6
    for ext in ("png", "svg", "pdf"):
        assert (out / "figures" / f"fidelity-seed999.{ext}").stat().st_size > 1000
    html = (out / "report.html").read_text()
    assert 'id="fig-fidelity-seed999"' in html and "Every plotted point (7)" in html
    md = (out / "checks.md").read_text()
    assert "Points within ±25% of the paper's data" in md and "1 point(s) not simulated, not counted: no bypass." in md
    points = pd.read_parquet(out / "points.parquet")
    assert len(points) == 7 and set(points["role"]) == {"finding", "not simulated"}
    assert points[points["role"] == "finding"]["ratio"].notna().all()


def test_a_sweeps_figures_show_every_run(tmp_path):
    """The figures a sweep's report adds: every run is in the tails (12 per panel, so 16 runs make two panels), each
    scheduler is a line against the swept depth and a bar, the heat map has a cell per point, and a scheduler's
    state over time leaves out the metrics that never change."""
    from iosched.report.sweep import RunData, sweep_figures

    native_or_skip()
    spec = tmp_path / "qd.toml"
    spec.write_text('name = "qd"\nduration = "100ms"\n[[job]]\nname = "r"\nrw = "randread"\n'
                    '[sweep]\n"scheduler.name" = ["none", "mq-deadline", "kyber", "bfq"]\n'
                    '"job.r.iodepth" = [1, 4, 16, 64]\n')
    res = CliRunner().invoke(main, ["run", str(spec), "--out", str(tmp_path / "res"), "--no-report"])
    assert res.exit_code == 0, res.output
    out = tmp_path / "res"
    order = [r["id"] for r in store.read_manifest(out)["experiments"]["qd"]["runs"]]     # the sweep's order
    runs = [RunData(rid, store.load_run_spec(out, rid)["sweep_point"], 0, store.load_run_spec(out, rid)["scheduler"],
                    store.load_result(out, rid)) for rid in order]
    figs = {f.id: f for f in sweep_figures("qd", runs)}
    tails = figs["qd-tail"].panels
    assert [p.title for p in tails] == ["r read: tail (runs 1-12 of 16)", "r read: tail (runs 13-16 of 16)"]
    assert sum(len(p.traces) for p in tails) == 16
    against = figs["qd-vs-job.r.iodepth"].panels
    assert [p.title for p in against] == ["r: IOPS", "r: P99 (µs)", "r: P99.9 (µs)", "cores busy"]
    assert all(len(p.traces) == 4 and p.traces[0].x == [1, 4, 16, 64] for p in against)
    assert [t.name for t in figs["qd-by-scheduler"].panels[0].traces] == ["IOPS"]
    assert figs["qd-by-scheduler"].panels[0].xcategories == ["none", "mq-deadline", "kyber", "bfq"]
    heat = figs["qd-heatmap"].panels[0].heat
    assert len(heat.z) == 4 and all(len(row) == 4 and None not in row for row in heat.z)
    kyber = figs["qd-over-time-kyber"].panels
    assert kyber and all(len({v for t in p.traces for v in t.y}) > 1 for p in kyber)


def _every_panel_kind():
    from iosched.report.figures import Figure, Heat, Panel, Trace

    line = Trace(name="bfq", x=[1, 2, 4], y=[1.0, float("nan"), 3.0], text=["a", "b", "c"], hover=["h1", "h2", "h3"])
    paper = Trace(name="paper: bfq", x=[1, 2, 4], y=[1.5, 2.5, 3.5], paper=True, symbol="square")
    cdf = Trace(name="none", x=[10, 20, 30], y=[0.1, 0.5, 1.0], marks=[(25.0, "P99")])
    heat = Heat(x=["50us", "1ms"], y=["R", "W"], z=[[1.0, None], [0.5, 2.0]], zmin=0.0, zmax=2.0, colorbar="x none",
                own_scale=True)
    panels = [Panel(title="lines", traces=[line, paper], xlog=True, ylog=True, xlabel="QD", ylabel="KIOPS"),
              Panel(title="cdf", kind="cdf", traces=[cdf]), Panel(title="", kind="tail", traces=[cdf]),
              Panel(title="scatter", kind="scatter", traces=[line], band=(0.8, 1.25)),
              Panel(title="bars", kind="bars", traces=[line, paper], xcategories=["1", "2", "4"]),
              Panel(title="map", kind="heatmap", heat=heat), Panel(title="map 2", kind="heatmap", heat=heat)]
    return Figure(id="kinds", ref="", title="kinds", panels=panels, cols=3)


def test_the_interactive_figure_is_valid_plotly_on_plotlys_own_grid():
    """The report's figures are plain dicts handed to plotly.js unvalidated (plotly's classes took most of a report's
    drawing time): plotly's own classes must accept every panel kind's dict, and the grid (axes, domains, titles) must
    be make_subplots' own. A property plotly does not know must fail the same check."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from iosched.report.figures import plotly_figure

    fig = _every_panel_kind()
    d = plotly_figure(fig)
    go.Figure(d)                                      # raises ValueError on any invalid property or value
    sp = make_subplots(rows=3, cols=3, subplot_titles=[p.title for p in fig.panels], horizontal_spacing=0.17,
                       vertical_spacing=min(0.16, 110 / (330 * 3 + 60))).to_dict()["layout"]
    for n in ("", "2", "5", "9"):
        for axis in ("xaxis", "yaxis"):
            assert d["layout"][axis + n]["domain"] == sp[axis + n]["domain"]
            assert d["layout"][axis + n]["anchor"] == sp[axis + n]["anchor"]
    assert d["layout"]["annotations"] == sp["annotations"]           # the untitled panel has none, as in plotly
    assert d["layout"]["xaxis5"]["categoryarray"] == ["1", "2", "4"] and d["layout"]["xaxis"]["type"] == "log"
    assert d["layout"]["xaxis6"]["type"] == "category"                # a map's labels are categories, not numbers
    assert {t["xaxis"] for t in d["data"]} == {"x", "x2", "x3", "x4", "x5", "x6", "x7"}
    d["data"][0]["markr"] = {"color": "red"}
    with pytest.raises(ValueError):
        go.Figure(d)


def test_the_report_grid_is_make_subplots_own():
    """The grid is computed as make_subplots computes it (which validates every property: 0.1-0.35 s a figure):
    equal, axes, domains, title annotations and template, for every shape from 1 x 1 to 40 x 3 at the report's
    spacings; a grid one spacing off is not."""
    from plotly.subplots import make_subplots

    from iosched.report.figures import _subplot_layout

    for rows in [*range(1, 13), 40]:
        for cols in (1, 2, 3):
            height_px = 330 * rows + 60
            vertical = min(0.16, 110 / height_px, 0.9 / (rows - 1)) if rows > 1 else 0.1
            titles = [f"t{i}" if i % 4 else "" for i in range(rows * cols - (cols > 1))]
            for horizontal in (0.09, 0.17):
                sp = make_subplots(rows=rows, cols=cols, subplot_titles=titles, horizontal_spacing=horizontal,
                                   vertical_spacing=vertical)
                sp.update_layout(template="plotly_white")
                assert _subplot_layout(rows, cols, horizontal, vertical, titles) == sp.to_dict()["layout"]
    off = _subplot_layout(3, 2, 0.09, 0.1, ["a"] * 6)
    assert off != make_subplots(rows=3, cols=2, subplot_titles=["a"] * 6, horizontal_spacing=0.09,
                                vertical_spacing=0.11).update_layout(template="plotly_white").to_dict()["layout"]


def test_calibration_rows_and_rows_beyond_the_paper_are_shown_and_not_counted():
    """A section's "checks that hold" counts the paper's findings only: a calibration input that holds (it was fitted)
    and a check beyond the paper that holds add nothing, and a failing finding still counts as a miss."""
    from iosched.report.build import Section

    def row(finding: str, holds: bool) -> registry.Check:
        return registry.Check(finding, "x", "1", "1", holds)
    sec = Section(name="e", title="t", kind="paper",
                  checks=[row("calibration", True), row("calibration", False), row("F1", False), row("F2", True),
                          row(f"{registry.BEYOND}: F1", True)])
    assert [c.finding for c in sec.counted] == ["F1", "F2"] and sec.holds == 1
    assert sec.uncounted_text == ("; calibration inputs (not counted): 1 of 2 within their band; beyond the paper "
                                    "(not counted): 1 of 1 hold")
    # Negative control: the same rows all counted would have said 3 of 5.
    assert sum(c.holds for c in sec.checks) == 3 and len(sec.checks) == 5
