//! Shared test helpers: a request builder, a small deterministic generator, and the random-traffic conservation
//! harness every policy runs, with a hook for the policy's own invariants.
//!
//! [`check_conservation`] drives a policy with random bio submissions (some merge into held requests), dispatches
//! on random hardware queues, completions in any order and timer firings, then drains it. Whatever the policy, every
//! inserted request must be dispatched exactly once and complete, no merged bio may come out on its own, the policy
//! must end empty, and it may only hand out requests it holds. A policy adds what only it can check through a
//! [`Hook`]: it sees every [`Event`] with the policy and the harness's [`Flow`] (what is held, in flight, done).

use std::collections::BTreeSet;
use std::ops::Range;

use crate::{AfterCompletion, Elevator, IoprioClass, Op, Request};

/// A synchronous request of process 0 (writes too, as direct I/O is), best effort.
pub fn rq(id: u32, op: Op, sector: u64, nr_sectors: u32) -> Request {
    Request {
        id,
        op,
        sector,
        nr_sectors,
        cpu: 0,
        hctx: 0,
        ioprio_class: IoprioClass::None,
        ioprio_level: 4,
        process: 0,
        cgroup: 0,
        cgroup_weight: 100,
        sync: true,
        start_ns: 0,
    }
}

/// Deterministic pseudo-random numbers (Knuth's MMIX LCG), high bits only.
pub struct Lcg(pub u64);

impl Lcg {
    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n.max(1)
    }

    /// One of `items`, uniformly.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

/// Reads and writes, two to one.
pub const READS_AND_WRITES: &[Op] = &[Op::Read, Op::Read, Op::Write];

/// 50% reads, 35% writes, 10% discards, 5% flushes.
#[rustfmt::skip]
pub const EVERY_OP: &[Op] = &[
    Op::Read, Op::Read, Op::Read, Op::Read, Op::Read, Op::Read, Op::Read, Op::Read, Op::Read, Op::Read,
    Op::Write, Op::Write, Op::Write, Op::Write, Op::Write, Op::Write, Op::Write,
    Op::Discard, Op::Discard, Op::Flush,
];

/// What [`check_conservation`] submits, and how its stand-in device takes requests.
#[derive(Debug, Clone)]
pub struct Traffic {
    pub seeds: Range<u64>,
    /// Random steps per seed before the drain.
    pub steps: u32,
    /// Hardware queues: a bio goes to its CPU's (`cpu % nr_hw_queues`); each dispatch step asks a random one.
    pub nr_hw_queues: u32,
    pub nr_cpus: u32,
    /// Submitting processes; process `p` is in cgroup `p % cgroup_weights.len()`, of that weight.
    pub nr_processes: u32,
    pub cgroup_weights: &'static [u32],
    /// Operations, drawn uniformly (repeat one to make it likelier). Reads are synchronous, writes half the time.
    pub ops: &'static [Op],
    /// Bio sizes in sectors, drawn uniformly (a flush carries none).
    pub bio_sectors: &'static [u32],
    /// Half the bios continue their process's previous one; the others start at a random multiple of 8 sectors
    /// below this (a small span makes them land next to held requests: front and back merges).
    pub span_sectors: u64,
    /// The merge size limit given to `bio_merge`.
    pub max_sectors: u32,
    /// Requests the device takes at once; no dispatch is asked for while it holds this many.
    pub driver_depth: usize,
    /// Time between two steps: uniformly below this. A due timer fires at the start of a step.
    pub max_gap_ns: u64,
    /// One step in ten moves time on to the policy's next timer and fires it (an idle slice cut short by nothing
    /// else happening). Otherwise those steps do nothing.
    pub jump_to_timers: bool,
    /// A dispatch for hardware queue `h` returns only requests inserted on `h` (per-hctx policies).
    pub own_hctx_only: bool,
    /// The policy never holds work back: with work and nothing in flight, a dispatch returns a request.
    pub work_conserving: bool,
    /// Every seed must see bios merged into held requests (false for a policy that never merges).
    pub merges: bool,
}

impl Default for Traffic {
    /// Four processes in the root cgroup, every I/O priority class, reads and writes of 4 or 8 KiB within 256 KiB
    /// (merges both ways), one hardware queue, a device taking 8 requests at once, steps up to 2 ms apart.
    fn default() -> Self {
        Self {
            seeds: 1..31,
            steps: 3000,
            nr_hw_queues: 1,
            nr_cpus: 1,
            nr_processes: 4,
            cgroup_weights: &[100],
            ops: READS_AND_WRITES,
            bio_sectors: &[8, 16],
            span_sectors: 512,
            max_sectors: 64,
            driver_depth: 8,
            max_gap_ns: 2_000_000,
            jump_to_timers: false,
            own_hctx_only: false,
            work_conserving: false,
            merges: true,
        }
    }
}

/// The harness's bookkeeping, as hooks see it.
#[derive(Debug, Default)]
pub struct Flow {
    pub seed: u64,
    /// The random step under way (the last one once draining).
    pub step: u32,
    pub draining: bool,
    pub now_ns: u64,
    /// Ids of the requests inserted (bios that did not merge), dispatched and completed so far.
    pub inserted: BTreeSet<u32>,
    pub dispatched: BTreeSet<u32>,
    pub completed: BTreeSet<u32>,
    /// Ids of the bios that merged into a held request.
    pub merged: BTreeSet<u32>,
    /// Requests at the device, with when each was dispatched.
    pub in_flight: Vec<(Request, u64)>,
}

impl Flow {
    /// Requests the policy holds: inserted, not yet dispatched.
    pub fn held(&self) -> usize {
        self.inserted.len() - self.dispatched.len()
    }
}

/// What just happened, for a [`Hook`] to check. The flow is already updated, except where the event says "about to".
pub enum Event<'a> {
    /// A bio that did not merge was inserted as this request.
    Inserted(&'a Request),
    /// About to ask for a request for this hardware queue.
    Dispatching(u32),
    /// What the dispatch for this hardware queue returned (in flight already if a request).
    Dispatched(u32, Option<&'a Request>),
    /// This request completed (no longer in flight) and the policy asked for this.
    Completed(&'a Request, AfterCompletion),
    /// About to fire the policy's timer, which is due.
    TimerDue,
    TimerFired,
    /// The end of a random step, or of a drain round.
    Step,
    /// Everything has come out and the policy is empty (after a few settling timer firings).
    Drained,
}

/// A policy's own checks, run by [`check_conservation`]; `()` has none.
pub trait Hook<E> {
    /// Before each random step: change a tunable, say. The harness's generator keeps the run deterministic.
    fn before_step(&mut self, _policy: &mut E, _flow: &Flow, _rng: &mut Lcg) {}
    /// After (or, for `Dispatching` and `TimerDue`, before) each event: assert the policy's invariants.
    fn check(&mut self, _policy: &E, _flow: &Flow, _event: Event) {}
}

impl<E> Hook<E> for () {}

/// Random traffic, then a drain, for each seed of `traffic`; every request comes out once (see the module doc).
/// `make` builds the policy and its hook for a seed; the hooks are returned, in seed order, for checks across
/// seeds (that the traffic exercised something, say).
pub fn check_conservation<E: Elevator, H: Hook<E>>(
    traffic: &Traffic,
    mut make: impl FnMut(u64) -> (E, H),
) -> Vec<H> {
    traffic
        .seeds
        .clone()
        .map(|seed| {
            let (policy, hook) = make(seed);
            let mut run = Run {
                traffic,
                policy,
                hook,
                rng: Lcg(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1),
                flow: Flow {
                    seed,
                    ..Flow::default()
                },
                next_id: 0,
                next_sector: vec![0; traffic.nr_processes as usize],
            };
            run.random_steps();
            run.drain();
            run.hook
        })
        .collect()
}

/// One seed's run.
struct Run<'t, E, H> {
    traffic: &'t Traffic,
    policy: E,
    hook: H,
    rng: Lcg,
    flow: Flow,
    next_id: u32,
    /// Where each process's next sequential bio starts.
    next_sector: Vec<u64>,
}

impl<E: Elevator, H: Hook<E>> Run<'_, E, H> {
    fn random_steps(&mut self) {
        let seed = self.flow.seed;
        for step in 0..self.traffic.steps {
            self.flow.step = step;
            self.hook
                .before_step(&mut self.policy, &self.flow, &mut self.rng);
            self.flow.now_ns += self.rng.below(self.traffic.max_gap_ns);
            self.fire_timer_if_due();
            match self.rng.below(10) {
                0..=2 => self.submit(),
                3..=5 => {
                    let hctx = self.rng.below(self.traffic.nr_hw_queues as u64) as u32;
                    self.dispatch(hctx);
                }
                6..=8 => {
                    if !self.flow.in_flight.is_empty() {
                        let i = self.rng.below(self.flow.in_flight.len() as u64) as usize;
                        self.complete(i);
                    }
                }
                _ => {
                    // As if nothing else happened until the policy's timer: time moves on to it.
                    if let Some(at) = self.policy.next_timer_ns() {
                        if self.traffic.jump_to_timers {
                            self.flow.now_ns = self.flow.now_ns.max(at);
                            self.fire_timer_if_due();
                        }
                    }
                }
            }
            self.hook.check(&self.policy, &self.flow, Event::Step);
        }
        assert!(
            self.flow.dispatched.len() as u32 > self.traffic.steps / 10,
            "seed {seed}: the random steps dispatch (only {} of {} requests)",
            self.flow.dispatched.len(),
            self.flow.inserted.len()
        );
    }

    /// A new bio: merged into a held request, or inserted.
    fn submit(&mut self) {
        let t = self.traffic;
        let rng = &mut self.rng;
        let op = rng.pick(t.ops);
        let process = rng.below(t.nr_processes as u64) as u32;
        let cpu = rng.below(t.nr_cpus as u64) as u32;
        let nr_sectors = if op == Op::Flush {
            0
        } else {
            rng.pick(t.bio_sectors)
        };
        let next_sector = &mut self.next_sector[process as usize];
        let sector = if rng.below(2) == 0 {
            *next_sector
        } else {
            8 * rng.below(t.span_sectors / 8)
        };
        *next_sector = sector + nr_sectors as u64;
        let cgroup = process % t.cgroup_weights.len() as u32;
        let bio = Request {
            id: self.next_id,
            op,
            sector,
            nr_sectors,
            cpu,
            hctx: cpu % t.nr_hw_queues,
            ioprio_class: rng.pick(&[
                IoprioClass::None,
                IoprioClass::BestEffort,
                IoprioClass::Idle,
                IoprioClass::RealTime,
            ]),
            ioprio_level: rng.below(8) as u8,
            process,
            cgroup,
            cgroup_weight: t.cgroup_weights[cgroup as usize],
            sync: op == Op::Read || rng.below(2) == 0,
            start_ns: self.flow.now_ns,
        };
        self.next_id += 1;
        let flow = &mut self.flow;
        if let Some(into) = self.policy.bio_merge(&bio, t.max_sectors) {
            assert!(
                flow.inserted.contains(&into) && !flow.dispatched.contains(&into),
                "seed {}: bio {} merged into request {into}, which is not held",
                flow.seed,
                bio.id
            );
            flow.merged.insert(bio.id);
        } else {
            flow.inserted.insert(bio.id);
            self.policy.insert(bio.clone(), flow.now_ns);
            self.hook
                .check(&self.policy, &self.flow, Event::Inserted(&bio));
        }
    }

    /// Ask for a request for `hctx` unless the device is full. Returns whether one came out.
    fn dispatch(&mut self, hctx: u32) -> bool {
        if self.flow.in_flight.len() >= self.traffic.driver_depth {
            return false;
        }
        let seed = self.flow.seed;
        self.hook
            .check(&self.policy, &self.flow, Event::Dispatching(hctx));
        let had_work = self.policy.has_work(hctx);
        let now = self.flow.now_ns;
        let Some(rq) = self.policy.dispatch(hctx, now) else {
            assert!(
                !(self.traffic.work_conserving && had_work && self.flow.in_flight.is_empty()),
                "seed {seed}: has_work({hctx}) with nothing in flight, yet nothing dispatched"
            );
            self.hook
                .check(&self.policy, &self.flow, Event::Dispatched(hctx, None));
            return false;
        };
        assert!(
            had_work,
            "seed {seed}: dispatched {} while has_work({hctx}) was false",
            rq.id
        );
        assert!(
            self.flow.inserted.contains(&rq.id),
            "seed {seed}: dispatched request {}, never inserted",
            rq.id
        );
        assert!(
            self.flow.dispatched.insert(rq.id),
            "seed {seed}: request {} dispatched twice",
            rq.id
        );
        if self.traffic.own_hctx_only {
            assert_eq!(
                rq.hctx, hctx,
                "seed {seed}: request {} dispatched on another hardware queue",
                rq.id
            );
        }
        self.flow.in_flight.push((rq.clone(), now));
        self.hook
            .check(&self.policy, &self.flow, Event::Dispatched(hctx, Some(&rq)));
        true
    }

    /// Complete the `i`th request in flight.
    fn complete(&mut self, i: usize) {
        let (rq, issued_ns) = self.flow.in_flight.swap_remove(i);
        let after = self.policy.completed(&rq, issued_ns, self.flow.now_ns);
        // The random dispatch steps run every hardware queue anyway; woken ones need no special turn.
        self.policy.take_woken_hctxs(&mut Vec::new());
        assert!(
            self.flow.completed.insert(rq.id),
            "seed {}: request {} completed twice",
            self.flow.seed,
            rq.id
        );
        self.hook
            .check(&self.policy, &self.flow, Event::Completed(&rq, after));
    }

    /// Fire the policy's timer if it is due; whether it fired.
    fn fire_timer_if_due(&mut self) -> bool {
        let due = self
            .policy
            .next_timer_ns()
            .is_some_and(|at| at <= self.flow.now_ns);
        if due {
            self.hook.check(&self.policy, &self.flow, Event::TimerDue);
            self.policy.timer(self.flow.now_ns);
            self.hook.check(&self.policy, &self.flow, Event::TimerFired);
        }
        due
    }

    fn has_work(&self) -> bool {
        (0..self.traffic.nr_hw_queues).any(|h| self.policy.has_work(h))
    }

    /// Dispatch everything the device takes and complete it, until the policy is empty; when it holds work back
    /// with nothing in flight, its timer must be coming to release it (an idle slice, a budget refill).
    fn drain(&mut self) {
        let seed = self.flow.seed;
        self.flow.draining = true;
        for round in 0.. {
            assert!(round < 100_000, "seed {seed}: the policy never drained");
            let mut progress = false;
            for hctx in 0..self.traffic.nr_hw_queues {
                while self.dispatch(hctx) {
                    progress = true;
                }
            }
            while !self.flow.in_flight.is_empty() {
                self.complete(self.flow.in_flight.len() - 1);
                progress = true;
            }
            self.hook.check(&self.policy, &self.flow, Event::Step);
            self.flow.now_ns += 250_000;
            // A timer that comes due within the step may release work (an idle slice expiring): as the kernel's
            // timer handlers do (bfq_schedule_dispatch), the queues are run again before anything is concluded.
            if self.fire_timer_if_due() {
                continue;
            }
            if !progress {
                if !self.has_work() {
                    break;
                }
                let at = self.policy.next_timer_ns().unwrap_or_else(|| {
                    panic!("seed {seed}: work held back, nothing in flight and no timer coming")
                });
                self.flow.now_ns = self.flow.now_ns.max(at);
                self.fire_timer_if_due();
            }
        }
        // Let pending timers run out (an idle slice expiring); they must not bring work back.
        for _ in 0..8 {
            let Some(at) = self.policy.next_timer_ns() else {
                break;
            };
            self.flow.now_ns = self.flow.now_ns.max(at);
            self.fire_timer_if_due();
            assert!(!self.has_work(), "seed {seed}: a timer brought work back");
        }
        let flow = &self.flow;
        assert_eq!(
            flow.dispatched, flow.inserted,
            "seed {seed}: every inserted request dispatched once"
        );
        assert_eq!(
            flow.completed, flow.dispatched,
            "seed {seed}: every dispatched request completed"
        );
        assert!(
            flow.merged.is_disjoint(&flow.dispatched),
            "seed {seed}: a merged bio was dispatched on its own"
        );
        assert_eq!(
            flow.merged.len() + flow.inserted.len(),
            self.next_id as usize,
            "seed {seed}: every bio merged or inserted"
        );
        if self.traffic.merges {
            assert!(
                !flow.merged.is_empty(),
                "seed {seed}: the run exercised merging"
            );
        }
        self.hook.check(&self.policy, &self.flow, Event::Drained);
    }
}

/// The harness itself, on a correct FIFO and on broken ones (each must fail, with the message that names its fault).
#[cfg(test)]
mod tests {
    use super::*;
    use crate::{merge_into_recent, Locking};
    use std::collections::VecDeque;

    #[derive(Clone, Copy, PartialEq)]
    enum Fault {
        None,
        /// Drops every 50th request inserted.
        Loses,
        /// Hands out every 50th request twice.
        Duplicates,
        /// Serves any hardware queue from one FIFO.
        IgnoresHctx,
        /// Holds a lone request back.
        Idles,
        /// Holds a lone request back until its timer, 200 µs after the refusal (an idle slice).
        IdlesUntilTimer,
    }

    struct Fifo {
        queues: Vec<VecDeque<Request>>,
        fault: Fault,
        inserted: u32,
        again: Option<Request>,
        timer_at: Option<u64>,
        released: bool,
    }

    impl Fifo {
        fn new(nr_hw_queues: u32, fault: Fault) -> Self {
            Self {
                queues: vec![VecDeque::new(); nr_hw_queues as usize],
                fault,
                inserted: 0,
                again: None,
                timer_at: None,
                released: false,
            }
        }

        fn queue(&mut self, hctx: u32) -> &mut VecDeque<Request> {
            let i = if self.fault == Fault::IgnoresHctx {
                0
            } else {
                hctx
            };
            &mut self.queues[i as usize]
        }
    }

    impl Elevator for Fifo {
        fn name(&self) -> &'static str {
            "fifo"
        }
        fn locking(&self) -> Locking {
            Locking::None
        }
        fn bio_merge(&mut self, bio: &Request, max_sectors: u32) -> Option<u32> {
            merge_into_recent(self.queue(bio.hctx), bio, max_sectors)
        }
        fn insert(&mut self, rq: Request, _now_ns: u64) {
            self.inserted += 1;
            if self.fault == Fault::Loses && self.inserted.is_multiple_of(50) {
                return;
            }
            self.queue(rq.hctx).push_back(rq);
        }
        fn dispatch(&mut self, hctx: u32, now_ns: u64) -> Option<Request> {
            if let Some(rq) = self.again.take() {
                return Some(rq);
            }
            if self.fault == Fault::Idles && self.queue(hctx).len() == 1 {
                return None;
            }
            if self.fault == Fault::IdlesUntilTimer && self.queue(hctx).len() == 1 && !self.released
            {
                self.timer_at.get_or_insert(now_ns + 200_000);
                return None;
            }
            let rq = self.queue(hctx).pop_front()?;
            self.released = false;
            if self.fault == Fault::Duplicates && rq.id.is_multiple_of(50) {
                self.again = Some(rq.clone());
            }
            Some(rq)
        }
        fn has_work(&self, hctx: u32) -> bool {
            let i = if self.fault == Fault::IgnoresHctx {
                0
            } else {
                hctx
            };
            self.again.is_some() || !self.queues[i as usize].is_empty()
        }
        fn completed(&mut self, _rq: &Request, _issue_ns: u64, _now_ns: u64) -> AfterCompletion {
            AfterCompletion::RunQueue
        }
        fn next_timer_ns(&self) -> Option<u64> {
            self.timer_at
        }
        fn timer(&mut self, now_ns: u64) {
            if self.timer_at.is_some_and(|at| at <= now_ns) {
                self.timer_at = None;
                self.released = true;
            }
        }
    }

    fn run_with(fault: Fault, work_conserving: bool) {
        let traffic = Traffic {
            seeds: 1..4,
            nr_hw_queues: 2,
            nr_cpus: 2,
            own_hctx_only: true,
            work_conserving,
            ..Traffic::default()
        };
        check_conservation(&traffic, |_| (Fifo::new(2, fault), ()));
    }

    fn run(fault: Fault) {
        run_with(fault, true);
    }

    #[test]
    fn a_correct_fifo_passes() {
        run(Fault::None);
    }

    #[test]
    #[should_panic(expected = "every inserted request dispatched once")]
    fn a_lost_request_fails() {
        run(Fault::Loses);
    }

    #[test]
    #[should_panic(expected = "dispatched twice")]
    fn a_duplicated_request_fails() {
        run(Fault::Duplicates);
    }

    #[test]
    #[should_panic(expected = "dispatched on another hardware queue")]
    fn a_request_served_on_another_hardware_queue_fails() {
        run(Fault::IgnoresHctx);
    }

    #[test]
    #[should_panic(expected = "with nothing in flight, yet nothing dispatched")]
    fn holding_work_back_fails_when_the_policy_claims_to_conserve_work() {
        run(Fault::Idles);
    }

    #[test]
    #[should_panic(expected = "work held back, nothing in flight and no timer coming")]
    fn holding_work_back_with_no_timer_coming_fails() {
        run_with(Fault::Idles, false);
    }

    /// Worked example of a drain step in which the policy's idle timer comes due (BFQ idling for its in-service
    /// queue, seed 6 of its random test): the lone request is refused, nothing is in flight, time moves on 250 µs
    /// and the timer, due 200 µs after the refusal, fires and releases it. The timer handler's dispatch must follow
    /// (the kernel's run the queue, bfq_schedule_dispatch), not the conclusion that work is held with no timer.
    #[test]
    fn work_held_until_a_timer_that_fires_within_the_drain_step_drains() {
        run_with(Fault::IdlesUntilTimer, false);
    }

    /// A hook sees every kind of event, and its assertions fail the run.
    #[test]
    #[should_panic(expected = "the hook's own check")]
    fn a_hooks_assertion_fails_the_run() {
        #[derive(Default)]
        struct Seen([bool; 8]);
        impl Hook<Fifo> for Seen {
            fn check(&mut self, _fifo: &Fifo, _flow: &Flow, event: Event) {
                let kind = match event {
                    Event::Inserted(_) => 0,
                    Event::Dispatching(_) => 1,
                    Event::Dispatched(_, _) => 2,
                    Event::Completed(_, _) => 3,
                    Event::TimerDue | Event::TimerFired => 4,
                    Event::Step => 5,
                    Event::Drained => 6,
                };
                self.0[kind] = true;
                assert!(
                    kind != 6 || self.0[..4].iter().all(|&s| s) && self.0[5],
                    "a hook missed events"
                );
                assert!(kind != 6, "the hook's own check");
            }
        }
        check_conservation(&Traffic::default(), |_| {
            (Fifo::new(1, Fault::None), Seen::default())
        });
    }
}
