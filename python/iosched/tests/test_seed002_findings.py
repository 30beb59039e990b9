"""Seed 002's (K2, RTSS'19) findings that the model reproduces, checked on the real presets.

The findings it does not reproduce (64 KiB random reads and 4 KiB mixed read/write under K2, BFQ's lower write
bandwidth in K4, none's absolute bandwidths, two same-priority RT tasks under 3 ms in K5) are reported by
`python -m iosched.papers.seed002` and in docs/papers.md, not asserted here. To stay fast, the Table II checks run only
the sweep's top target (900 MiB/s), where the random-read background saturates the drive.
"""

import pytest

from iosched.papers import seed002 as s

from .conftest import native_or_skip, on_real_presets

TOP = s.TOP_TARGET_MIB


pytestmark = pytest.mark.usefixtures("real_presets")


def k2_and_none(workload, target=TOP):
    """RT P99.9 and background bandwidth for K2-8, K2-16, K2-32 and none (in that order)."""
    return [s.point(workload, "k2" if b else "none", b, target) for b in (8, 16, 32, None)]


def test_k2_table_ii_4k_random_read_k2_8_cuts_the_tail_tenfold_at_half_the_bandwidth():
    k8, k16, k32, none = k2_and_none(s.WORKLOADS["rr4k"])
    assert none.p999_ms / k8.p999_ms >= 5  # paper: 3.04 / 0.31 ms = 9.8x
    assert 0.3 <= k8.bandwidth_mib / none.bandwidth_mib <= 0.7  # paper: 288 / 557 = 0.52
    assert k8.bandwidth_mib < k16.bandwidth_mib < k32.bandwidth_mib < none.bandwidth_mib  # paper: 288 < 417 < 493 < 557
    assert k8.p999_ms < k16.p999_ms < k32.p999_ms < none.p999_ms  # paper: 0.31 < 0.55 < 0.96 < 3.04
    assert k8.p999_ms == pytest.approx(0.31, rel=0.5)  # the RT read waits behind at most 8 others


def test_k2_trade_off_appears_for_64k_reads_once_the_drive_saturates():
    """Not in the paper's range: the model's drive only saturates on 64 KiB random reads far above 900 MiB/s."""
    k8, k16, k32, none = k2_and_none(s.WORKLOADS["rr64k"], target=None)
    assert k8.bandwidth_mib < k16.bandwidth_mib < k32.bandwidth_mib < none.bandwidth_mib
    assert k8.p999_ms < k16.p999_ms < k32.p999_ms < none.p999_ms
    assert none.p999_ms / k8.p999_ms >= 5.7 / 2  # paper (at its saturation): 5.7x at 0.90 of none's bandwidth


def test_k1_linux_schedulers_alike_on_4k_random_reads():
    pts = {name: s.point(s.WORKLOADS["rr4k"], name, None, TOP) for name in s.LINUX}
    none = pts["none"]
    for name, p in pts.items():
        assert p.bandwidth_mib == pytest.approx(none.bandwidth_mib, rel=0.10), name  # paper: within 2%
        assert 1 / 1.5 <= p.p999_ms / none.p999_ms <= 1.5, name  # paper: 2.87-3.31 ms
    assert none.p999_ms == pytest.approx(3.04, rel=0.5)


def test_k1_random_writes_stay_below_100_us_at_the_999th_percentile_for_every_scheduler():
    for name in s.LINUX:
        p = s.point(s.WORKLOADS["rw4k"], name, None, TOP, runtime_s=2.0)
        assert p.p999_ms < 0.1, name  # paper: 0.01-0.02 ms
        assert p.bandwidth_mib > 0.95 * TOP, name


def test_k4_bfq_adds_about_a_microsecond_to_the_median_write():
    low = min(s.TARGETS_MIB)
    deadline, bfq = (s.point(s.WORKLOADS["rw4k"], name, None, low) for name in ("mq-deadline", "bfq"))
    assert 0.5 <= (bfq.p50_ms - deadline.p50_ms) * 1000 <= 2.0  # paper Fig. 7: ~1 us, 8% of the makespan


@pytest.fixture(scope="module")
def k5_rows():
    native_or_skip()
    with on_real_presets():
        # The targets up to the first overloaded one (K2-16 on this mix saturates between 250 and 300 MiB/s).
        return {check.what: check for check in s.k5(targets=(50, 100, 150, 200, 250, 300))}


def test_k5_a_lower_priority_rt_task_does_not_hurt_the_higher_one(k5_rows):
    row = next(c for w, c in k5_rows.items() if w.startswith("RT1 alone vs beside"))
    assert row.holds, row.simulated


def test_k5_two_rt_tasks_of_different_priority_stay_below_3_ms_until_overload(k5_rows):
    row = next(c for w, c in k5_rows.items() if "(lower priority)" in w)
    assert row.holds, row.simulated
    assert "up to 250 MiB/s" in row.what  # K2-16 on this 80/20 mix saturates between 250 and 300 MiB/s
