//! `k2`: the work-constraining scheduler of Miemietz, Weisbach, Roitzsch and Härtig, "K2: Work-Constraining
//! Scheduling of NVMe-Attached Storage" (RTSS 2019, seed 002 §IV), restated from the paper and the behaviour of its
//! kernel module (TUD-OS/k2-scheduler, tag k2-rtss19), not from its code. The same algorithm runs in a real Linux
//! 6.12 kernel as our module `kmod/k2` (in the VM lab); keep the two in step: docs/kmod.md lists every difference.
//!
//! # Model
//!
//! Nine FIFO lists for the whole device: one per real-time I/O priority level (RT 0, the highest, … RT 7) and one
//! best-effort list for every other request (classes best-effort, idle and none). One instance serves every hardware
//! queue, so [`Elevator::dispatch`] may return a request inserted on any hardware queue, and [`Elevator::locking`]
//! is [`Locking::Device`] (the module's one spinlock).
//!
//! - **Insert:** to the tail of the request's list. The list follows the request's I/O priority: class RT at level
//!   `l` → RT list `l`; an RT request without a valid level (outside 0..=7) → RT level 4, the kernel's
//!   `IOPRIO_NORM`, which is what an RT task that never set a level gets from its nice value; every other class →
//!   the best-effort list.
//! - **Dispatch:** if `inflight >= max_inflight`, nothing (work-constraining: the request stays in its list until a
//!   completion makes room). Otherwise the head of the lowest-numbered non-empty RT list, else the head of the
//!   best-effort list; `inflight += 1`. Strict priority between lists, FIFO within a list, and no distinction
//!   between reads and writes (the paper, §IV-A: with a write cache, writes do not disturb reads enough to matter).
//! - **Completion:** `inflight -= 1`. When that brings `inflight` from the bound to below it, every hardware queue
//!   is re-run ([`AfterCompletion::RunAllQueues`]): requests held back by the bound may sit behind any of them.
//! - `inflight` counts requests dispatched and not yet completed across all hardware queues of the device: the
//!   "total length of the NVMe queues" of the paper. Setting the bound very high makes K2 approximate `none`.
//!
//! # Tunables (sysfs names and units)
//!
//! | name | unit | default | accepted |
//! |---|---|---|---|
//! | `max_inflight` | requests | 32 | 1 ..= 4294967295 |
//!
//! The paper evaluates 8, 16 and 32 ("K2-8", "K2-16", "K2-32").
//!
//! # Simplifications and deviations (all deliberate)
//!
//! - **Priority mapping: the intended one, not the module's.** The module reads the submitting task's I/O priority
//!   and builds the level with `IOPRIO_PRIO_VALUE(class, ioprio)`, which ORs the class bits into the value; for an
//!   RT task that is always ≥ 8, fails the range check and falls back to level 4. So in the module every RT request
//!   lands on RT level 4 and the eight RT levels behave as one. Here the request's own level is used, as the paper
//!   describes (§IV-B: "one for each of the eight Linux real-time I/O priority levels").
//! - **The request's priority, not the current task's.** The module looks at `current` at insert time; in the
//!   simulator every request carries its submitting process's class and level, which is the same task for fio's
//!   direct I/O.
//! - **`has_work` as intended.** The module's `has_work` returns true when an RT list is *empty* (an inverted test),
//!   so it reports work whenever the bound allows; here it reports work only when a list holds a request. This only
//!   saves blk-mq a `dispatch` call that finds nothing.
//! - **Re-run on the transition only.** Like the module, completions re-run all hardware queues only when the count
//!   falls from the bound to just below it; other completions ask for blk-mq's usual restart of their own queue.
//!   The module's re-run is asynchronous (kworkers); here it runs at the completion's time.
//! - **No merging in the scheduler.** The module has no `bio_merge` hook, and with an elevator blk-mq's software
//!   queues stay empty, so a bio never merges into a request K2 holds ([`Elevator::bio_merge`] returns None). Bios
//!   of one plug still merge before they reach K2, as in the kernel.
//! - **Tunable range.** `max_inflight = 0` is rejected: the module accepts it and then never dispatches again
//!   (and silently ignores text it cannot parse).
//! - **No requeues.** The simulator never hands a dispatched request back: blk-mq checks for a free driver tag
//!   before asking the elevator, and the device accepts every command. So `inflight` needs no requeue path and is
//!   exact: each request is counted once at dispatch and released once at completion.
//! - **Lock acquisitions** ([`Elevator::lock_acquisitions`]): the module takes its lock in `insert_requests`,
//!   `has_work`, `dispatch_request` and `completed_request`. Per bio that is counted as 2 on submission (insert;
//!   the `has_work` that ends the dispatch loop of the queue run that follows), 2 per dispatch call (`has_work` and
//!   `dispatch`) wherever the queue runs, and 1 on completion. Not counted: blk-mq's extra `has_work` probes (the pending check before a queue run, and one per
//!   hardware queue when a completion at the bound re-runs them all), so under contention this undercounts.

use std::collections::VecDeque;

use crate::{
    tunable_in_range, AfterCompletion, Elevator, IoprioClass, LockAcquisitions, Locking, Request,
    TunableError,
};

/// The module's default bound on requests in flight on the device.
pub const DEFAULT_MAX_INFLIGHT: u32 = 32;
/// Linux real-time I/O priority levels (IOPRIO_BE_NR): 0 is the highest.
pub const RT_LEVELS: usize = 8;
/// Index of the best-effort list (after the RT lists).
pub const BEST_EFFORT: usize = RT_LEVELS;
const LISTS: usize = RT_LEVELS + 1;
/// The level of an RT request that has none (the kernel's IOPRIO_NORM).
pub const DEFAULT_RT_LEVEL: u8 = 4;

pub struct K2 {
    /// RT lists 0..8, then the best-effort list.
    lists: [VecDeque<Request>; LISTS],
    inflight: u32,
    max_inflight: u32,
    /// Requests dispatched from each list since the start (introspection).
    dispatched: [u64; LISTS],
    /// The most requests ever in flight at once (introspection).
    inflight_peak: u32,
}

impl Default for K2 {
    fn default() -> Self {
        Self::new()
    }
}

impl K2 {
    pub fn new() -> Self {
        Self {
            lists: Default::default(),
            inflight: 0,
            max_inflight: DEFAULT_MAX_INFLIGHT,
            dispatched: [0; LISTS],
            inflight_peak: 0,
        }
    }

    /// The list a request goes to: its RT level, or the best-effort list.
    pub fn list_of(rq: &Request) -> usize {
        match rq.ioprio_class {
            IoprioClass::RealTime if (rq.ioprio_level as usize) < RT_LEVELS => {
                rq.ioprio_level as usize
            }
            IoprioClass::RealTime => DEFAULT_RT_LEVEL as usize,
            IoprioClass::BestEffort | IoprioClass::Idle | IoprioClass::None => BEST_EFFORT,
        }
    }

    /// Requests dispatched and not yet completed, over the whole device.
    pub fn inflight(&self) -> u32 {
        self.inflight
    }

    pub fn max_inflight(&self) -> u32 {
        self.max_inflight
    }

    fn queued(&self) -> usize {
        self.lists.iter().map(VecDeque::len).sum()
    }

    fn list_name(list: usize) -> String {
        if list == BEST_EFFORT {
            "be".to_string()
        } else {
            format!("rt{list}")
        }
    }
}

impl Elevator for K2 {
    fn name(&self) -> &'static str {
        "k2"
    }

    fn locking(&self) -> Locking {
        Locking::Device
    }

    /// insert and the has_work that ends the queue run after it; has_work + dispatch per dispatch call;
    /// completed_request (see the module doc).
    fn lock_acquisitions(&self) -> LockAcquisitions {
        LockAcquisitions {
            submit: 2,
            dispatch: 2,
            complete: 1,
            submit_unbooked: 0,
        }
    }

    fn bio_merge(&mut self, _bio: &Request, _max_sectors: u32) -> Option<u32> {
        None // the module has no bio_merge hook
    }

    fn insert(&mut self, rq: Request, _now_ns: u64) {
        self.lists[Self::list_of(&rq)].push_back(rq);
    }

    fn dispatch(&mut self, _hctx: u32, _now_ns: u64) -> Option<Request> {
        if self.inflight >= self.max_inflight {
            return None;
        }
        let list = self.lists.iter().position(|l| !l.is_empty())?;
        let rq = self.lists[list].pop_front()?;
        self.inflight += 1;
        self.inflight_peak = self.inflight_peak.max(self.inflight);
        self.dispatched[list] += 1;
        Some(rq)
    }

    fn has_work(&self, _hctx: u32) -> bool {
        self.inflight < self.max_inflight && self.lists.iter().any(|l| !l.is_empty())
    }

    fn completed(&mut self, _rq: &Request, _issue_ns: u64, _now_ns: u64) -> AfterCompletion {
        debug_assert!(
            self.inflight > 0,
            "k2: completion of a request it never dispatched"
        );
        let was_at_bound = self.inflight >= self.max_inflight;
        self.inflight = self.inflight.saturating_sub(1);
        if was_at_bound && self.inflight < self.max_inflight {
            AfterCompletion::RunAllQueues
        } else {
            AfterCompletion::RunQueue
        }
    }

    fn tunables(&self) -> Vec<(&'static str, i64)> {
        vec![("max_inflight", self.max_inflight as i64)]
    }

    fn set_tunable(&mut self, name: &str, value: i64) -> Result<(), TunableError> {
        match name {
            "max_inflight" => {
                let unit = " (requests in flight on the whole device)";
                self.max_inflight = tunable_in_range(name, value, 1, u32::MAX as i64, unit)? as u32;
                Ok(())
            }
            _ => Err(TunableError::Unknown {
                name: name.to_string(),
                known: vec!["max_inflight"],
            }),
        }
    }

    /// `inflight`, `max_inflight`, `inflight_peak`, `queued` (all lists), and per list (`rt0` … `rt7`, `be`):
    /// `queued_<list>` and `dispatched_<list>` (cumulative).
    fn introspect(&self) -> Vec<(String, f64)> {
        let mut out = vec![
            ("inflight".to_string(), self.inflight as f64),
            ("max_inflight".to_string(), self.max_inflight as f64),
            ("inflight_peak".to_string(), self.inflight_peak as f64),
            ("queued".to_string(), self.queued() as f64),
        ];
        for list in 0..LISTS {
            let name = Self::list_name(list);
            out.push((format!("queued_{name}"), self.lists[list].len() as f64));
            out.push((format!("dispatched_{name}"), self.dispatched[list] as f64));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{self, check_conservation, Event, Flow, Hook, Lcg, Traffic};
    use crate::Op;
    use std::collections::HashMap;

    fn rq(id: u32, class: IoprioClass, level: u8, hctx: u32) -> Request {
        let op = if id.is_multiple_of(2) {
            Op::Read
        } else {
            Op::Write
        };
        Request {
            cpu: hctx,
            hctx,
            ioprio_class: class,
            ioprio_level: level,
            process: id,
            ..testkit::rq(id, op, id as u64 * 8, 8)
        }
    }

    fn be(id: u32) -> Request {
        rq(id, IoprioClass::BestEffort, 4, 0)
    }

    fn rt(id: u32, level: u8) -> Request {
        rq(id, IoprioClass::RealTime, level, 0)
    }

    fn ids(k2: &mut K2, hctx: u32) -> Vec<u32> {
        std::iter::from_fn(|| k2.dispatch(hctx, 0).map(|r| r.id)).collect()
    }

    #[test]
    fn maps_rt_levels_to_their_own_lists_and_everything_else_to_best_effort() {
        for level in 0..8 {
            assert_eq!(K2::list_of(&rt(0, level)), level as usize);
        }
        assert_eq!(
            K2::list_of(&rt(0, 9)),
            4,
            "an RT request without a valid level gets IOPRIO_NORM"
        );
        for class in [
            IoprioClass::BestEffort,
            IoprioClass::Idle,
            IoprioClass::None,
        ] {
            assert_eq!(K2::list_of(&rq(0, class, 0, 0)), BEST_EFFORT, "{class:?}");
        }
    }

    #[test]
    fn serves_the_highest_real_time_level_first_then_best_effort() {
        let mut k2 = K2::new();
        k2.insert(be(1), 0);
        k2.insert(rt(2, 7), 0);
        k2.insert(rt(3, 0), 0);
        k2.insert(rq(4, IoprioClass::Idle, 7, 1), 0);
        k2.insert(rt(5, 3), 0);
        assert_eq!(ids(&mut k2, 0), vec![3, 5, 2, 1, 4]);
    }

    #[test]
    fn keeps_arrival_order_within_a_level_regardless_of_direction_or_sector() {
        let mut k2 = K2::new();
        // Descending sectors, alternating reads and writes, from two hardware queues: still FIFO.
        for (i, id) in [10, 7, 4, 3].into_iter().enumerate() {
            k2.insert(rq(id, IoprioClass::RealTime, 2, i as u32 % 2), 0);
        }
        for id in [9, 2, 8] {
            k2.insert(be(id), 0);
        }
        assert_eq!(ids(&mut k2, 1), vec![10, 7, 4, 3, 9, 2, 8]);
    }

    #[test]
    fn best_effort_waits_while_any_real_time_request_is_queued() {
        let mut k2 = K2::new();
        k2.insert(be(1), 0);
        k2.insert(rt(2, 6), 0);
        assert_eq!(k2.dispatch(0, 0).unwrap().id, 2);
        k2.insert(rt(3, 6), 0); // arrives later than the BE request, still goes first
        assert_eq!(k2.dispatch(0, 0).unwrap().id, 3);
        assert_eq!(
            k2.dispatch(0, 0).unwrap().id,
            1,
            "only now, with no RT request waiting"
        );
    }

    #[test]
    fn holds_requests_back_at_the_bound_and_releases_one_per_completion() {
        let mut k2 = K2::new();
        k2.set_tunable("max_inflight", 2).unwrap();
        for id in 1..=4 {
            k2.insert(be(id), 0);
        }
        let first = k2.dispatch(0, 0).unwrap();
        let second = k2.dispatch(1, 0).unwrap();
        assert_eq!((first.id, second.id), (1, 2));
        assert_eq!(k2.inflight(), 2);
        assert!(
            !k2.has_work(0) && !k2.has_work(1),
            "requests wait, but the bound is reached"
        );
        assert!(k2.dispatch(0, 0).is_none());
        // A real-time request arriving now still waits for room, but jumps the queue.
        k2.insert(rt(5, 0), 0);
        assert!(k2.dispatch(0, 0).is_none());
        assert_eq!(k2.completed(&first, 0, 10), AfterCompletion::RunAllQueues);
        assert!(k2.has_work(1));
        assert_eq!(k2.dispatch(1, 10).unwrap().id, 5);
        assert!(k2.dispatch(1, 10).is_none(), "full again");
    }

    #[test]
    fn completion_below_the_bound_re_runs_all_queues_only_on_the_transition() {
        let mut k2 = K2::new();
        k2.set_tunable("max_inflight", 3).unwrap();
        for id in 1..=3 {
            k2.insert(be(id), 0);
        }
        let done: Vec<Request> = std::iter::from_fn(|| k2.dispatch(0, 0)).collect();
        assert_eq!(done.len(), 3);
        assert_eq!(
            k2.completed(&done[0], 0, 1),
            AfterCompletion::RunAllQueues,
            "3 -> 2: room opens, queues on other CPUs may hold waiting requests"
        );
        assert_eq!(
            k2.completed(&done[1], 0, 2),
            AfterCompletion::RunQueue,
            "2 -> 1"
        );
        assert_eq!(
            k2.completed(&done[2], 0, 3),
            AfterCompletion::RunQueue,
            "1 -> 0"
        );
        assert_eq!(k2.inflight(), 0);
    }

    #[test]
    fn a_lowered_bound_lets_the_excess_drain_before_re_running() {
        let mut k2 = K2::new();
        for id in 1..=4 {
            k2.insert(be(id), 0);
        }
        let out: Vec<Request> = std::iter::from_fn(|| k2.dispatch(0, 0)).collect();
        assert_eq!(out.len(), 4);
        k2.set_tunable("max_inflight", 2).unwrap();
        assert_eq!(
            k2.completed(&out[0], 0, 1),
            AfterCompletion::RunQueue,
            "4 -> 3, still over"
        );
        assert_eq!(
            k2.completed(&out[1], 0, 1),
            AfterCompletion::RunQueue,
            "3 -> 2, at the bound"
        );
        assert_eq!(
            k2.completed(&out[2], 0, 1),
            AfterCompletion::RunAllQueues,
            "2 -> 1"
        );
    }

    #[test]
    fn dispatches_from_any_hardware_queue_and_does_not_merge() {
        let mut k2 = K2::new();
        k2.insert(rq(1, IoprioClass::BestEffort, 0, 3), 0);
        assert!(
            k2.has_work(0),
            "device-wide lists: hctx 0 sees hctx 3's request"
        );
        let contiguous = Request {
            sector: 16,
            ..rq(2, IoprioClass::BestEffort, 0, 3)
        };
        assert_eq!(k2.bio_merge(&contiguous, 256), None);
        assert_eq!(k2.dispatch(0, 0).unwrap().id, 1);
        assert!(!k2.has_work(3));
    }

    #[test]
    fn max_inflight_is_the_only_tunable_and_must_be_positive() {
        let mut k2 = K2::new();
        assert_eq!(k2.tunables(), vec![("max_inflight", 32)]);
        k2.set_tunable("max_inflight", 8).unwrap();
        assert_eq!(k2.tunables(), vec![("max_inflight", 8)]);
        for bad in [0, -1, u32::MAX as i64 + 1] {
            let err = k2.set_tunable("max_inflight", bad).unwrap_err();
            assert!(matches!(err, TunableError::OutOfRange { .. }), "{bad}");
            assert!(err.to_string().contains("max_inflight") && err.to_string().contains("1..="));
        }
        assert_eq!(k2.max_inflight(), 8, "a rejected value changes nothing");
        let err = k2.set_tunable("read_expire", 5).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown tunable \"read_expire\": expected one of max_inflight"
        );
    }

    #[test]
    fn introspection_shows_in_flight_and_per_list_counts() {
        let mut k2 = K2::new();
        k2.insert(rt(1, 2), 0);
        k2.insert(be(2), 0);
        k2.insert(be(3), 0);
        k2.dispatch(0, 0).unwrap();
        k2.dispatch(0, 0).unwrap();
        let state: HashMap<String, f64> = k2.introspect().into_iter().collect();
        assert_eq!(state["inflight"], 2.0);
        assert_eq!(state["max_inflight"], 32.0);
        assert_eq!(state["inflight_peak"], 2.0);
        assert_eq!(state["queued"], 1.0);
        assert_eq!(state["dispatched_rt2"], 1.0);
        assert_eq!(state["dispatched_be"], 1.0);
        assert_eq!(state["queued_be"], 1.0);
        assert_eq!(state["queued_rt0"], 0.0);
        assert_eq!(state.len(), 4 + 2 * 9);
    }

    /// The test's model of K2 for the conservation harness: its bound and, per list, the ids in arrival order.
    struct Model {
        bound: u32,
        lists: Vec<VecDeque<u32>>,
        /// At the dispatch under way: the list it must take from, and whether the bound leaves room.
        expected: Option<usize>,
        room: bool,
        /// Dispatches that found work held back by the bound.
        bound_reached: u32,
    }

    impl Hook<K2> for Model {
        fn before_step(&mut self, k2: &mut K2, flow: &Flow, rng: &mut Lcg) {
            if flow.step.is_multiple_of(2_500) && flow.step > 0 {
                self.bound = 1 + rng.below(16) as u32;
                k2.set_tunable("max_inflight", self.bound as i64).unwrap();
            }
        }

        fn check(&mut self, k2: &K2, flow: &Flow, event: Event) {
            let seed = flow.seed;
            match event {
                Event::Inserted(r) => self.lists[K2::list_of(r)].push_back(r.id),
                Event::Dispatching(hctx) => {
                    self.expected = self.lists.iter().position(|l| !l.is_empty());
                    self.room = (flow.in_flight.len() as u32) < self.bound;
                    assert_eq!(
                        k2.has_work(hctx),
                        self.room && self.expected.is_some(),
                        "seed {seed}"
                    );
                }
                Event::Dispatched(_, Some(r)) => {
                    let list = self.expected.expect("dispatched from empty lists");
                    assert_eq!(
                        self.lists[list].pop_front(),
                        Some(r.id),
                        "seed {seed}: order"
                    );
                    assert!(
                        flow.in_flight.len() as u32 <= self.bound,
                        "seed {seed}: over the bound"
                    );
                }
                Event::Dispatched(_, None) => {
                    assert!(
                        !self.room || self.expected.is_none(),
                        "seed {seed}: idle with room and work"
                    );
                    if !self.room && self.expected.is_some() {
                        self.bound_reached += 1;
                    }
                }
                Event::Completed(_, after) => {
                    let before = flow.in_flight.len() as u32 + 1;
                    let expected = if before >= self.bound && before - 1 < self.bound {
                        AfterCompletion::RunAllQueues
                    } else {
                        AfterCompletion::RunQueue
                    };
                    assert_eq!(after, expected, "seed {seed}");
                }
                Event::Step => {
                    assert_eq!(
                        k2.inflight() as usize,
                        flow.in_flight.len(),
                        "seed {seed}: count"
                    );
                    assert_eq!(k2.queued(), self.lists.iter().map(VecDeque::len).sum());
                    assert_eq!(k2.queued(), flow.held());
                }
                Event::Drained => assert_eq!(k2.inflight(), 0),
                _ => {}
            }
        }
    }

    /// Random arrivals (any class and level, any hardware queue), dispatches, completions in any order, and bound
    /// changes: K2 never has more than the bound in flight (once an over-bound excess has drained), its count
    /// always equals the requests dispatched and not completed, it only stops dispatching at the bound or when
    /// empty, each dispatch is the oldest request of the best non-empty list, completions re-run every queue exactly
    /// when they bring the count below the bound, and nothing is lost or duplicated.
    #[test]
    fn random_traffic_never_exceeds_the_bound_and_never_loses_a_request() {
        let traffic = Traffic {
            seeds: 0..24,
            steps: 20_000,
            nr_hw_queues: 4,
            nr_cpus: 4,
            driver_depth: usize::MAX,
            merges: false,
            ..Traffic::default()
        };
        let models = check_conservation(&traffic, |seed| {
            let mut k2 = K2::new();
            let bound = 1 + Lcg(seed).below(16) as u32;
            k2.set_tunable("max_inflight", bound as i64).unwrap();
            let model = Model {
                bound,
                lists: vec![VecDeque::new(); LISTS],
                expected: None,
                room: false,
                bound_reached: 0,
            };
            (k2, model)
        });
        let bound_reached: u32 = models.iter().map(|m| m.bound_reached).sum();
        assert!(
            bound_reached > 1000,
            "the bound was exercised: {bound_reached}"
        );
    }
}
