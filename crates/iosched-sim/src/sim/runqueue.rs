//! The run queue of a busy core (kernel/sched/fair.c; CFS before Linux 6.6, EEVDF since: `FairScheduler`): a
//! process woken while its core (for an unpinned one: every allowed core, `woken_core`) runs other work (by its
//! completion, by a freed request tag it slept for in its submission call, or to issue: its start, the end of a
//! think time) waits there, and when the core gets to it the runnable process with the least virtual
//! runtime runs first (`pick_next_entity`), not the one woken first. The core switches only once the process
//! running there stops running (its booked work ends: it sleeps), or once its slice is over (`sched_slice`: the
//! scaled latency shared by the runnable processes of the core, at least the minimum granularity each) and it next
//! leaves the kernel: a process that never sleeps (its completions keep coming) then goes back to the run queue
//! itself (`yields_core`, CFS's need_resched), at a new completion or when its submission call returns (a syscall
//! is not preempted; its scheduler hooks are booked as it reaches them). A process woken there that lags the
//! runner by more than the wake-up granularity sets need_resched at once (`preempt_on_wakeup`): the runner gives
//! the core up at its next step, not at its slice's end. Without that, the L-app beside 16 CPU-bound readers on 10
//! cores (seed 000 Fig. 11a, BFQ) waited whole slices: 880 reads and a P99 of 12 ms in 2 s, where the artifact has
//! a P99 of 0.14-0.18 ms; with it, 24,132 reads at 131 us.
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
//! Simplifications: processes already waiting move between run queues only by the periodic balancing of
//! `balance.rs` (an idle core pulls at its next tick; at once only a process whose own work is running,
//! `idle_pull`); a slice is checked when a pick comes due or its end passes, not at the tick (4 ms at HZ=250), and
//! starts at a pick or a switch-in (a process back from sleep on a core nobody else ran keeps its start); the
//! process charged with an interrupt is the one whose own work (submission, reaping) the core runs then, none
//! during scheduler hooks or kworkers; the interrupt's time itself stays booked with the woken process's completion
//! path. EEVDF (6.6+) shares the machinery with its own slice and no wake-up preemption (`FairScheduler`); it picks
//! by virtual deadline among eligible processes, which for processes of one weight and slice is about the least
//! virtual runtime, as here.
//!
//! A submitter woken by a freed request tag (libaio's io_submit, psync's pwrite: `TagWait::Submitter`) waits here
//! too, and asks for the tag only once it runs (`Resume::TagRetry`). Until 2026-12-04 its wake-up was booked
//! between the pieces of the running process's submission call, so it always found the tag it was woken for; in
//! the VM lab (Linux 6.12, one vCPU, four readers on 16 tags, docs/validation.md) a woken reader waited a median
//! 0.64-0.82 ms to run and found the tags taken 55-63% of the time, a real-time reader's P99 103 ms against the
//! model's 34 ms then (49-51 ms now).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::Simulation;
use crate::engine::Event;

/// A woken process waiting for its core, with what it was woken for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Woken {
    /// Ordered by virtual runtime, then by wake-up order.
    pub(super) vruntime_ns: u64,
    pub(super) seq: u64,
    pub(super) process: u32,
    pub(super) resume: Resume,
}

/// What a woken process does first once its core picks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Resume {
    /// Issue: its start, the end of a think time or rate wait, or going on after it gave its core up.
    Issue,
    /// Reap the completion it was woken for.
    Reap(Completion),
    /// Asleep in its submission call for a request for bio `io`, woken by a freed tag: ask again (`tag_retry`).
    TagRetry(u32),
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
    pub(super) waiting: BinaryHeap<Reverse<Woken>>,
    /// A PickNext event is pending for this core.
    pick_pending: bool,
}

impl RunQueue {
    /// The least virtual runtime among the processes waiting here.
    pub(super) fn least_vruntime_ns(&self) -> Option<u64> {
        self.waiting.peek().map(|Reverse(w)| w.vruntime_ns)
    }
}

impl Simulation<'_> {
    /// Whether a process woken on `core` at `at_ns` waits in the core's run queue: the core is busy then or others
    /// already wait there (a core with runnable processes queued is not idle, though nothing is booked on it
    /// between two picks). An unpinned process was placed on `core` by `woken_core`, which prefers an idle one: it
    /// waits only when all its cores were busy. On EEVDF also on an idle core that other processes may run on, for
    /// the pick at the same instant (`FairScheduler`: processes woken together are picked by virtual runtime, not
    /// in wake-up order; a core only one process may use picks it anyway, and runs it at once as before).
    pub(super) fn waits_in_run_queue(&self, core: u32, at_ns: u64) -> bool {
        (self.fair_scheduler.eevdf && self.shared_core[core as usize])
            || !self.core_idle(core, at_ns)
    }

    /// Whether `core` is idle at `at_ns`: nothing booked on it and nobody in its run queue waiting for a pick.
    pub(super) fn core_idle(&self, core: u32, at_ns: u64) -> bool {
        self.host.idle_at(core, at_ns)
            && self.run_queues[core as usize].waiting.is_empty()
            && !self.in_call_on(core)
    }

    /// Whether `core`'s runner is inside its submission call there: between the call's booked pieces (its hooks
    /// are booked as it reaches them) the core has nothing booked, but it is not idle.
    pub(super) fn in_call_on(&self, core: u32) -> bool {
        let (runner, _) = self.core_runner[core as usize];
        self.in_submission_call(runner) && self.processes[runner as usize].state.core == core
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
        if at_ns <= proc.state.busy_until_ns || proc.state.submitting || proc.state.queued {
            return None;
        }
        let core = self.woken_core(process, at_ns);
        self.waits_in_run_queue(core, at_ns).then_some(core)
    }

    /// Queue the woken `process` on `core`, with what it does first (`resume`); the core picks among its queue when
    /// it gets to it.
    pub(super) fn queue_woken(&mut self, core: u32, process: u32, resume: Resume) {
        self.queue_woken_from(core, process, resume, 0);
    }

    /// `queue_woken` for a thread that cannot run before `runnable_ns`: woken onto an idle core that the host wakes
    /// late (`wake_late_ns`), the core's pick waits for it. Threads woken onto that core meanwhile find it no longer
    /// idle (someone waits there) and join that pick. Before this, a thread woken onto an idle core of a run queue
    /// (EEVDF, a core more than one process may use) was picked at once, the lateness drawn for it dropped: in
    /// kyber-read-target under none the lab's two writers on vCPU 1 start 0.13 ms after a wake-up at the median,
    /// the simulator's 0.02 (docs/validation.md).
    pub(super) fn queue_woken_from(
        &mut self,
        core: u32,
        process: u32,
        resume: Resume,
        runnable_ns: u64,
    ) {
        // Its virtual runtime goes with it, relative to this core's min_vruntime (`migrate_task_rq_fair`).
        self.move_vruntime(process, core);
        let proc = &mut self.processes[process as usize];
        proc.state.queued = true;
        proc.state.resched = false;
        let woken = Woken {
            vruntime_ns: proc.state.vruntime_ns,
            seq: 0,
            process,
            resume,
        };
        self.requeue_from(core, woken, runnable_ns);
    }

    /// Enqueue `woken` (its virtual runtime already relative to `core`) in `core`'s run queue, after those
    /// enqueued before it, and have the core pick when it gets to it.
    pub(super) fn requeue(&mut self, core: u32, woken: Woken) {
        self.requeue_from(core, woken, 0);
    }

    fn requeue_from(&mut self, core: u32, mut woken: Woken, runnable_ns: u64) {
        woken.seq = self.run_queue_seq;
        self.run_queue_seq += 1;
        self.run_queues[core as usize].waiting.push(Reverse(woken));
        self.schedule_pick_from(core, runnable_ns);
    }

    /// `process`, woken from sleep, was queued on `core`: if it lags the process running there by more than the
    /// wake-up granularity it preempts it (`check_preempt_wakeup` sets need_resched), which gives the core up at
    /// its next step (`yields_core`), not at the end of its slice. Only a wake-up does this; a process going back
    /// to the run queue from running (`yields_core`) waits for the tick's check, the slice.
    pub(super) fn preempt_on_wakeup(&mut self, core: u32, process: u32) {
        let (runner, until_ns) = self.core_runner[core as usize];
        if runner != process
            && (runner as usize) < self.processes.len()
            && self.processes[runner as usize].state.core == core
            && (until_ns > self.events.now_ns || self.in_submission_call(runner))
            && self.would_preempt(process, runner)
        {
            self.processes[runner as usize].state.resched = true;
        }
    }

    /// A pick on `core` when its booked work ends, unless one is pending or nobody waits.
    fn schedule_pick(&mut self, core: u32) {
        self.schedule_pick_from(core, 0);
    }

    /// `schedule_pick`, not before `runnable_ns`.
    fn schedule_pick_from(&mut self, core: u32, runnable_ns: u64) {
        let queue = &mut self.run_queues[core as usize];
        if !queue.waiting.is_empty() && !queue.pick_pending {
            queue.pick_pending = true;
            let at = self.host.cores[core as usize]
                .free_at_ns
                .max(self.events.now_ns)
                .max(runnable_ns);
            self.events.schedule(at, Event::PickNext { core });
        }
    }

    /// `core` got to its run queue: the process with the least virtual runtime runs its completion path (behind
    /// whatever was booked there meanwhile: interrupts, kworkers), then goes on with its loop; the next pick comes
    /// when that work ends.
    pub(super) fn pick_next(&mut self, core: u32, now: u64) {
        let free_at = self.host.cores[core as usize].free_at_ns;
        let (runner, runner_until_ns) = self.core_runner[core as usize];
        let in_call = self.in_submission_call(runner);
        let slice_end_ns = self.slice_end_ns(core);
        if free_at > now && (in_call || runner_until_ns > now) {
            // The process running there is still running: in its submission call (its scheduler hooks and queue
            // runs are booked as it reaches them), or reaping and submitting again. CFS switches from it only
            // once its slice is over (`check_preempt_tick` sets need_resched) and, the kernel not preempting a
            // syscall, where it next leaves the kernel or sleeps: it then goes back to the run queue itself
            // (`yields_core`). A pick from here would book the waiting process's work between its pieces.
            let at = if now >= slice_end_ns || self.processes[runner as usize].state.resched {
                self.processes[runner as usize].state.resched = true;
                free_at
            } else {
                free_at.min(slice_end_ns)
            };
            self.events.schedule(at, Event::PickNext { core });
            return;
        }
        let queue = &mut self.run_queues[core as usize];
        queue.pick_pending = false;
        let Some(Reverse(woken)) = queue.waiting.pop() else {
            return;
        };
        let process = woken.process;
        self.processes[process as usize].state.queued = false;
        // The process that ran here is switched out (`__schedule` clears its need_resched).
        if (runner as usize) < self.processes.len() {
            self.processes[runner as usize].state.resched = false;
        }
        // A pick starts a slice (`set_next_entity`), also for the process that ran there last.
        self.slice_start_ns[core as usize] = now.max(free_at);
        self.core_runner[core as usize].0 = process;
        match woken.resume {
            Resume::Reap(io) => {
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
            Resume::TagRetry(io) => {
                // Its wake-up runs here, then it asks for the request again.
                self.move_vruntime(process, core);
                let end = self.book_wake_up_on(core, process, now);
                self.trace_thread('R', io, end);
                self.events.schedule(end, Event::TagRetry { io });
            }
            Resume::Issue => {
                // It runs here: its loop's work is booked on this core (`process_core` keeps a running process
                // where it runs), not wherever a wake-up would place it.
                self.move_vruntime(process, core);
                let state = &mut self.processes[process as usize].state;
                state.busy_until_ns = state.busy_until_ns.max(now);
                self.try_issue(process, now)
            }
        }
        self.schedule_pick(core);
    }

    /// When the slice of `core`'s runner ends: its slice (`FairScheduler::slice_ns`: CFS shares it with the
    /// processes waiting there, EEVDF does not), from its switch-in.
    fn slice_end_ns(&self, core: u32) -> u64 {
        let nr_running = 1 + self.run_queues[core as usize].waiting.len() as u64;
        self.slice_start_ns[core as usize] + self.fair_scheduler.slice_ns(nr_running)
    }

    /// Whether `process`, running on `core` and at a step of its loop (a new completion to reap, its submission
    /// call returning), gives the core up: its slice is over while others wait there (`resched`), or another
    /// process's work was booked there after its own (unless it would preempt that one). It then waits in the run
    /// queue, runnable, until a pick (CFS, kernels before 6.6). Without this, two processes that never sleep had
    /// their work interleaved piece by piece on one core, a context switch per I/O: 15 QD-128 readers on 10 cores and 8
    /// SSDs switched 0.2-1.3 times per I/O under the four schedulers and lost 11-28% of the throughput of 10;
    /// the artifact's switched 0.001 times per I/O and kept it (seed 000 Figs. 8b and 10, N = 15).
    pub(super) fn yields_core(&self, process: u32, core: u32, now: u64) -> bool {
        if self.processes[process as usize].state.resched
            && !self.run_queues[core as usize].waiting.is_empty()
        {
            return true;
        }
        let (runner, until_ns) = self.core_runner[core as usize];
        runner != process
            && (runner as usize) < self.processes.len()
            && until_ns > now
            && !self.would_preempt(process, runner)
    }

    /// Whether `process` lags `runner` (both on one core) by more than the wake-up granularity: CFS would switch
    /// to it at once (`wakeup_preempt_entity`), so it does not give its core up to it.
    fn would_preempt(&self, process: u32, runner: u32) -> bool {
        let lag = self.processes[runner as usize]
            .state
            .vruntime_ns
            .saturating_sub(self.processes[process as usize].state.vruntime_ns);
        self.fair_scheduler.wakeup_preempts(lag)
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
        if irq_ns == 0 {
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
            sim.queue_woken(0, process as u32, Resume::Reap(completion(5_000)));
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
    fn a_pick_waits_for_the_running_process_to_leave_its_call_and_after_its_slice_it_gives_the_core_up_there(
    ) {
        // Test host: 2 cores, CFS scaling 1 + ilog2(2) = 2 (latency 12 ms, minimum granularity 1.5 ms).
        let c = three_pinned_readers();
        let mut sim = Simulation::new(&c).unwrap();
        // Process 1 is in its submission call on core 0 (its hooks booked until 20 us); process 0 waits.
        sim.run_process_on(0, 1, 0, 5_000);
        sim.host.run(0, 1, 5_000, 15_000, &mut Default::default());
        sim.processes[1].state.submitting = true;
        sim.processes[0].state.inflight = 1;
        sim.queue_woken(0, 0, Resume::Reap(completion(5_000)));
        // Due at 10 us, the core busy with the call until 20 us: put off, nothing booked, still waiting.
        sim.pick_next(0, 10_000);
        assert!(sim.processes[0].state.queued);
        assert_eq!(sim.host.cores[0].free_at_ns, 20_000);
        // At 20 us the call's work is over: process 0 runs (a 1 us switch, its 5 us reap, its 2 us submission).
        sim.pick_next(0, 20_000);
        assert!(!sim.processes[0].state.queued);
        assert_eq!(sim.host.cores[0].free_at_ns, 28_000);
        // A call that goes on past the slice. Process 1 switched in at 0; with process 0 waiting, sched_slice is
        // the latency (6 ms x 2 = 12 ms) over the 2 runnable processes: 6 ms. The pick is put off while the slice
        // lasts; once it is over the runner is told to give the core up (need_resched), and the pick still waits
        // for its call to end (a syscall is not preempted), where it goes back to the run queue itself.
        let mut sim = Simulation::new(&c).unwrap();
        sim.run_process_on(0, 1, 0, 5_000);
        sim.host
            .run(0, 1, 5_000, 20_000_000, &mut Default::default());
        sim.processes[1].state.submitting = true;
        sim.processes[0].state.inflight = 1;
        sim.queue_woken(0, 0, Resume::Reap(completion(5_000)));
        sim.pick_next(0, 10_000);
        assert!(sim.processes[0].state.queued && !sim.processes[1].state.resched);
        sim.pick_next(0, 5_990_000);
        assert!(
            sim.processes[0].state.queued && !sim.processes[1].state.resched,
            "5.99 ms into the slice"
        );
        sim.pick_next(0, 6_000_000);
        assert!(sim.processes[0].state.queued, "the call goes on");
        assert!(sim.processes[1].state.resched, "the slice is over");
        // The call returns at 20.005 ms: process 1 queues, and the pick runs process 0 (the least vruntime).
        sim.submission_call_returned(1, 20_005_000);
        assert!(sim.processes[1].state.queued && !sim.processes[1].state.resched);
        sim.pick_next(0, 20_005_000);
        assert!(!sim.processes[0].state.queued && sim.processes[1].state.queued);
        // Asleep in its call for a request (blk-mq's tag wait), process 1 holds no core: the pick does not wait.
        let mut sim = Simulation::new(&c).unwrap();
        sim.run_process_on(0, 1, 0, 5_000);
        sim.host.run(0, 1, 5_000, 15_000, &mut Default::default());
        sim.processes[1].state.submitting = true;
        sim.processes[1].params.tag_wait = super::super::tags::TagWait::Submitter; // libaio's, psync's
        sim.processes[1].state.tag_waits = 1;
        assert!(sim.processes[1].asleep_on_tag());
        sim.processes[0].state.inflight = 1;
        sim.queue_woken(0, 0, Resume::Reap(completion(5_000)));
        sim.pick_next(0, 10_000);
        assert!(!sim.processes[0].state.queued);
    }

    #[test]
    fn a_woken_process_far_behind_the_runner_preempts_it_at_its_next_step_not_at_its_slices_end() {
        // Test host: 2 cores, CFS scaling 2: wake-up granularity 2 ms; with 2 runnable processes the runner's slice
        // is 12 ms / 2 = 6 ms. Process 1 runs on core 0, in its submission call, its hooks booked until 20 us.
        // Process 0, asleep, is woken for its completion there with `lag_ns` less virtual runtime than process 1.
        // Returns whether process 0 still waits after the call returns at 20 us and the core's pick comes.
        let c = three_pinned_readers();
        let waits_after_the_call = |lag_ns: u64| {
            let mut sim = Simulation::new(&c).unwrap();
            sim.run_process_on(0, 1, 0, 5_000);
            sim.host.run(0, 1, 5_000, 15_000, &mut Default::default());
            sim.processes[1].state.submitting = true;
            sim.processes[1].state.vruntime_ns = 20_000_000;
            sim.processes[0].state.vruntime_ns = 20_000_000 - lag_ns;
            sim.processes[0].state.inflight = 1;
            sim.queue_woken(0, 0, Resume::Reap(completion(5_000)));
            sim.preempt_on_wakeup(0, 0);
            // A pick due at 10 us waits for the call either way (a syscall is not preempted).
            sim.pick_next(0, 10_000);
            assert!(sim.processes[0].state.queued);
            sim.submission_call_returned(1, 20_000);
            sim.pick_next(0, 20_000);
            sim.processes[0].state.queued
        };
        // 3 ms behind (> 2 ms): need_resched is set on process 1, which gives the core up where its call returns,
        // and process 0 runs at 20 us.
        assert!(!waits_after_the_call(3_000_000));
        // Negative control: 1 ms behind (< 2 ms) does not preempt; process 1 goes on to its slice's end (6 ms).
        assert!(waits_after_the_call(1_000_000));
    }

    #[test]
    fn a_core_with_processes_waiting_is_busy_to_the_next_one_woken() {
        let c = three_pinned_readers();
        let mut sim = Simulation::new(&c).unwrap();
        sim.host.run(0, 9, 0, 10_000, &mut Default::default());
        sim.queue_woken(0, 0, Resume::Reap(completion(5_000)));
        // At 10 us nothing is booked on core 0 any more, but process 0 waits there for its pick: process 1, woken
        // then, queues behind it by virtual runtime instead of running ahead of it.
        assert!(sim.host.idle_at(0, 10_000));
        assert!(sim.waits_in_run_queue(0, 10_000));
    }

    #[test]
    fn a_process_woken_onto_a_busy_core_waits_in_its_run_queue_on_cfs_and_eevdf() {
        for kernel in ["6.3", "6.12"] {
            let mut c = three_pinned_readers();
            c.host.kernel = kernel.into();
            let mut sim = Simulation::new(&c).unwrap();
            sim.host.run(0, 9, 0, 10_000, &mut Default::default());
            assert!(sim.waits_in_run_queue(0, 1_000), "{kernel}");
        }
        // Negative control: CFS runs a process woken onto an idle core at once.
        let c = three_pinned_readers();
        let sim = Simulation::new(&c).unwrap();
        assert!(!sim.waits_in_run_queue(0, 1_000));
    }

    #[test]
    fn on_eevdf_processes_woken_together_onto_an_idle_core_run_least_virtual_runtime_first() {
        // Core 0 idle, three readers pinned there; reader 0 has run 300 us, reader 2 100 us, reader 1 200 us
        // (min_vruntime 100 us). One interrupt wakes 0, then 1, then 2, at 50 us: EEVDF enqueues all three before
        // the core picks, and picks by deadline, here the least virtual runtime: 2, then 1, then 0, each once the
        // one before has reaped.
        let mut c = three_pinned_readers();
        c.host.kernel = "6.12".into();
        let mut sim = Simulation::new(&c).unwrap();
        for (process, ran_us) in [(0, 300), (1, 200), (2, 100)] {
            sim.processes[process].state.vruntime_ns = ran_us * 1_000;
            sim.processes[process].state.inflight = 1;
        }
        sim.min_vruntime_ns[0] = 100_000;
        sim.events.now_ns = 50_000;
        for process in 0..3 {
            assert!(sim.waits_in_run_queue(0, 50_000));
            sim.queue_woken(0, process, Resume::Reap(completion(5_000)));
        }
        let mut order = Vec::new();
        while let Some((now, event)) = sim.events.pop() {
            if let Event::PickNext { core } = event {
                let queued: Vec<bool> = (0..3).map(|p| sim.processes[p].state.queued).collect();
                sim.pick_next(core, now);
                order.extend((0..3).filter(|&p| queued[p] && !sim.processes[p].state.queued));
            }
            if order.len() == 3 {
                break;
            }
        }
        assert_eq!(order, [2, 1, 0]);
        // Negative control: CFS books the first woken at once (it never waits on an idle core).
        let c = three_pinned_readers();
        let sim = Simulation::new(&c).unwrap();
        assert!(!sim.waits_in_run_queue(0, 50_000));
    }

    #[test]
    fn on_eevdf_threads_woken_onto_an_idle_core_are_picked_once_the_host_has_woken_it() {
        // The VM lab's host wakes a halted vCPU late (`wake_late_ns`): 100 / 200 / 1,000 us at P10 / P50 / P90 after
        // 1 ms. Core 0, shared by three pinned readers on EEVDF, has been idle since 1 ms; at 3 ms one interrupt
        // wakes readers 0 and 1 there, its timer late at its median. Reader 0 finds the core idle: 200 us late
        // (the 1 ms row at P50). Reader 1, woken at the same instant, finds reader 0 waiting (the core is no
        // longer idle): no draw of its own, it joins the same pick. So the first pick is at 3.2 ms, not 3 ms.
        let mut c = three_pinned_readers();
        c.host.kernel = "6.12".into();
        c.host.wake_lateness = Some(crate::testkit::lateness());
        let mut sim = Simulation::new(&c).unwrap();
        sim.host.cores[0].free_at_ns = 1_000_000;
        sim.events.now_ns = 3_000_000;
        for process in 0..2 {
            sim.processes[process].state.inflight = 1;
        }
        assert!(sim.waits_in_run_queue(0, 3_000_000));
        let late_ns = sim.wake_late_ns(0, 3_000_000, Some((0.5, 1_000_000)));
        assert_eq!(late_ns, 200_000);
        sim.queue_woken_from(0, 0, Resume::Reap(completion(5_000)), 3_000_000 + late_ns);
        assert_eq!(sim.wake_late_ns(0, 3_000_000, Some((0.5, 1_000_000))), 0);
        sim.queue_woken_from(0, 1, Resume::Reap(completion(5_000)), 0);
        let picks: Vec<u64> = std::iter::from_fn(|| sim.events.pop())
            .filter_map(|(now, e)| matches!(e, Event::PickNext { core: 0 }).then_some(now))
            .collect();
        assert_eq!(picks, [3_200_000]);
        // Negative control: queued with no lateness (a busy core, or a host without it), picked at once.
        let mut sim = Simulation::new(&c).unwrap();
        sim.events.now_ns = 3_000_000;
        sim.processes[0].state.inflight = 1;
        sim.queue_woken_from(0, 0, Resume::Reap(completion(5_000)), 0);
        assert_eq!(sim.events.pop().map(|(now, _)| now), Some(3_000_000));
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
        sim.queue_woken(1, 1, Resume::Reap(completion(5_000)));
        assert_eq!(sim.woken_core(0, 1_000), 0);
        // Core 1's work is over at 10 us but process 1 still waits there for its pick: not idle to process 0.
        sim.host.run(0, 9, 20_000, 30_000, &mut Default::default());
        assert_eq!(sim.woken_core(0, 15_000), 0);
        // EEVDF (6.12) places a woken process as CFS does (`select_task_rq_fair` did not change with it): with
        // both cores busy and nobody waiting, core 1, whose work ends first, where it waits.
        let c = three_unpinned_readers("6.12");
        let mut sim = Simulation::new(&c).unwrap();
        sim.processes[0].state.core = 0;
        sim.host.run(0, 9, 0, 20_000, &mut Default::default());
        sim.host.run(1, 9, 0, 10_000, &mut Default::default());
        assert_eq!(sim.woken_core(0, 1_000), 1);
        assert!(sim.waits_in_run_queue(1, 1_000));
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
        // Had each piece of a call been booked on the core that frees first, behind others' pieces (the model
        // of Linux 6.6+ until 2026-12-04), the slat would be 385 us, more than the clat.
        for kernel in ["6.3", "6.12"] {
            let (alone_slat_us, _) = slat_and_clat_us(kernel, 1);
            assert!(
                (alone_slat_us - 32.0).abs() < 0.5,
                "{kernel}: {alone_slat_us}"
            );
            let (slat_us, clat_us) = slat_and_clat_us(kernel, 16);
            assert!(
                slat_us < 2.0 * alone_slat_us && clat_us > 5.0 * slat_us,
                "{kernel}: {slat_us} {clat_us}"
            );
        }
    }

    #[test]
    fn processes_that_never_sleep_share_a_core_in_slices_not_one_io_at_a_time() {
        // Three QD-32 readers on the 2-core test host, each I/O costing 40 us to submit and 1.5 us to complete:
        // CPU-bound (two cores finish one I/O per 41.5 / 2 us; the small SSD takes ~77 K/s), so none of them ever
        // waits for a completion. Two share a core. On CFS (6.3) the one running keeps it for its slice: the
        // latency 6 ms x (1 + ilog2(2)) = 12 ms over the 2 runnable there, 6 ms; then it gives the core up where
        // it next leaves the kernel. In 50 ms that is 50 / 6 ~ 8 switches (9), and the three together do what
        // two do alone (2,408 I/Os in the window).
        let run = |kernel: &str, readers: u32| {
            let mut j = job("r", Rw::Randread, 32, readers);
            j.runtime_ns = 50_000_000;
            let mut c = config("none", vec![j]);
            c.host.kernel = kernel.into();
            c.host.io_uring.submit_ns = 40_000;
            let r = Simulation::new(&c).unwrap().run(&mut |_| true).unwrap();
            (r.jobs[0].read.ios, r.jobs[0].context_switches)
        };
        let (two_ios, two_switches) = run("6.3", 2);
        // Each sleeps once, after its runtime, waiting for its last I/Os (fio's ctx counts that too).
        assert_eq!(two_switches, 2);
        // Three sleep as their last I/Os complete too (5 times in all on 6.3).
        let drain = 3..=8;
        let (ios, switches) = run("6.3", 3);
        assert!(
            (5 + drain.start()..=12 + drain.end()).contains(&switches),
            "{switches}"
        );
        assert!(ios as f64 >= 0.98 * two_ios as f64, "{ios} {two_ios}");
        // On EEVDF (6.12) a slice is the base slice, 0.75 ms x 2 = 1.5 ms, not shared out, and the switch comes
        // where the runner next leaves the kernel: after the submissions its loop booked at once (up to 32 x 40
        // us = 1.28 ms), so 50 / (1.5 to 2.8) = 18-33 switches (21), and still the throughput of two. (Their work
        // interleaved piece by piece, as the model of 6.6+ did until 2026-12-04, gave 683 switches, each paid for.)
        let (ios, switches) = run("6.12", 3);
        assert!(
            (17 + drain.start()..=34 + drain.end()).contains(&switches),
            "{switches}"
        );
        assert!(ios as f64 >= 0.98 * two_ios as f64, "{ios} {two_ios}");
    }
}
