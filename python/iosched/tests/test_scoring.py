"""Point-by-point scoring (papers.scoring): the ±25% band at its edges, missing points, roles that are not counted,
shares per figure, the share rows of the checks table, the shipped reference data and the fidelity picture."""

import pytest

from iosched.papers import scoring
from iosched.papers.scoring import (ALL, CALIBRATION, CONSTRUCTION, FINDING, NOT_SIMULATED, Key, RefPoint, Scored,
                                    score, shares, within)


def point(figure="fig-7a", series="bfq", x="10", y=100.0, x_name="numjobs", label="", plotted="yes",
          quantity="read_kiops"):
    return RefPoint(figure, series, x_name, x, quantity, y, "KIOPS", label, plotted, "src")


@pytest.mark.parametrize("ratio, holds", [(0.79, False), (0.8, True), (0.81, True), (1.0, True), (1.25, True),
                                          (1.26, False), (None, False)])
def test_the_band_is_0_8_to_1_25_inclusive(ratio, holds):
    assert within(ratio) is holds


@pytest.mark.parametrize("sim, holds", [(79.0, False), (81.0, True), (124.0, True), (126.0, False)])
def test_a_point_holds_by_its_ratio(sim, holds):
    p = point()
    (s,) = score([p], {p.key: sim})
    assert s.ratio == pytest.approx(sim / 100) and s.holds is holds and s.counted and not s.missing


def test_a_missing_point_is_reported_and_counts_as_a_miss():
    a, b = point(x="1"), point(x="2")
    scored = score([a, b], {a.key: 100.0})
    assert [s.missing for s in scored] == [False, True]
    assert scored[1].sim is None and scored[1].ratio is None and not scored[1].holds
    sh = shares(scored)
    assert (sh[ALL].held, sh[ALL].total, sh[ALL].missing) == (1, 2, 1)
    assert sh["fig-7a"].text() == "1 of 2 (50%), 1 missing"


def test_unplotted_rows_are_not_scored():
    assert score([point(plotted="no(beyond x-axis)")], {}) == []


def test_a_measured_x_is_scored_too():
    p = point("fig-1b", "4p", x="774.0", y=330.0, x_name="read_kiops", label="qd=64", quantity="read_lat_mean")
    assert p.at == "qd=64" and p.x_key == Key("fig-1b", "4p", "qd=64", "read_kiops")
    good, = score([p], {p.key: 330.0, p.x_key: 780.0})
    bad_x, = score([p], {p.key: 330.0, p.x_key: 500.0})
    no_x, = score([p], {p.key: 330.0})
    assert good.holds and not bad_x.holds and bad_x.ratio == pytest.approx(1.0) and no_x.missing


def test_roles_other_than_finding_are_shown_and_not_counted():
    pts = [point(series=s) for s in ("bfq", "spdk", "none", "kyber")]
    roles = {"bfq": (FINDING, ""), "spdk": (NOT_SIMULATED, "no bypass"), "none": (CALIBRATION, "fitted"),
             "kyber": (CONSTRUCTION, "1 by definition")}
    scored = score(pts, {p.key: 100.0 for p in pts}, lambda p: roles[p.series])
    by = {s.point.series: s for s in scored}
    assert by["spdk"].sim is None and not by["spdk"].counted and not by["spdk"].missing
    assert by["none"].holds and not by["none"].counted          # calibration: its ratio is shown, never counted
    assert by["kyber"].sim is None and by["kyber"].note == "1 by definition"
    assert shares(scored)[ALL].total == 1
    md = scoring.points_markdown(scored)
    assert "Calibration inputs" in md and "fig-7a none @ 10 (read_kiops)" in md
    assert "1 point(s) not simulated, not counted: no bypass." in md


def test_shares_per_figure_in_paper_order_and_the_share_rows():
    pts = [point("table-2", x="a"), point("fig-10", x="1"), point("fig-2", x="1"), point("fig-4a", x="1")]
    vals = {pts[0].key: 100.0, pts[1].key: 100.0, pts[2].key: 50.0, pts[3].key: 100.0}
    scored = score(pts, vals)
    assert list(shares(scored)) == ["fig-2", "fig-4a", "fig-10", "table-2", ALL]
    rows = {c.ref: c for c in scoring.share_checks(scored)}
    assert rows["Fig. 2"].simulated == "0 of 1 (0%)" and not rows["Fig. 2"].holds
    assert rows["Table 2"].holds and rows["all"].sim_value == pytest.approx(0.75) and not rows["all"].holds
    many = score([point(x=str(i)) for i in range(100)], {point(x=str(i)).key: 100.0 if i < 85 else 1.0
                                                         for i in range(100)})
    assert scoring.share_checks(many)[-1].holds          # 85 of 100: the target
    fewer = score([point(x=str(i)) for i in range(100)], {point(x=str(i)).key: 100.0 if i < 84 else 1.0
                                                          for i in range(100)})
    assert not scoring.share_checks(fewer)[-1].holds     # 84 of 100


def test_the_shipped_icpe24_data_reads_and_covers_every_figure():
    pts = scoring.load_reference(scoring.DATA / "icpe24" / "figure_points.csv")
    assert len(pts) == 1172 and sum(p.is_plotted for p in pts) == 1080
    assert {p.figure for p in pts if p.is_plotted} >= {"fig-1a", "fig-7a", "fig-11d", "fig-12b", "table-2",
                                                        "table-3", "table-4"}
    derived = scoring.load_reference(scoring.DATA / "icpe24" / "derived_points.csv")
    assert derived and not any(p.is_plotted for p in derived)
    for name in ("LICENSE", "README.md"):
        assert (scoring.DATA / "icpe24" / name).is_file()
    assert "MIT License" in (scoring.DATA / "icpe24" / "LICENSE").read_text()
    vals = scoring.reference_values(pts)
    assert vals[Key("fig-10", "bfq", "10", "read_miops")] == pytest.approx(1.2601, abs=1e-3)
    assert vals[Key("fig-1b", "4p", "qd=64", "read_kiops")] == pytest.approx(780.8086)


def test_the_fidelity_figure_colours_by_figure_and_draws_the_band():
    pts = [point("fig-7a", x="1"), point("fig-7b", x="1", quantity="cpu_cores"), point("fig-10", x="1"),
           point("fig-8a", x="1", quantity="lock_cycles_pct"), point("fig-1b", series="1p")]
    vals = {pts[0].key: 90.0, pts[1].key: 120.0, pts[2].key: 300.0, pts[3].key: 0.0, pts[4].key: 100.0}
    scored = score(pts, vals, lambda p: (CALIBRATION, "") if p.series == "1p" else (FINDING, ""))
    fig = scoring.fidelity_figure(scored, "f", "t")
    (panel,) = fig.panels
    assert panel.band == scoring.BAND and panel.xlog and panel.ylog
    names = [t.name for t in panel.traces]
    assert names == ["Fig. 7", "Fig. 10", "calibration (not counted)"]   # 7a and 7b share Fig. 7's colour
    assert panel.traces[0].x == [100.0, 100.0] and panel.traces[0].y == [90.0, 120.0]
    assert "1 counted point(s) with a zero or missing simulated value are not drawn" in fig.caption
    assert "2 of 4 (50%)" in fig.caption


def test_the_fidelity_figure_renders_statically_and_interactively(tmp_path):
    from iosched.report.figures import render_plotly, render_static

    pts = [point(x=str(i)) for i in range(5)]
    scored = score(pts, {p.key: 60.0 + 20 * i for i, p in enumerate(pts)})
    fig = scoring.fidelity_figure(scored, "fidelity-test", "test")
    assert all(p.stat().st_size > 1000 for p in render_static(fig, tmp_path))
    html = render_plotly(fig)
    assert "sim = paper" in html and "tonexty" in html
