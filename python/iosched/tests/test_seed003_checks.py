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


# ---------------------------------------------------------------- the configuration plots' messages

def _fake_config(paper_like: bool):
    """Made-up seed003-kyber runs: with ``paper_like`` the slides' messages hold (the favoured class gets the lower
    latency and the higher throughput, reads vary more than writes over the grid); without, every configuration gives
    the same numbers."""
    def make(run):
        rl = run.sweep_point["scheduler.read_lat_nsec"]
        wl = run.sweep_point["scheduler.write_lat_nsec"]
        reads_first = paper_like and rl < wl
        writes_first = paper_like and wl < rl
        read_kiops = 200.0 if reads_first else 20.0 if writes_first else 100.0
        write_kiops = 60.0 if reads_first else 80.0 if writes_first else 70.0
        p99_us = 2_000.0 if reads_first else 15_000.0 if writes_first else 8_000.0
        jobs = []
        for j in run.jobs:
            kiops = read_kiops if j.config["name"] == "r" else write_kiops
            side = {"ios": int(kiops * 1e3), "bytes": 0, "percentiles": [[99.0, p99_us * 1e3]]}
            idle = {"ios": 0, "bytes": 0, "percentiles": [[99.0, 0.0]]}
            jobs.append({"name": j.config["name"], "window_ns": 10**9,
                         "read": side if j.config["name"] == "r" else idle,
                         "write": side if j.config["name"] == "w" else idle})
        return {"jobs": jobs}
    return make


def test_config_checks_hold_for_paper_like_runs_and_fail_when_the_targets_change_nothing(tmp_path):
    from iosched.papers import registry

    from .test_registry import FakeResults

    exp = registry.get("seed003-kyber")
    like = exp.checks(FakeResults(tmp_path, exp, _fake_config(True)))
    assert like and all(c.holds for c in like), [c.what for c in like if not c.holds]
    flat = exp.checks(FakeResults(tmp_path, exp, _fake_config(False)))
    assert not any(c.holds for c in flat), [c.what for c in flat if c.holds]
