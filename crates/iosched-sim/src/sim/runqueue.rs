//! CFS's run queue on a busy core (Linux before 6.6, kernel/sched/fair.c): a process woken while its core (for an
//! unpinned one: every allowed core, `woken_core`) runs other work (by its completion, or to issue: its start, the
//! end of a think time) waits there, and when the core gets to it the runnable process with the least virtual runtime runs first (`pick_next_entity`), not the
//! one woken first. The core switches once the process running there is out of its submission call (a syscall is
//! not preempted; its scheduler hooks are booked as it reaches them), or after CFS's minimum granularity.
//!
//! Why it matters: N QD-1 readers on one core all do the same work per I/O, so their virtual runtimes stay within
//! one I/O's work of each other, and small differences in what each is charged decide the order. The interrupt
//! that completes one reader's I/O runs on top of whichever reader runs then and is charged to it
//! (`HostConfig::completion_irq_ns`), so the order changes from round to round: a reader that ran early in one
//! round can come late in the next. Seed 000's Fig. 3 measures the result: with 16-256 such readers on one core
//! the artifact's P99 is 1.8-2.2x the mean; booking woken work in wake-up order (round-robin) gave 1.04-1.3x, this
//! gives 1.7-1.8x. Waiting for the running process's call matters as much: booked in between, other processes'
//! work split each call, whose dispatch loop then took the requests they inserted and went on, so the processes
//! were still in their calls when their completions came and never slept (Kyber's 64 readers: 1.35x the mean).
//!
//! Simplifications: processes already waiting are not balanced between run queues (an idle core pulls only a
//! process whose own work is running, `idle_pull`); the process charged with an interrupt is the one whose own
//! work (submission, reaping) the core runs then, none during scheduler hooks or kworkers; the interrupt's time
//! itself stays booked with the woken process's completion path. EEVDF (6.6+) picks by virtual deadline and
//! eligibility: not modelled, its woken processes are booked in wake-up order.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::Simulation;
use crate::engine::Event;

/// A woken process waiting for its core, with the completion it was woken for (None: woken to issue).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Woken {
    /// Ordered by virtual runtime, then by wake-up order.
    vruntime_ns: u64,
    seq: u64,
    process: u32,
    completion: Option<Completion>,
}

/// The completion a woken process reaps first: its I/O, and its completion path with the wake-up and the locks
/// taken there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Completion {
    pub(super) issue_ns: u64,
    pub(super) call_ns: u64,
    pub(super) bytes: u32,
    pub(super) write: bool,
    pub(super) work_ns: u64,
    pub(super) lock_calls: u32,
}

/// One core's run queue.
#[derive(Debug, Default)]
pub(super) struct RunQueue {
    waiting: BinaryHeap<Reverse<Woken>>,
    /// A PickNext event is pending for this core.
    pick_pending: bool,
    /// When the pending pick first came due (it waits while the running process is in its call).
    due_since_ns: Option<u64>,
}

impl RunQueue {
    /// The least virtual runtime among the processes waiting here.
    pub(super) fn least_vruntime_ns(&self) -> Option<u64> {
        self.waiting.peek().map(|Reverse(w)| w.vruntime_ns)
    }
}

impl Simulation<'_> {
    /// Whether a process woken on `core` at `at_ns` waits in the core's run queue: CFS (`wakeup_preemption` is
    /// its marker), and the core busy then or others already waiting there (a core with runnable processes queued
    /// is not idle, though nothing is booked on it between two picks). An unpinned process was placed on `core` by
    /// `woken_core`, which prefers an idle one: it waits only when all its cores were busy.
    pub(super) fn waits_in_run_queue(&self, core: u32, at_ns: u64) -> bool {
        self.wakeup_preemption.is_some() && !self.core_idle(core, at_ns)
    }

    /// Whether `core` is idle at `at_ns`: nothing booked on it and nobody in its run queue waiting for a pick.
    pub(super) fn core_idle(&self, core: u32, at_ns: u64) -> bool {
        self.host.idle_at(core, at_ns) && self.run_queues[core as usize].waiting.is_empty()
    }

    /// The core `process`, woken from sleep at `at_ns`, runs on: a pinned process's own; an unpinned one's
    /// wake-up placement (kernel/sched/fair.c `select_idle_sibling`): its previous core if idle, else the first
    /// idle allowed core after it. With none idle, on CFS it queues where the fewest wait (among equals, the core
    /// whose booked work ends first, then its previous core), as `select_task_rq_fair` leaves it on a busy core's
    /// run queue. Without the run-queue model (EEVDF) the core whose work ends first (`Host::wake_core`).
    ///
    /// Why queue: booking an unpinned process's work piece by piece on whichever core frees first let other
    /// processes' work interleave its submission call, which Linux does not preempt. 256 unpinned QD-1 readers on
    /// 10 cores under mq-deadline (seed 000 Fig. 6c) then spent 345 us in the submission call and 317 us after it
    /// (fio's slat and clat); the artifact has 21 and 580 us. Queued, the model gives 9.6 and 500 us.
    pub(super) fn woken_core(&self, process: u32, at_ns: u64) -> u32 {
        let proc = &self.processes[process as usize];
        let allowed = &proc.params.allowed_cores;
        if allowed.len() == 1 {
            return allowed[0];
        }
        let previous = proc.state.core;
        if self.wakeup_preemption.is_none() {
            return self.host.wake_core(allowed, previous, at_ns);
        }
        let order = crate::host::wake_order(allowed, previous);
        if let Some(core) = order.clone().find(|&core| self.core_idle(core, at_ns)) {
            return core;
        }
        let waiting = |core: u32| self.run_queues[core as usize].waiting.len();
        order
            .min_by_key(|&core| (waiting(core), self.host.cores[core as usize].free_at_ns))
            .expect("a process has an allowed core")
    }

    /// Where `process`, woken at `at_ns` to issue (an Issue event: its start, the end of a think time or rate
    /// wait), waits in a run queue as a woken completion would (`waits_in_run_queue`); None if it runs at once.
    pub(super) fn issues_from_run_queue(&self, process: u32, at_ns: u64) -> Option<u32> {
        let proc = &self.processes[process as usize];
        if at_ns < proc.state.busy_until_ns || proc.state.submitting || proc.state.queued {
            return None;
        }
        let core = self.woken_core(process, at_ns);
        self.waits_in_run_queue(core, at_ns).then_some(core)
    }

    /// Queue the woken `process` on `core`, with the completion it reaps first if it was woken for one; the core
    /// picks among its queue when it gets to it.
    pub(super) fn queue_woken(&mut self, core: u32, process: u32, completion: Option<Completion>) {
        let proc = &mut self.processes[process as usize];
        proc.state.queued = true;
        let woken = Woken {
            vruntime_ns: proc.state.vruntime_ns,
            seq: self.run_queue_seq,
            process,
            completion,
        };
        self.run_queue_seq += 1;
        self.run_queues[core as usize].waiting.push(Reverse(woken));
        self.schedule_pick(core);
    }

    /// A pick on `core` when its booked work ends, unless one is pending or nobody waits.
    fn schedule_pick(&mut self, core: u32) {
        let queue = &mut self.run_queues[core as usize];
        if !queue.waiting.is_empty() && !queue.pick_pending {
            queue.pick_pending = true;
            let at = self.host.cores[core as usize]
                .free_at_ns
                .max(self.events.now_ns);
            self.events.schedule(at, Event::PickNext { core });
        }
    }

    /// `core` got to its run queue: the process with the least virtual runtime runs its completion path (behind
    /// whatever was booked there meanwhile: interrupts, kworkers), then goes on with its loop; the next pick comes
    /// when that work ends.
    pub(super) fn pick_next(&mut self, core: u32, now: u64) {
        let free_at = self.host.cores[core as usize].free_at_ns;
        let (runner, _) = self.core_runner[core as usize];
        let in_call = self.in_submission_call(runner);
        let patience_ns = self.wakeup_preemption.map_or(0, |w| w.min_granularity_ns);
        let queue = &mut self.run_queues[core as usize];
        let due_since_ns = *queue.due_since_ns.get_or_insert(now);
        if free_at > now && in_call && now - due_since_ns < patience_ns {
            // The process running there is still in its submission call: its scheduler hooks and queue runs are
            // booked as it reaches them, and the core switches only once the call is over (a syscall is not
            // preempted). Not for longer than CFS's minimum granularity, after which the tick would switch.
            self.events.schedule(free_at, Event::PickNext { core });
            return;
        }
        queue.pick_pending = false;
        queue.due_since_ns = None;
        let Some(Reverse(woken)) = queue.waiting.pop() else {
            return;
        };
        let process = woken.process;
        self.processes[process as usize].state.queued = false;
        match woken.completion {
            Some(io) => {
                let booked = self.run_process_on(core, process, now, io.work_ns);
                let end = self.reaped(process, &io, booked, true, true);
                let next = if self.processes[process as usize].state.unreaped.is_empty() {
                    self.count_reap(process, now, 1);
                    self.after_reap(process, end)
                } else {
                    self.reap(process, end, 1)
                };
                if let Some(at) = next {
                    self.try_issue(process, at);
                }
            }
            None => self.try_issue(process, now),
        }
        self.schedule_pick(core);
    }

    /// Whether `process` (a fio process, else false) is running inside its submission call: its batch's scheduler
    /// hooks and queue runs are not all over, and it is not asleep in the call waiting for a request (then its core
    /// runs others, as Linux's does).
    fn in_submission_call(&self, process: u32) -> bool {
        self.processes.get(process as usize).is_some_and(|p| {
            (p.state.submitting || p.state.dispatch_loops > 0) && !p.asleep_on_tag()
        })
    }

    /// A completion's interrupt arrived on `core` at `at_ns` for `woken`'s I/O: if the core is running another
    /// fio process's own work then (its submission or reaping, `core_runner`), that process is charged the
    /// interrupt's time (`HostConfig::completion_irq_ns`). During scheduler hooks and kworkers nobody is.
    pub(super) fn charge_interrupt(&mut self, core: u32, woken: u32, at_ns: u64) {
        let irq_ns = self.config.host.completion_irq_ns;
        if irq_ns == 0 || self.wakeup_preemption.is_none() {
            return;
        }
        let (running, until_ns) = self.core_runner[core as usize];
        if until_ns > at_ns && running != woken {
            self.processes[running as usize].state.vruntime_ns += irq_ns;
        }
    }

    /// The woken process's completion path was booked with its interrupt's time, which CFS charged to whatever ran
    /// when it arrived (`charge_interrupt`): take it off its own virtual runtime.
    pub(super) fn credit_interrupt(&mut self, process: u32) {
        if self.wakeup_preemption.is_none() {
            return;
        }
        let irq_ns = self.config.host.completion_irq_ns;
        let state = &mut self.processes[process as usize].state;
        state.vruntime_ns = state.vruntime_ns.saturating_sub(irq_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Rw;
    use crate::testkit::{config, job};

    /// Three QD-1 readers pinned to core 0 of the test host on Linux 6.3 (CFS), with a 2 us interrupt share.
    fn three_pinned_readers() -> crate::config::SimConfig {
        let mut readers = job("r", Rw::Randread, 1, 3);
        readers.cpus_allowed = vec![0];
        let mut c = config("none", vec![readers]);
        c.host.kernel = "6.3".into();
        c.host.completion_irq_ns = 2_000;
        c
    }

    fn completion(work_ns: u64) -> Completion {
        Completion {
            issue_ns: 0,
            call_ns: 0,
            bytes: 4096,
            write: false,
            work_ns,
            lock_calls: 0,
        }
    }

    #[test]
    fn a_busy_core_runs_its_woken_processes_least_virtual_runtime_first_not_in_wake_up_order() {
        let c = three_pinned_readers();
        let mut sim = Simulation::new(&c).unwrap();
        // Core 0 runs other work until 10 us. Processes 2, 0, 1 wake in that order with virtual runtimes 30, 10
        // and 20 us, each to reap with 5 us of work.
        sim.host.run(0, 9, 0, 10_000, &mut Default::default());
        for (process, vruntime_ns) in [(2, 30_000), (0, 10_000), (1, 20_000)] {
            sim.processes[process].state.vruntime_ns = vruntime_ns;
            sim.processes[process].state.inflight = 1; // the I/O it was woken for
            assert!(sim.waits_in_run_queue(0, 1_000));
            sim.queue_woken(0, process as u32, Some(completion(5_000)));
            assert!(sim.processes[process].state.queued);
        }
        // One pick at a time, each when the core's work so far ends, least virtual runtime first: a context
        // switch (1 us on the test host), the 5 us reap, then the process's next submission (2 us, io_uring).
        let mut runs = Vec::new();
        while let Some((now, event)) = sim.events.pop() {
            if let Event::PickNext { core } = event {
                let next = sim.run_queues[core as usize]
                    .waiting
                    .peek()
                    .unwrap()
                    .0
                    .process;
                sim.pick_next(core, now);
                runs.push((next, now));
            }
            if runs.len() == 3 {
                break;
            }
        }
        // 0 starts at 10 us and its reap and submission take 1 + 5 + 2 = 8 us; 1 at 18 us; 2 at 26 us.
        assert_eq!(runs, vec![(0, 10_000), (1, 18_000), (2, 26_000)]);
        // Negative control: the wake-up order (2, 0, 1) is not what ran.
        assert_ne!(runs.iter().map(|r| r.0).collect::<Vec<_>>(), vec![2, 0, 1]);
    }

    #[test]
    fn an_interrupt_is_charged_to_the_process_it_interrupts_not_to_the_one_it_wakes() {
        let c = three_pinned_readers();
        let mut sim = Simulation::new(&c).unwrap();
        // Process 1 runs its own work on core 0 from 0 to 5 us (no switch: the core's first work).
        sim.run_process_on(0, 1, 0, 5_000);
        assert_eq!(sim.processes[1].state.vruntime_ns, 5_000);
        // Process 0's completion interrupts it at 3 us: process 1 is charged the 2 us interrupt share.
        sim.charge_interrupt(0, 0, 3_000);
        assert_eq!(sim.processes[1].state.vruntime_ns, 7_000);
        // Process 0 then reaps with 6 us of work (completion path and wake-up, the interrupt's share included):
        // charged 6 us, less the 2 us process 1 paid.
        sim.processes[0].state.vruntime_ns = 0;
        sim.run_process_on(0, 0, 5_000, 6_000);
        sim.credit_interrupt(0);
        assert_eq!(sim.processes[0].state.vruntime_ns, 1_000 + 6_000 - 2_000);
        // An interrupt on an idle core, or one that finds the woken process itself running, charges nobody.
        let before: Vec<u64> = sim.processes.iter().map(|p| p.state.vruntime_ns).collect();
        sim.charge_interrupt(0, 2, 100_000);
        sim.charge_interrupt(0, 0, 11_000);
        let after: Vec<u64> = sim.processes.iter().map(|p| p.state.vruntime_ns).collect();
        assert_eq!(before, after);
    }

    #[test]
    fn a_pick_waits_for_the_running_process_to_leave_its_call_but_no_longer_than_the_minimum_granularity(
    ) {
        // Test host: 2 cores, CFS scaling 1 + ilog2(2) = 2: minimum granularity 0.75 ms x 2 = 1.5 ms.
        let c = three_pinned_readers();
        let mut sim = Simulation::new(&c).unwrap();
        // Process 1 is in its submission call on core 0 (its hooks booked until 20 us); process 0 waits.
        sim.run_process_on(0, 1, 0, 5_000);
        sim.host.run(0, 1, 5_000, 15_000, &mut Default::default());
        sim.processes[1].state.submitting = true;
        sim.processes[0].state.inflight = 1;
        sim.queue_woken(0, 0, Some(completion(5_000)));
        // Due at 10 us, the core busy with the call until 20 us: put off, nothing booked, still waiting.
        sim.pick_next(0, 10_000);
        assert!(sim.processes[0].state.queued);
        assert_eq!(sim.host.cores[0].free_at_ns, 20_000);
        // At 20 us the call's work is over: process 0 runs (a 1 us switch, its 5 us reap, its 2 us submission).
        sim.pick_next(0, 20_000);
        assert!(!sim.processes[0].state.queued);
        assert_eq!(sim.host.cores[0].free_at_ns, 28_000);
        // A call that goes on: put off until 1.5 ms after the pick came due, then the waiting process runs anyway.
        let mut sim = Simulation::new(&c).unwrap();
        sim.run_process_on(0, 1, 0, 5_000);
        sim.host
            .run(0, 1, 5_000, 5_000_000, &mut Default::default());
        sim.processes[1].state.submitting = true;
        sim.processes[0].state.inflight = 1;
        sim.queue_woken(0, 0, Some(completion(5_000)));
        sim.pick_next(0, 10_000);
        sim.pick_next(0, 1_500_000);
        assert!(sim.processes[0].state.queued, "1.49 ms after it came due");
        sim.pick_next(0, 1_510_000);
        assert!(!sim.processes[0].state.queued, "1.5 ms after it came due");
        // Asleep in its call for a request (blk-mq's tag wait), process 1 holds no core: the pick does not wait.
        let mut sim = Simulation::new(&c).unwrap();
        sim.run_process_on(0, 1, 0, 5_000);
        sim.host.run(0, 1, 5_000, 15_000, &mut Default::default());
        sim.processes[1].state.submitting = true;
        sim.processes[1].params.tag_wait = super::super::tags::TagWait::Submitter; // libaio's, psync's
        sim.processes[1].state.tag_waits = 1;
        assert!(sim.processes[1].asleep_on_tag());
        sim.processes[0].state.inflight = 1;
        sim.queue_woken(0, 0, Some(completion(5_000)));
        sim.pick_next(0, 10_000);
        assert!(!sim.processes[0].state.queued);
    }

    #[test]
    fn a_core_with_processes_waiting_is_busy_to_the_next_one_woken() {
        let c = three_pinned_readers();
        let mut sim = Simulation::new(&c).unwrap();
        sim.host.run(0, 9, 0, 10_000, &mut Default::default());
        sim.queue_woken(0, 0, Some(completion(5_000)));
        // At 10 us nothing is booked on core 0 any more, but process 0 waits there for its pick: process 1, woken
        // then, queues behind it by virtual runtime instead of running ahead of it.
        assert!(sim.host.idle_at(0, 10_000));
        assert!(sim.waits_in_run_queue(0, 10_000));
    }

    #[test]
    fn only_processes_on_a_cfs_kernel_with_a_busy_core_wait_in_the_run_queue() {
        let c = three_pinned_readers();
        let mut sim = Simulation::new(&c).unwrap();
        assert!(
            !sim.waits_in_run_queue(0, 1_000),
            "an idle core runs it at once"
        );
        sim.host.run(0, 9, 0, 10_000, &mut Default::default());
        assert!(sim.waits_in_run_queue(0, 1_000));
        // Negative control: EEVDF (6.12) is not modelled so.
        let mut eevdf = three_pinned_readers();
        eevdf.host.kernel = "6.12".into();
        let mut sim = Simulation::new(&eevdf).unwrap();
        sim.host.run(0, 9, 0, 10_000, &mut Default::default());
        assert!(!sim.waits_in_run_queue(0, 1_000));
    }

    /// Three QD-1 readers allowed on both cores of the test host, on Linux 6.3 (CFS) or 6.12 (EEVDF).
    fn three_unpinned_readers(kernel: &str) -> crate::config::SimConfig {
        let mut c = three_pinned_readers();
        c.jobs[0].cpus_allowed = vec![];
        c.host.kernel = kernel.into();
        c
    }

    #[test]
    fn an_unpinned_process_wakes_on_an_idle_core_else_queues_where_the_fewest_wait() {
        let c = three_unpinned_readers("6.3");
        let mut sim = Simulation::new(&c).unwrap();
        sim.processes[0].state.core = 1;
        // Both cores idle: its previous core, 1.
        assert_eq!(sim.woken_core(0, 1_000), 1);
        // Core 1 busy until 10 us: the idle core 0, where it runs at once.
        sim.host.run(1, 9, 0, 10_000, &mut Default::default());
        assert_eq!(sim.woken_core(0, 1_000), 0);
        assert!(!sim.waits_in_run_queue(0, 1_000));
        // Core 0 busy until 20 us too: both busy and nobody waiting; core 1, whose work ends first, where it
        // waits in the run queue.
        sim.host.run(0, 9, 0, 20_000, &mut Default::default());
        assert_eq!(sim.woken_core(0, 1_000), 1);
        assert!(sim.waits_in_run_queue(1, 1_000));
        // Process 1 waits on core 1: process 0 goes to core 0, where nobody waits.
        sim.processes[1].state.inflight = 1;
        sim.queue_woken(1, 1, Some(completion(5_000)));
        assert_eq!(sim.woken_core(0, 1_000), 0);
        // Core 1's work is over at 10 us but process 1 still waits there for its pick: not idle to process 0.
        sim.host.run(0, 9, 20_000, 30_000, &mut Default::default());
        assert_eq!(sim.woken_core(0, 15_000), 0);
        // Negative control: without the run-queue model (6.12, EEVDF) the core whose work ends first, 1, and it
        // never waits in a run queue.
        let c = three_unpinned_readers("6.12");
        let mut sim = Simulation::new(&c).unwrap();
        sim.processes[0].state.core = 0;
        sim.host.run(0, 9, 0, 20_000, &mut Default::default());
        sim.host.run(1, 9, 0, 10_000, &mut Default::default());
        assert_eq!(sim.woken_core(0, 1_000), 1);
        assert!(!sim.waits_in_run_queue(1, 1_000));
    }

    #[test]
    fn an_unpinned_processs_submission_call_is_not_interleaved_with_others_work() {
        // QD-1 readers allowed on both cores under mq-deadline with hooks of 20 us per insert and 10 us per
        // dispatch: alone, a reader's submission call (fio's slat) is 20 + 10 + 2 us (io_uring's submission on
        // the test host) = 32 us. Sixteen of them keep both cores busy; each woken reader waits in a run queue
        // and its call, once it runs, is its own: slat 54 us (others' completion paths and their dispatches in
        // its queue runs add the rest), the waiting is after the call, in clat.
        let slat_and_clat_us = |kernel: &str, readers: u32| {
            let mut job = job("r", Rw::Randread, 1, readers);
            job.cpus_allowed = vec![];
            job.runtime_ns = 20_000_000;
            let mut c = config("mq-deadline", vec![job]);
            c.host.kernel = kernel.into();
            let hooks = crate::config::SchedulerCost {
                insert_ns: 20_000,
                dispatch_ns: 10_000,
                complete_ns: 0,
            };
            c.host.scheduler_costs.insert("mq-deadline".into(), hooks);
            let result = Simulation::new(&c).unwrap().run(&mut |_| true).unwrap();
            let read = &result.jobs[0].read;
            let slat_ns = read.slat.as_ref().unwrap().clat_mean_ns;
            (slat_ns / 1e3, read.clat_mean_ns / 1e3)
        };
        let (alone_slat_us, _) = slat_and_clat_us("6.3", 1);
        assert!((alone_slat_us - 32.0).abs() < 0.5, "{alone_slat_us}");
        let (slat_us, clat_us) = slat_and_clat_us("6.3", 16);
        assert!(
            slat_us < 2.0 * alone_slat_us && clat_us > 5.0 * slat_us,
            "{slat_us} {clat_us}"
        );
        // Negative control: without the run-queue model (6.12) each piece of a call is booked on the core that
        // frees first, behind others' pieces: slat 385 us, more than clat.
        let (slat_us, clat_us) = slat_and_clat_us("6.12", 16);
        assert!(
            slat_us > 5.0 * alone_slat_us && slat_us > clat_us,
            "{slat_us} {clat_us}"
        );
    }
}
