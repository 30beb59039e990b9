//! fio's side of an I/O: the submit/reap loop of each process (depth, `iodepth_batch_submit` batches sharing a
//! plug, rate and think time, trace replay batches), reaping completions and recording their latency, and the end
//! of a process and of a stonewall group.

use iosched_policy::SECTOR_BYTES;

use super::process::{batch_level, depth_level, Ramp};
use super::runqueue::{Completion, Resume};
use super::{BioKind, CpuBooking, IoSlot, Simulation, NO_IO};
use crate::engine::Event;

/// fio's default `iodepth_batch_complete_max` (that of `iodepth_batch_complete_min`, 1): events fio takes from the
/// ring per reap.
const FIO_REAP_MAX: u32 = 1;

impl Simulation<'_> {
    /// fio's submit/reap loop: submit one batch at a time (its submission path, then its scheduler hooks, run
    /// before the next batch is submitted: `SubmitNext`) for as long as the depth, rate and time allow; then take
    /// one event from the ring (`consume`, or `reap` the completions that arrived meanwhile), and submit again if
    /// that freed depth.
    pub(super) fn try_issue(&mut self, process: u32, now: u64) {
        if self.processes[process as usize].state.submitting {
            return; // the pending SubmitNext continues the loop
        }
        if self.processes[process as usize].asleep_on_tag() {
            return; // asleep in its submission call: the request it gets wakes it (`tag_granted`)
        }
        if self.processes[process as usize].state.queued {
            return; // woken, waiting in its core's run queue: `pick_next` goes on with its loop
        }
        if self.processes[process as usize].source.buffered.is_some() {
            return self.buffered_call(process, now);
        }
        let mut at = now;
        loop {
            if let Some(end) = self.submit_batch(process, at) {
                if !self.costs.any() && !self.processes[process as usize].params.may_sleep_on_tags {
                    // Nothing is booked between this batch and the next (no scheduler hooks to run on the core),
                    // and no bio of it can put the process to sleep waiting for a request, so the loop can go on
                    // at once; completions meanwhile are booked behind these submissions.
                    at = self.run_task_work(process, end);
                    continue;
                }
                let proc = &mut self.processes[process as usize];
                proc.state.submitting = true;
                self.events.schedule(end, Event::SubmitNext { process });
                return;
            }
            let next = if !self.processes[process as usize].state.consumable.is_empty() {
                self.consume(process, at)
            } else if self.processes[process as usize].state.unreaped.is_empty() {
                return;
            } else {
                self.reap(process, at, 0)
            };
            match next {
                Some(end) => at = end,
                None => return,
            }
        }
    }

    /// The process's submission call returned at `now` (its `SubmitNext` came, and its queue runs ended): its loop
    /// goes on, after the call's completion task work (`run_task_work`).
    pub(super) fn submission_call_returned(&mut self, process: u32, now: u64) {
        self.processes[process as usize].state.submitting = false;
        let core = self.processes[process as usize].state.core;
        if self.yields_core(process, core, now) {
            // Another process has its core now (a pick made while this one was in its call): it waits, runnable.
            return self.queue_woken(core, process, Resume::Issue);
        }
        let at = self.run_task_work(process, now);
        self.try_issue(process, at);
    }

    /// io_uring (`task_work_at_submit`): the submission call that ends at `at` runs the task work of the
    /// completions that arrived since the process last entered the kernel, posting their events for fio to take
    /// one per turn (`consume`); none is taken here. Returns when the work ends. Without it, a process at full
    /// depth left them all to the reap that found its ring empty: every few hundred I/Os one block of completion
    /// work (seed 000 Fig. 2e, BFQ at QD 256 on one core: 340 µs every millisecond, the clat P99 1.31x its P50
    /// where the artifact's is 1.06x).
    fn run_task_work(&mut self, process: u32, at: u64) -> u64 {
        let proc = &self.processes[process as usize];
        if !proc.params.task_work_at_submit || proc.state.stopped || proc.state.unreaped.is_empty()
        {
            return at;
        }
        // As if fio had taken its events already: the work is done, every event waits in the ring.
        self.work_off_unreaped(process, at, FIO_REAP_MAX).0
    }

    /// Do the completion work of every completion waiting for the process, and take the first from the ring as
    /// fio's reap (none if `reaped_before` already took it); the rest wait for fio's next turns (`consume`).
    /// Returns when it may submit again, or None if it stopped or thinks first.
    ///
    /// fio takes at most `iodepth_batch_complete_max` events per reap, whose default is
    /// `iodepth_batch_complete_min`'s 1 (fio's `fixup_options`), and reaps only with its queue full: it takes one
    /// event, submits one I/O, takes the next. An event it has not taken holds its depth and its clat runs on,
    /// also while fio sleeps in io_submit waiting for a request. The kernel's side of the completions is not
    /// spread out that way (io_uring posts them in task work that runs, all pending, when the process enters the
    /// kernel; libaio in the interrupt), so their work stays booked here, all at once. (The VM lab's two QD-16
    /// libaio readers sharing 16 tags under none: clat P50 two service times, fio's reaps of 1-4 and its depth at
    /// 16 for 99%; reaping all at once gave one service time, reaps of 5-8 and depth 5-8: docs/validation.md.)
    /// `reaped_before`: completions this same reap already took in (the one a woken process reaps first).
    pub(super) fn reap(&mut self, process: u32, at: u64, reaped_before: u32) -> Option<u64> {
        let (end, taken) = self.work_off_unreaped(process, at, reaped_before);
        self.count_reap(process, at, taken);
        self.after_reap(process, end)
    }

    /// Do the completion work of every completion waiting for the process, from `at`; fio takes events while it
    /// has taken fewer than `FIO_REAP_MAX` (`taken_before` already), the rest wait in the ring (`consume`).
    /// Returns when the work ends and how many fio took, `taken_before` included.
    fn work_off_unreaped(&mut self, process: u32, at: u64, taken_before: u32) -> (u64, u32) {
        let mut unreaped = std::mem::take(&mut self.processes[process as usize].state.unreaped);
        let stopped = self.processes[process as usize].state.stopped;
        let mut taken = taken_before;
        let mut end = at;
        for &io in &unreaped {
            // A job that has ended waits for all its I/O: every event is taken.
            let take = stopped || taken < FIO_REAP_MAX;
            end = self
                .reap_bio(io, at, false, take, false)
                .expect("a process that had not slept, reaping on, does not queue");
            taken += take as u32;
        }
        unreaped.clear();
        self.processes[process as usize].state.unreaped = unreaped; // keep the allocation
        (end, taken)
    }

    /// fio takes the next event already completed on its side from the ring (no CPU booked: the work was done at
    /// `reap`). Returns when it may submit again, or None if it stopped or thinks first.
    fn consume(&mut self, process: u32, at: u64) -> Option<u64> {
        let io = self.processes[process as usize]
            .state
            .consumable
            .pop_front()
            .expect("an event to take");
        self.finish_io(process, &io, at);
        self.count_reap(process, at, 1);
        self.after_reap(process, at)
    }

    /// Count one reap of `n` completions in fio's io_u_complete buckets, once the process measures.
    pub(super) fn count_reap(&mut self, process: u32, at: u64, n: u32) {
        let proc = &mut self.processes[process as usize];
        if proc.state.ramp == Ramp::Over && at >= proc.state.stats_start_ns {
            proc.stats.depth_tables.complete_levels[batch_level(n)] += 1;
        }
    }

    /// What the process does after reaping: stop, think, or submit from `end` (returned).
    pub(super) fn after_reap(&mut self, process: u32, end: u64) -> Option<u64> {
        let proc = &mut self.processes[process as usize];
        proc.state.ramp.loop_goes_on();
        if proc.state.stopped {
            self.stop(process, end);
            None
        } else if proc.params.thinktime_ns > 0 {
            if !proc.state.issue_pending {
                proc.state.issue_pending = true;
                let at = end + proc.params.thinktime_ns;
                self.events.schedule(at, Event::Issue { process });
            }
            None
        } else {
            Some(end)
        }
    }

    /// Submit one batch (`iodepth_batch_submit` I/Os sharing a plug) if depth, rate and time allow. Returns when
    /// its submission path ends on the core.
    pub(super) fn submit_batch(&mut self, process: u32, at: u64) -> Option<u64> {
        let batch = self.batch_size(process, at)?;
        let proc = &self.processes[process as usize];
        let (submit_ns, clat_after_call) =
            (proc.params.cost.submit_ns, proc.params.clat_after_call);
        let booked = self.run_process(process, at, submit_ns * batch as u64);
        let proc = &mut self.processes[process as usize];
        if proc.state.ramp == Ramp::Over && booked.start_ns >= proc.state.stats_start_ns {
            proc.stats.depth_tables.submit_levels[batch_level(batch)] += 1;
        }
        let path = self.processes[process as usize].params.locks;
        let locks = path.submit_call as u64 + batch as u64 * path.submit as u64;
        self.count_lock_calls(
            booked.core,
            booked.start_ns,
            locks,
            submit_ns * batch as u64,
        );
        let mut previous = NO_IO;
        for i in 0..batch {
            // An async engine's call returns no earlier than its submission path's end (`block_submit` and
            // `tag_obtained` move this on past the hooks and any sleep for a request).
            let issue_ns = if clat_after_call {
                booked.end_ns
            } else {
                booked.start_ns + i as u64 * submit_ns
            };
            let io = self.issue_fio_bio(process, booked.core, issue_ns, booked.start_ns);
            // The plug: a bio contiguous with the previous one of this batch joins it.
            if previous != NO_IO && self.plug_merge(previous, io) {
                continue;
            }
            self.events
                .schedule(booked.end_ns, Event::BlockSubmit { io });
            previous = io;
        }
        Some(booked.end_ns)
    }

    /// How many I/Os the process submits in one call at `at`: None if it may not now (its depth is full or short
    /// of a whole batch, its rate or its trace makes it wait: an Issue event is then pending) or it stops.
    fn batch_size(&mut self, process: u32, at: u64) -> Option<u32> {
        let proc = &self.processes[process as usize];
        if proc.state.stopped || proc.state.inflight >= proc.params.iodepth {
            return None;
        }
        if at >= proc.state.end_ns
            || (!proc.params.time_based && proc.state.bytes_issued >= proc.params.size_limit_bytes)
        {
            self.stop(process, at);
            return None;
        }
        let free_slots = proc.params.iodepth - proc.state.inflight;
        let mut batch = proc.params.batch.min(proc.params.iodepth);
        if free_slots < batch {
            // fio gathers iodepth_batch_submit I/Os before committing them; it waits for more completions.
            return None;
        }
        if proc.params.rate_period_ns > 0 {
            // fio's linear rate: I/O k is due at start + k * period; a late process catches up at once.
            let due = proc.state.start_ns + proc.state.issued * proc.params.rate_period_ns;
            if due > at {
                let wake = due.min(proc.state.end_ns);
                if !proc.state.issue_pending {
                    self.processes[process as usize].state.issue_pending = true;
                    self.events.schedule(wake, Event::Issue { process });
                }
                return None;
            }
            batch = 1;
        }
        if proc.source.trace.is_some() {
            batch = self.trace_batch(process, at, batch)?;
        }
        Some(batch)
    }

    /// The process's next I/O (from its trace or its generator) as a new bio submitted from `core`, with fio's
    /// clat starting at `issue_ns`.
    fn issue_fio_bio(&mut self, process: u32, core: u32, issue_ns: u64, call_ns: u64) -> u32 {
        let proc = &mut self.processes[process as usize];
        let plan = match proc.source.trace.as_deref_mut() {
            Some(trace) => trace.next_io(),
            None => proc
                .source
                .generator
                .as_mut()
                .expect("a job's process")
                .next_io(),
        };
        let device = proc.params.devices[plan.device_slot];
        if plan.write {
            // The drive looks this write's pages up when it arrives, after the submission path's events: a
            // cache miss per page in a drive-sized table, partly hidden if asked for now (Fig. 11c's 4 KiB
            // writers: 0.96x the time; docs/simulator.md, "Performance").
            self.devices[device as usize].prefetch_write(plan.offset_bytes, plan.bytes);
        }
        let proc = &mut self.processes[process as usize];
        proc.state.inflight += 1;
        if proc.state.ramp == Ramp::Over && issue_ns >= proc.state.stats_start_ns {
            proc.stats.depth_tables.depth_levels[depth_level(proc.state.inflight)] += 1;
        }
        proc.state.issued += 1;
        self.ios_issued += 1;
        proc.state.bytes_issued += plan.bytes as u64;
        let hctx = core % self.queues[device as usize].nr_hw_queues;
        self.alloc_slot(IoSlot {
            process,
            write: plan.write,
            device,
            offset_bytes: plan.offset_bytes,
            bytes: plan.bytes,
            request_bytes: plan.bytes,
            issue_ns,
            call_ns,
            core,
            hctx,
            dispatch_hctx: hctx,
            dispatch_ns: 0,
            booked_dispatch_end_ns: 0,
            runs_queue_at_insert: false,
            io_wq_worker: 0,
            next_merged: NO_IO,
            tail: NO_IO,
            request: None,
            live: true,
            sync: true,
            kind: BioKind::Fio,
        })
    }

    /// Merge bio `io` in the plug into the request headed by `head` if it continues it (same device and direction,
    /// contiguous, within `max_sectors`). Returns whether it did.
    fn plug_merge(&mut self, head: u32, io: u32) -> bool {
        let (h, bio) = (&self.slots[head as usize], &self.slots[io as usize]);
        let max_bytes = self.queues[bio.device as usize].max_sectors as u64 * SECTOR_BYTES;
        let contiguous = h.device == bio.device
            && h.write == bio.write
            && h.offset_bytes + h.request_bytes as u64 == bio.offset_bytes
            && h.request_bytes as u64 + bio.bytes as u64 <= max_bytes;
        if contiguous {
            self.slots[head as usize].request_bytes += self.slots[io as usize].bytes;
            self.link(head, io);
        }
        contiguous
    }

    /// How many trace records the process submits now (at most `batch`): None if it waits for the next record's
    /// time (an Issue event is then pending) or the replay is over (the process stops).
    fn trace_batch(&mut self, process: u32, at: u64, batch: u32) -> Option<u32> {
        let proc = &mut self.processes[process as usize];
        let trace = proc.source.trace.as_deref_mut().expect("a trace process");
        let ready = match trace.ready(batch as usize) {
            Ok(ready) => ready,
            Err(e) => {
                let job = &self.config.jobs[proc.params.job as usize].name;
                self.failure
                    .get_or_insert_with(|| format!("job {job}: read_iolog: {e}"));
                0
            }
        };
        if ready == 0 {
            self.stop(process, at);
            return None;
        }
        match trace.next_due_ns() {
            None => Some(ready as u32), // replay_no_stall: as fast as the depth allows
            Some(due) if due > at => {
                if !proc.state.issue_pending {
                    proc.state.issue_pending = true;
                    let wake = due.min(proc.state.end_ns);
                    self.events.schedule(wake, Event::Issue { process });
                }
                None
            }
            Some(_) => Some(1), // with timing, one record at a time, each at its time
        }
    }

    /// The process stops issuing at `at`; once nothing of it is in flight it has finished, and the last process of
    /// a stonewall group to finish starts the next group.
    pub(super) fn stop(&mut self, process: u32, at: u64) {
        let proc = &mut self.processes[process as usize];
        if !proc.state.stopped {
            proc.state.stopped = true;
        }
        // Its loop over, fio waits for all its I/O: events left in the ring are taken now.
        while let Some(io) = self.processes[process as usize]
            .state
            .consumable
            .pop_front()
        {
            self.finish_io(process, &io, at);
        }
        let proc = &mut self.processes[process as usize];
        if proc.state.inflight == 0 && proc.state.finished_ns.is_none() {
            proc.state.finished_ns = Some(at);
            self.active_processes -= 1;
            self.last_finish_ns = self.last_finish_ns.max(at);
            let group = proc.params.group as usize;
            self.group_remaining[group] -= 1;
            if self.group_remaining[group] == 0 && group + 1 < self.group_remaining.len() {
                self.start_group(group as u32 + 1, at);
            }
        }
    }

    /// fio's stonewall: the next group of jobs starts when the previous one has finished.
    fn start_group(&mut self, group: u32, at: u64) {
        for p in 0..self.processes.len() {
            if self.processes[p].params.group != group {
                continue;
            }
            let job = &self.config.jobs[self.processes[p].params.job as usize];
            let (start, ramp, runtime, invalidate) = (
                at + job.start_ns,
                job.ramp_ns,
                job.runtime_ns,
                job.invalidate,
            );
            let proc = &mut self.processes[p];
            proc.state.start_ns = start;
            proc.state.stats_start_ns = start + ramp;
            proc.state.end_ns = start + ramp + runtime;
            proc.state.ramp = Ramp::starting(ramp > 0, self.config.ramp_end);
            proc.state.issue_pending = true;
            if let (Some(b), Some(cache)) = (&proc.source.buffered, &mut self.cache) {
                if invalidate {
                    cache.invalidate_clean(b.file);
                }
            }
            self.events
                .schedule(start, Event::Issue { process: p as u32 });
        }
    }

    /// The completion path of one bio on its submitting core, then the process's next I/O.
    /// The kernel finished bio `io` at `now`: fio reaps it at once if it is waiting for completions, or after
    /// its current submission loop.
    pub(super) fn complete_bio(&mut self, io: u32, now: u64, sleeping: bool) {
        let process = self.slots[io as usize].process;
        let proc = &self.processes[process as usize];
        if proc.state.submitting || proc.asleep_on_tag() || proc.state.queued {
            self.processes[process as usize].state.unreaped.push(io);
            return;
        }
        let Some(end) = self.reap_bio(io, now, sleeping, true, true) else {
            return; // queued on its core: `pick_next` goes on
        };
        self.count_reap(process, now, 1);
        if let Some(at) = self.after_reap(process, end) {
            self.try_issue(process, at);
        }
    }

    /// fio reaps bio `io` on its core (the engine's completion path, plus the wake-up if it slept): its latency
    /// ends here. Returns when the work ends, or None if the woken process waits in its core's run queue
    /// (`queue_woken`: the pick reaps it and goes on with its loop).
    /// `take`: fio takes the event now; else it waits in the ring (`consume`). A sleeping process's is taken.
    /// `may_yield`: a new completion for a running process, which waits in the run queue if another process has
    /// the core now (`yields_core`); false for the completions it reaps on, in its own work.
    fn reap_bio(
        &mut self,
        io: u32,
        now: u64,
        sleeping: bool,
        take: bool,
        may_yield: bool,
    ) -> Option<u64> {
        let (process, slot_core, issue_ns, call_ns, write, bytes) = {
            let s = &self.slots[io as usize];
            (s.process, s.core, s.issue_ns, s.call_ns, s.write, s.bytes)
        };
        let slot = &mut self.slots[io as usize];
        assert!(slot.live, "bio {io} completed twice");
        slot.live = false;
        self.free_slots.push(io);
        let proc = &self.processes[process as usize];
        // A pinned process reaps on its core (the bio's). An unpinned one reaps on the core it is still running on
        // (or one idle when its running work ends: `idle_pull`), or, asleep, where its wake-up places it. Either
        // pays the sleep/wake path if it had gone to sleep for the completion (`asleep_at`).
        let (core, from_ns, sleeping) = if proc.params.allowed_cores.len() == 1 {
            (slot_core, now, sleeping)
        } else if now <= proc.state.busy_until_ns {
            // Its work ends just now (a queue run of its submission call ended and its loop reaps): still on its
            // core, not woken (as `process_core` decides).
            let (core, from_ns) = self
                .idle_pull(process, now)
                .unwrap_or((proc.state.core, now));
            (core, from_ns, false)
        } else {
            (self.woken_core(process, now), now, sleeping)
        };
        // Asleep on an idle core, it starts late where the host wakes a halted CPU late (`wake_late_ns`).
        let late_ns = if sleeping {
            self.wake_late_ns(core, from_ns, self.completion_timer_draw)
        } else {
            0
        };
        let from_ns = from_ns + late_ns;
        let params = &self.processes[process as usize].params;
        let (cost, locks) = (&params.cost, params.locks);
        let work = cost.complete_ns
            + if sleeping {
                cost.sleep_wake_ns + self.package_idle_wake_extra_ns(now)
            } else {
                0
            };
        let lock_calls = locks.complete + if sleeping { locks.sleep_wake } else { 0 };
        let io = Completion {
            issue_ns,
            call_ns,
            bytes,
            write,
            work_ns: work,
            lock_calls,
        };
        let booked = if sleeping && self.wakeup_preempts(process, core, from_ns) {
            self.run_ahead(core, process, from_ns, work, true)
        } else if sleeping && self.waits_in_run_queue(core, from_ns) {
            // Not before its wake-up's lateness, if its core was idle (else picked when the core gets to it).
            let runnable_ns = if late_ns > 0 { from_ns } else { 0 };
            self.queue_woken_from(core, process, Resume::Reap(io), runnable_ns);
            self.preempt_on_wakeup(core, process);
            return None;
        } else if !sleeping && may_yield && self.yields_core(process, core, from_ns) {
            self.queue_woken(core, process, Resume::Reap(io));
            return None;
        } else {
            self.run_process_on(core, process, from_ns, work)
        };
        Some(self.reaped(process, &io, booked, sleeping, take))
    }

    /// The process reaped `io` with its completion path booked as `booked`: count that path's lock calls, take the
    /// interrupt's share off its virtual runtime if it had slept (`credit_interrupt`), and, if fio `take`s the
    /// event now, record the latency and free its depth (else the event waits in the ring: `consume`). Returns when
    /// the path ends.
    pub(super) fn reaped(
        &mut self,
        process: u32,
        io: &Completion,
        booked: CpuBooking,
        slept: bool,
        take: bool,
    ) -> u64 {
        self.count_lock_calls(
            booked.core,
            booked.start_ns,
            io.lock_calls as u64,
            io.work_ns,
        );
        if slept {
            self.credit_interrupt(process);
        }
        if take {
            self.finish_io(process, io, booked.end_ns);
        } else {
            self.processes[process as usize]
                .state
                .consumable
                .push_back(*io);
        }
        booked.end_ns
    }

    /// fio took `io`'s event at `end_ns`: its latency ends there, and it frees its depth.
    fn finish_io(&mut self, process: u32, io: &Completion, end_ns: u64) {
        let counted = self.record_latency(process, io.write, io.issue_ns, end_ns, io.bytes);
        let proc = &mut self.processes[process as usize];
        if counted && proc.params.clat_after_call {
            // fio's slat (the submission call) and lat (from the call's start to completion) of an async engine;
            // for a sync one the call is the I/O, and fio reports neither apart from clat.
            // Five statistics each, as fio reports them; lat's percentiles only where the job asks for them.
            let d = io.write as usize;
            proc.stats.slat[d].record_moments(io.issue_ns - io.call_ns, 0);
            let lat_ns = end_ns - io.call_ns;
            if self.config.jobs[proc.params.job as usize].lat_percentiles {
                proc.stats.lat[d].record(lat_ns, 0);
            } else {
                proc.stats.lat[d].record_moments(lat_ns, 0);
            }
        }
        proc.state.inflight -= 1;
        self.ios_completed += 1;
    }

    /// Record one I/O of the process, `bytes` long, whose latency runs from `start_ns` to `end_ns`, if it ended
    /// inside the process's measurement window. The first one at or after the ramp ends the ramp instead and moves
    /// the window to start there (fio's `ramp_time_over()`); neither it nor the rest of its reap batch is
    /// accounted (`Ramp::Ending`).
    pub(super) fn record_latency(
        &mut self,
        process: u32,
        write: bool,
        start_ns: u64,
        end_ns: u64,
        bytes: u32,
    ) -> bool {
        let proc = &mut self.processes[process as usize];
        proc.stats.interval[write as usize].add(end_ns - start_ns, bytes);
        match proc.state.ramp {
            Ramp::Pending if end_ns >= proc.state.stats_start_ns => {
                let state = &mut proc.state;
                state.ramp = Ramp::Ending;
                state.end_ns += end_ns - state.stats_start_ns;
                state.stats_start_ns = end_ns;
                return false;
            }
            Ramp::Pending | Ramp::Ending => return false,
            Ramp::Over => {}
        }
        if end_ns >= proc.state.stats_start_ns && end_ns <= proc.state.end_ns {
            let stats = if write {
                &mut proc.stats.write
            } else {
                &mut proc.stats.read
            };
            stats.record(end_ns - start_ns, bytes as u64);
            proc.stats.window[write as usize].add(end_ns - start_ns, bytes);
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{IoEngine, RampEnd, Rw};
    use crate::testkit::{config, job};

    #[test]
    fn a_batch_books_one_submission_path_and_its_contiguous_bios_share_one_request() {
        let mut sequential = job("a", Rw::Write, 4, 1);
        sequential.iodepth_batch_submit = 4;
        let c = config("none", vec![sequential]);
        let mut sim = Simulation::new(&c).unwrap();
        let submit_ns = c.host.io_uring.submit_ns;
        assert_eq!(sim.submit_batch(0, 0), Some(4 * submit_ns));
        assert_eq!((sim.ios_issued, sim.processes[0].state.inflight), (4, 4));
        let head = &sim.slots[0];
        assert_eq!((head.request_bytes, head.tail), (4 * 4096, 3));
        // io_uring: clat starts when the call returns.
        assert!(sim.slots.iter().all(|s| s.issue_ns == 4 * submit_ns));
        // One request reaches the block layer.
        assert_eq!(
            sim.events.pop(),
            Some((4 * submit_ns, Event::BlockSubmit { io: 0 }))
        );
        assert!(sim.events.is_empty());
        // The depth is full: nothing more until completions.
        assert_eq!(sim.submit_batch(0, 10_000), None);
    }

    #[test]
    fn random_bios_of_a_batch_are_requests_of_their_own_and_psync_clat_starts_at_the_call() {
        let mut random = job("a", Rw::Randread, 4, 1);
        random.iodepth_batch_submit = 4;
        random.ioengine = IoEngine::Libaio;
        let c = config("none", vec![random]);
        let mut sim = Simulation::new(&c).unwrap();
        sim.submit_batch(0, 0);
        let mut submitted = 0;
        while let Some((_, event)) = sim.events.pop() {
            assert!(matches!(event, Event::BlockSubmit { .. }));
            submitted += 1;
        }
        assert_eq!(submitted, 4);
        let mut psync = job("p", Rw::Read, 1, 1);
        psync.ioengine = IoEngine::Psync;
        let c = config("none", vec![psync]);
        let mut sim = Simulation::new(&c).unwrap();
        assert_eq!(sim.submit_batch(0, 500), Some(500 + c.host.psync.submit_ns));
        assert_eq!(sim.slots[0].issue_ns, 500);
    }

    #[test]
    fn a_rate_limited_process_waits_for_its_next_ios_due_time() {
        let mut paced = job("a", Rw::Randread, 4, 1);
        paced.rate_iops = 1_000;
        let c = config("none", vec![paced]);
        let mut sim = Simulation::new(&c).unwrap();
        assert!(sim.submit_batch(0, 0).is_some());
        assert_eq!(
            sim.submit_batch(0, 10_000),
            None,
            "the next I/O is due at 1 ms"
        );
        assert!(sim.processes[0].state.issue_pending);
        let issue =
            std::iter::from_fn(|| sim.events.pop()).find(|(_, e)| matches!(e, Event::Issue { .. }));
        assert_eq!(issue, Some((1_000_000, Event::Issue { process: 0 })));
    }

    #[test]
    fn a_sized_process_stops_after_its_bytes_and_finishes_once_nothing_is_in_flight() {
        let mut sized = job("a", Rw::Read, 1, 1);
        sized.time_based = false;
        sized.size_bytes = 8192;
        let c = config("none", vec![sized]);
        let mut sim = Simulation::new(&c).unwrap();
        sim.start_and_run_until(|sim| sim.active_processes == 0);
        let p = &sim.processes[0].state;
        assert_eq!((p.issued, p.bytes_issued, p.inflight), (2, 8192, 0));
        assert!(p.stopped && p.finished_ns.is_some());
        assert_eq!(sim.last_finish_ns, p.finished_ns.unwrap());
    }

    #[test]
    fn loops_repeat_a_sized_process_over_its_region() {
        // size 8 KiB of 4 KiB reads, loops = 3: 3 x 2 reads, the sequential walk going round its region again.
        let mut sized = job("a", Rw::Read, 1, 1);
        sized.time_based = false;
        sized.size_bytes = 8192;
        sized.loops = Some(3);
        let c = config("none", vec![sized]);
        let mut sim = Simulation::new(&c).unwrap();
        sim.start_and_run_until(|sim| sim.active_processes == 0);
        let p = &sim.processes[0].state;
        assert_eq!((p.issued, p.bytes_issued), (6, 3 * 8192));
    }

    #[test]
    fn latency_counts_only_inside_the_measurement_window_which_starts_at_the_first_completion_after_the_ramp(
    ) {
        // 1 ms of ramp, 5 ms of runtime: nominally measured over [1, 6] ms.
        let c = config("none", vec![job("a", Rw::Randread, 1, 1)]);
        let mut sim = Simulation::new(&c).unwrap();
        sim.record_latency(0, false, 0, 999_999, 4096); // in the ramp: not counted
        assert_eq!(sim.processes[0].state.ramp, Ramp::Pending);
        // The first completion after 1 ms (at 1.2 ms) ends the ramp: the window becomes [1.2, 6.2] ms. Neither
        // it nor another of its reap batch is counted (fio is in its ramp state until its loop goes on).
        sim.record_latency(0, false, 1_000_000, 1_200_000, 4096);
        sim.record_latency(0, false, 1_000_000, 1_210_000, 4096);
        let state = &sim.processes[0].state;
        assert_eq!(state.ramp, Ramp::Ending);
        assert_eq!((state.stats_start_ns, state.end_ns), (1_200_000, 6_200_000));
        assert_eq!(sim.after_reap(0, 1_210_000), Some(1_210_000));
        assert_eq!(sim.processes[0].state.ramp, Ramp::Over);
        sim.record_latency(0, false, 1_000_000, 1_250_000, 4096); // counted
        sim.record_latency(0, true, 6_000_000, 6_200_000, 4096); // the window's last instant: counted
        sim.record_latency(0, true, 6_100_000, 6_200_001, 4096); // after the runtime: not counted
        let stats = &sim.processes[0].stats;
        assert_eq!([stats.window[0].ios, stats.window[1].ios], [1, 1]);
        // The time series counts every completion, the ramp's too (as fio's logs do).
        assert_eq!([stats.interval[0].ios, stats.interval[1].ios], [4, 2]);
        assert_eq!((stats.read.result().ios, stats.write.result().ios), (1, 1));
    }

    #[test]
    fn with_a_nominal_ramp_end_every_job_is_measured_from_start_plus_ramp() {
        // The same job, RampEnd::Nominal: the window stays [1, 6] ms and the completion at 1.2 ms counts.
        let mut c = config("none", vec![job("a", Rw::Randread, 1, 1)]);
        c.ramp_end = RampEnd::Nominal;
        let mut sim = Simulation::new(&c).unwrap();
        assert_eq!(sim.processes[0].state.ramp, Ramp::Over);
        sim.record_latency(0, false, 0, 999_999, 4096); // in the ramp: not counted
        sim.record_latency(0, false, 1_000_000, 1_200_000, 4096);
        sim.record_latency(0, false, 5_000_000, 6_000_001, 4096); // after the runtime
        let state = &sim.processes[0].state;
        assert_eq!((state.stats_start_ns, state.end_ns), (1_000_000, 6_000_000));
        let stats = &sim.processes[0].stats;
        assert_eq!([stats.window[0].ios, stats.window[1].ios], [1, 0]);
    }

    #[test]
    fn the_next_stonewall_group_starts_when_the_last_process_of_the_previous_finishes() {
        let mut first = job("a", Rw::Read, 1, 1);
        first.time_based = false;
        first.size_bytes = 4096;
        let mut second = job("b", Rw::Read, 1, 1);
        second.stonewall = true;
        let c = config("none", vec![first, second]);
        let mut sim = Simulation::new(&c).unwrap();
        sim.start_and_run_until(|sim| sim.group_remaining[0] == 0);
        let finished = sim.processes[0].state.finished_ns.unwrap();
        let second = &sim.processes[1].state;
        assert_eq!(second.start_ns, finished);
        assert_eq!(second.end_ns, finished + 1_000_000 + 5_000_000);
        assert!(second.issue_pending);
    }
}
