//! Tests of Kyber-fairness (a file of their own: kyber_fairness.rs stays the policy).

use super::*;
use crate::testkit::{self, check_conservation, Event, Flow, Hook, Lcg, Traffic};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

const US: u64 = 1_000;
const MS: u64 = 1_000_000;

fn rq(id: u32, op: Op, cgroup: u32, weight: u32, hctx: u32, nr_sectors: u32) -> Request {
    Request {
        cpu: hctx,
        hctx,
        process: cgroup,
        cgroup,
        cgroup_weight: weight,
        ..testkit::rq(id, op, id as u64 * 4096, nr_sectors)
    }
}

#[test]
fn budgets_start_at_16_sectors_per_unit_of_weight_and_writes_cost_wr_scale_times_their_sectors() {
    let mut kf = KyberFairness::new(1);
    kf.insert(rq(1, Op::Read, 1, 100, 0, 8), 0);
    kf.insert(rq(2, Op::Write, 2, 50, 0, 8), 0);
    assert_eq!((kf.budget(1), kf.budget(2)), (Some(1600), Some(800)));
    assert_eq!(kf.wr_scale(), 2, "before any measurement");
    let ids: Vec<u32> = std::iter::from_fn(|| kf.dispatch(0, 0))
        .map(|r| r.id)
        .collect();
    assert_eq!(ids, [1, 2]);
    assert_eq!((kf.budget(1), kf.budget(2)), (Some(1592), Some(784)));
    assert_eq!(kf.budget(3), None, "a cgroup exists from its first insert");
}

#[test]
fn hardware_queues_serve_cgroups_round_robin_and_skip_those_out_of_budget() {
    let mut kf = KyberFairness::new(1);
    // Weight 1: 16 sectors, two 8-sector reads. Weight 100: plenty.
    for id in 0..3 {
        kf.insert(rq(id, Op::Read, 1, 1, 0, 8), 0);
    }
    for id in 10..14 {
        kf.insert(rq(id, Op::Read, 2, 100, 0, 8), 0);
    }
    let order: Vec<u32> = std::iter::from_fn(|| kf.dispatch(0, MS))
        .map(|r| r.cgroup)
        .collect();
    assert_eq!(
        order,
        [1, 2, 1, 2, 2, 2],
        "cgroup 1 runs out after two reads"
    );
    assert_eq!(kf.budget(1), Some(0));
    assert!(
        kf.has_work(0),
        "cgroup 1's third read waits for the next refill"
    );
    assert_eq!(
        kf.next_timer_ns(),
        Some(100 * MS),
        "cgroup 2 is active with tokens left: no early refill"
    );
    kf.timer(100 * MS);
    assert_eq!(kf.dispatch(0, 100 * MS).map(|r| r.id), Some(2));
}

/// Two cgroups on their own hardware queues, each dispatching one big read that spends its whole budget.
fn spend_whole_budgets(per_cgroup: bool, a_at: u64, b_at: u64) -> KyberFairness {
    let mut kf = KyberFairness::new(2);
    kf.set_tunable("per_cgroup_prediction", per_cgroup as i64)
        .unwrap();
    kf.insert(rq(1, Op::Read, 1, 100, 0, 1600), 0);
    kf.insert(rq(2, Op::Read, 2, 300, 1, 4800), 0);
    assert_eq!(kf.dispatch(0, a_at).map(|r| r.id), Some(1));
    kf.insert(rq(3, Op::Read, 1, 100, 0, 8), a_at);
    assert_eq!(kf.dispatch(0, a_at), None, "cgroup 1 is out of budget");
    assert_eq!(kf.dispatch(1, b_at).map(|r| r.id), Some(2));
    kf
}

#[test]
fn when_every_active_cgroup_has_run_out_the_refill_comes_at_once_scaled_to_the_period() {
    // Cgroup 1 runs out at 10 ms, cgroup 2 (the last) at 20 ms: 6,400 sectors in 20 ms predicts 32,000 per
    // 100 ms period, shared 1:3.
    let mut kf = spend_whole_budgets(false, 10 * MS, 20 * MS);
    assert_eq!(kf.next_timer_ns(), Some(20 * MS), "refill due at once");
    kf.timer(20 * MS);
    assert_eq!(kf.predicted_sectors(), 32_000);
    assert_eq!((kf.budget(1), kf.budget(2)), (Some(8_000), Some(24_000)));
    assert_eq!(kf.refills(), (1, 1));
    assert_eq!(kf.dispatch(0, 20 * MS).map(|r| r.id), Some(3));
    assert_eq!(
        kf.next_timer_ns(),
        Some(120 * MS),
        "the next period starts now"
    );
}

#[test]
fn per_cgroup_prediction_scales_each_cgroup_by_its_own_throttled_time() {
    // 1,600 in 10 ms -> 16,000; 4,800 in 20 ms -> 24,000: 40,000 in all.
    let mut kf = spend_whole_budgets(true, 10 * MS, 20 * MS);
    kf.timer(20 * MS);
    assert_eq!(kf.predicted_sectors(), 40_000);
    assert_eq!((kf.budget(1), kf.budget(2)), (Some(10_000), Some(30_000)));
}

#[test]
fn the_scale_is_at_most_ten() {
    // Both budgets spent within 1 ms: 6,400 x 100 ms / 1 ms would be 640,000; the cap makes it 64,000.
    let mut kf = spend_whole_budgets(false, 0, MS);
    kf.timer(MS);
    assert_eq!(kf.predicted_sectors(), 64_000);
}

#[test]
fn at_the_period_end_a_cgroup_with_tokens_left_makes_the_prediction_what_was_used() {
    let mut kf = KyberFairness::new(2);
    kf.insert(rq(1, Op::Read, 1, 100, 0, 800), 0);
    kf.insert(rq(2, Op::Read, 2, 300, 1, 4800), 0);
    kf.insert(rq(3, Op::Read, 2, 300, 1, 8), 0);
    assert!(kf.dispatch(0, 0).is_some());
    assert!(kf.dispatch(1, 50 * MS).is_some());
    assert_eq!(kf.dispatch(1, 50 * MS), None, "cgroup 2 waits from 50 ms");
    assert_eq!(
        kf.next_timer_ns(),
        Some(100 * MS),
        "cgroup 1 still has 800 sectors"
    );
    kf.timer(100 * MS);
    // Used 800 + 4,800: the prediction shrinks from 6,400 to 5,600, shared 1:3.
    assert_eq!(kf.predicted_sectors(), 5_600);
    assert_eq!((kf.budget(1), kf.budget(2)), (Some(1_400), Some(4_200)));
    assert_eq!(kf.refills(), (1, 0));
}

#[test]
fn a_cgroup_that_used_nothing_goes_idle_gets_its_initial_budget_back_and_takes_no_share() {
    let mut kf = KyberFairness::new(3);
    let mut id = 0;
    let mut one = |kf: &mut KyberFairness, cgroup: u32, weight: u32, now: u64| {
        id += 1;
        kf.insert(rq(id, Op::Read, cgroup, weight, cgroup - 1, 8), now);
        kf.dispatch(cgroup - 1, now).expect("budget and tokens");
    };
    for (cgroup, weight) in [(1, 100), (2, 300), (3, 600)] {
        one(&mut kf, cgroup, weight, 0);
    }
    kf.timer(100 * MS);
    // All three used 8 sectors: 24 in all, shared 1:3:6.
    assert_eq!(kf.predicted_sectors(), 24);
    assert_eq!(
        (kf.budget(1), kf.budget(2), kf.budget(3)),
        (Some(2), Some(7), Some(14))
    );
    // Second period: cgroup 3 does nothing.
    one(&mut kf, 1, 100, 110 * MS);
    one(&mut kf, 2, 300, 110 * MS);
    assert_eq!(
        kf.next_timer_ns(),
        Some(200 * MS),
        "cgroup 3 still holds tokens"
    );
    kf.timer(200 * MS);
    assert_eq!(kf.is_active(3), Some(false));
    assert_eq!(kf.budget(3), Some(9_600), "reset to 600 x 16");
    // The two active cgroups ran out 10 ms into the period and then waited: 16 sectors in 10 ms predicts 160.
    assert_eq!(kf.predicted_sectors(), 160);
    assert_eq!((kf.budget(1), kf.budget(2)), (Some(40), Some(120)));
    // Its next insert makes it active again, with the reset budget.
    one(&mut kf, 3, 600, 210 * MS);
    assert_eq!(kf.is_active(3), Some(true));
    assert_eq!(kf.budget(3), Some(9_592));
}

#[test]
fn a_cgroup_whose_requests_wait_for_kyber_tokens_stays_active() {
    // Cgroup 1 holds all 64 DISCARD tokens; cgroup 2's discard waits through two periods without inserting
    // or spending anything.
    let mut kf = KyberFairness::new(2);
    let mut held = Vec::new();
    for id in 0..64 {
        kf.insert(rq(id, Op::Discard, 1, 100, 0, 8), 0);
        held.push(kf.dispatch(0, 0).unwrap());
    }
    kf.insert(rq(64, Op::Discard, 2, 1000, 1, 8), 0);
    assert_eq!(kf.dispatch(1, 0), None);
    kf.timer(100 * MS);
    kf.timer(200 * MS);
    assert_eq!(kf.refills(), (2, 0));
    assert_eq!(kf.is_active(2), Some(true), "a request is waiting");
    assert_eq!(
        kf.is_active(1),
        Some(false),
        "cgroup 1 did nothing in the second period"
    );
    assert!(kf.completed(&held.pop().unwrap(), 0, 210 * MS) == AfterCompletion::RunQueue);
    assert_eq!(kf.dispatch(1, 210 * MS).map(|r| r.id), Some(64));
}

#[test]
fn wr_scale_is_the_ratio_of_mean_write_to_read_latency_in_bucket_upper_bounds() {
    let mut id = 0;
    // One request of `cgroup` (weight 1000: 16,000 sectors to start with) that waited `latency` in all.
    let mut complete = |kf: &mut KyberFairness, cgroup: u32, op: Op, latency: u64, now: u64| {
        id += 1;
        let mut r = rq(id, op, cgroup, 1000, 0, 8);
        r.start_ns = now - latency;
        kf.insert(r, now - latency);
        let issued = kf.dispatch(0, now - latency).expect("dispatch");
        kf.completed(&issued, now - latency, now);
    };
    let mut kf = KyberFairness::new(1);
    // Reads at 0.4 ms: bucket 0 of the 2 ms target, counted as 0.5 ms. Writes at 12 ms: bucket 4 of the 10 ms
    // target, counted as 12.5 ms. 12.5 / 0.5 = 25.
    complete(&mut kf, 1, Op::Read, 400 * US, 10 * MS);
    complete(&mut kf, 1, Op::Write, 12 * MS, 20 * MS);
    // The period began with the first insert (9.6 ms); Kyber's timer is due 100 ms after the first completion.
    assert_eq!(kf.next_timer_ns(), Some(109_600_000));
    kf.timer(110 * MS);
    assert_eq!(kf.wr_scale(), 25);
    complete(&mut kf, 2, Op::Write, 0, 150 * MS);
    assert_eq!(kf.budget(2), Some(16_000 - 8 * 25));
    // Kyber has not evaluated its windows yet (fewer than 500 samples, under 1 s), so the histograms keep
    // accumulating: reads 0.5 and 4 ms (bucket 7, twice the target), writes 12.5 and 2.5 ms: 7.5 / 2.25.
    complete(&mut kf, 3, Op::Read, 7 * MS, 160 * MS);
    kf.timer(260 * MS);
    assert_eq!(kf.wr_scale(), 3);

    // Reads slower than writes: the ratio is below 1, so the write cost is 1.
    let mut kf = KyberFairness::new(1);
    complete(&mut kf, 1, Op::Read, 7 * MS, 10 * MS);
    complete(&mut kf, 1, Op::Write, MS, 10 * MS);
    kf.timer(110 * MS);
    assert_eq!(kf.wr_scale(), 1);
    // Only reads: the scale is not recomputed.
    let mut kf = KyberFairness::new(1);
    complete(&mut kf, 1, Op::Read, MS, 10 * MS);
    kf.timer(110 * MS);
    assert_eq!(kf.wr_scale(), 2);
}

#[test]
fn a_request_waits_for_its_kyber_token_while_other_cgroups_dispatch() {
    // OTHER has 16 tokens device-wide; flushes cost no budget.
    let mut kf = KyberFairness::new(1);
    let mut held = Vec::new();
    for id in 0..16 {
        kf.insert(rq(id, Op::Flush, 1, 100, 0, 0), 0);
        held.push(kf.dispatch(0, 0).unwrap());
    }
    kf.insert(rq(16, Op::Flush, 1, 100, 0, 0), 0);
    kf.insert(rq(17, Op::Read, 2, 100, 0, 8), 0);
    assert_eq!(
        kf.dispatch(0, 0).map(|r| r.id),
        Some(17),
        "cgroup 1 has budget but no OTHER token: cgroup 2 goes"
    );
    assert_eq!(
        kf.dispatch(0, 0),
        None,
        "the public code would dispatch the flush without a token"
    );
    assert!(kf.kyber().waiting(0, Domain::Other));
    // The freed token restarts the queue it completed on, which takes it.
    assert_eq!(
        kf.completed(&held.pop().unwrap(), 0, MS),
        AfterCompletion::RunQueue
    );
    assert_eq!(kf.dispatch(0, MS).map(|r| r.id), Some(16));
    assert!(!kf.kyber().waiting(0, Domain::Other));
}

#[test]
fn bios_merge_only_within_their_own_cgroup() {
    let mut kf = KyberFairness::new(1);
    kf.insert(rq(1, Op::Read, 1, 100, 0, 8), 0);
    let mut other = rq(2, Op::Read, 2, 100, 0, 8);
    other.sector = 4096 + 8;
    assert_eq!(kf.bio_merge(&other, 256), None, "cgroup 2 has no lists yet");
    kf.insert(rq(3, Op::Read, 2, 100, 0, 8), 0);
    assert_eq!(kf.bio_merge(&other, 256), None, "adjacent, but cgroup 1's");
    let mut own = rq(4, Op::Read, 1, 100, 0, 8);
    own.sector = 4096 + 8;
    assert_eq!(kf.bio_merge(&own, 256), Some(1));
}

#[test]
fn tunables_by_sysfs_name_are_validated() {
    let mut kf = KyberFairness::new(1);
    assert_eq!(
        kf.tunables(),
        [
            ("read_lat_nsec", 2_000_000),
            ("write_lat_nsec", 10_000_000),
            ("refill_period_nsec", 100_000_000),
            ("per_cgroup_prediction", 0)
        ]
    );
    kf.set_tunable("refill_period_nsec", 50_000_000).unwrap();
    kf.set_tunable("write_lat_nsec", 5_000_000).unwrap();
    for (name, bad) in [
        ("refill_period_nsec", 999_999),
        ("refill_period_nsec", 10_000_000_001),
        ("per_cgroup_prediction", 2),
        ("read_lat_nsec", -1),
    ] {
        assert!(
            matches!(
                kf.set_tunable(name, bad),
                Err(TunableError::OutOfRange { .. })
            ),
            "{name}={bad}"
        );
    }
    assert!(matches!(
        kf.set_tunable("slice_idle", 0),
        Err(TunableError::Unknown { .. })
    ));
    assert_eq!(
        kf.tunables()[1..3],
        [
            ("write_lat_nsec", 5_000_000),
            ("refill_period_nsec", 50_000_000)
        ]
    );
    // The period starts with the first insert.
    kf.insert(rq(1, Op::Read, 1, 100, 0, 8), 7 * MS);
    assert_eq!(kf.next_timer_ns(), Some(57 * MS));
    kf.set_tunable("refill_period_nsec", 10_000_000).unwrap();
    assert_eq!(
        kf.next_timer_ns(),
        Some(17 * MS),
        "a new period length applies to the current period"
    );
}

#[test]
fn introspection_shows_budgets_wr_scale_and_kybers_depths() {
    let mut kf = KyberFairness::new(1);
    kf.insert(rq(1, Op::Read, 4, 250, 0, 8), 0);
    kf.dispatch(0, 0).unwrap();
    let state: HashMap<String, f64> = kf.introspect().into_iter().collect();
    assert_eq!(state["cgroup4_budget_sectors"], 3_992.0);
    assert_eq!(state["cgroup4_allotted_sectors"], 4_000.0);
    assert_eq!(state["wr_scale"], 2.0);
    assert_eq!(state["read_tokens"], 256.0);
    assert_eq!(state["read_tokens_in_use"], 1.0);
    assert_eq!(state["active_cgroups"], 1.0);
    assert_eq!(state["refills"], 0.0);
}

mod sharing;

/// Kyber-fairness's own checks under the conservation harness: Kyber's tokens match the requests in flight; each
/// cgroup's budget is what it was allotted at the last refill less what its dispatches since cost (writes and
/// discards at wr_scale times their sectors), refills happen only from the timer, every allotment is positive and no
/// cgroup overdraws by more than one request. Counts the early refills (budgets run out before the period ends).
#[derive(Default)]
struct Budgets {
    nr_cgroups: u32,
    /// wr_scale and the refill count when the dispatch under way began.
    scale: i64,
    refills: u64,
    /// Sectors charged per cgroup since the last refill.
    charged: HashMap<u32, i64>,
    early_refills: u64,
}

impl Hook<KyberFairness> for Budgets {
    fn check(&mut self, kf: &KyberFairness, flow: &Flow, event: Event) {
        let seed = flow.seed;
        match event {
            Event::Dispatching(_) => {
                self.scale = kf.wr_scale() as i64;
                assert_eq!(
                    kf.refills().0,
                    self.refills,
                    "seed {seed}: refills only run from the timer"
                );
            }
            Event::Dispatched(_, Some(r)) => {
                assert_eq!(
                    kf.refills().0,
                    self.refills,
                    "seed {seed}: the dispatch that spent the last tokens asked for a refill; none happened yet"
                );
                let cost = match r.op {
                    Op::Write | Op::Discard => r.nr_sectors as i64 * self.scale,
                    _ => r.nr_sectors as i64,
                };
                *self.charged.entry(r.cgroup).or_default() += cost;
                let c = r.cgroup;
                assert_eq!(
                    kf.allotted(c).unwrap() - kf.budget(c).unwrap(),
                    self.charged[&c],
                    "seed {seed}: cgroup {c} budget"
                );
            }
            Event::TimerFired if kf.refills().0 != self.refills => {
                self.refills = kf.refills().0;
                self.charged.clear();
            }
            Event::Step | Event::Drained => {
                for domain in Domain::ALL {
                    let holding = flow
                        .in_flight
                        .iter()
                        .filter(|(r, _)| Domain::of(r.op) == domain)
                        .count();
                    assert_eq!(
                        kf.kyber().tokens_in_use(domain) as usize,
                        holding,
                        "seed {seed}: {domain:?}"
                    );
                }
                for c in 0..self.nr_cgroups {
                    if let Some(budget) = kf.budget(c) {
                        let allotted = kf.allotted(c).unwrap();
                        assert!(allotted >= 1, "seed {seed}: cgroup {c} allotted {allotted}");
                        assert!(
                            budget > -32 * 1000,
                            "seed {seed}: overdraft beyond one request"
                        );
                    }
                }
                if let Event::Drained = event {
                    self.early_refills = kf.refills().1;
                }
            }
            _ => {}
        }
    }
}

#[test]
fn random_traffic_never_loses_or_duplicates_requests_and_budgets_account_for_every_dispatch() {
    const NR_HCTX: u32 = 3;
    const WEIGHTS: &[u32] = &[1, 10, 100, 1000, 37];
    let traffic = Traffic {
        seeds: 0..12,
        steps: 40_000,
        nr_hw_queues: NR_HCTX,
        nr_cpus: 8,
        // One process per cgroup.
        nr_processes: WEIGHTS.len() as u32,
        cgroup_weights: WEIGHTS,
        ops: testkit::EVERY_OP,
        bio_sectors: &[8, 16, 24, 32],
        span_sectors: 1 << 24,
        max_sectors: 256,
        driver_depth: usize::MAX,
        max_gap_ns: 200_000,
        own_hctx_only: true,
        ..Traffic::default()
    };
    let runs = check_conservation(&traffic, |seed| {
        let mut kf = KyberFairness::new(NR_HCTX);
        if seed % 2 == 1 {
            kf.set_tunable("per_cgroup_prediction", 1).unwrap();
        }
        kf.set_tunable("refill_period_nsec", 5_000_000).unwrap();
        let budgets = Budgets {
            nr_cgroups: WEIGHTS.len() as u32,
            ..Budgets::default()
        };
        (kf, budgets)
    });
    let early_refills: u64 = runs.iter().map(|b| b.early_refills).sum();
    assert!(
        early_refills > 10,
        "the workload should run budgets out: {early_refills} early refills"
    );
}
