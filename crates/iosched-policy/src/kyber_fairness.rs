//! `kyber-fairness`: the proportional-share scheduler of Son, Oh and Ahn (seed 001, §IV and Algorithm 1), built on
//! [`Kyber`](crate::kyber::Kyber). It shares the device among cgroups in proportion to their weights with tokens
//! that each cgroup spends on its own, so dispatching needs no device-wide lock.
//!
//! # Model
//!
//! * **Kyber underneath, unchanged.** Domains, the device-wide token pool per domain (a dispatched request holds
//!   one until it completes), batching per hardware queue, the latency histograms, the 100 ms timer that resizes
//!   the pools, token waits and wake-ups: all are Kyber's own code (`kyber.rs`), so `read_lat_nsec` and
//!   `write_lat_nsec` behave as under `kyber`.
//! * **Per-cgroup request lists on every hardware queue.** Kyber's per-CPU staging lists and per-hardware-queue
//!   dispatch lists are indexed by [cgroup][domain]. Bio merges look only at the bio's own cgroup's lists.
//! * **Budgets.** Each cgroup has a budget of tokens, counted in sectors. A cgroup starts with `weight × 16`
//!   sectors. Dispatching a request costs its sectors for a read and its sectors × `wr_scale` for a write or
//!   discard, charged when it is dispatched. Only a cgroup with budget > 0 may dispatch; its last request may take
//!   the budget below zero. Completions do not touch budgets.
//! * **Choosing a cgroup** (per hardware queue, under its lock): round-robin, starting after the cgroup this
//!   hardware queue served last. The first cgroup with requests on this hardware queue and budget > 0 is served
//!   by Kyber's domain and batch logic, restricted to that cgroup's lists. If it gets no Kyber token (all its
//!   pending domains are out of tokens), the next eligible cgroup is tried.
//! * **Write cost** `wr_scale` = floor(mean write total latency / mean read total latency), at least 1, from
//!   Kyber's total-latency histograms, each sample counted at its bucket's upper bound (so the two latency
//!   targets set the scale of the buckets: writes at 12 ms against 2 ms reads give 6). It starts at 2 and is
//!   recomputed on every Kyber timer run (before Kyber evaluates and clears the histograms) when both domains
//!   have samples.
//! * **Active and idle cgroups.** A cgroup is active from its first insert. At a refill, a cgroup that neither
//!   inserted nor used anything during the period, and has no request waiting, goes idle: its budget is reset to
//!   `weight × 16` and it gets no share of the prediction. It becomes active again with its next insert.
//! * **Refill** (the paper's token manager), when either
//!   1. the period (`refill_period_nsec`, 100 ms) has passed since the last refill, or
//!   2. every active cgroup has run out of budget: checked when a cgroup's budget runs out and when a hardware
//!      queue finds only cgroups without budget. The refill is then run at once (as a timer due now, like the
//!      public code's refill thread), and every hardware queue is re-run afterwards.
//!
//!   For each active cgroup i the period's used tokens u_i (its allotment minus what is left, overdraft included)
//!   and its throttled time t_i (from the period's start until its budget ran out; the whole elapsed period if
//!   it did not run out) are recorded. The prediction for the next period (`predicted_sectors`) is U = Σ u_i × P
//!   / t, where P is the period and t is the throttled time of the period: the latest t_i of the active cgroups,
//!   i.e. when the last of them ran out (the elapsed time if one never did). So when every active cgroup ran out
//!   before the period's end the prediction grows (they would have used that much more in a whole period); when
//!   one still had tokens at the end, U is what was used, less than was given: it shrinks. The scale P / t is at
//!   most ×10. Each active cgroup then gets U × weight / (sum of active weights) sectors (at least 1; `weight × 16`
//!   if nothing at all was used), replacing what it had left. Nothing carries over between periods.
//!
//! # Where this follows the paper rather than the public code
//!
//! The public code (`hellp-me/Kyber_Fairness_Improved`, `block/kyber-iosched.c`) differs from the paper; this
//! module follows the paper:
//!
//! * **Kyber tokens.** When the chosen cgroup's domain has no Kyber token, the public code dispatches the request
//!   anyway (without a token), so Kyber's depth limits stop applying. Here a request waits for its domain token as
//!   under Kyber, and the next cgroup with budget is tried.
//! * **Prediction.** The paper scales used tokens by the throttled time (increase when shorter than the period,
//!   decrease otherwise). The public code instead scales the sum of used tokens by the elapsed time since the last
//!   refill in 10 ms steps (×100 / (100 − 10k)), multiplies it by 100/110 whenever a whole period passed, and
//!   subtracts the tokens left over. Here the scale is the exact P / t from the throttled times, with no fixed
//!   ×100/110 decrease and no subtraction; only the ×10 cap is taken from the code, because the paper gives none
//!   and an unbounded scale would let a refill right after the last one (t near 0) predict without bound.
//! * **Algorithm 1 itself is a figure that the text does not reproduce.** The paper's prose names the inputs (used
//!   tokens u_i and throttled time t_i per cgroup, an average per allocation period, their sum U) and the direction
//!   of the adjustment; the rule above is our reading of it. The other reading, scaling each cgroup's used tokens
//!   by its *own* throttled time, is available as `per_cgroup_prediction = 1`. It over-predicts whenever
//!   cgroups run out at different times: a light cgroup that runs out after a fifth of the period was served at
//!   a quarter of the device while the others ran alongside, so it claims a quarter of the device for the whole
//!   period, though the others take its share once it stops. The heaviest cgroup then never runs out and gets
//!   less than its share (the unit test `per_cgroup_prediction_over_predicts_and_shortchanges_the_heaviest_cgroup`
//!   shows it). The paper reports exact proportional shares, which fits the default.
//! * **Choosing a cgroup.** The public code scans its cgroup list from the head on every dispatch (the first
//!   cgroup with requests and budget wins, so the list order decides who goes first within a period); here the
//!   scan is round-robin from the cgroup after the last one served. The paper does not say.
//! * **Which cgroups are idle.** The paper idles a cgroup that inserted nothing in the period, the public code one
//!   whose budget did not change. Both idle a cgroup whose requests all waited through the period for Kyber
//!   tokens (its processes, with every request queued, insert nothing more): it then takes no share, the others
//!   are given the whole device, and it can starve behind them. Here a cgroup with requests waiting stays active.
//!   (The public code also counts the weight of an idle cgroup that used tokens but gives it no new budget until
//!   its next insert, which can leave its requests stuck; here any cgroup that used tokens is active.)
//! * **Write cost.** The public code derives each bucket's latency from the targets set at start-up, and when a
//!   domain has no samples it keeps the domain's old latency sum but sets its count to 1; here the current targets
//!   are used and `wr_scale` is only recomputed when both domains have samples.
//!
//! # Simplifications
//!
//! * Everything Kyber simplifies (see `kyber.rs`).
//! * Cgroups are flat and identified by [`Request::cgroup`]; a cgroup's weight is the `cgroup_weight` of its most
//!   recent insert (at most 1000; 0 counts as 1). There is no limit on the number of cgroups (the public code has
//!   100 slots).
//! * The refill runs at the moment it is due; the kernel runs it in a kernel thread woken by an hrtimer or by the
//!   dispatch path, a few microseconds later.
//! * Time is in nanoseconds, not jiffies.
//!
//! # Locking
//!
//! Dispatch runs under the hardware queue's lock (Kyber's `khd->lock`); insert and bio merge take the submitting
//! CPU's staging-queue lock. Nothing device-wide is locked per request: [`Locking::PerHctx`], with the same
//! three acquisitions per request on the submission path as Kyber. The kernel also takes each cgroup's own
//! spinlock (`kf->lock`) to mark it active at insert and to read and charge its budget at dispatch; the CPUs that
//! submit for one cgroup share that lock. Its uncontended cost is part of the host preset's `dispatch_ns`; its
//! hand-offs between CPUs are not modelled (as Kyber's token wait-queue locks are not). The refill reads and
//! writes every cgroup (the only device-wide step, once per period or when all budgets are spent).
//!
//! # Tunables (sysfs-style names and units)
//!
//! `read_lat_nsec`, `write_lat_nsec`: Kyber's (see `kyber.rs`). `refill_period_nsec`: the allocation period P,
//! default 100,000,000, within 1 ms..=10 s. `per_cgroup_prediction`: 0 (default, see above) or 1.

use std::collections::HashMap;

use crate::kyber::{Domain, Kyber};
use crate::{
    tunable_switch, AfterCompletion, Elevator, LockAcquisitions, Locking, Op, Request, TunableError,
};

/// A cgroup's starting budget (and the budget an idle cgroup is reset to), in sectors per unit of weight.
pub const INITIAL_BUDGET_SECTORS_PER_WEIGHT: i64 = 16;
pub const DEFAULT_REFILL_PERIOD_NS: u64 = 100_000_000;
const MIN_REFILL_PERIOD_NS: u64 = 1_000_000;
const MAX_REFILL_PERIOD_NS: u64 = 10_000_000_000;
/// Write cost multiplier before the first measurement.
pub const INITIAL_WR_SCALE: u64 = 2;
/// A prediction scales used tokens by at most this much (the public code's limit; the paper gives none).
const MAX_PREDICTION_SCALE: u64 = 10;
/// Largest cgroup weight (cgroup v1 `blkio.weight` and the public code's KYBER_MAX_WEIGHT).
const MAX_WEIGHT: u32 = 1000;

const TUNABLE_NAMES: [&str; 4] = [
    "read_lat_nsec",
    "write_lat_nsec",
    "refill_period_nsec",
    "per_cgroup_prediction",
];

/// One cgroup's share state. In the kernel it sits behind the cgroup's own spinlock, not a device-wide one.
#[derive(Debug, Clone)]
struct Cgroup {
    id: u32,
    weight: u32,
    /// Tokens (sectors; writes count × wr_scale) the cgroup may still spend this period. Goes below zero by at
    /// most the cost of the request that spent the last tokens.
    budget: i64,
    /// What the cgroup was given at the period's start.
    allotted: i64,
    /// When the budget ran out this period (its throttled time), if it did.
    ran_out_ns: Option<u64>,
    /// Requests were inserted this period.
    inserted: bool,
    /// Requests inserted and not yet dispatched, on all hardware queues.
    queued: u32,
    active: bool,
}

impl Cgroup {
    fn used(&self) -> u64 {
        (self.allotted - self.budget).max(0) as u64
    }
}

fn initial_budget(weight: u32) -> i64 {
    weight as i64 * INITIAL_BUDGET_SECTORS_PER_WEIGHT
}

pub struct KyberFairness {
    kyber: Kyber,
    /// Cgroups in order of first appearance; the index is the cgroup's class in Kyber's lists.
    cgroups: Vec<Cgroup>,
    slot_of: HashMap<u32, usize>,
    /// Per hardware queue: the cgroup to try first on the next dispatch.
    next_start: Vec<usize>,
    wr_scale: u64,
    period_ns: u64,
    per_cgroup_prediction: bool,
    /// Start of the current period (the last refill, or the first insert).
    period_start_ns: Option<u64>,
    refill_at_ns: Option<u64>,
    /// Total tokens given at the last refill (U).
    predicted_sectors: u64,
    refills: u64,
    /// Refills because every active cgroup had run out before the period ended.
    early_refills: u64,
}

impl KyberFairness {
    pub fn new(nr_hw_queues: u32) -> Self {
        Self {
            kyber: Kyber::new(nr_hw_queues),
            cgroups: Vec::new(),
            slot_of: HashMap::new(),
            next_start: vec![0; nr_hw_queues.max(1) as usize],
            wr_scale: INITIAL_WR_SCALE,
            period_ns: DEFAULT_REFILL_PERIOD_NS,
            per_cgroup_prediction: false,
            period_start_ns: None,
            refill_at_ns: None,
            predicted_sectors: 0,
            refills: 0,
            early_refills: 0,
        }
    }

    /// The Kyber instance underneath (token pools and depths).
    pub fn kyber(&self) -> &Kyber {
        &self.kyber
    }

    /// Current write cost multiplier.
    pub fn wr_scale(&self) -> u64 {
        self.wr_scale
    }

    /// The cgroup's remaining budget in sectors, if the cgroup has been seen.
    pub fn budget(&self, cgroup: u32) -> Option<i64> {
        self.slot_of.get(&cgroup).map(|&s| self.cgroups[s].budget)
    }

    /// What the cgroup was given at the start of the current period.
    pub fn allotted(&self, cgroup: u32) -> Option<i64> {
        self.slot_of.get(&cgroup).map(|&s| self.cgroups[s].allotted)
    }

    /// Whether the cgroup is active (idle cgroups take no share of the prediction).
    pub fn is_active(&self, cgroup: u32) -> Option<bool> {
        self.slot_of.get(&cgroup).map(|&s| self.cgroups[s].active)
    }

    /// Total tokens given at the last refill.
    pub fn predicted_sectors(&self) -> u64 {
        self.predicted_sectors
    }

    /// Refills so far, and how many of them came early (every active cgroup had run out).
    pub fn refills(&self) -> (u64, u64) {
        (self.refills, self.early_refills)
    }

    fn slot_for(&mut self, cgroup: u32, weight: u32) -> usize {
        let weight = weight.clamp(1, MAX_WEIGHT);
        if let Some(&slot) = self.slot_of.get(&cgroup) {
            self.cgroups[slot].weight = weight;
            return slot;
        }
        let slot = self.cgroups.len();
        self.cgroups.push(Cgroup {
            id: cgroup,
            weight,
            budget: initial_budget(weight),
            allotted: initial_budget(weight),
            ran_out_ns: None,
            inserted: false,
            queued: 0,
            active: true,
        });
        self.slot_of.insert(cgroup, slot);
        slot
    }

    fn cost(&self, rq: &Request) -> i64 {
        let scale = match rq.op {
            Op::Write | Op::Discard => self.wr_scale,
            Op::Read | Op::Flush => 1,
        };
        (rq.nr_sectors as u64)
            .saturating_mul(scale)
            .min(i64::MAX as u64) as i64
    }

    /// Charge a dispatched request to its cgroup; note when the budget runs out, and refill at once if that
    /// leaves no active cgroup with tokens.
    fn charge(&mut self, slot: usize, rq: &Request, now_ns: u64) {
        let cost = self.cost(rq);
        let cgroup = &mut self.cgroups[slot];
        cgroup.queued -= 1;
        cgroup.active = true;
        cgroup.budget = cgroup.budget.saturating_sub(cost);
        if cgroup.budget <= 0 && cgroup.ran_out_ns.is_none() {
            cgroup.ran_out_ns = Some(now_ns);
            if self.active_budgets_spent() {
                self.refill_now(now_ns);
            }
        }
    }

    /// Every active cgroup has run out (the paper's second refill condition; true when none is active).
    fn active_budgets_spent(&self) -> bool {
        self.cgroups.iter().all(|c| !c.active || c.budget <= 0)
    }

    fn refill_now(&mut self, now_ns: u64) {
        self.refill_at_ns = Some(self.refill_at_ns.map_or(now_ns, |at| at.min(now_ns)));
    }

    /// Tokens `used` over `throttled_ns`, scaled to a whole period (at most ×10).
    fn per_period(&self, used: u64, throttled_ns: u64) -> u128 {
        let throttled_ns = throttled_ns
            .max(self.period_ns.div_ceil(MAX_PREDICTION_SCALE))
            .max(1);
        used as u128 * self.period_ns as u128 / throttled_ns as u128
    }

    /// The token manager: predict the next period's total from this period's use and hand it out by weight.
    fn refill(&mut self, now_ns: u64) {
        let start = self.period_start_ns.unwrap_or(now_ns);
        let elapsed_ns = now_ns.saturating_sub(start);
        let mut used_total: u64 = 0;
        let mut per_cgroup_total: u128 = 0;
        let mut active_weight: u64 = 0;
        let mut latest_ran_out_ns: u64 = 0;
        let mut all_ran_out = true;
        for c in 0..self.cgroups.len() {
            let cgroup = &self.cgroups[c];
            let used = cgroup.used();
            if used > 0 || cgroup.inserted || cgroup.queued > 0 {
                let throttled_ns = cgroup.ran_out_ns.map(|t| t.saturating_sub(start));
                match throttled_ns {
                    Some(t) => latest_ran_out_ns = latest_ran_out_ns.max(t),
                    None => all_ran_out = false,
                }
                per_cgroup_total += self.per_period(used, throttled_ns.unwrap_or(elapsed_ns));
                used_total = used_total.saturating_add(used);
                active_weight += cgroup.weight as u64;
                self.cgroups[c].active = true;
            } else {
                let cgroup = &mut self.cgroups[c];
                cgroup.active = false;
                cgroup.allotted = initial_budget(cgroup.weight);
                cgroup.budget = cgroup.allotted;
            }
            let cgroup = &mut self.cgroups[c];
            cgroup.ran_out_ns = None;
            cgroup.inserted = false;
        }
        let any_active = active_weight > 0;
        let predicted = if self.per_cgroup_prediction {
            per_cgroup_total
        } else {
            let throttled_ns = if any_active && all_ran_out {
                latest_ran_out_ns
            } else {
                elapsed_ns
            };
            self.per_period(used_total, throttled_ns)
        };
        let predicted = predicted.min(i64::MAX as u128 / (MAX_WEIGHT as u128 + 1));
        self.predicted_sectors = predicted as u64;
        for cgroup in self.cgroups.iter_mut().filter(|c| c.active) {
            cgroup.allotted = if predicted == 0 {
                initial_budget(cgroup.weight)
            } else {
                ((predicted * cgroup.weight as u128 / active_weight as u128) as i64).max(1)
            };
            cgroup.budget = cgroup.allotted;
        }
        self.refills += 1;
        if elapsed_ns < self.period_ns {
            self.early_refills += 1;
        }
        self.period_start_ns = Some(now_ns);
        self.refill_at_ns = Some(now_ns + self.period_ns);
    }

    /// wr_scale from Kyber's histograms, before the Kyber timer evaluates (and clears) them.
    fn update_wr_scale(&mut self) {
        let read = self.kyber.mean_total_latency_ns(Domain::Read);
        let write = self.kyber.mean_total_latency_ns(Domain::Write);
        if let (Some(read), Some(write)) = (read, write) {
            if let Some(ratio) = write.checked_div(read) {
                self.wr_scale = ratio.max(1);
            }
        }
    }
}

impl Elevator for KyberFairness {
    fn name(&self) -> &'static str {
        "kyber-fairness"
    }

    fn locking(&self) -> Locking {
        Locking::PerHctx
    }

    /// As Kyber: the staging-queue lock for the bio merge and for the insert, the hardware queue's lock for the
    /// dispatch (see the module doc for the per-cgroup lock, which is not booked as a lock).
    fn lock_acquisitions(&self) -> LockAcquisitions {
        self.kyber.lock_acquisitions()
    }

    fn bio_merge(&mut self, bio: &Request, max_sectors: u32) -> Option<u32> {
        let slot = *self.slot_of.get(&bio.cgroup)?;
        self.kyber.bio_merge_class(bio, slot, max_sectors)
    }

    fn insert(&mut self, rq: Request, now_ns: u64) {
        if self.period_start_ns.is_none() {
            self.period_start_ns = Some(now_ns);
            self.refill_at_ns = Some(now_ns + self.period_ns);
        }
        let slot = self.slot_for(rq.cgroup, rq.cgroup_weight);
        let cgroup = &mut self.cgroups[slot];
        cgroup.inserted = true;
        cgroup.queued += 1;
        cgroup.active = true;
        self.kyber.insert_class(rq, slot);
    }

    fn dispatch(&mut self, hctx: u32, now_ns: u64) -> Option<Request> {
        let nr_cgroups = self.cgroups.len();
        if nr_cgroups == 0 {
            return None;
        }
        let h = hctx as usize;
        if self.next_start.len() <= h {
            self.next_start.resize(h + 1, 0);
        }
        let start = self.next_start[h];
        let mut throttled = false;
        for k in 0..nr_cgroups {
            let slot = (start + k) % nr_cgroups;
            if !self.kyber.class_has_work(hctx, slot) {
                continue;
            }
            if self.cgroups[slot].budget <= 0 {
                throttled = true;
                continue;
            }
            if let Some(rq) = self.kyber.dispatch_class(hctx, slot) {
                self.next_start[h] = (slot + 1) % nr_cgroups;
                self.charge(slot, &rq, now_ns);
                return Some(rq);
            }
        }
        if throttled && self.active_budgets_spent() {
            self.refill_now(now_ns);
        }
        None
    }

    fn has_work(&self, hctx: u32) -> bool {
        self.kyber.has_work(hctx)
    }

    fn limit_depth(&self, op: Op, sync: bool, nr_requests: u32) -> u32 {
        self.kyber.limit_depth(op, sync, nr_requests)
    }

    fn tag_wake_batch(&self, nr_requests: u32) -> u32 {
        self.kyber.tag_wake_batch(nr_requests)
    }

    fn completed(&mut self, rq: &Request, issue_ns: u64, now_ns: u64) -> AfterCompletion {
        self.kyber.completed(rq, issue_ns, now_ns)
    }

    fn take_woken_hctxs(&mut self, into: &mut Vec<u32>) {
        self.kyber.take_woken_hctxs(into)
    }

    fn next_timer_ns(&self) -> Option<u64> {
        match (self.kyber.next_timer_ns(), self.refill_at_ns) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn timer(&mut self, now_ns: u64) {
        if self.kyber.next_timer_ns().is_some_and(|at| at <= now_ns) {
            self.update_wr_scale();
            self.kyber.timer(now_ns);
        }
        if self.refill_at_ns.is_some_and(|at| at <= now_ns) {
            self.refill(now_ns);
        }
    }

    fn tunables(&self) -> Vec<(&'static str, i64)> {
        let mut out = self.kyber.tunables();
        out.push(("refill_period_nsec", self.period_ns as i64));
        out.push(("per_cgroup_prediction", self.per_cgroup_prediction as i64));
        out
    }

    fn set_tunable(&mut self, name: &str, value: i64) -> Result<(), TunableError> {
        match name {
            "read_lat_nsec" | "write_lat_nsec" => self.kyber.set_tunable(name, value),
            "refill_period_nsec" => {
                if !(MIN_REFILL_PERIOD_NS as i64..=MAX_REFILL_PERIOD_NS as i64).contains(&value) {
                    return Err(TunableError::out_of_range(
                        name,
                        value,
                        "a period in nanoseconds within 1000000..=10000000000 (1 ms to 10 s)",
                    ));
                }
                self.period_ns = value as u64;
                if let Some(start) = self.period_start_ns {
                    self.refill_at_ns = Some(start + self.period_ns);
                }
                Ok(())
            }
            "per_cgroup_prediction" => {
                self.per_cgroup_prediction = tunable_switch(name, value)?;
                Ok(())
            }
            _ => Err(TunableError::Unknown {
                name: name.to_string(),
                known: TUNABLE_NAMES.to_vec(),
            }),
        }
    }

    fn introspect(&self) -> Vec<(String, f64)> {
        let mut out = self.kyber.introspect();
        out.push(("wr_scale".to_string(), self.wr_scale as f64));
        out.push((
            "predicted_sectors".to_string(),
            self.predicted_sectors as f64,
        ));
        out.push(("refills".to_string(), self.refills as f64));
        out.push(("early_refills".to_string(), self.early_refills as f64));
        let active = self.cgroups.iter().filter(|c| c.active).count();
        out.push(("active_cgroups".to_string(), active as f64));
        for cgroup in &self.cgroups {
            out.push((
                format!("cgroup{}_budget_sectors", cgroup.id),
                cgroup.budget as f64,
            ));
            out.push((
                format!("cgroup{}_allotted_sectors", cgroup.id),
                cgroup.allotted as f64,
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{self, Lcg};
    use std::cmp::Reverse;
    use std::collections::{BinaryHeap, HashSet, VecDeque};

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
    fn budgets_start_at_16_sectors_per_unit_of_weight_and_writes_cost_wr_scale_times_their_sectors()
    {
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

    // ---------------------------------------------------------------- a tiny device loop

    /// A closed-loop process: keeps `depth` requests of `nr_sectors` outstanding while `running`.
    struct Process {
        cgroup: u32,
        weight: u32,
        hctx: u32,
        depth: u32,
        op: Op,
        nr_sectors: u32,
        outstanding: u32,
        running: bool,
    }

    /// A device that takes every dispatched request into its queue and serves `slots` of them at a time, in
    /// arrival order, `service_ns` each; the device-wide limit on what is dispatched is Kyber's tokens, as in the
    /// simulator. A hardware queue is run after an insert on it, when a freed token wakes it, after a completion
    /// that asks for it (all of them on RunAllQueues), and all of them after a timer.
    struct Bench {
        kf: KyberFairness,
        nr_hctx: u32,
        processes: Vec<Process>,
        slots: usize,
        service_ns: u64,
        now: u64,
        next_id: u32,
        /// Dispatched, waiting for a slot.
        device_queue: VecDeque<u32>,
        /// (completion time, id) of requests in service.
        in_service: BinaryHeap<Reverse<(u64, u32)>>,
        requests: HashMap<u32, (Request, u64, usize)>,
        /// Sectors completed per process since the last `reset`.
        served: Vec<u64>,
        /// Slot-nanoseconds of service since the last `reset`, and when it began.
        busy_ns: u64,
        since: u64,
    }

    impl Bench {
        fn new(nr_hctx: u32, slots: usize, service_ns: u64) -> Self {
            Self {
                kf: KyberFairness::new(nr_hctx),
                nr_hctx,
                processes: Vec::new(),
                slots,
                service_ns,
                now: 0,
                next_id: 0,
                device_queue: VecDeque::new(),
                in_service: BinaryHeap::new(),
                requests: HashMap::new(),
                served: Vec::new(),
                busy_ns: 0,
                since: 0,
            }
        }

        fn process(&mut self, cgroup: u32, weight: u32, hctx: u32, depth: u32, op: Op) -> usize {
            self.processes.push(Process {
                cgroup,
                weight,
                hctx,
                depth,
                op,
                nr_sectors: 8,
                outstanding: 0,
                running: true,
            });
            self.served.push(0);
            self.processes.len() - 1
        }

        fn submit(&mut self, p: usize) {
            while self.processes[p].running
                && self.processes[p].outstanding < self.processes[p].depth
            {
                let proc = &mut self.processes[p];
                proc.outstanding += 1;
                let mut r = rq(
                    self.next_id,
                    proc.op,
                    proc.cgroup,
                    proc.weight,
                    proc.hctx,
                    proc.nr_sectors,
                );
                r.process = p as u32;
                r.start_ns = self.now;
                self.next_id += 1;
                let hctx = r.hctx;
                self.kf.insert(r, self.now);
                self.run(hctx);
            }
        }

        fn run(&mut self, hctx: u32) {
            while self.kf.has_work(hctx) {
                let Some(r) = self.kf.dispatch(hctx, self.now) else {
                    return;
                };
                self.device_queue.push_back(r.id);
                let process = r.process as usize;
                assert!(self.requests.insert(r.id, (r, self.now, process)).is_none());
            }
            self.start_service();
        }

        fn start_service(&mut self) {
            while self.in_service.len() < self.slots {
                let Some(id) = self.device_queue.pop_front() else {
                    return;
                };
                self.in_service
                    .push(Reverse((self.now + self.service_ns, id)));
            }
        }

        fn run_all(&mut self) {
            for h in 0..self.nr_hctx {
                self.run(h);
            }
        }

        fn reset(&mut self) {
            self.served.iter_mut().for_each(|s| *s = 0);
            self.busy_ns = 0;
            self.since = self.now;
        }

        /// Advance to `until`.
        fn run_until(&mut self, until: u64) {
            for p in 0..self.processes.len() {
                self.submit(p);
            }
            self.run_all();
            loop {
                let completion = self.in_service.peek().map(|Reverse((t, _))| *t);
                let timer = self.kf.next_timer_ns();
                let next = match (completion, timer) {
                    (Some(c), Some(t)) => c.min(t),
                    (c, t) => c
                        .or(t)
                        .expect("the refill timer is always armed once work arrived"),
                };
                if next > until {
                    break;
                }
                let busy = self.in_service.len() as u64;
                self.busy_ns += busy * (next - self.now);
                self.now = next;
                if completion == Some(next) {
                    let Reverse((_, id)) = self.in_service.pop().unwrap();
                    let (r, issued, p) = self.requests.remove(&id).unwrap();
                    self.start_service();
                    let after = self.kf.completed(&r, issued, self.now);
                    self.served[p] += r.nr_sectors as u64;
                    self.processes[p].outstanding -= 1;
                    let mut woken = Vec::new();
                    self.kf.take_woken_hctxs(&mut woken);
                    for hctx in woken {
                        self.run(hctx);
                    }
                    match after {
                        AfterCompletion::RunQueue => self.run(r.hctx),
                        AfterCompletion::RunAllQueues => self.run_all(),
                    }
                    self.submit(p);
                } else {
                    self.kf.timer(self.now);
                    self.run_all();
                }
            }
            self.busy_ns += self.in_service.len() as u64 * (until - self.now);
            self.now = until;
        }

        /// Sectors served per cgroup since the last reset, in order of first appearance.
        fn served_by_cgroup(&self) -> Vec<(u32, u32, u64)> {
            let mut out: Vec<(u32, u32, u64)> = Vec::new();
            for (p, proc) in self.processes.iter().enumerate() {
                match out.iter_mut().find(|(c, _, _)| *c == proc.cgroup) {
                    Some(entry) => entry.2 += self.served[p],
                    None => out.push((proc.cgroup, proc.weight, self.served[p])),
                }
            }
            out
        }

        fn utilization(&self) -> f64 {
            self.busy_ns as f64 / (self.slots as u64 * (self.now - self.since)) as f64
        }
    }

    /// Each backlogged cgroup's share of the service divided by its share of the weight (1.0 = exact).
    fn share_ratios(served: &[(u32, u32, u64)]) -> Vec<f64> {
        let total: u64 = served.iter().map(|s| s.2).sum();
        let weights: u32 = served.iter().map(|s| s.1).sum();
        served
            .iter()
            .map(|&(_, w, s)| (s as f64 / total as f64) / (w as f64 / weights as f64))
            .collect()
    }

    #[test]
    fn four_cgroups_share_the_device_by_weight_100_250_500_1000() {
        // Seed 001's setup: 4 cgroups x 4 processes, one hardware queue each; a device serving 64 requests at a
        // time, 100 us each (640 K requests/s), busy with any one cgroup alone.
        let mut bench = Bench::new(16, 64, 100 * US);
        for (c, weight) in [100, 250, 500, 1000].into_iter().enumerate() {
            for t in 0..4 {
                bench.process(c as u32 + 1, weight, (c * 4 + t) as u32, 32, Op::Read);
            }
        }
        bench.run_until(300 * MS);
        bench.reset();
        bench.run_until(1300 * MS);
        let ratios = share_ratios(&bench.served_by_cgroup());
        for r in &ratios {
            assert!((r - 1.0).abs() < 0.02, "share / weight share: {ratios:?}");
        }
        assert!(
            bench.utilization() > 0.99,
            "work-conserving: {}",
            bench.utilization()
        );
        let (refills, early) = bench.kf.refills();
        assert!(
            refills >= 10 && early > 0,
            "refills {refills}, early {early}"
        );
    }

    #[test]
    fn one_to_six_cgroups_with_random_weights_share_by_weight() {
        let mut rng = Lcg(7);
        for nr_cgroups in 1..=6u32 {
            let mut bench = Bench::new(8, 48, 80 * US);
            for c in 0..nr_cgroups {
                let weight = 1 + rng.below(1000) as u32;
                // Two processes per cgroup, each deep enough to keep the device busy alone.
                for _ in 0..2 {
                    let hctx = rng.below(8) as u32;
                    bench.process(c + 1, weight, hctx, 48, Op::Read);
                }
            }
            bench.run_until(300 * MS);
            bench.reset();
            bench.run_until(1300 * MS);
            let served = bench.served_by_cgroup();
            let ratios = share_ratios(&served);
            for r in &ratios {
                assert!(
                    (r - 1.0).abs() < 0.03,
                    "{nr_cgroups} cgroups {served:?}: {ratios:?}"
                );
            }
            assert!(
                bench.utilization() > 0.99,
                "{nr_cgroups} cgroups: {}",
                bench.utilization()
            );
        }
    }

    #[test]
    fn when_a_cgroup_goes_idle_the_others_share_its_part_by_their_weights() {
        let mut bench = Bench::new(6, 64, 100 * US);
        let mut third = Vec::new();
        for (c, weight) in [100, 300, 600].into_iter().enumerate() {
            for t in 0..2 {
                let p = bench.process(c as u32 + 1, weight, (c * 2 + t) as u32, 64, Op::Read);
                if c == 2 {
                    third.push(p);
                }
            }
        }
        bench.run_until(500 * MS);
        for p in third {
            bench.processes[p].running = false;
        }
        // One period for the leftovers to drain and one for the refill to find cgroup 3 idle.
        bench.run_until(700 * MS);
        assert_eq!(bench.kf.is_active(3), Some(false));
        bench.reset();
        bench.run_until(1700 * MS);
        let served = bench.served_by_cgroup();
        assert_eq!(served[2].2, 0);
        let ratios = share_ratios(&served[..2]);
        assert!(
            ratios.iter().all(|r| (r - 1.0).abs() < 0.02),
            "1:3 between the two left: {served:?}"
        );
        assert!(bench.utilization() > 0.99, "{}", bench.utilization());
    }

    #[test]
    fn one_cgroup_alone_keeps_the_device_busy() {
        // Its budget runs out every few ms at first; each time it is the only active cgroup, so it is refilled
        // at once, and the prediction grows to what the device does in a period.
        let mut bench = Bench::new(4, 64, 100 * US);
        for h in 0..4 {
            bench.process(1, 100, h, 32, Op::Write);
        }
        bench.run_until(20 * MS);
        assert!(
            bench.utilization() > 0.99,
            "from the start: {}",
            bench.utilization()
        );
        bench.reset();
        bench.run_until(1020 * MS);
        assert!(bench.utilization() > 0.99, "{}", bench.utilization());
        // 640 K requests/s x 8 sectors x wr_scale 2 per 100 ms, within the granularity of a request.
        let predicted = bench.kf.predicted_sectors() as f64;
        assert!((predicted / 1_024_000.0 - 1.0).abs() < 0.05, "{predicted}");
    }

    #[test]
    fn per_cgroup_prediction_over_predicts_and_shortchanges_the_heaviest_cgroup() {
        let run = |per_cgroup: bool| {
            let mut bench = Bench::new(16, 64, 100 * US);
            bench
                .kf
                .set_tunable("per_cgroup_prediction", per_cgroup as i64)
                .unwrap();
            for (c, weight) in [100, 250, 500, 1000].into_iter().enumerate() {
                for t in 0..4 {
                    bench.process(c as u32 + 1, weight, (c * 4 + t) as u32, 32, Op::Read);
                }
            }
            bench.run_until(300 * MS);
            bench.reset();
            bench.run_until(1300 * MS);
            (
                share_ratios(&bench.served_by_cgroup()),
                bench.kf.predicted_sectors(),
            )
        };
        let (device_wide, capacity) = run(false);
        let (per_cgroup, over) = run(true);
        assert!((device_wide[3] - 1.0).abs() < 0.02, "{device_wide:?}");
        // The light cgroups run out early at a quarter of the device each and claim that for the whole period.
        assert!(over as f64 > 1.15 * capacity as f64, "{over} vs {capacity}");
        assert!(
            per_cgroup[3] < 0.9,
            "the heaviest cgroup gets less than its share: {per_cgroup:?}"
        );
    }

    #[test]
    fn random_traffic_never_loses_or_duplicates_requests_and_budgets_account_for_every_dispatch() {
        const NR_HCTX: u32 = 3;
        let mut early_refills = 0;
        for seed in 0..12 {
            let mut rng = Lcg(seed);
            let mut kf = KyberFairness::new(NR_HCTX);
            if seed % 2 == 1 {
                kf.set_tunable("per_cgroup_prediction", 1).unwrap();
            }
            kf.set_tunable("refill_period_nsec", 5_000_000).unwrap();
            let weights = [1, 10, 100, 1000, 37];
            let mut now = 0u64;
            let mut next_id = 0u32;
            let mut merged = 0u32;
            let mut queued: HashSet<u32> = HashSet::new();
            let mut in_flight: Vec<(Request, u64)> = Vec::new();
            let mut completed: HashSet<u32> = HashSet::new();
            let mut next_sector = [0u64; 8];
            // Tokens charged per cgroup since the last refill.
            let mut charged: HashMap<u32, i64> = HashMap::new();
            let mut refills = 0;

            let check = |kf: &KyberFairness, in_flight: &Vec<(Request, u64)>| {
                for domain in Domain::ALL {
                    let holding = in_flight
                        .iter()
                        .filter(|(r, _)| Domain::of(r.op) == domain)
                        .count();
                    assert_eq!(
                        kf.kyber().tokens_in_use(domain) as usize,
                        holding,
                        "seed {seed}: {domain:?}"
                    );
                }
            };

            for _ in 0..40_000 {
                now += rng.below(200_000);
                match rng.below(10) {
                    0..=2 => {
                        let op = rng.op();
                        let cpu = rng.below(8) as u32;
                        let cgroup = rng.below(weights.len() as u64) as u32;
                        let (sector, nr_sectors) = rng.extent(op, &mut next_sector[cpu as usize]);
                        let mut bio = rq(
                            next_id,
                            op,
                            cgroup,
                            weights[cgroup as usize],
                            cpu % NR_HCTX,
                            nr_sectors,
                        );
                        bio.cpu = cpu;
                        bio.sector = sector;
                        bio.start_ns = now;
                        next_id += 1;
                        match kf.bio_merge(&bio, 256) {
                            Some(into) => {
                                assert!(
                                    queued.contains(&into),
                                    "seed {seed}: merged into a request not queued"
                                );
                                merged += 1;
                            }
                            None => {
                                queued.insert(bio.id);
                                kf.insert(bio, now);
                            }
                        }
                    }
                    3..=5 => {
                        let hctx = rng.below(NR_HCTX as u64) as u32;
                        let scale = kf.wr_scale() as i64;
                        if let Some(r) = kf.dispatch(hctx, now) {
                            assert!(
                                queued.remove(&r.id),
                                "seed {seed}: request {} dispatched twice",
                                r.id
                            );
                            assert_eq!(r.hctx, hctx);
                            if kf.refills().0 != refills {
                                // The dispatch that spent the last tokens asked for a refill; none happened yet.
                                unreachable!("refills only run from the timer");
                            }
                            let cost = match r.op {
                                Op::Write | Op::Discard => r.nr_sectors as i64 * scale,
                                _ => r.nr_sectors as i64,
                            };
                            *charged.entry(r.cgroup).or_default() += cost;
                            let c = r.cgroup;
                            assert_eq!(
                                kf.allotted(c).unwrap() - kf.budget(c).unwrap(),
                                charged[&c],
                                "seed {seed}: cgroup {c} budget"
                            );
                            in_flight.push((r, now));
                        }
                    }
                    6..=8 => {
                        if !in_flight.is_empty() {
                            let (r, issued) =
                                in_flight.swap_remove(rng.below(in_flight.len() as u64) as usize);
                            kf.completed(&r, issued, now);
                            assert!(completed.insert(r.id), "seed {seed}: completed twice");
                        }
                    }
                    _ => {
                        if kf.next_timer_ns().is_some_and(|at| at <= now) {
                            kf.timer(now);
                            if kf.refills().0 != refills {
                                refills = kf.refills().0;
                                charged.clear();
                            }
                        }
                    }
                }
                check(&kf, &in_flight);
                for c in 0..weights.len() as u32 {
                    if let Some(budget) = kf.budget(c) {
                        let allotted = kf.allotted(c).unwrap();
                        assert!(allotted >= 1, "seed {seed}: cgroup {c} allotted {allotted}");
                        assert!(
                            budget > -32 * 1000,
                            "seed {seed}: overdraft beyond one request"
                        );
                    }
                }
            }

            // Drain: everything queued is dispatched (refills come from the timer) and completed.
            for _ in 0..10_000 {
                let mut progress = false;
                for hctx in 0..NR_HCTX {
                    while let Some(r) = kf.dispatch(hctx, now) {
                        assert!(queued.remove(&r.id));
                        in_flight.push((r, now));
                        progress = true;
                    }
                }
                check(&kf, &in_flight);
                now += 10_000;
                for (r, issued) in in_flight.drain(..) {
                    kf.completed(&r, issued, now);
                    assert!(completed.insert(r.id));
                    progress = true;
                }
                if !progress {
                    if !(0..NR_HCTX).any(|h| kf.has_work(h)) {
                        break;
                    }
                    let due = kf
                        .next_timer_ns()
                        .expect("throttled work always has a refill coming");
                    now = now.max(due);
                    kf.timer(now);
                }
            }
            assert!(
                queued.is_empty(),
                "seed {seed}: {} requests stuck",
                queued.len()
            );
            assert!((0..NR_HCTX).all(|h| !kf.has_work(h)));
            assert_eq!(completed.len() as u32 + merged, next_id, "seed {seed}");
            assert!(
                merged > 0,
                "seed {seed}: the workload should exercise merges"
            );
            early_refills += kf.refills().1;
            for domain in Domain::ALL {
                assert_eq!(
                    kf.kyber().tokens_in_use(domain),
                    0,
                    "seed {seed}: tokens returned"
                );
            }
        }
        assert!(
            early_refills > 10,
            "the workload should run budgets out: {early_refills} early refills"
        );
    }
}
