//! `kyber-fairness`: the proportional-share scheduler of Son, Oh and Ahn (seed 001, §IV and Algorithm 1), built on
//! [`Kyber`]. It shares the device among cgroups in proportion to their weights with tokens
//! that each cgroup spends on its own, so dispatching needs no device-wide lock. The same algorithm runs in a real
//! Linux 6.12 kernel as our module `kmod/kyber-fairness` (in the VM lab); keep the two in step: docs/kmod.md lists
//! every difference.
//!
//! # Model
//!
//! * **Kyber underneath, unchanged.** Domains, the device-wide token pool per domain (a dispatched request holds
//!   one until it completes), batching per hardware queue, the latency histograms, the 100 ms timer that resizes
//!   the pools, token waits and wake-ups: all are Kyber's own code (`kyber.rs`), so `read_lat_nsec` and
//!   `write_lat_nsec` behave as under `kyber`.
//! * **Per-cgroup request lists on every hardware queue.** Kyber's per-CPU staging lists and per-hardware-queue
//!   dispatch lists are indexed by `[cgroup][domain]`. Bio merges look only at the bio's own cgroup's lists.
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

use crate::id_map::IdMap;

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
    slot_of: IdMap<u32, usize>,
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
            slot_of: IdMap::default(),
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

    fn set_kernel_version(&mut self, kernel: crate::KernelVersion) {
        self.kyber.set_kernel_version(kernel);
    }

    fn limit_depth(&self, rq: &Request, tags: crate::SchedTags) -> Option<u32> {
        self.kyber.limit_depth(rq, tags)
    }

    fn min_shallow_depth(&self, tags: crate::SchedTags) -> Option<u32> {
        self.kyber.min_shallow_depth(tags)
    }

    fn completed(&mut self, rq: &Request, issue_ns: u64, now_ns: u64) -> AfterCompletion {
        // A cgroup out of budget holds its requests while `has_work` is true; the model re-runs the queue after
        // every completion, as it did for Kyber before blk-mq's restart was modelled (not analysed further in the
        // paper's code: a named simplification).
        match self.kyber.completed(rq, issue_ns, now_ns) {
            AfterCompletion::Restart => AfterCompletion::RunQueue,
            after => after,
        }
    }

    fn take_woken_hctxs(&mut self, into: &mut Vec<u32>) {
        self.kyber.take_woken_hctxs(into)
    }

    /// Kyber's token wait queues, whose spinlocks its dispatch and completion take.
    fn inner_locks(&self) -> u32 {
        self.kyber.inner_locks()
    }

    fn take_inner_lock_uses(&mut self, into: &mut Vec<crate::InnerLockUse>) {
        self.kyber.take_inner_lock_uses(into)
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
mod tests;
