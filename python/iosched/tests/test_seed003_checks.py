"""Seed 003's baseline table scored point by point: the slides' own numbers pass, made-up ones fail (the negative
controls), and the single-workload rows are calibration, never counted."""

import pytest

from iosched.papers import scoring
from iosched.papers import seed003 as s


def paper_values(scale: float = 1.0) -> scoring.Values:
    """The slides' table as if it were measured, the mixed rows scaled."""
    return s.baseline_values({w: tuple(None if v is None else v * (1.0 if w in s.CALIBRATION else scale)
                                       for v in vals) for w, vals in s.BASELINE.items()})


def test_the_slides_own_numbers_score_every_mixed_cell_within_the_band():
    scored = s.BASELINE_POINTS.score_values(paper_values())
    counted = [p for p in scored if p.counted]
    # R1-W1, R1-W256, R256-W1, R256-W256: four numbers each.
    assert len(counted) == 16 and all(p.holds for p in counted)
    assert scoring.shares(scored)[scoring.ALL].text() == "16 of 16 (100%)"


@pytest.mark.parametrize("scale", [1.3, 0.75])
def test_made_up_numbers_outside_the_band_fail_every_mixed_cell(scale):
    # 1.3 x and 0.75 x the slides' numbers: each ratio is outside [0.8, 1.25].
    scored = s.BASELINE_POINTS.score_values(paper_values(scale))
    assert not any(p.holds for p in scored if p.counted)
    assert not all(c.holds for c in scoring.share_checks(scored))


def test_one_cell_off_is_one_miss():
    # R256-W256's write KIOPS at 93.1 x 0.5: 15 of 16 hold, under the 85% share? 15/16 = 94% still passes the share,
    # and the point itself is a miss.
    values = paper_values()
    values[scoring.Key(s.BASELINE_TABLE, "R256-W256", "", "write_kiops")] = 93.1 * 0.5
    scored = s.BASELINE_POINTS.score_values(values)
    misses = [p.point.label for p in scored if p.counted and not p.holds]
    assert misses == ["baseline-table R256-W256 (write_kiops)"]
    assert all(c.holds for c in scoring.share_checks(scored))


def test_single_workload_rows_are_calibration_and_not_counted():
    scored = s.BASELINE_POINTS.score_values(paper_values())
    calib = {p.point.series for p in scored if p.role == scoring.CALIBRATION}
    assert calib == set(s.CALIBRATION) and not any(p.counted for p in scored if p.point.series in calib)


def test_one_panel_has_one_share_row():
    rows = scoring.share_checks(s.BASELINE_POINTS.score_values(paper_values()))
    assert [r.what.split(":")[0] for r in rows] == ["baseline table"]
