//! The run's request trace (`SimConfig::request_trace`): each request's life as the kernel's blk tracer logs it
//! (Q: the bio reached blk-mq; M: it merged into a queued request; G: it got a request; D: the request went to the
//! driver; C: it completed) and, for a thread that sleeps for a request tag, the CPU scheduler's events (S: asleep;
//! W: woken; R: running again), so a simulated run and a traced lab run (`--vm trace=blk+sched`) read alike
//! (`iosched trace-summary`). Recording only: nothing here changes what the run does.
//!
//! Simplifications: a thread's events are the process's (an io_uring ring's io-wq worker asleep for a tag counts
//! as its process); a request's sector is its first bio's, as `make_request` sets it; events are kept in the order
//! they are booked and sorted by time at the end (a wake-up's R is booked when the wake-up is).

use iosched_policy::SECTOR_BYTES;

use super::Simulation;
use crate::result::{RequestTraceEvent, SchedNoteEvent, REQUEST_TRACE_EVENTS_MAX};

impl Simulation<'_> {
    /// Record `action` of bio `io` (its request's once it has one) at `at_ns`, on the bio's core.
    #[inline]
    pub(super) fn trace_bio(&mut self, action: char, io: u32, at_ns: u64) {
        if self.request_trace.is_some() {
            let core = self.slots[io as usize].core;
            self.record(action, io, core, at_ns);
        }
    }

    /// Record `action` of the thread that waits for a request for bio `io` (S, W, R) at `at_ns`, on its
    /// process's core.
    #[inline]
    pub(super) fn trace_thread(&mut self, action: char, io: u32, at_ns: u64) {
        if self.request_trace.is_some() {
            let core = self.processes[self.slots[io as usize].process as usize]
                .state
                .core;
            self.record(action, io, core, at_ns);
        }
    }

    #[cold]
    #[inline(never)]
    fn record(&mut self, action: char, io: u32, core: u32, at_ns: u64) {
        let slot = &self.slots[io as usize];
        // A bio's own size until it has a request (Q, M, a thread's events); then the request's, plug merges
        // included.
        let bytes = if matches!(action, 'Q' | 'M' | 'E' | 'S' | 'W' | 'R') {
            slot.bytes
        } else {
            slot.request_bytes
        };
        let (sector, sectors) = match &slot.request {
            Some(rq) => (rq.sector, rq.nr_sectors),
            None => (
                slot.offset_bytes / SECTOR_BYTES,
                (bytes as u64 / SECTOR_BYTES) as u32,
            ),
        };
        let event = RequestTraceEvent {
            t_ns: at_ns,
            action,
            process: slot.process,
            thread: slot.io_wq_worker,
            core,
            device: slot.device,
            write: slot.write,
            sector,
            sectors,
        };
        let trace = self.request_trace.as_mut().expect("recording a traced run");
        if trace.len() < REQUEST_TRACE_EVENTS_MAX {
            trace.push(event);
        } else {
            // Full: the oldest event gives way, as in the kernel tracer's ring (the lab's traces keep a run's end).
            trace[self.request_trace_oldest] = event;
            self.request_trace_oldest = (self.request_trace_oldest + 1) % REQUEST_TRACE_EVENTS_MAX;
            self.request_trace_truncated = true;
        }
    }

    /// Every device's scheduler notes, in time order (none unless the run is traced: only then were they asked
    /// for).
    pub(super) fn take_sched_notes(&mut self) -> Vec<SchedNoteEvent> {
        let mut notes: Vec<SchedNoteEvent> = self
            .queues
            .iter_mut()
            .enumerate()
            .flat_map(|(d, q)| {
                q.elevator
                    .take_notes()
                    .into_iter()
                    .map(move |n| SchedNoteEvent::new(d as u32, &n))
            })
            .collect();
        notes.sort_by_key(|n| n.t_ns); // stable: one device's notes keep their order
        notes
    }

    /// The trace for the result: in time order (events booked ahead of `now` were recorded early).
    pub(super) fn take_request_trace(&mut self) -> Vec<RequestTraceEvent> {
        let mut trace = self.request_trace.take().unwrap_or_default();
        trace.rotate_left(self.request_trace_oldest); // booking order again
        trace.sort_by_key(|e| e.t_ns); // stable: same-time events keep their booking order
        trace
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{IoEngine, Rw};
    use crate::result::RequestTraceEvent;
    use crate::testkit::{config, job};

    /// One libaio reader submitting 3 reads per call to a device with 2 requests (no elevator: its tags), for
    /// 0.5 ms.
    fn scarce(trace: bool) -> crate::config::SimConfig {
        let mut j = job("a", Rw::Randread, 3, 1);
        j.iodepth_batch_submit = 3;
        j.ioengine = IoEngine::Libaio;
        j.runtime_ns = 500_000;
        let mut c = config("none", vec![j]);
        c.devices[0].queue_depth = 2;
        c.request_trace = trace;
        c
    }

    /// BFQ keeps notes of its decisions in a traced run: a QD-32 writer, and 200 ms later (past stable merging's
    /// 180 ms, so with a queue of its own) a QD-1 reader, on one device for 5 ms after a 1 ms ramp. The notes come
    /// in time order with the everyday kinds (busy, in service, expired, an allocation's depth); the reader is
    /// new, so raised as interactive (x30) from its first request; recording changes nothing (an untraced run
    /// keeps no notes).
    #[test]
    fn a_traced_bfq_run_keeps_the_schedulers_notes_and_changes_nothing_else() {
        let run = |trace: bool| {
            let mut reader = job("r", Rw::Randread, 1, 1);
            reader.start_ns = 200_000_000;
            let mut c = config("bfq", vec![job("w", Rw::Randwrite, 32, 1), reader]);
            c.request_trace = trace;
            crate::simulate(&c, &mut |_| true).unwrap()
        };
        let plain = run(false);
        let mut traced = run(true);
        assert!(plain.sched_notes.is_empty());
        let notes = std::mem::take(&mut traced.sched_notes);
        traced.request_trace.clear();
        assert_eq!(traced, plain, "recording changes nothing");
        assert!(notes.windows(2).all(|w| w[0].t_ns <= w[1].t_ns));
        let kinds: std::collections::BTreeSet<char> = notes.iter().map(|n| n.kind).collect();
        for k in ['B', 'S', 'E', 'L'] {
            assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
        }
        let of = |p: u32, k: char| {
            notes
                .iter()
                .filter(move |n| n.process == Some(p) && n.kind == k)
        };
        assert!(of(0, 'S').count() > 0 && of(1, 'S').count() > 0);
        assert!(of(1, 'R').all(|n| n.a == 30) && of(1, 'R').count() > 0);
        // 6.18's depths are shares of the whole set: nr_requests (256 here) for a read, less for a write.
        assert!(notes.iter().filter(|n| n.kind == 'L').all(|n| n.c <= 256));
    }

    /// A run with more events than the trace keeps: it holds the last `REQUEST_TRACE_EVENTS_MAX`, in time order,
    /// up to the run's last completions, and says it was cut; what was dropped is the run's start, as a lab trace
    /// whose ring overran keeps the end. Negative control: the same run shorter keeps its first event (the first
    /// bio, microseconds in).
    #[test]
    fn a_long_run_keeps_the_end_of_its_trace() {
        let run = |runtime_ns: u64| {
            let mut j = job("a", Rw::Randread, 32, 1);
            j.runtime_ns = runtime_ns;
            let mut c = config("none", vec![j]);
            c.request_trace = true;
            crate::simulate(&c, &mut |_| true).unwrap()
        };
        let long = run(2_000_000_000);
        let trace = &long.request_trace;
        assert!(
            long.request_trace_truncated && trace.len() == crate::result::REQUEST_TRACE_EVENTS_MAX
        );
        assert!(trace.windows(2).all(|w| w[0].t_ns <= w[1].t_ns));
        let (first, last) = (trace[0].t_ns, trace[trace.len() - 1].t_ns);
        assert!(first > 100_000_000, "{first}"); // the first ~0.36 s of the 2 s were dropped
        assert!(last + 1_000_000 >= long.sim_time_ns && trace[trace.len() - 1].action == 'C');
        let short = run(10_000_000);
        assert!(!short.request_trace_truncated && short.request_trace[0].t_ns < 100_000);
    }

    fn actions(trace: &[RequestTraceEvent]) -> String {
        trace.iter().map(|e| e.action).collect()
    }

    #[test]
    fn a_traced_run_records_each_request_and_the_tag_sleeper_and_changes_nothing_else() {
        let plain = crate::simulate(&scarce(false), &mut |_| true).unwrap();
        let mut traced = crate::simulate(&scarce(true), &mut |_| true).unwrap();
        assert!(
            plain.request_trace.is_empty()
                && !traced.request_trace.is_empty()
                && !traced.request_trace_truncated
        );
        let trace = std::mem::take(&mut traced.request_trace);
        assert_eq!(traced, plain, "recording changes nothing");
        assert!(trace.windows(2).all(|w| w[0].t_ns <= w[1].t_ns));
        // The first call: three bios reach blk-mq, two get the device's two requests, the third's thread sleeps;
        // the first completion frees a request, the thread is woken, runs, and gets it.
        let first = actions(&trace[..12]);
        assert!(
            first.starts_with("QGDQGD") || first.starts_with("QGQGDD"),
            "{first}"
        );
        assert!(first.contains("QS") && first.contains("CWRG"), "{first}");
        // Every request: Q, G, D, C in that order, at its sector (nothing merges here).
        let mut by_sector = std::collections::HashMap::<u64, String>::new();
        for e in trace.iter().filter(|e| "QGDC".contains(e.action)) {
            by_sector.entry(e.sector).or_default().push(e.action);
        }
        let whole = by_sector.values().filter(|a| a.as_str() == "QGDC").count();
        assert!(
            whole as u64 >= plain.ios_completed - 3,
            "{whole} of {}",
            plain.ios_completed
        );
        assert!(
            by_sector.values().all(|a| "QGDC".starts_with(a.as_str())),
            "{by_sector:?}"
        );
        // Every sleep ends in a wake-up and a run; nothing else sleeps.
        let threads = actions(&trace).replace(['Q', 'G', 'D', 'C'], "");
        assert!(
            !threads.is_empty()
                && threads
                    .trim_end_matches('S')
                    .split("SWR")
                    .all(str::is_empty),
            "{threads}"
        );
    }
}
