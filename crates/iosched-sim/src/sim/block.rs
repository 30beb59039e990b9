//! An I/O in the block layer: the scheduler's hooks booked on the submitting core (under its lock), merging into a
//! queued request or taking a request tag, insertion into the elevator, hardware-queue runs that dispatch to the
//! device while driver tags last, the elevator's timers, and the completion of a request (freeing its tags, waking
//! whoever waits for them, then each bio's completion).

use iosched_policy::{AfterCompletion, Op, Request, SECTOR_BYTES};

use super::tags::TagWait;
use super::{BioKind, Simulation, NO_IO};
use crate::device::Command;
use crate::engine::Event;

impl Simulation<'_> {
    /// The request the elevator sees for bio `io` (with any bios plug-merged behind it), arriving at `now`.
    pub(super) fn make_request(&self, io: u32, now: u64) -> Request {
        let slot = &self.slots[io as usize];
        let proc = &self.processes[slot.process as usize];
        Request {
            id: io,
            op: if slot.write { Op::Write } else { Op::Read },
            sector: slot.offset_bytes / SECTOR_BYTES,
            nr_sectors: (slot.request_bytes as u64 / SECTOR_BYTES) as u32,
            cpu: slot.core,
            hctx: slot.hctx,
            ioprio_class: proc.params.ioprio_class,
            ioprio_level: proc.params.ioprio_level,
            process: slot.process,
            cgroup: proc.params.cgroup,
            cgroup_weight: proc.params.cgroup_weight,
            sync: slot.sync,
            start_ns: now,
        }
    }

    /// The submission path reached blk-mq: book the scheduler's insert and dispatch work, under its lock.
    pub(super) fn block_submit(&mut self, io: u32, now: u64) {
        let cost = self.costs.insert_dispatch_ns;
        if cost == 0 {
            return self.block_insert(io, now);
        }
        let (core, process, device, hctx) = {
            let s = &self.slots[io as usize];
            (s.core, s.process, s.device, s.hctx)
        };
        let acquisitions = self.costs.submit_acquisitions;
        let ready = self.run_scheduler_work(core, process, device, hctx, now, cost, acquisitions);
        // In the submitter's context (submit_bio): it is running on this core until then.
        let proc = &mut self.processes[process as usize];
        proc.state.busy_until_ns = proc.state.busy_until_ns.max(ready);
        if proc.params.clat_after_call {
            self.slots[io as usize].issue_ns = ready; // the hooks run inside the call
        }
        self.events.schedule(ready, Event::BlockInsert { io });
    }

    /// Book `cost_ns` of scheduler work on `core`, under the scheduler's lock if its hooks take one on this path
    /// (`acquisitions` > 0). Returns when done.
    #[allow(clippy::too_many_arguments)]
    fn run_scheduler_work(
        &mut self,
        core: u32,
        process: u32,
        device: u32,
        hctx: u32,
        now: u64,
        cost_ns: u64,
        acquisitions: u32,
    ) -> u64 {
        let account = &mut self.processes[process as usize].stats.cpu;
        let (start, _) = self.host.run(core, process, now, 0, account);
        match self.queues[device as usize].lock_for(hctx) {
            Some(lock) if acquisitions > 0 => {
                let booking = lock.acquire(core, process, now, start, cost_ns, acquisitions);
                let end = self.host.extend_for_lock(
                    core,
                    booking.spin_ns + booking.handoff_ns,
                    cost_ns,
                    account,
                );
                for d in &lock.displaced {
                    let account = &mut self.processes[d.owner as usize].stats.cpu;
                    self.host.delay_for_lock(d.core, d.delay_ns, account);
                }
                end
            }
            _ => self.host.run(core, process, start, cost_ns, account).1,
        }
    }

    /// Bio `io` enters the elevator (`BlockInsert`): merged into a request it holds, or as a request of its own
    /// once it has a request tag (else it waits for one: `tags.rs`); then the hardware queue runs.
    pub(super) fn block_insert(&mut self, io: u32, now: u64) {
        let rq = self.make_request(io, now);
        let (device, hctx) = (self.slots[io as usize].device, rq.hctx);
        let queue = &mut self.queues[device as usize];
        if let Some(into) = queue.elevator.bio_merge(&rq, queue.max_sectors) {
            // The elevator grew its request; this bio (and any plug-merged chain behind it) rides along. A punted
            // io_uring bio's io-wq worker is free again, as after an insert.
            let chain_tail = self.slots[io as usize].tail;
            self.link(into, io);
            if chain_tail != NO_IO {
                self.slots[into as usize].tail = chain_tail;
            }
            self.next_punted_bio(io, now);
            self.accepted(io, now);
            return;
        }
        if !queue.try_take_request_tag(hctx, rq.op, rq.sync) {
            let slot = &self.slots[io as usize];
            if slot.kind == BioKind::Fio {
                let proc = &mut self.processes[slot.process as usize];
                if let TagWait::IoWqWorkers(workers) = proc.params.tag_wait {
                    if proc.state.tag_waits >= workers {
                        proc.state.punted.push_back(io); // every worker is already waiting
                        return;
                    }
                }
                proc.state.tag_waits += 1;
            }
            queue.wait_for_tag(hctx, rq.op, rq.sync, io);
            return;
        }
        queue.elevator.insert(rq, now);
        self.next_punted_bio(io, now);
        self.accepted(io, now);
        self.run_hw_queue(device, hctx, now);
        self.arm_timer(device, now);
    }

    /// Dispatch from the elevator to the device while driver tags last.
    pub(super) fn run_hw_queue(&mut self, device: u32, hctx: u32, now: u64) {
        loop {
            let queue = &mut self.queues[device as usize];
            if !queue.can_dispatch(hctx) || !queue.elevator.has_work(hctx) {
                return;
            }
            let Some(rq) = queue.elevator.dispatch(hctx, now) else {
                return;
            };
            // Never fails: can_dispatch checked it. So a dispatched request is never handed back (no requeue).
            let tagged = queue.try_take_driver_tag(hctx);
            debug_assert!(tagged, "dispatch without a driver tag");
            let command = Command {
                request: rq.id,
                write: rq.op == Op::Write,
                offset_bytes: rq.sector * SECTOR_BYTES,
                bytes: (rq.nr_sectors as u64 * SECTOR_BYTES) as u32,
            };
            let slot = &mut self.slots[rq.id as usize];
            slot.dispatch_hctx = hctx;
            slot.dispatch_ns = now;
            slot.request = Some(rq);
            self.devices[device as usize].submit(hctx, command, &mut self.events);
        }
    }

    /// Run the hardware queues the elevator woke, in its wake order.
    fn run_woken_hw_queues(&mut self, device: u32, now: u64) {
        let mut woken = std::mem::take(&mut self.woken_hctxs);
        self.queues[device as usize]
            .elevator
            .take_woken_hctxs(&mut woken);
        for &hctx in &woken {
            self.run_hw_queue(device, hctx, now);
        }
        woken.clear();
        self.woken_hctxs = woken;
    }

    fn run_all_hw_queues(&mut self, device: u32, now: u64) {
        for hctx in 0..self.nr_hw_queues(device) {
            self.run_hw_queue(device, hctx, now);
        }
    }

    pub(super) fn arm_timer(&mut self, device: u32, now: u64) {
        let queue = &mut self.queues[device as usize];
        if let Some(at) = queue.elevator.next_timer_ns() {
            let at = at.max(now);
            if queue.timer_pending_ns.is_none_or(|pending| at < pending) {
                queue.timer_pending_ns = Some(at);
                self.events.schedule(at, Event::SchedulerTimer { device });
            }
        }
    }

    pub(super) fn scheduler_timer(&mut self, device: u32, now: u64) {
        let queue = &mut self.queues[device as usize];
        if queue.timer_pending_ns != Some(now) {
            return; // superseded by an earlier timer
        }
        queue.timer_pending_ns = None;
        if queue.elevator.next_timer_ns().is_some_and(|at| at <= now) {
            queue.elevator.timer(now);
            self.run_all_hw_queues(device, now);
        }
        self.arm_timer(device, now);
    }

    pub(super) fn complete_request(&mut self, device: u32, request: u32, now: u64) {
        let slot = &mut self.slots[request as usize];
        let rq = slot
            .request
            .take()
            .expect("a completed request was dispatched");
        let (dispatch_hctx, dispatch_ns, core, process) = (
            slot.dispatch_hctx,
            slot.dispatch_ns,
            slot.core,
            slot.process,
        );
        self.devices[device as usize].command_completed();
        let queue = &mut self.queues[device as usize];
        queue.release_tags(rq.hctx, dispatch_hctx, rq.op == Op::Read || rq.sync);
        let after = queue.elevator.completed(&rq, dispatch_ns, now);
        // Whether the process had gone to sleep is decided when the interrupt arrives, before any work is booked.
        let sleeping = self.host.idle_at(core, now);
        let mut path_start = now;
        if self.costs.complete_ns > 0 {
            path_start = self.run_scheduler_work(
                core,
                process,
                device,
                rq.hctx,
                now,
                self.costs.complete_ns,
                self.costs.complete_acquisitions,
            );
        }
        let inserted = self.request_tag_freed(device, rq.hctx, now);
        // Queues the freed resource woke run first: the wake-up happens as the completion releases it (Kyber's
        // token, freed in the completion's finish_request), before anything else on this path runs a queue.
        self.run_woken_hw_queues(device, now);
        match after {
            AfterCompletion::RunAllQueues => self.run_all_hw_queues(device, now),
            AfterCompletion::RunQueue => {
                self.run_hw_queue(device, dispatch_hctx, now);
                if inserted && rq.hctx != dispatch_hctx {
                    self.run_hw_queue(device, rq.hctx, now);
                }
            }
        }
        self.arm_timer(device, now);
        self.complete_bios(request, core, sleeping, path_start);
    }

    /// Each bio of the completed request headed by `request` completes from `path_start_ns` on its submitting core:
    /// a fio bio is reaped by its process, a page-cache bio ends its readahead or writeback. `sleeping`: whether the
    /// request's own process (on `core`) had gone to sleep.
    fn complete_bios(&mut self, request: u32, core: u32, mut sleeping: bool, path_start_ns: u64) {
        let mut bio = request;
        while bio != NO_IO {
            let next = self.slots[bio as usize].next_merged;
            let bio_core = self.slots[bio as usize].core;
            let bio_sleeping = if bio_core == core {
                sleeping
            } else {
                self.host.idle_at(bio_core, path_start_ns) // a bio merged in from another core's process
            };
            if self.slots[bio as usize].kind == BioKind::Fio {
                self.complete_bio(bio, path_start_ns, bio_sleeping);
            } else {
                self.complete_cache_bio(bio, path_start_ns);
            }
            if bio_core == core {
                sleeping = false; // its first bio's completion woke the process
            }
            bio = next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Rw, SchedulerCost};
    use crate::testkit::{config, job};

    /// Submit one batch of `batch` bios of process 0 at time 0 and handle the events until they are all in the
    /// block layer (inserted, merged or waiting for a request).
    fn submit_and_insert(sim: &mut Simulation, batch: u32) {
        sim.submit_batch(0, 0);
        let mut inserted = 0;
        while inserted < batch {
            let (now, event) = sim.events.pop().unwrap();
            inserted += matches!(event, Event::BlockInsert { .. }) as u32;
            if let Event::BlockSubmit { io } = event {
                // Without scheduler costs the bio goes straight in.
                inserted += (sim.costs.insert_dispatch_ns == 0) as u32;
                sim.block_submit(io, now);
            } else {
                sim.handle(now, event);
            }
        }
    }

    #[test]
    fn the_hardware_queue_dispatches_to_the_device_while_driver_tags_last() {
        let mut random = job("a", Rw::Randread, 6, 1);
        random.iodepth_batch_submit = 6;
        let mut c = config("mq-deadline", vec![random]);
        c.devices[0].queue_depth = 2;
        let mut sim = Simulation::new(&c).unwrap();
        submit_and_insert(&mut sim, 6);
        assert_eq!(sim.devices[0].outstanding_commands(), 2);
        assert!(
            sim.queues[0].elevator.has_work(0),
            "the rest waits in the elevator"
        );
        let dispatched = sim.slots.iter().filter(|s| s.request.is_some()).count();
        assert_eq!(dispatched, 2);
    }

    #[test]
    fn scheduler_hooks_are_booked_on_the_submitting_core_before_the_bio_is_inserted() {
        let mut c = config("mq-deadline", vec![job("a", Rw::Randread, 1, 1)]);
        let hooks = SchedulerCost {
            insert_ns: 300,
            dispatch_ns: 200,
            complete_ns: 0,
        };
        c.host.scheduler_costs.insert("mq-deadline".into(), hooks);
        let mut sim = Simulation::new(&c).unwrap();
        let submitted = sim.submit_batch(0, 0).unwrap();
        let (at, event) = sim.events.pop().unwrap();
        assert_eq!((at, event), (submitted, Event::BlockSubmit { io: 0 }));
        sim.block_submit(0, at);
        let ready = submitted + 500;
        assert_eq!(
            sim.events.pop(),
            Some((ready, Event::BlockInsert { io: 0 }))
        );
        // In the submitter's context, inside its io_uring_enter call.
        assert_eq!(sim.processes[0].state.busy_until_ns, ready);
        assert_eq!(sim.slots[0].issue_ns, ready);
    }

    #[test]
    fn a_completed_request_frees_its_tags_and_completes_every_bio_merged_into_it() {
        let mut sequential = job("a", Rw::Read, 4, 1);
        sequential.iodepth_batch_submit = 4;
        let c = config("none", vec![sequential]);
        let mut sim = Simulation::new(&c).unwrap();
        submit_and_insert(&mut sim, 1);
        assert_eq!(
            sim.devices[0].outstanding_commands(),
            1,
            "one request for 4 bios"
        );
        while sim.ios_completed < 4 {
            sim.step();
        }
        assert_eq!(sim.devices[0].outstanding_commands(), 0);
        assert!(sim.queues[0].all_tags_free(c.devices[0].queue_depth));
        // Reaping the four freed the depth: the next batch is on its way.
        let state = &sim.processes[0].state;
        assert_eq!((state.issued, state.inflight), (8, 4));
    }
}
