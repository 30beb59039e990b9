"""The presets meet their calibration inputs (../shared/reference/targets.md) in the simulator."""

import pytest

from iosched import presets
from iosched.papers import calibration_targets as calibration

from .conftest import REPO, native_or_skip


@pytest.fixture(autouse=True)
def real_presets(monkeypatch):
    monkeypatch.setenv("IOSCHED_PRESETS", str(REPO / "presets"))
    presets._cache.clear()


@pytest.mark.parametrize("target", calibration.TARGETS, ids=lambda t: f"{t.device}:{t.name}")
def test_preset_meets_its_calibration_input(target):
    native_or_skip()
    value = calibration.measure(target)
    assert value == pytest.approx(target.paper_value, rel=target.tolerance), (
        f"{target.name} ({target.source}): paper {target.paper_value}, simulated {value:.2f}"
    )


def test_each_drive_state_is_the_one_its_calibration_targets_measure():
    from iosched.papers import seed000, seed003

    # Seed 000's: the 64 KiB writers (the state's own input), the 8 KiB QD 1 read (the drive's), the 64 KiB reader's
    # CPU and the CPU of 256 QD-1 processes on one core (the host's), each measured in that state. Seed 003's raw
    # grids': the one grid cell's writer the state is fitted to.
    states = [dict(t.device_options) for t in calibration.TARGETS if t.device_options]
    assert states == [seed000.DRIVE_STATE] * 4 + [seed003.GRID_DRIVE_STATE]
    grid = next(t for t in calibration.TARGETS if t.device_options and dict(t.device_options) == seed003.GRID_DRIVE_STATE)
    assert grid.paper_value == seed003.GRID_STATE_INPUT_KIOPS
