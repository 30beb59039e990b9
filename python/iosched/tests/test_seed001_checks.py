"""Seed 001's checks fed made-up measurements: numbers shaped like the paper's hold every row, numbers that
contradict it fail the rows they contradict (the negative controls). No simulation."""

from iosched.papers import seed001 as s


def run(total: float, weighted: bool, weights=s.WEIGHTS) -> s.Run:
    """Cgroup throughputs (MB/s) summing to ``total``: in proportion to the weights, or equal."""
    shares = [w / sum(weights) for w in weights] if weighted else [1 / len(weights)] * len(weights)
    mbs = [total * x for x in shares]
    return s.Run(mbs, s.fairness_index(mbs, weights))


def kf2_runs(kf_over_none: float, gain: dict[str, float]) -> dict[str, dict[str, s.Run]]:
    out = {}
    for rw, _, _ in s.KF2_WORKLOADS:
        kf = run(1000 * kf_over_none, True)
        out[rw] = {"none": run(1000, False), "kyber-fairness": kf, "bfq": run(kf.total / gain[rw], True)}
    return out


def test_kf1_paper_like_holds_and_bfq_like_none_fails():
    # Fig. 1: BFQ at 0.38x none, by weight; none equal shares.
    like = s.kf1({"none": run(1400, False), "bfq": run(0.38 * 1400, True)})
    assert all(c.holds for c in like)
    # BFQ as fast as none and ignoring weights: the ratio (1.0 vs 0.38), the FI and "below every cgroup" fail.
    unlike = s.kf1({"none": run(1400, False), "bfq": run(1400, False)})
    assert [c.holds for c in unlike] == [False, False, True, False]
    # none sharing by weight fails "none ignores weights".
    assert not s.kf1({"none": run(1400, True), "bfq": run(0.38 * 1400, True)})[2].holds


def test_kf2_paper_like_holds_and_made_up_fails():
    # Fig. 4: Kyber-fairness 0.95x none; 2.68x / 3.61x BFQ on random reads / writes, 1.1x on sequential ones.
    paper = {"randread": 2.68, "randwrite": 3.61, "read": 1.1, "write": 1.1}
    assert all(c.holds for c in s.kf2(kf2_runs(0.95, paper)))
    # Kyber-fairness at half of none, gains of 2x where the paper has 2.68x / 3.61x (0.75x, 0.55x) and 1.5x where it
    # has a small gain: every throughput row fails; the FI rows (weights kept) still hold.
    made_up = s.kf2(kf2_runs(0.5, {"randread": 2.0, "randwrite": 2.0, "read": 1.5, "write": 1.5}))
    assert [c.holds for c in made_up if "FI" not in c.what] == [False] * 8
    assert all(c.holds for c in made_up if "FI" in c.what)


def test_kf3_paper_like_holds_and_flat_bfq_fails():
    counts = s.KF3_CGROUPS

    def runs(bfq_at_16: float, kf_over_none: float):
        none = [(n, run(500, False, (100,) * 4)) for n in counts]
        kf = [(n, run(500 * kf_over_none, False, (100,) * 4)) for n in counts]
        # BFQ falls linearly from 150 MB/s at one cgroup to bfq_at_16 at 16.
        bfq = [(n, run(150 + (bfq_at_16 - 150) * (n - 1) / 15, False, (100,) * 4)) for n in counts]
        return {"none": none, "kyber-fairness": kf, "bfq": bfq}
    assert all(c.holds for c in s.kf3(runs(bfq_at_16=40, kf_over_none=0.95)))
    # The model's shape: BFQ flat (150 -> 149 MB/s) fails "falls sharply"; Kyber-fairness at 0.8x none fails too.
    assert [c.holds for c in s.kf3(runs(bfq_at_16=149, kf_over_none=0.8))] == [False, False]


def test_kf4_paper_like_holds_and_made_up_fails():
    def runs(gains: dict[int, float], kf_over_none: float):
        out = {"none": {}, "kyber-fairness": {}, "bfq": {}}
        for h in s.LUNS:
            weights = [g.weight for g in s.lun_cgroups(h)]
            out["none"][h] = run(2500, False, weights)
            kf = run(2500 * kf_over_none, True, weights)
            out["kyber-fairness"][h] = kf
            out["bfq"][h] = run(kf.total / gains[h], True, weights)
        return out
    # Fig. 5: up to 1.33x BFQ, the smallest gain with LUN3 heaviest, Kyber-fairness near none.
    assert all(c.holds for c in s.kf4(runs({0: 1.33, 1: 1.25, 2: 1.2, 3: 1.1}, 0.95)))
    # Gains up to 2x (1.5x the paper's), the narrowest with LUN0, Kyber-fairness at 0.8x none: those three fail.
    made_up = s.kf4(runs({0: 1.1, 1: 2.0, 2: 1.5, 3: 1.3}, 0.8))
    assert [c.holds for c in made_up] == [False, False, True, False]
