"""Seed 001's findings that the model reproduces, checked on the real presets with shorter runs than
`python -m iosched.papers.seed001` uses (the shapes hold from a few Kyber-fairness periods on).

Not asserted here, because the model does not reproduce them (see docs/papers.md): the size of Kyber-fairness's gain
over BFQ for random writes in KF2, BFQ's sharp fall with more cgroups in KF3 (in the model BFQ serves one queue at a
time whatever the number of cgroups, and stays flat), and Kyber-fairness's FI above BFQ's in KF4 (both share within
a few per cent of exactly; which is higher depends on the run length).
"""

import pytest

from iosched.papers import seed001 as s


# randrw (KF1) as seed001.QUICK_TIMES: BFQ's share only settles after its first second (see there).
SHORT = {"randread": (0.4, 0.3), "randwrite": (0.4, 0.4), "randrw": (1.0, 0.5), "read": (0.8, 0.8),
         "write": (0.8, 0.8), "trace": (0.3, 0.2)}


pytestmark = pytest.mark.usefixtures("real_presets")


def test_fairness_index_is_one_for_shares_in_proportion_to_weight():
    assert s.fairness_index([10, 25, 50, 100], s.WEIGHTS) == pytest.approx(1.0)
    assert s.fairness_index([1, 1, 1, 1], s.WEIGHTS) == pytest.approx(0.597, abs=0.001)


def test_kf1_none_ignores_weights_and_bfqs_heaviest_cgroup_gets_less_than_any_under_none():
    runs = s.kf1_runs(SHORT)
    none, bfq = runs["none"], runs["bfq"]
    assert max(abs(m / (none.total / 4) - 1) for m in none.mbs) < 0.1, none.mbs
    assert bfq.mbs[3] < min(none.mbs), (bfq.mbs, none.mbs)
    assert bfq.mbs == sorted(bfq.mbs), "BFQ serves the heavier cgroups more"
    # The paper's 0.38x of none, within the module's 20%, and shares by weight.
    assert s.ratio_ok(bfq.total / none.total, 0.38), (bfq.total, none.total)
    assert bfq.fi > 0.95, bfq.mbs


def test_kf2_kyber_fairness_keeps_nones_throughput_and_shares_by_weight():
    runs = s.kf2_runs(("randread", "randwrite", "write"), SHORT)
    for rw, r in runs.items():
        none, kf = r["none"], r["kyber-fairness"]
        assert kf.total > 0.9 * none.total, (rw, kf.total, none.total)
        assert kf.fi > 0.98 and none.fi < 0.61, (rw, kf.mbs, none.mbs)
    # Sequential writes: no gain over BFQ (random reads: the next test).
    assert runs["write"]["kyber-fairness"].total < 1.3 * runs["write"]["bfq"].total


# At the edge of the paper's +-20% (3.216x): 3.19x once dispatch calls raced and blk-mq restarted only marked queues,
# 3.2161x (just outside) once fio took one event per reap, 3.210x since unpinned processes woken onto busy cores wait
# in a CFS run queue (sim/runqueue.rs `woken_core`), 3.2185x (just outside) once processes that never sleep shared a
# core in CFS slices (`yields_core`), 3.2158x since a woken process that lags the runner preempts it
# (`preempt_on_wakeup`). See docs/papers.md.
def test_kf2_random_reads_gain_the_papers_2_68x_over_bfq():
    runs = s.kf2_runs(("randread",), SHORT)
    # Random reads: the paper's 2.68x over BFQ, within the module's 20%.
    gain = runs["randread"]["kyber-fairness"].total / runs["randread"]["bfq"].total
    assert s.ratio_ok(gain, 2.68), gain


def test_kf3_kyber_fairness_stays_near_none_from_one_to_sixteen_cgroups():
    # Not asserted: BFQ's sharp fall (the model's BFQ stays flat, see docs/papers.md).
    runs = s.kf3_runs((1, 4, 16), {"randread": (0.3, 0.5)})
    for (n, kf), (_, none) in zip(runs["kyber-fairness"], runs["none"]):
        assert kf.total > 0.9 * none.total, (n, kf.total, none.total)
        assert kf.fi > 0.98, (n, kf.mbs)


def test_kf4_each_lun_in_turn_heaviest_weights_rotate_with_it():
    assert [g.weight for g in s.lun_cgroups(3)] == [100, 250, 500, 1000]
    assert [g.weight for g in s.lun_cgroups(0)] == [1000, 100, 250, 500]
    assert [g.lun for g in s.lun_cgroups(1)] == [0, 1, 2, 3]


@pytest.fixture(scope="module")
def kf4_runs():
    """KF4's replays, shared by the two tests that read them."""
    return s.kf4_runs(times=SHORT)


def test_kf4_replaying_four_luns_kyber_fairness_shares_by_weight_keeps_nones_throughput_beats_bfq_by_up_to_a_third(
        kf4_runs):
    runs = kf4_runs
    none, kf, bfq = (runs[x] for x in ("none", "kyber-fairness", "bfq"))
    for h in s.LUNS:
        assert kf[h].fi > 0.95, (h, kf[h].mbs)
        assert kf[h].total > 0.9 * none[h].total, (h, kf[h].total, none[h].total)
        # The heaviest LUN gets the most under Kyber-fairness; none ignores the weights.
        assert max(range(4), key=lambda i: kf[h].mbs[i]) == h, (h, kf[h].mbs)
        assert none[h].fi < 0.8, (h, none[h].mbs)
    # Up to the paper's 1.33x over BFQ (within the module's 20%), the gap narrowest with LUN3 highest.
    gains = {h: kf[h].total / bfq[h].total for h in s.LUNS}
    assert s.ratio_ok(max(gains.values()), 1.33), gains
    assert gains[3] < min(gains[h] for h in (0, 1, 2)), gains


# Held again since BFQ's queue runs after a completion follow the kernel (bfq_schedule_dispatch only with nothing in
# the driver): with LUN3 heaviest Kyber-fairness 2,331 vs BFQ 2,062 MB/s (BFQ had edged it, 2,457 vs 2,324).
def test_kf4_kyber_fairness_beats_bfq_whichever_lun_is_heaviest(kf4_runs):
    kf, bfq = kf4_runs["kyber-fairness"], kf4_runs["bfq"]
    for h in s.LUNS:
        assert kf[h].total > bfq[h].total, (h, kf[h].total, bfq[h].total)
