"""Seed 000's scheduler findings that the model reproduces (issue 3), checked on the real presets.

The findings the model does not reproduce (BFQ's part of F10, F10 with readers, F12, F15 and parts of F3/F4/F5) are
reported by `python -m iosched.papers.seed000` and in docs/papers.md, not asserted here; F13's default
configuration, which it reproduced before garbage collection ran in steps, is a strict xfail with the reason. The
runs use seed 000's drive state (`seed000.DRIVE_STATE`), and F13's and F14's the tables' own
(`seed000.TABLES_DRIVE_STATE`), as its experiments do.
"""

import pytest

from iosched.simconfig import Job
from iosched.papers import seed000 as s

from .conftest import native_or_skip, on_real_presets


pytestmark = pytest.mark.usefixtures("real_presets")


@pytest.fixture(scope="module")
def one_ssd_curves():
    """F2's runs, shared by the tests that read them: 1, 3 and 10 T-4KiB-apps per scheduler on one SSD."""
    native_or_skip()
    with on_real_presets():
        return s.scaling(1, apps=(1, 3, 10))


def peak(curves, scheduler):
    return max(k for _, k, _, _ in curves[scheduler])


def test_f2_one_ssd_peaks_order_bfq_deadline_kyber_none(one_ssd_curves):
    none, kyber = peak(one_ssd_curves, "none"), peak(one_ssd_curves, "kyber")
    deadline, bfq = peak(one_ssd_curves, "mq-deadline"), peak(one_ssd_curves, "bfq")
    assert kyber == pytest.approx(none, rel=0.02)  # paper: both 785.7 KIOPS
    assert 0.60 < deadline / none < 0.90  # paper: 0.72
    assert 0.25 < bfq / none < 0.50  # paper: 0.40


def test_f3_device_wide_locks_take_most_of_the_cpu_on_one_ssd(one_ssd_curves):
    lock = {sched: max(l for *_, l in one_ssd_curves[sched]) for sched in s.SCHEDULERS}
    assert lock["mq-deadline"] > 0.6 and lock["bfq"] > 0.6  # paper: up to 78%
    assert 0.0 < lock["none"] < 0.05  # its own uncontended lock calls only (paper: ~3%)
    _, _, busy_at_10, _ = one_ssd_curves["bfq"][-1]
    assert busy_at_10 > 9.5, "all ten cores busy, mostly spinning"


def test_f5_eight_ssds_keep_the_order_and_locks_matter_less():
    kiops, share = {}, {}
    for sched in s.SCHEDULERS:
        r = s.simulate([s.t4k(10)], sched, ssds=8, runtime_s=0.1)
        kiops[sched], share[sched] = s.total(r, "read_kiops"), s.lock_share(r)
    assert kiops["bfq"] < kiops["mq-deadline"] < kiops["kyber"] < kiops["none"]
    assert share["mq-deadline"] < 0.5  # paper: 27% with 8 SSDs, 78% with one


def test_f6_alike_at_qd1_and_bfq_worst_once_the_core_saturates():
    p99 = {(sched, qd): s.value(s.simulate([Job("r", s.R, qd, [0])], sched, runtime_s=0.15), "read_p99_us", "r")
           for sched in s.SCHEDULERS for qd in (1, 256)}
    for sched in s.SCHEDULERS:
        assert p99[sched, 1] == pytest.approx(78, rel=0.1)  # paper: 77-79 us for all
    assert max(p99[sched, 256] for sched in s.SCHEDULERS) == p99["bfq", 256]
    assert p99["bfq", 256] > 1.25 * p99["none", 256]  # paper: +43%


def test_f7_many_qd1_processes_bfq_worst_and_lock_schedulers_burn_all_cores():
    p99, busy = {}, {}
    for sched in s.SCHEDULERS:
        r = s.simulate([Job("l", s.R, 1, list(range(10)), numjobs=256)], sched, runtime_s=0.1)
        p99[sched] = max(j["read"]["percentiles"][12][1] for j in r["jobs"])
        busy[sched] = s.cores_busy(r)
    assert p99["bfq"] == max(p99.values())  # paper: BFQ 1,810 us vs ~1,100 for the others
    assert busy["bfq"] > 9.5 and busy["mq-deadline"] > 9.5  # paper: all 10 cores
    assert busy["none"] < 9 and busy["kyber"] < 9  # paper: ~7 of 10


def kyber_mixed(read_lat, write_lat):
    """F13's setup: a 4 KiB random reader and writer, QD 128 each on their own cores, in the tables' drive state
    and past its static SLC region and Kyber's adaptation (the tables' ramp)."""
    jobs = [Job("r", s.R, 128, [0]), Job("w", s.W, 128, [1])]
    return s.simulate(jobs, "kyber", tunables=[("read_lat_nsec", read_lat), ("write_lat_nsec", write_lat)],
                      runtime_s=1.0, ramp_s=s.TABLES_RAMP_S, state=s.TABLES_DRIVE_STATE)


@pytest.mark.parametrize("read_lat, write_lat, throttled", [
    # The defaults; paper: tokens 256 / 93. The model's reads' P90 (~1.8 ms in the tables' drive state) stays under
    # the 2 ms read target, so Kyber never throttles the writes (docs/papers.md: its reader waits one program or copy
    # where the artifact's waits 2.8 ms).
    pytest.param(2 * s.MS, 10 * s.MS, "some writes",
                 marks=pytest.mark.xfail(strict=True, reason="F13 defaults: reads never miss their target")),
    (0, 1000 * s.MS, "write"),  # paper: tokens 256 / 1
    (1000 * s.MS, 0, "read"),  # paper: 1 / 128
    (0, 0, None),  # paper: 256 / 128
])
def test_f13_kyber_throttles_the_domain_with_the_looser_target(read_lat, write_lat, throttled):
    read_tokens, write_tokens = s.kyber_tokens(kyber_mixed(read_lat, write_lat))
    assert read_tokens == (1 if throttled == "read" else 256)
    if throttled == "some writes":
        assert 1 < write_tokens < 128
    else:
        assert write_tokens == (1 if throttled == "write" else 128)


def test_f13_throttling_writes_lets_reads_through():
    untuned = s.value(kyber_mixed(0, 0), "read_kiops", "r")
    reads_first = s.value(kyber_mixed(0, 1000 * s.MS), "read_kiops", "r")
    # paper: 219.9 vs 136.1 KIOPS, 1.62x; the model 204.0 vs 129.5, 1.57x (1.49x, 207.3 vs 139.4, before garbage
    # collection's copies crossed the channel)
    assert reads_first > 1.5 * untuned


def l_app_beside_writer(scheduler, tunables=(), writers=1, state=None, runtime_s=0.5):
    """F10/F14's setup: the L-app (4 KiB random read, QD 1) beside 4 KiB random writers at QD 128; its P99 in ms.
    ``state``: the drive's (Table 3's runs: TABLES_DRIVE_STATE, rested, so past its static SLC region with the
    tables' ramp), else seed 000's."""
    jobs = [Job("l", s.R, 1, [0]), Job("t", s.W, 128, list(range(1, 1 + writers)), numjobs=writers)]
    ramp_s = s.TABLES_RAMP_S if state == s.TABLES_DRIVE_STATE else s.KYBER_SETTLE_S
    r = s.simulate(jobs, scheduler, tunables=tunables, runtime_s=runtime_s, ramp_s=ramp_s, state=state)
    return s.value(r, "read_p99_us", "l") / 1000


def test_f10_kyber_bounds_the_l_apps_latency_beside_writers_where_none_lets_it_explode():
    none, kyber = l_app_beside_writer("none", writers=8), l_app_beside_writer("kyber", writers=8)
    assert none > 10  # ms: the L-app's read waits behind the writers' queued writes at the drive
    assert kyber < none / 3


def test_f14_kyber_with_reads_prioritised_gives_the_lowest_p99():
    # Two of Table 3's cells only: reads first against writes first (R 100 ms, W 0). The F14 row of the full
    # reproduction asks for less (reads first below 0.9x every cell where writes go unthrottled); this pair asks for
    # the artifact's size of the gap, 1.5x. The model gives it since the 980 PRO programs with its cache register
    # while writes back up (2026-12-02): 1.83 against 3.47 ms, 1.9x (the artifact 1.5 against 2.8, 1.8x), where the
    # reader waited one program either way before (1.8 against 2.1 ms, 1.15x; a strict xfail then). Before the
    # rested start (runs measured from 6 s, inside what is now the static SLC region's phase) the pair passed on a
    # 0.5 s window. 2 s, not 0.5: a P99 from ~450 reads lands on either side of a step in the reader's waits (before
    # cache programming: 3.3 ms on 0.5 s against the full run's 2.13 ms); ~1,800 reads give what the 10 s cells
    # give (the quick reproduction's Table 3 on 2026-12-02: 3.47 and 1.83 ms).
    prioritised = l_app_beside_writer("kyber", [("read_lat_nsec", 500 * s.US), ("write_lat_nsec", 100 * s.MS)],
                                      state=s.TABLES_DRIVE_STATE, runtime_s=2)
    writes_first = l_app_beside_writer("kyber", [("read_lat_nsec", 100 * s.MS), ("write_lat_nsec", 0)],
                                       state=s.TABLES_DRIVE_STATE, runtime_s=2)
    assert prioritised < 3.0  # ms; paper: 1.4-1.9
    assert writes_first > 1.5 * prioritised  # paper: 2.8
