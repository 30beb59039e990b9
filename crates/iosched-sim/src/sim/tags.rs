//! A bio that finds no free request (tag): who waits for it (`TagWait`), the sleeping thread's wake-up, its retry,
//! and what the thread does once it has its request.

use iosched_policy::BlockLayer;

use super::block::QueueRunner;
use super::process::PathLocks;
use super::{BioKind, Resume, Simulation};
use crate::config::SchedulerDispatch;
use crate::engine::Event;

/// Who waits for a request (a tag) when a bio finds none: the submitting thread, or io_uring's workers.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum TagWait {
    /// libaio's io_submit and psync's pwrite ask for no REQ_NOWAIT: the submitter sleeps in its call until the
    /// request is free, so it neither submits nor reaps meanwhile, and has at most one bio waiting. (With a
    /// scheduler, the request is sought once its hooks' CPU time is booked, `BlockInsert`, while the process's loop
    /// goes on from the end of its submission path, `SubmitNext`: it may book one more batch before it sleeps.
    /// Holding the loop back until the hooks end moved BFQ's shares in seed 001's KF1, where requests never run
    /// out, so it is not done.)
    Submitter,
    /// io_uring issues inline with REQ_NOWAIT: a bio that finds no request fails with -EAGAIN and is reissued,
    /// blocking, by one of the ring's io-wq workers, while the submitter goes on; the worker's issue is a new
    /// allocation, with the shallow depth `limit_depth` gives when it runs. Block-device I/O is bounded work,
    /// and a ring has min(SQ entries, 4 x CPUs) bounded workers (io_uring/io_uring.c `io_init_wq_offload`), so at
    /// most that many of its bios wait for requests; the rest queue for a worker in io-wq, in order.
    IoWqWorkers(u32),
    /// Kernel threads (the writeback flusher), which wait for each bio to be accepted anyway.
    Kernel,
}

impl Simulation<'_> {
    /// The thread asleep waiting for a request for bio `io` (the submitter, an io-wq worker or the flusher) is
    /// woken: its wake-up is booked on the process's core, and then it asks again (`TagRetry`).
    ///
    /// At once, from whichever core the waker ran on. The VM lab's blk trace (2026-12-04, two libaio readers of 16
    /// on a 16-tag null_blk under none, one per vCPU; docs/validation.md) has a reader that slept for a tag get it
    /// 30 / 137 / 353 us (P10 / P50 / P90) after the last completion before it when that completion was the other
    /// vCPU's, and 37 / 117 / 310 us when it was its own: waking a halted vCPU adds little. (Until then the
    /// simulator delayed such a wake-up by the lateness of a timer as long as the sleeper's vCPU had been halted,
    /// ~0.3 ms at the median after 14 ms; with the lab's CPU costs measured on a quiet host that let one reader
    /// take every freed tag, which the lab never does.)
    fn wake_tag_sleeper(&mut self, io: u32, now: u64) {
        let process = self.slots[io as usize].process;
        self.trace_thread('W', io, now);
        let end = if self.slots[io as usize].io_wq_worker != 0 {
            let core = self.woken_worker_core(io, now);
            self.slots[io as usize].core = core;
            let at = now + self.wake_late_ns(core, now, None);
            self.book_worker_wake_up(core, process, at)
        } else if self.slots[io as usize].kind == BioKind::Fio {
            let core = self.woken_core(process, now);
            // The submitter itself slept: woken onto a busy core, it waits there for the process running to
            // sleep, leave the kernel or end its slice (`runqueue.rs`), as for a completion.
            if self.processes[process as usize].params.tag_wait == TagWait::Submitter
                && self.waits_in_run_queue(core, now)
            {
                // On an idle core of a run queue (EEVDF), picked once the host has woken the core.
                let late_ns = self.wake_late_ns(core, now, None);
                let runnable_ns = if late_ns > 0 { now + late_ns } else { 0 };
                self.queue_woken_from(core, process, Resume::TagRetry(io), runnable_ns);
                self.preempt_on_wakeup(core, process);
                return;
            }
            self.woken_thread_runs_at(process, core, now)
        } else {
            self.book_wake_up(process, now)
        };
        self.trace_thread('R', io, end);
        self.events.schedule(end, Event::TagRetry { io });
    }

    /// Where an io-wq worker woken for a request runs: a thread of its own, placed as the kernel places any woken
    /// task (kernel/sched/fair.c `select_task_rq_fair`, `select_idle_sibling`): on the CPU it slept on when that is
    /// idle, else on an idle allowed one, else on its own. The freed tag that woke it was on the hardware queue of
    /// the CPU it slept on, whose completion ran there, so an idle machine keeps it on that queue; one that moves
    /// asks another queue and, leaving, wakes a sleeper of the old one (`Blk::retry_tag`), which may move in turn.
    /// Until 2026-12-07 the model woke it where its fio process would run (the process's core, if idle): 98% of
    /// the retries of Fig. 11b's BFQ run with 16 readers moved, and every move woke another sleeper, ~1.1 M
    /// wake-ups a second on the slow drive for its ~26 K freed requests, so the order in which the kernel's
    /// sleepers get requests was lost (docs/papers.md, "Every app of Figs. 11-12 starts together").
    fn woken_worker_core(&self, io: u32, at_ns: u64) -> u32 {
        let slot = &self.slots[io as usize];
        let allowed = &self.processes[slot.process as usize].params.allowed_cores;
        if allowed.len() == 1 {
            return allowed[0];
        }
        crate::host::wake_order(allowed, slot.core)
            .find(|&core| self.core_idle(core, at_ns))
            .unwrap_or(slot.core)
    }

    /// Book an io-wq worker's wake-up on `core` from `at_ns`: the worker's CPU time, counted as its process's, but
    /// neither moving the process (its submitter) to that core nor keeping it busy; returns when the worker runs.
    fn book_worker_wake_up(&mut self, core: u32, process: u32, at_ns: u64) -> u64 {
        let wake_ns = self.wake_up_ns(process, at_ns);
        let proc = &mut self.processes[process as usize];
        let (start_ns, end_ns) = self
            .host
            .run(core, process, at_ns, wake_ns, &mut proc.stats.cpu);
        self.set_runner(core, process, start_ns, end_ns);
        let booked = super::CpuBooking {
            core,
            start_ns,
            end_ns,
        };
        self.woken_up(booked, wake_ns)
    }

    /// Wake the threads of the bios a freed tag woke (`woken`, taken from `woken_bios`, whose allocation it gives
    /// back empty).
    fn wake_tag_sleepers(&mut self, mut woken: Vec<u32>, now: u64) {
        for &io in &woken {
            self.wake_tag_sleeper(io, now);
        }
        woken.clear();
        self.woken_bios = woken;
    }

    /// Book a sleeping thread's wake-up on `process`'s core from `now`; returns when it runs.
    fn book_wake_up(&mut self, process: u32, now: u64) -> u64 {
        let wake_ns = self.wake_up_ns(process, now);
        let booked = self.run_process(process, now, wake_ns);
        self.woken_up(booked, wake_ns)
    }

    /// `book_wake_up` on `core`, which picked the thread from its run queue.
    pub(super) fn book_wake_up_on(&mut self, core: u32, process: u32, now: u64) -> u64 {
        let wake_ns = self.wake_up_ns(process, now);
        let booked = self.run_process_on(core, process, now, wake_ns);
        self.woken_up(booked, wake_ns)
    }

    fn wake_up_ns(&self, process: u32, now: u64) -> u64 {
        self.processes[process as usize].params.cost.sleep_wake_ns
            + self.package_idle_wake_extra_ns(now)
    }

    /// A wake-up booked as `booked`: count its wait-queue lock calls; returns when the thread runs.
    fn woken_up(&mut self, booked: super::CpuBooking, wake_ns: u64) -> u64 {
        let locks = PathLocks::WAIT_QUEUE_SLEEP as u64;
        self.count_lock_calls(booked.core, booked.start_ns, locks, wake_ns);
        booked.end_ns
    }

    /// A woken tag sleeper asks for a request for bio `io` again (blk-mq): it goes back to sleep, or its bio
    /// enters the elevator and its thread goes on.
    /// A thread of a fio job asks from the core it woke on (an unpinned process may have moved, and its request
    /// then belongs to that core's hardware queue); the flusher's bios keep theirs.
    pub(super) fn tag_retry(&mut self, io: u32, now: u64) {
        let (device, slept_on, kind, process) = {
            let s = &self.slots[io as usize];
            (s.device, s.hctx, s.kind, s.process)
        };
        let worker = self.slots[io as usize].io_wq_worker != 0;
        let (core, hctx) = if kind == BioKind::Fio {
            let core = if worker {
                self.slots[io as usize].core // where its wake-up put it (`woken_worker_core`)
            } else {
                self.processes[process as usize].state.core
            };
            (core, core % self.queues[device as usize].nr_hw_queues)
        } else {
            (self.slots[io as usize].core, slept_on)
        };
        let mut woken = std::mem::take(&mut self.woken_bios);
        let got = self.queues[device as usize].retry_tag(slept_on, hctx, core, io, &mut woken);
        if hctx != slept_on {
            let slot = &mut self.slots[io as usize];
            (slot.core, slot.hctx, slot.dispatch_hctx) = (core, hctx, hctx);
        }
        self.wake_tag_sleepers(woken, now);
        if !got {
            self.trace_thread('S', io, now);
            return; // asleep again, on the next wait queue
        }
        self.trace_bio('G', io, now);
        let rq = self.make_request(io, now);
        self.queues[device as usize].elevator.insert(rq, now);
        self.accepted(io, now);
        self.tag_obtained(io, now);
        // The woken thread inserted in its own context; it runs the queue itself unless kblockd does.
        let runner = match self.costs.dispatch_context {
            SchedulerDispatch::Kblockd => QueueRunner::Kblockd,
            SchedulerDispatch::Inline => QueueRunner::Thread {
                core: if worker {
                    self.slots[io as usize].core
                } else {
                    self.processes[process as usize].state.core
                },
                process: self.slots[io as usize].process,
                booked_until_ns: 0,
            },
        };
        self.run_hw_queue(device, hctx, now, runner);
        self.arm_timer(device, now);
    }

    /// io_uring: bio `io` has its request (or merged) without sleeping; if an io-wq worker issued it, that worker
    /// is free again and takes the next bio waiting in io-wq.
    pub(super) fn io_wq_worker_done(&mut self, io: u32, now: u64) {
        if !self.release_io_wq_worker(io) {
            return;
        }
        let process = self.slots[io as usize].process;
        self.processes[process as usize].state.tag_waits -= 1;
        self.next_io_wq_work(process, now);
    }

    /// The io-wq worker that issued bio `io`, if one did, goes back on its ring's free list; whether one did.
    fn release_io_wq_worker(&mut self, io: u32) -> bool {
        let slot = &mut self.slots[io as usize];
        let worker = std::mem::take(&mut slot.io_wq_worker);
        if worker != 0 {
            self.processes[slot.process as usize]
                .state
                .io_wq_free
                .push(worker);
        }
        worker != 0
    }

    /// The number of a free io-wq worker of `process`'s ring (the last freed, else a new one), taken: the request
    /// trace names the thread by it (`iou-wrk-PID`, a thread of its own).
    pub(super) fn take_io_wq_worker(&mut self, process: u32) -> u16 {
        let state = &mut self.processes[process as usize].state;
        state.io_wq_free.pop().unwrap_or_else(|| {
            state.io_wq_started += 1;
            state.io_wq_started
        })
    }

    /// A free io-wq worker of `process`'s ring, running at `now`, issues the next bio waiting in io-wq, if any.
    fn next_io_wq_work(&mut self, process: u32, now: u64) {
        let proc = &mut self.processes[process as usize];
        if let Some(next) = proc.state.punted.pop_front() {
            proc.state.tag_waits += 1;
            self.slots[next as usize].io_wq_worker = self.take_io_wq_worker(process);
            self.events.schedule(now, Event::BlockInsert { io: next });
        }
    }

    /// When an io-wq worker woken for a bio whose NOWAIT attempt failed runs, and issues it again: woken as a tag
    /// sleeper is (`woken_thread_runs_at`).
    /// Between the two attempts completions may have brought the queue under its share of the tags
    /// (`bfq_limit_depth`), so the worker's attempt may get a deeper shallow depth than the one that failed.
    pub(super) fn io_wq_worker_runs_at(&mut self, process: u32, now: u64) -> u64 {
        let core = self.woken_core(process, now);
        self.woken_thread_runs_at(process, core, now)
    }

    /// When a thread of `process` woken at `now` onto `core` runs: late where the host wakes a halted CPU late
    /// (`wake_late_ns`), its wake-up booked as the process's.
    fn woken_thread_runs_at(&mut self, process: u32, core: u32, now: u64) -> u64 {
        let at = now + self.wake_late_ns(core, now, None);
        self.book_wake_up(process, at)
    }

    /// Legacy layer: bio `io` was handed the request it waited for, and the thread that waited wakes (a job's; the
    /// flusher's wake-up is not booked here).
    pub(super) fn tag_granted(&mut self, io: u32, now: u64) {
        if self.slots[io as usize].kind != BioKind::Fio {
            return;
        }
        self.trace_thread('W', io, now);
        let end = self.book_wake_up(self.slots[io as usize].process, now);
        self.trace_thread('R', io, end);
        self.tag_obtained(io, end);
    }

    /// Bio `io` got the request its (now running) thread waited for: the submitter goes on with its loop, or the
    /// io-wq worker takes the next punted bio.
    pub(super) fn tag_obtained(&mut self, io: u32, now: u64) {
        let slot = &self.slots[io as usize];
        if slot.kind != BioKind::Fio {
            return;
        }
        let process = slot.process;
        self.release_io_wq_worker(io);
        let proc = &mut self.processes[process as usize];
        proc.state.tag_waits -= 1;
        if proc.params.tag_wait == TagWait::Submitter && proc.params.clat_after_call {
            // libaio: io_submit returns only now, so the sleep was submission latency (see `clat_after_call`).
            self.slots[io as usize].issue_ns = now;
        }
        match proc.params.tag_wait {
            TagWait::Submitter if !proc.state.submitting => {
                proc.state.submitting = true;
                self.events.schedule(now, Event::SubmitNext { process });
            }
            TagWait::IoWqWorkers(_) => self.next_io_wq_work(process, now),
            _ => {}
        }
    }

    /// A request tag on `hctx` of `device` was freed at `now`: under blk-mq it may wake sleepers, who ask again
    /// once they run (`tag_retry`); the legacy request list hands it to the bio that waited longest. Returns
    /// whether a waiting bio was inserted with it.
    pub(super) fn request_tag_freed(&mut self, device: u32, hctx: u32, now: u64) -> bool {
        let mut inserted = false;
        if self.queues[device as usize].layer == BlockLayer::Mq {
            let mut woken = std::mem::take(&mut self.woken_bios);
            self.queues[device as usize].tag_freed(hctx, &mut woken);
            self.wake_tag_sleepers(woken, now);
        }
        while let Some(waiting) = self.queues[device as usize].next_tag_waiter(hctx) {
            self.trace_bio('G', waiting, now);
            let waiting_rq = self.make_request(waiting, now);
            self.queues[device as usize]
                .elevator
                .insert(waiting_rq, now);
            self.accepted(waiting, now);
            self.tag_granted(waiting, now);
            inserted = true;
        }
        inserted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{IoEngine, Rw};
    use crate::testkit::{config, job};

    /// A device with 2 requests per hardware queue (no elevator: the driver tags), and one process submitting
    /// `batch` random reads in one call with `engine`.
    fn scarce_requests(engine: IoEngine, batch: u32) -> crate::config::SimConfig {
        let mut j = job("a", Rw::Randread, batch, 1);
        j.iodepth_batch_submit = batch;
        j.ioengine = engine;
        let mut c = config("none", vec![j]);
        c.devices[0].queue_depth = 2;
        c
    }

    /// Handle events until every bio issued so far has left `BlockSubmit` (or was punted).
    fn until_all_reached_the_block_layer(sim: &mut Simulation) {
        sim.submit_batch(0, 0);
        while let Some((now, event)) = sim.events.pop() {
            let last =
                matches!(event, Event::BlockSubmit { io } if io + 1 == sim.ios_issued as u32);
            sim.handle(now, event);
            if last {
                return;
            }
        }
    }

    /// The request trace shows io-wq as the kernel's does: 16 reads for 2 requests, io_uring (8 workers on 2
    /// cores), traced for 1 ms. Every NOWAIT attempt that found no request ends (E, the tracer's C with -EAGAIN),
    /// and its bio is issued again as a new Q by a worker numbered 1 to 8, whose sleeps and G follow under that
    /// number, while D and C are the request's, not the worker's. Negative control: libaio's submitter sleeps
    /// itself, so its trace has no E and no worker.
    #[test]
    fn the_request_trace_shows_a_failed_nowait_attempt_and_the_io_wq_worker_that_issues_it_again() {
        let trace = |engine: IoEngine| {
            let mut c = scarce_requests(engine, 16);
            c.jobs[0].runtime_ns = 1_000_000;
            c.request_trace = true;
            crate::simulate(&c, &mut |_| true).unwrap().request_trace
        };
        let events = trace(IoEngine::IoUring);
        let failed: Vec<usize> = (0..events.len())
            .filter(|&i| events[i].action == 'E')
            .collect();
        assert!(!failed.is_empty() && failed.iter().all(|&i| events[i].thread == 0));
        for &i in &failed {
            // E.g. one bio: Q at 32 us (the fio thread), E at 32 us, Q by worker 1 at 35 us (its wake-up), S,
            // W and R under worker 1, its G at 103 us, then D and C of the request.
            let again = events[i..]
                .iter()
                .find(|q| q.action == 'Q' && q.sector == events[i].sector)
                .expect("issued again");
            assert!((1..=8).contains(&again.thread), "{again:?}");
        }
        assert!(events
            .iter()
            .all(|e| e.thread <= 8 && (!matches!(e.action, 'D' | 'C') || e.thread == 0)));
        assert!(
            events.iter().any(|e| e.action == 'S' && e.thread > 0),
            "a worker slept"
        );
        let libaio = trace(IoEngine::Libaio);
        assert!(
            libaio.iter().any(|e| e.action == 'S'),
            "the submitter slept"
        );
        assert!(libaio.iter().all(|e| e.action != 'E' && e.thread == 0));
    }

    /// Two processes, one per core, and a host whose timers are late by 0.1 ms after 1 ms and by 2 ms after 10
    /// ms, whatever the draw (the table's two quantiles agree), so the arithmetic is exact.
    #[test]
    fn io_urings_bios_wait_in_its_workers_and_the_rest_queue_for_a_worker() {
        // 16 entries on 2 cores: 8 io-wq workers.
        let c = scarce_requests(IoEngine::IoUring, 16);
        let mut sim = Simulation::new(&c).unwrap();
        until_all_reached_the_block_layer(&mut sim);
        let state = &sim.processes[0].state;
        assert_eq!(
            (state.tag_waits, state.punted.len()),
            (8, 6),
            "2 got requests"
        );
        assert!(!sim.processes[0].asleep_on_tag(), "the submitter goes on");
        sim.run_until(|sim| sim.ios_completed >= 16);
        let state = &sim.processes[0].state;
        assert_eq!((state.tag_waits, state.punted.len()), (0, 0));
    }

    /// The same 16 bios: a NOWAIT attempt that finds no request is not yet a sleeper. Its io-wq worker issues the
    /// bio again from scratch once it has woken (so with whatever shallow depth `limit_depth` gives then), and only
    /// that attempt sleeps if there is still no request.
    #[test]
    fn an_io_wq_worker_asks_again_once_it_runs_and_only_then_sleeps() {
        let c = scarce_requests(IoEngine::IoUring, 16);
        let mut sim = Simulation::new(&c).unwrap();
        until_all_reached_the_block_layer(&mut sim);
        let hw_queues = sim.nr_hw_queues(0);
        let asleep = |sim: &Simulation| -> usize {
            (0..hw_queues)
                .map(|h| sim.queues[0].sleeping_on_tags(h))
                .sum()
        };
        let with_workers = |sim: &Simulation| -> usize {
            sim.slots
                .iter()
                .filter(|slot| slot.live && slot.io_wq_worker != 0)
                .count()
        };
        let failed_at = sim.events.now_ns;
        assert_eq!(
            (asleep(&sim), with_workers(&sim)),
            (0, 8),
            "8 bios with workers, none asleep yet"
        );
        // The batch's NOWAIT attempts end at 32 us; the first worker's wake-up (3 us on the test host) is booked on
        // the process's core from then, and it asks again at 35 us.
        let (first_ns, first_io) = loop {
            let (now, event) = sim.events.pop().expect("the workers' attempts");
            if let Event::BlockInsert { io } = event {
                if sim.slots[io as usize].io_wq_worker != 0 {
                    break (now, io);
                }
            }
            sim.handle(now, event);
        };
        let wake_ns = sim.processes[0].params.cost.sleep_wake_ns;
        assert_eq!((failed_at, wake_ns, first_ns), (32_000, 3_000, 35_000));
        sim.handle(first_ns, Event::BlockInsert { io: first_io });
        assert_eq!(
            asleep(&sim),
            1,
            "no request was freed meanwhile: the worker sleeps"
        );
        sim.run_until(|sim| sim.ios_completed >= 16);
        assert_eq!(
            (with_workers(&sim), sim.processes[0].state.tag_waits),
            (0, 0)
        );
    }

    /// A woken io-wq worker is a thread of its own: it runs on the CPU it slept on while that one is idle, so it
    /// asks the same hardware queue again and wakes nobody on leaving it; on a busy CPU it moves to an idle one;
    /// with every CPU busy it waits on its own. The 16 reads of `scarce_requests` on the test host's 2 cores: a
    /// worker that slept on core 1 while its fio process last ran on core 0. Negative control: placed as its
    /// process would be (the rule before 2026-12-07), it goes to the process's core 0 and changes queue.
    #[test]
    fn a_woken_io_wq_worker_runs_on_the_cpu_it_slept_on_while_that_is_idle() {
        let c = scarce_requests(IoEngine::IoUring, 16);
        let mut sim = Simulation::new(&c).unwrap();
        until_all_reached_the_block_layer(&mut sim);
        let io = (0..sim.slots.len() as u32)
            .find(|&io| sim.slots[io as usize].live && sim.slots[io as usize].io_wq_worker != 0)
            .expect("a bio with a worker");
        sim.slots[io as usize].core = 1;
        sim.processes[0].state.core = 0;
        let now = sim.events.now_ns + 1_000_000; // past every piece of work booked so far
        assert!(sim.core_idle(0, now) && sim.core_idle(1, now));
        assert_eq!(sim.woken_worker_core(io, now), 1, "idle: where it slept");
        assert_eq!(
            sim.woken_core(0, now),
            0,
            "control: the process's rule moves it"
        );
        let mut account = Default::default();
        sim.host.run(1, 0, now, 10_000, &mut account);
        assert_eq!(
            sim.woken_worker_core(io, now),
            0,
            "its CPU busy: the idle one"
        );
        sim.host.run(0, 0, now, 10_000, &mut account);
        assert_eq!(sim.woken_worker_core(io, now), 1, "both busy: its own");
    }

    /// Two sequential io_uring writers on one core (so 4 io-wq workers per ring) over the same blocks, 2 command
    /// slots and 4 requests: bios punted to io-wq later merge into requests the elevator holds (the other
    /// process's, contiguous with theirs). Each such merge frees its worker, which must take the next punted bio.
    fn punted_bios_that_merge(scheduler: &str) -> crate::config::SimConfig {
        let mut j = job("a", Rw::Write, 32, 2);
        j.runtime_ns = 2_000_000;
        let mut c = config(scheduler, vec![j]);
        c.host.cores = 1;
        c.scheduler.nr_requests = Some(4);
        c.devices[0].queue_depth = 2;
        c
    }

    #[test]
    fn a_punted_bio_that_merges_hands_its_io_wq_worker_to_the_next_punted_bio() {
        // Stranded, mq-deadline's run ran out of events with bios in flight; kyber-fairness's timer kept ticking.
        for scheduler in ["mq-deadline", "kyber-fairness"] {
            let c = punted_bios_that_merge(scheduler);
            let mut sim = Simulation::new(&c).unwrap();
            sim.start_and_run_until(|sim| sim.events.processed > 1_000_000);
            assert_eq!(sim.active_processes, 0, "{scheduler}: the run never ended");
            let result =
                crate::simulate(&c, &mut |_| true).unwrap_or_else(|e| panic!("{scheduler}: {e}"));
            assert_eq!(result.ios_issued, result.ios_completed, "{scheduler}");
        }
    }

    /// Two libaio processes pinned to core 0 on Linux `kernel`, 2 requests per queue: process 0's third bio found
    /// none and it sleeps in io_submit. Returns the simulation, its events cleared, and that bio.
    fn a_submitter_asleep_beside_another(kernel: &str) -> (Simulation<'static>, u32) {
        let mut c = scarce_requests(IoEngine::Libaio, 3);
        c.jobs[0].numjobs = 2;
        c.jobs[0].cpus_allowed = vec![0];
        c.host.kernel = kernel.into();
        let mut sim = Simulation::new(Box::leak(Box::new(c))).unwrap();
        until_all_reached_the_block_layer(&mut sim);
        assert!(sim.processes[0].asleep_on_tag());
        let io = sim.ios_issued as u32 - 1;
        sim.events = crate::engine::EventQueue::default();
        (sim, io)
    }

    /// Handle events until bio `io`'s thread asks for a request again; when it does.
    fn next_tag_retry_ns(sim: &mut Simulation, io: u32) -> Option<u64> {
        while let Some((now, event)) = sim.events.pop() {
            if matches!(event, Event::TagRetry { io: retried } if retried == io) {
                return Some(now);
            }
            sim.handle(now, event);
        }
        None
    }

    #[test]
    fn a_woken_submitter_waits_for_the_process_in_its_call_on_its_core_before_asking_again() {
        // A freed tag wakes process 0 at 10 us while process 1 runs its own submission call on core 0, booked to
        // 60 us: the kernel does not preempt a syscall, so process 0 waits in the run queue and runs its wake-up
        // (3 us on the test host, plus a 1 us switch) from 60 us, asking again at 64 us, by which time process 1
        // may have taken the tag. Linux 6.3 (CFS) and 6.12 (EEVDF) alike.
        for kernel in ["6.3", "6.12"] {
            let (mut sim, io) = a_submitter_asleep_beside_another(kernel);
            let booked = sim.run_process_on(0, 1, 10_000, 50_000);
            assert_eq!((booked.start_ns, booked.end_ns), (10_000, 60_000));
            sim.processes[1].state.submitting = true;
            sim.events.now_ns = 10_000;
            sim.wake_tag_sleeper(io, 10_000);
            assert!(sim.processes[0].state.queued, "{kernel}");
            // Its call over, process 1 sleeps (its own bio found no request): the core picks process 0.
            sim.processes[1].state.submitting = false;
            assert_eq!(next_tag_retry_ns(&mut sim, io), Some(64_000), "{kernel}");
        }
        // Negative control: with core 0 idle the wake-up runs at once, 3 us (plus the switch): on CFS booked at
        // once, on EEVDF picked at the same instant (`waits_in_run_queue`).
        for kernel in ["6.3", "6.12"] {
            let (mut sim, io) = a_submitter_asleep_beside_another(kernel);
            sim.events.now_ns = 100_000;
            sim.wake_tag_sleeper(io, 100_000);
            let retry_ns = next_tag_retry_ns(&mut sim, io);
            assert!(
                retry_ns.is_some_and(|at| at <= 104_000),
                "{kernel}: {retry_ns:?}"
            );
        }
    }

    #[test]
    fn a_libaio_submitter_sleeps_in_its_call_and_reaps_nothing_until_it_has_its_request() {
        let c = scarce_requests(IoEngine::Libaio, 3);
        let mut sim = Simulation::new(&c).unwrap();
        until_all_reached_the_block_layer(&mut sim);
        assert_eq!(sim.processes[0].state.tag_waits, 1);
        assert!(sim.processes[0].asleep_on_tag());
        // The first completion finds it asleep: fio has not seen it yet.
        while sim.ios_completed == 0 && sim.processes[0].state.unreaped.is_empty() {
            sim.step();
        }
        assert_eq!(sim.ios_completed, 0);
        assert_eq!(sim.processes[0].state.unreaped.len(), 1);
    }
}
