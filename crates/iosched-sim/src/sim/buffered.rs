//! Buffered I/O (direct=0) through the page cache (`pagecache.rs`): a process's read() and write() calls, the
//! readahead and writeback bios they cause, waking readers whose pages arrived and writers the dirty limit held,
//! and the writeback flusher.

use iosched_policy::SECTOR_BYTES;

use super::{BioKind, CpuBooking, IoSlot, Simulation, NO_IO};
use crate::engine::Event;
use crate::pagecache::{Readahead, PAGE_BYTES};

/// A buffered process's state: its file, readahead, and the call in progress.
pub(super) struct Buffered {
    pub(super) file: usize,
    pub(super) write: bool,
    pub(super) readahead: Readahead,
    /// The read() or write() in progress: first page, pages, bytes, when it started.
    pub(super) call: Option<(u64, u64, u32, u64)>,
    /// Sleeping: a read waits for its pages, a write for the dirty limit.
    pub(super) waiting: bool,
    /// fio's end_fsync on a writer: once its writing is done it fsyncs its file, and the job ends when that returns.
    pub(super) end_fsync: bool,
    pub(super) fsync: Option<Fsync>,
}

/// Where a writer's fsync is (`Simulation::fsync_step`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fsync {
    /// Writing its file's dirty pages back: its latest request is on its way into the elevator.
    Writing,
    /// Asleep until the last of its file's pages under writeback is written (filemap_fdatawait).
    Waiting,
}

impl Simulation<'_> {
    /// CPU time to copy `bytes` between the page cache and a caller's buffer.
    fn copy_ns(&self, bytes: u64) -> u64 {
        let rate = self
            .config
            .host
            .page_cache
            .as_ref()
            .map_or(1, |pc| pc.copy_bytes_per_s);
        (bytes as u128 * 1_000_000_000 / rate as u128) as u64
    }

    /// Pages in the largest request the block layer builds (`max_sectors_kb`): each readahead or writeback bio's
    /// most.
    fn max_request_pages(&self) -> u64 {
        self.queues[0].max_sectors as u64 * SECTOR_BYTES / PAGE_BYTES
    }

    /// The work of waking process `p`, asleep in its read(), write() or fsync, at `at`.
    fn wake_work_ns(&self, p: usize, at: u64) -> u64 {
        self.processes[p].params.cost.sleep_wake_ns + self.package_idle_wake_extra_ns(at)
    }

    /// A buffered process's next read() or write() call (psync: one at a time).
    pub(super) fn buffered_call(&mut self, process: u32, at: u64) {
        let p = process as usize;
        let proc = &self.processes[p];
        let b = proc.source.buffered.as_ref().expect("a buffered process");
        if b.call.is_some() || b.waiting || proc.state.stopped {
            return;
        }
        if at >= proc.state.end_ns || proc.state.bytes_issued >= proc.params.size_limit_bytes {
            if b.end_fsync && b.fsync.is_none() {
                return self.fsync_step(process, at);
            }
            return self.stop(process, at);
        }
        let proc = &mut self.processes[p];
        let submit_ns = proc.params.cost.submit_ns;
        let plan = proc
            .source
            .generator
            .as_mut()
            .expect("a job's process")
            .next_io();
        proc.state.issued += 1;
        proc.state.bytes_issued += plan.bytes as u64;
        let b = proc.source.buffered.as_mut().unwrap();
        let cache = self
            .cache
            .as_mut()
            .expect("validated: the host has a page cache");
        let first = (plan.offset_bytes - cache.offset_of(b.file)) / PAGE_BYTES;
        let count = plan.bytes as u64 / PAGE_BYTES;
        let mut work = submit_ns;
        let mut runs = Vec::new();
        if b.write {
            cache.write(b.file, first, count);
            work += self.copy_ns(plan.bytes as u64);
        } else {
            runs = b.readahead.on_read(cache, b.file, first, count);
        }
        // Each readahead request is built and submitted in the reader's context.
        let max_pages = self.max_request_pages();
        let requests: u64 = runs.iter().map(|&(_, _, n)| n.div_ceil(max_pages)).sum();
        work += requests * submit_ns;
        let CpuBooking {
            core,
            start_ns: start,
            end_ns: end,
        } = self.run_process(process, at, work);
        let proc = &mut self.processes[p];
        proc.source.buffered.as_mut().unwrap().call = Some((first, count, plan.bytes, start));
        for (file, first, pages) in runs {
            self.submit_readahead(process, core, file as u32, first..first + pages, end);
        }
        self.events.schedule(end, Event::CallDone { process });
    }

    /// Readahead of `pages` of `file` for `process`, submitted from `core` at `at`: one bio per `max_sectors`.
    fn submit_readahead(
        &mut self,
        process: u32,
        core: u32,
        file: u32,
        pages: std::ops::Range<u64>,
        at: u64,
    ) {
        let max_pages = self.max_request_pages();
        let mut first = pages.start;
        while first < pages.end {
            let count = max_pages.min(pages.end - first);
            let kind = BioKind::Readahead { file, first, count };
            self.submit_cache_bio(process, core, kind, at);
            first += count;
        }
    }

    /// A page-cache bio of `process` reaches the block layer at `at`.
    fn submit_cache_bio(&mut self, process: u32, core: u32, kind: BioKind, at: u64) {
        let (file, first, count, write) = match kind {
            BioKind::Readahead { file, first, count } => (file, first, count, false),
            BioKind::Writeback { file, first, count } => (file, first, count, true),
            BioKind::Fio => unreachable!("fio bios are submitted by submit_batch"),
        };
        let cache = self.cache.as_ref().unwrap();
        let device = cache.device_of(file as usize);
        let offset_bytes = cache.offset_of(file as usize) + first * PAGE_BYTES;
        let hctx = core % self.queues[device as usize].nr_hw_queues;
        let bytes = (count * PAGE_BYTES) as u32;
        let io = self.alloc_slot(IoSlot {
            process,
            write,
            device,
            offset_bytes,
            bytes,
            request_bytes: bytes,
            issue_ns: at,
            call_ns: at,
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
            // Readahead is a read (sync for the elevator); the flusher's writeback is asynchronous, fsync's
            // (WB_SYNC_ALL) sync.
            sync: !write || Some(process) != self.flusher,
            kind,
        });
        self.ios_issued += 1;
        self.cache_bios_in_flight += 1;
        self.events.schedule(at, Event::BlockSubmit { io });
    }

    /// A buffered call's CPU work is done: a write may be throttled, a read may wait for its pages.
    pub(super) fn call_done(&mut self, process: u32, now: u64) {
        let p = process as usize;
        let b = self.processes[p].source.buffered.as_ref().unwrap();
        let (file, write) = (b.file, b.write);
        let (first, count, _, _) = b.call.expect("a call in progress");
        let cache = self.cache.as_ref().unwrap();
        if write {
            let over_limit = cache.over_dirty_limit();
            self.kick_flusher(now);
            if over_limit {
                self.processes[p].source.buffered.as_mut().unwrap().waiting = true; // balance_dirty_pages
                return;
            }
            return self.finish_call(process, now);
        }
        if cache.readable(file, first, count) {
            let bytes = count * PAGE_BYTES;
            let work = self.copy_ns(bytes);
            let end = self.run_process(process, now, work).end_ns;
            return self.finish_call(process, end);
        }
        self.processes[p].source.buffered.as_mut().unwrap().waiting = true;
    }

    /// The call returns at `end`: its latency is recorded and the process makes its next call.
    fn finish_call(&mut self, process: u32, end: u64) {
        let b = self.processes[process as usize]
            .source
            .buffered
            .as_mut()
            .unwrap();
        let (_, _, bytes, start) = b.call.take().expect("a call in progress");
        b.waiting = false;
        let write = b.write;
        self.record_latency(process, write, start, end, bytes);
        self.processes[process as usize].state.ramp.loop_goes_on(); // one call per loop
        self.buffered_call(process, end);
    }

    /// A readahead or writeback bio completed at `now` (on its submitting core).
    pub(super) fn complete_cache_bio(&mut self, io: u32, now: u64) {
        let slot = &mut self.slots[io as usize];
        assert!(slot.live, "bio {io} completed twice");
        slot.live = false;
        let (kind, core, process) = (slot.kind, slot.core, slot.process);
        self.free_slots.push(io);
        self.ios_completed += 1;
        self.cache_bios_in_flight -= 1;
        let complete_ns = self.processes[process as usize].params.cost.complete_ns;
        let proc = &mut self.processes[process as usize];
        let (_, end) = self
            .host
            .run(core, process, now, complete_ns, &mut proc.stats.cpu);
        let cache = self.cache.as_mut().unwrap();
        match kind {
            BioKind::Readahead { file, first, count } => {
                cache.end_read(file as usize, first, count);
                self.wake_readers(file as usize, end);
            }
            BioKind::Writeback { file, first, count } => {
                cache.end_writeback(file as usize, first, count);
                if !cache.over_dirty_limit() {
                    self.wake_writers(end);
                }
                self.wake_fsync(file as usize, end);
                self.kick_flusher(end);
            }
            BioKind::Fio => unreachable!(),
        }
    }

    /// Readahead into `file` ended at `at`: readers of the file waiting for pages that are all there now wake, and
    /// copy them out.
    fn wake_readers(&mut self, file: usize, at: u64) {
        for p in 0..self.processes.len() {
            let Some(b) = &self.processes[p].source.buffered else {
                continue;
            };
            let Some((f, c, _, _)) = b.call else { continue };
            if b.write
                || !b.waiting
                || b.file != file
                || !self.cache.as_ref().unwrap().readable(b.file, f, c)
            {
                continue;
            }
            let work = self.wake_work_ns(p, at) + self.copy_ns(c * PAGE_BYTES);
            let done = self.run_process(p as u32, at, work).end_ns;
            self.finish_call(p as u32, done);
        }
    }

    /// Writeback brought the dirty pages under the limit at `at`: every throttled writer wakes and its write()
    /// returns.
    fn wake_writers(&mut self, at: u64) {
        for p in 0..self.processes.len() {
            let waiting_writer = self.processes[p]
                .source
                .buffered
                .as_ref()
                .is_some_and(|b| b.write && b.waiting);
            if waiting_writer {
                let work = self.wake_work_ns(p, at);
                let done = self.run_process(p as u32, at, work).end_ns;
                self.finish_call(p as u32, done);
            }
        }
    }

    /// Whether the flusher should write now: while the run lasts, something is dirty, and the background
    /// threshold is passed or a writer is throttled.
    fn flusher_should_write(&self) -> bool {
        let Some(cache) = &self.cache else {
            return false;
        };
        if self.active_processes == 0 || !cache.has_dirty() {
            return false;
        }
        cache.over_background()
            || self.processes.iter().any(|p| {
                p.source
                    .buffered
                    .as_ref()
                    .is_some_and(|b| b.write && b.waiting)
            })
    }

    fn kick_flusher(&mut self, at: u64) {
        if self.flusher.is_some() && !self.flusher_busy && self.flusher_should_write() {
            self.flusher_busy = true;
            self.events.schedule(at, Event::FlusherStep);
        }
    }

    /// The flusher submits its next request; it goes on once the block layer has accepted it.
    pub(super) fn flusher_step(&mut self, now: u64) {
        let Some(flusher) = self.flusher else { return };
        if !self.flusher_should_write() {
            self.flusher_busy = false;
            return;
        }
        let max_pages = self.max_request_pages();
        let Some((file, first, count)) = self.cache.as_mut().unwrap().next_writeback(max_pages)
        else {
            self.flusher_busy = false;
            return;
        };
        let submit_ns = self.processes[flusher as usize].params.cost.submit_ns;
        let CpuBooking { core, end_ns, .. } = self.run_process(flusher, now, submit_ns);
        self.submit_cache_bio(
            flusher,
            core,
            BioKind::Writeback {
                file: file as u32,
                first,
                count,
            },
            end_ns,
        );
    }

    /// Bio `io` got into the elevator (inserted or merged): the flusher, or a process in fsync, waiting on it goes
    /// on.
    pub(super) fn accepted(&mut self, io: u32, now: u64) {
        let slot = &self.slots[io as usize];
        if matches!(slot.kind, BioKind::Writeback { .. }) {
            if Some(slot.process) == self.flusher {
                self.events.schedule(now, Event::FlusherStep);
            } else {
                let process = slot.process;
                self.events.schedule(now, Event::FsyncStep { process });
            }
        }
    }

    /// fsync by a writer whose writing is done (ext4_sync_file: file_write_and_wait_range): it writes its file's
    /// dirty pages back itself, in file order, one request at a time (WB_SYNC_ALL, so REQ_SYNC: sync for the
    /// elevator), each once the last got into the elevator; then it sleeps until none of its file's pages is under
    /// writeback, the flusher's included, and the job ends. ext4's journal commit and the drive cache flush that
    /// end a real fsync are not modelled.
    pub(super) fn fsync_step(&mut self, process: u32, now: u64) {
        let p = process as usize;
        let file = self.processes[p].source.buffered.as_ref().unwrap().file;
        let max_pages = self.max_request_pages();
        let cache = self.cache.as_mut().unwrap();
        if let Some((_, first, count)) = cache.next_writeback_of(file, max_pages) {
            self.processes[p].source.buffered.as_mut().unwrap().fsync = Some(Fsync::Writing);
            let submit_ns = self.processes[p].params.cost.submit_ns;
            let CpuBooking { core, end_ns, .. } = self.run_process(process, now, submit_ns);
            let file = file as u32;
            let kind = BioKind::Writeback { file, first, count };
            return self.submit_cache_bio(process, core, kind, end_ns);
        }
        let in_flight = cache.under_writeback(file);
        self.processes[p].source.buffered.as_mut().unwrap().fsync = Some(Fsync::Waiting);
        if !in_flight {
            self.stop(process, now);
        }
    }

    /// Writeback of `file` ended at `at`: a process asleep in fsync on it wakes once none of its pages is under
    /// writeback (to write any dirtied meanwhile, or to return).
    fn wake_fsync(&mut self, file: usize, at: u64) {
        if self.cache.as_ref().unwrap().under_writeback(file) {
            return;
        }
        for p in 0..self.processes.len() {
            let asleep = self.processes[p]
                .source
                .buffered
                .as_ref()
                .is_some_and(|b| b.file == file && b.fsync == Some(Fsync::Waiting))
                && !self.processes[p].state.stopped;
            if asleep {
                let work = self.wake_work_ns(p, at);
                let done = self.run_process(p as u32, at, work).end_ns;
                self.fsync_step(p as u32, done);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Rw;
    use crate::testkit::{buffered_job, config};

    #[test]
    fn copies_take_their_bytes_over_the_hosts_copy_rate() {
        let c = config("none", vec![buffered_job("r", Rw::Read, 1, 1 << 20)]);
        let sim = Simulation::new(&c).unwrap();
        // 4 GB/s
        assert_eq!(sim.copy_ns(4096), 1_024);
        assert_eq!(sim.copy_ns(65536), 16_384);
    }

    #[test]
    fn writes_stay_in_the_cache_until_the_background_threshold_then_the_flusher_writes_back() {
        // 64 MiB cache: background writeback past 6.4 MiB dirty.
        let c = config("none", vec![buffered_job("w", Rw::Write, 1, 16 << 20)]);
        let mut sim = Simulation::new(&c).unwrap();
        let flusher = sim.flusher.unwrap();
        sim.start_and_run_until(|sim| sim.cache.as_ref().unwrap().over_background());
        assert_eq!(
            sim.ios_issued, 0,
            "below the threshold nothing reaches the device"
        );
        assert!(!sim.flusher_busy);
        sim.run_until(|sim| sim.cache_bios_in_flight > 0);
        let bio = sim.slots.iter().find(|s| s.live).unwrap();
        assert!(matches!(bio.kind, BioKind::Writeback { .. }));
        assert_eq!((bio.process, bio.sync), (flusher, false));
        assert!(sim.flusher_busy);
    }

    /// fio's end_fsync on a 4 MiB write, below the 64 MiB cache's 6.4 MiB background threshold. Without it nothing
    /// reaches the device: the job ends with its last write(). With it the writer writes its 1,024 dirty pages
    /// back itself, as sync requests of max_sectors (128 KiB: 4 MiB / 128 KiB = 32 of them), and the job ends
    /// only once the last has completed and no page of its file is dirty or under writeback.
    #[test]
    fn end_fsync_has_the_writer_write_its_file_back_and_the_job_end_when_it_is_clean() {
        // (requests issued, completed, the first one's (process, sync, bytes), the file clean, when the job ended)
        let run = |end_fsync: bool| {
            let mut job = buffered_job("w", Rw::Write, 1, 4 << 20);
            job.end_fsync = end_fsync;
            let c = config("none", vec![job]);
            let mut sim = Simulation::new(&c).unwrap();
            sim.start_and_run_until(|sim| {
                sim.cache_bios_in_flight > 0 || sim.active_processes == 0
            });
            let first = sim
                .slots
                .iter()
                .find(|s| s.live)
                .map(|s| (s.process, s.sync, s.bytes));
            sim.run_until(|sim| sim.active_processes == 0);
            let cache = sim.cache.as_ref().unwrap();
            let clean = !cache.file_has_dirty(0) && !cache.under_writeback(0);
            let ended = sim.processes[0].state.finished_ns.unwrap();
            (sim.ios_issued, sim.ios_completed, first, clean, ended)
        };
        let (issued, _, first, clean, plain_end) = run(false);
        assert_eq!((issued, first, clean), (0, None, false));
        let (issued, completed, first, clean, synced_end) = run(true);
        assert_eq!(
            first,
            Some((0, true, 128 << 10)),
            "the writer's own sync request"
        );
        assert_eq!((issued, completed, clean), (32, 32, true));
        // 4 MiB at the small device's rate takes milliseconds; the plain job's 64 copies of 16 us about one.
        assert!(
            synced_end > plain_end + 1_000_000,
            "{synced_end} vs {plain_end}"
        );
    }

    /// A 16 MiB write passes the 6.4 MiB background threshold, so the flusher is writing the file back when the
    /// writer's fsync starts: the fsync writes what is still dirty and returns only when the flusher's requests
    /// have completed too. 16 MiB in requests of up to 128 KiB: at least 128 of them, from the two together (the
    /// flusher may find a shorter run of dirty pages while the writer is still writing).
    #[test]
    fn end_fsync_waits_for_the_flushers_writeback_of_the_file_too() {
        let mut job = buffered_job("w", Rw::Write, 1, 16 << 20);
        job.end_fsync = true;
        let c = config("none", vec![job]);
        let mut sim = Simulation::new(&c).unwrap();
        let flusher = sim.flusher.unwrap();
        let mut by_flusher = 0;
        sim.schedule_start();
        while sim.active_processes > 0 && sim.step().is_some() {
            by_flusher = by_flusher.max(
                sim.slots
                    .iter()
                    .filter(|s| s.live && s.process == flusher)
                    .count(),
            );
        }
        assert!(by_flusher > 0, "the flusher wrote some of it");
        assert!(
            sim.ios_issued >= 128
                && sim.ios_issued == sim.ios_completed
                && sim.cache_bios_in_flight == 0
        );
        let cache = sim.cache.as_ref().unwrap();
        assert!(!cache.file_has_dirty(0) && !cache.under_writeback(0));
    }

    /// fio counts end_fsync in a job's runtime also when the job is time_based: a writer that dirties pages for
    /// 2 ms (~8 MiB at the test host's 4 GB/s copies, under the background threshold) reports a 2 ms window
    /// without it, and with it the 2 ms plus the milliseconds its fsync takes to write them back.
    #[test]
    fn a_time_based_writers_window_includes_its_end_fsync() {
        let window = |end_fsync: bool| {
            let mut job = buffered_job("w", Rw::Write, 1, 64 << 20);
            (job.time_based, job.runtime_ns, job.end_fsync) = (true, 2_000_000, end_fsync);
            let c = config("none", vec![job]);
            crate::simulate(&c, &mut |_| true).unwrap().jobs[0].window_ns
        };
        assert_eq!(window(false), 2_000_000);
        let synced = window(true);
        assert!(synced > 3_000_000, "{synced}");
    }

    #[test]
    fn a_read_waits_for_its_readahead_and_reads_ahead_of_itself() {
        let c = config("none", vec![buffered_job("r", Rw::Read, 1, 4 << 20)]);
        let mut sim = Simulation::new(&c).unwrap();
        sim.start_and_run_until(|sim| sim.processes[0].state.issued == 2);
        let cache = sim.cache.as_ref().unwrap();
        // The first 64 KiB read started a window larger than itself.
        assert!(cache.cached_pages() > 16, "{}", cache.cached_pages());
        let first = sim.processes[0].stats.read.result();
        assert_eq!(first.ios, 1);
        // It waited for the device: at least a flash read (40 us) longer than its copy (16 us).
        assert!(first.clat_min_ns > 40_000, "{}", first.clat_min_ns);
    }
}
