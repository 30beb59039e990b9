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


# ---------------------------------------------------------------- Kyber's target grids (the kyber-config artifact)

def grid_values(scale: float = 1.0, tokens: tuple[float, float] = (1.0, 0.0)) -> scoring.Values:
    """The artifact's own grids as if measured: heat-map values scaled, depths x tokens[0] + tokens[1]."""
    out = {}
    for k, v in scoring.reference_values(s.grid_reference()).items():
        out[k] = v * tokens[0] + tokens[1] if k.quantity in s.TOKEN_QUANTITIES else v * scale
    return out


def test_a_cell_holds_within_its_repetitions_spread_where_that_is_wider_than_the_band():
    # R1-W1, R 50 µs, W 20 µs: read 5.912 ± 3.462 KIOPS over 5 repetitions, SD 58.6% of the mean, so the cell holds
    # from 1 - 0.586 = 0.414x to 1.586x; a cell of 2.1 ± 0.0 keeps [0.8, 1.25].
    cell = next(p for p in s.grid_reference() if p.figure == "grid-R1-W1" and p.series == "R=50us"
                and p.x_value == "20us" and p.y_name == "read_kiops")
    lo, hi = scoring.band_with_spread(cell)
    assert (round(lo, 3), round(hi, 3)) == (0.414, 1.586)
    flat = scoring.RefPoint("f", "s", "x", "1", "q", 2.1, "KIOPS", "", "yes", "", 0.0)
    assert scoring.band_with_spread(flat) == scoring.BAND
    values = grid_values()
    key = cell.key
    for sim, holds in ((5.912 * 0.45, True), (5.912 * 0.40, False), (5.912 * 1.55, True), (5.912 * 1.6, False)):
        values[key] = sim
        got = next(p for p in s.GRID_POINTS.score_values(values) if p.point.key == key)
        assert got.holds is holds, sim


def test_the_artifacts_own_grids_hold_every_cell_and_every_check():
    scored = s.GRID_POINTS.score_values(grid_values())
    counted = [p for p in scored if p.counted]
    # 4 quantities x (72 + 90 + 72 + 90) cells, less the drive state's input; the depths are not plotted, their own
    # check scores them.
    assert len(counted) == 4 * 324 - 1 and all(p.holds for p in counted)
    checks = s.grid_checks_from(grid_values(), s.grid_reference_values())
    assert [c.finding for c in checks] == ["priority", "sensitivity", "tokens"] and len(checks[0].clauses) == 4
    assert all(c.holds for c in checks), [c.what for c in checks if not c.holds]
    # The raw grids' depths only: 2 x (72 + 90 + 72 + 90); the file systems' 48 are seed003-fs's row.
    assert checks[-1].paper.startswith("648 depths")


def test_the_grids_drive_state_input_is_one_cell_shown_apart_as_calibration():
    # R1-W256 at R 100 ms, W 1 ms: its writer is the state's input (131.34 K); the writes-first corner beside it
    # (W 20 µs), which the slides' messages compare, stays a finding.
    scored = s.GRID_POINTS.score_values(grid_values())
    calibration = [p for p in scored if p.point.figure.startswith("grid-") and p.role == scoring.CALIBRATION]
    assert [(p.point.figure, p.point.series, p.point.x_value, p.point.y_name) for p in calibration] == [
        ("grid-R1-W256", "R=100ms", "1ms", "write_kiops")]
    assert calibration[0].point.y_value == s.GRID_STATE_INPUT_KIOPS and not calibration[0].counted
    corner = next(p for p in scored if p.point.key == s.grid_key("R1-W256", *s.WRITES_FIRST, "write_kiops"))
    assert corner.role == scoring.FINDING and corner.counted


def test_made_up_grids_three_times_the_artifacts_fail_every_cell():
    # No cell's repetitions spread more than 67% of its mean (its band: 0.33x to 1.67x at the widest), so 3x and
    # 1/4x are outside every cell's band.
    for scale in (3.0, 0.25):
        scored = s.GRID_POINTS.score_values(grid_values(scale))
        assert not any(p.holds for p in scored if p.counted)
        assert not any(c.holds for c in scoring.share_checks(scored))


def test_grids_where_the_targets_change_nothing_fail_every_message():
    # Every cell of a quantity at that quantity's mean over its grid: no corner differs from another.
    ref = grid_values()
    flat = {}
    for k in ref:
        same = [v for kk, v in ref.items() if kk.figure == k.figure and kk.quantity == k.quantity]
        flat[k] = sum(same) / len(same)
    checks = s.grid_checks_from(flat, s.grid_reference_values())
    messages = [c for c in checks if c.finding != "tokens"]
    assert len(messages) == 2 and not any(c.holds for c in messages)
    # every clause of the priority row fails, not just one
    assert not any(c.holds for c in messages[0].clauses) and len(messages[0].clauses) == 4


def test_depths_off_by_a_quarter_and_more_than_a_token_fail_the_depth_check():
    # 1.3 x + 2 tokens: a depth of 1 becomes 3.3 (2.3 tokens off), one of 128 becomes 168.4 (1.32x).
    checks = s.grid_checks_from(grid_values(tokens=(1.3, 2.0)), s.grid_reference_values())
    tokens = next(c for c in checks if c.finding == "tokens")
    assert not tokens.holds and tokens.simulated.startswith("0 of ")
    # Within one token passes even where ±25% would not: 1.0 -> 1.9.
    assert s.tokens_hold(1.9, 1.0) and not s.tokens_hold(2.1, 1.0) and s.tokens_hold(150.0, 128.0)


def _fake_grid(run):
    """A made-up run for any grid cell: enough fields for every check, table, figure and point to read."""
    jobs = []
    for j in run.jobs:
        name = j.config["name"]
        side = {"ios": 50_000, "bytes": 0, "percentiles": [[99.0, 2_000_000.0]]}
        idle = {"ios": 0, "bytes": 0, "percentiles": [[99.0, 0.0]]}
        jobs.append({"name": name, "window_ns": 10**9, "read": side if name == "r" else idle,
                     "write": side if name == "w" else idle})
    series = [{"source": "scheduler", "subject": "/dev/nvme0n1", "t_ns": 2 * 10**9, "metric": m, "value": v}
              for m, v in (("read_tokens", 256.0), ("write_tokens", 128.0))]
    return {"jobs": jobs, "window_start_ns": 10**9, "timeseries": series}


def test_the_grid_experiment_declares_every_run_its_checks_figures_tables_and_points_read(tmp_path):
    from iosched.papers import registry

    from .test_registry import FakeResults

    exp = registry.get("seed003-kyber")
    assert len(exp.runs(quick=True)) == 324
    res = FakeResults(tmp_path, exp, _fake_grid)
    assert len(exp.checks(res)) == 3  # priority (4 clauses), sensitivity, tokens
    assert len(exp.figures(res)) == 4 and all(len(f.panels) == 12 for f in exp.figures(res))
    assert len(exp.tables(res)[0].rows) == 8
    scored = exp.points.score(res)
    assert not any(p.missing for p in scored)


# ---------------------------------------------------------------- the file systems (seed003-fs)

def test_the_artifacts_own_file_system_cells_hold_every_cell_and_every_claim():
    scored = s.FS_POINTS.score_values(grid_values())
    counted = [p for p in scored if p.counted]
    # 3 file systems x 2 workloads x 4 target pairs x 4 quantities; the None runs are not plotted (shown, not scored).
    assert len(counted) == 96 and all(p.holds for p in counted)
    checks = s.fs_checks_from(grid_values(), s.grid_reference_values())
    assert [c.finding for c in checks] == ["file systems"] * 4 + ["tokens"]
    assert all(c.holds for c in checks), [c.what for c in checks if not c.holds]
    assert checks[-1].paper.startswith("48 depths")


def test_made_up_file_system_cells_three_times_the_artifacts_fail_every_cell():
    # The widest spread: ext4 R256-W256 at R 100 ms / W 20 µs, read 93.2 ± 59.0 KIOPS (63%): 0.37x to 1.63x.
    for scale in (3.0, 0.25):
        scored = s.FS_POINTS.score_values(grid_values(scale))
        assert not any(p.holds for p in scored if p.counted)


def test_file_systems_no_better_than_the_raw_device_fail_claim_3():
    # Every file system's R1-W256 read P99 set to the raw device's at the same pair (ms -> µs): ratio 1.0x.
    values = grid_values()
    for fs in s.FILESYSTEMS:
        for rw in s.FS_PAIRS:
            raw = values[s.grid_key("R1-W256", *rw, "read_clat_p99")]
            values[s.grid_key("R1-W256", *rw, "read_clat_p99")._replace(figure=f"fs-{fs}-R1-W256")] = raw * 1e3
    checks = s.fs_checks_from(values, s.grid_reference_values())
    assert [c.holds for c in checks[:4]] == [False, True, True, True]


def test_file_systems_where_the_targets_change_nothing_fail_claims_4_to_6():
    ref = grid_values()
    flat = dict(ref)
    for k in ref:
        if k.figure.startswith("fs-") and k.series != "none":
            same = [v for kk, v in ref.items() if kk.figure == k.figure and kk.quantity == k.quantity
                    and kk.series != "none"]
            flat[k] = sum(same) / len(same)
    checks = s.fs_checks_from(flat, s.grid_reference_values())
    assert [c.holds for c in checks[:4]] == [True, False, False, False]


def test_an_f2fs_that_behaves_like_ext4_fails_claim_6():
    # ext4 R256-W256: reads first 231.0 vs writes first 93.2 read KIOPS = 2.48x, more than "slightly" (<= 1.25x).
    values = grid_values()
    for k, v in list(values.items()):
        if k.figure == "fs-ext4-R256-W256":
            values[k._replace(figure="fs-f2fs-R256-W256")] = v
    checks = s.fs_checks_from(values, s.grid_reference_values())
    assert not checks[3].holds and checks[3].simulated == "read 2.48x (231.0 vs 93.2 K), write 0.51x"


def test_the_file_system_experiment_declares_every_run_its_checks_figures_and_points_read(tmp_path):
    from iosched.papers import registry

    from .test_registry import FakeResults

    exp = registry.get("seed003-fs")
    # 3 file systems x 2 workloads x 4 pairs, 5 None runs, the raw device's 4 R1-W256 corners.
    assert len(exp.runs(quick=True)) == 24 + 5 + 4
    res = FakeResults(tmp_path, exp, _fake_grid)
    assert len(exp.checks(res)) == 5
    (fig,) = exp.figures(res)
    assert len(fig.panels) == 4 and all(len(p.traces) == 6 for p in fig.panels)
    scored = exp.points.score(res)
    assert not any(p.missing for p in scored)


@pytest.mark.usefixtures("real_presets")
def test_the_file_system_runs_read_in_slc_beside_the_writer(tmp_path):
    """The file-system runs' drive holds a 50 GiB file after a secure erase (FS_DRIVE_STATE: 95% never written),
    which fits the 980 PRO's SLC cache (6 + 108 GB), so it runs in SLC mode: each unit programs a 16 KiB page in
    196 us, and the QD-1 reader beside the QD-256 writer waits at most about that for a busy unit. The artifact's
    reader there (ext4, None): P99 264-938 µs over its 5 runs, median 42-47 µs. Negative control: the same file on a
    drive whose whole space holds data (trimmed_fraction 0) programs TLC units of 48 KiB in 1.73 ms, and the
    reader's P99 is about one of them."""
    import iosched

    def reader_p99_us(trimmed_fraction: float, out: str) -> float:
        spec = s._fs_spec("ext4", "R1-W256", "none")
        spec.update(duration="1s", ramp="200ms")
        spec["devices"] = [dict(spec["devices"][0], trimmed_fraction=trimmed_fraction)]
        df = iosched.run(spec, out=tmp_path / out, progress=False, report=False).df
        return float(df[df["job"] == "r"]["read_clat_p99_ns"].iloc[0]) / 1e3

    assert s.FS_DRIVE_STATE == {"condition": "fresh", "trimmed_fraction": 0.95}
    slc = reader_p99_us(s.FS_DRIVE_STATE["trimmed_fraction"], "slc")
    tlc = reader_p99_us(0.0, "tlc")
    assert slc < 400, f"SLC mode: P99 {slc:.0f} us"
    assert tlc > 1500, f"TLC: P99 {tlc:.0f} us"
