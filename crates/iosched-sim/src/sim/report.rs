//! What a run reports: time-series samples while it runs; at its end, the check that every bio, tag and slot came
//! back, and the `SimResult` (per-job and per-process latency and CPU, cores, devices).

use super::process::{Counts, Process, Ramp};
use super::Simulation;
use crate::config::JobConfig;
use crate::engine::Event;
use crate::metrics::{LatencyStats, SampleStats};
use crate::result::{CoreResult, DirectionResult, JobResult, ProcessResult, Sample, SimResult};

/// fio's iops_avg_time and bw_avg_time default: one IOPS and one bandwidth sample per 500 ms.
const DEFAULT_STATS_WINDOW_NS: u64 = 500_000_000;

impl Simulation<'_> {
    /// At the end every process has stopped with nothing in flight: every bio issued completed once, and every
    /// tag and slot came back. A violation is a simulator bug, reported as an error rather than a wrong result.
    pub(super) fn check_conservation(&self) -> Result<(), String> {
        let fail = |what: String| Err(format!("simulator invariant violated: {what}"));
        if self.ios_issued != self.ios_completed {
            return fail(format!(
                "{} bios issued, {} completed",
                self.ios_issued, self.ios_completed
            ));
        }
        if let Some(p) = self.processes.iter().find(|p| {
            p.state.inflight != 0
                || p.state.finished_ns.is_none()
                || p.source.buffered.as_ref().is_some_and(|b| b.call.is_some())
        }) {
            return fail(format!(
                "process {} of job {} did not finish",
                p.params.clone, p.params.job
            ));
        }
        if self.free_slots.len() != self.slots.len() || self.slots.iter().any(|s| s.live) {
            return fail("bio slots still in use".into());
        }
        for ((queue, device), model) in self
            .queues
            .iter()
            .zip(&self.config.devices)
            .zip(&self.devices)
        {
            if !queue.all_tags_free(device.queue_depth) {
                let (request_tags, driver_tags) = queue.free_tags();
                return fail(format!(
                    "{}: requests/command slots free {request_tags}/{driver_tags} at the end",
                    device.name
                ));
            }
            if model.outstanding_commands() != 0 {
                return fail(format!(
                    "{}: {} commands still outstanding",
                    device.name,
                    model.outstanding_commands()
                ));
            }
            if queue.has_tag_waiters() {
                return fail(format!("{}: bios still waiting for tags", device.name));
            }
            if (0..queue.nr_hw_queues).any(|h| queue.elevator.has_work(h)) {
                return fail(format!(
                    "{}: the scheduler still holds requests",
                    device.name
                ));
            }
        }
        Ok(())
    }

    pub(super) fn sample(&mut self, now: u64) {
        let seconds = self.config.sample_interval_ns as f64 / 1e9;
        // Per job, its processes' completions since the last sample (ramp included, as fio logs it): IOPS,
        // bytes per second and, where there was I/O, the mean completion latency.
        let mut per_job = vec![[Counts::default(); 2]; self.config.jobs.len()];
        let jobs = &self.config.jobs;
        for proc in self.processes.iter_mut().filter(|p| p.is_job_process()) {
            for (direction, counts) in proc.stats.interval.iter_mut().enumerate() {
                let sum = &mut per_job[proc.params.job as usize][direction];
                sum.ios += counts.ios;
                sum.bytes += counts.bytes;
                sum.clat_ns += counts.clat_ns;
                *counts = Counts::default();
            }
            close_stats_window(&jobs[proc.params.job as usize], proc, now);
        }
        for (job, counts) in per_job.iter().enumerate() {
            let name = &self.config.jobs[job].name;
            for (direction, d) in [(0, "read"), (1, "write")] {
                let c = counts[direction];
                let mut push = |metric: String, value: f64| {
                    self.timeseries.push(Sample {
                        t_ns: now,
                        source: "job".into(),
                        subject: name.clone(),
                        metric,
                        value,
                    })
                };
                push(format!("{d}_iops"), c.ios as f64 / seconds);
                push(format!("{d}_bw_bytes"), c.bytes as f64 / seconds);
                if c.ios > 0 {
                    push(format!("{d}_clat_mean_ns"), c.clat_ns as f64 / c.ios as f64);
                }
            }
        }
        for (device, queue) in self.devices.iter().zip(&self.queues) {
            let subject = &device.config.name;
            let mut push = |source: &str, metric: String, value: f64| {
                self.timeseries.push(Sample {
                    t_ns: now,
                    source: source.into(),
                    subject: subject.clone(),
                    metric,
                    value,
                })
            };
            push(
                "device",
                "write_buffer_bytes".into(),
                device.buffer_used_bytes() as f64,
            );
            push(
                "device",
                "free_program_units".into(),
                device.free_program_units() as f64,
            );
            push(
                "block",
                "requests_allocated".into(),
                queue.requests_allocated() as f64,
            );
            push(
                "block",
                "tag_sleepers".into(),
                (0..queue.nr_hw_queues)
                    .map(|h| queue.sleeping_on_tags(h))
                    .sum::<usize>() as f64,
            );
            for (metric, value) in queue.elevator.introspect() {
                push("scheduler", metric, value);
            }
        }
        let next = now + self.config.sample_interval_ns;
        if next <= self.end_ns {
            self.events.schedule(next, Event::Sample);
        }
    }

    /// Per job: its processes' results (latency, CPU split into usr and sys as fio does), their latencies merged,
    /// and the longest time one of them was measured.
    fn job_results(&self) -> Vec<JobResult> {
        let mut jobs: Vec<JobResult> = self
            .config
            .jobs
            .iter()
            .map(|job| JobResult {
                name: job.name.clone(),
                ..Default::default()
            })
            .collect();
        let mut merged: Vec<(LatencyStats, LatencyStats)> = vec![Default::default(); jobs.len()];
        let mut samples: Vec<[(SampleStats, SampleStats); 2]> =
            vec![Default::default(); jobs.len()];
        let mut totals: Vec<[(LatencyStats, LatencyStats); 2]> =
            vec![Default::default(); jobs.len()];
        for proc in self.processes.iter().filter(|p| p.is_job_process()) {
            let job = &mut jobs[proc.params.job as usize];
            // fio counts a job's end_fsync in its runtime, also past a time_based job's end.
            let fsynced = proc
                .source
                .buffered
                .as_ref()
                .is_some_and(|b| b.fsync.is_some());
            let end = match proc.state.finished_ns {
                Some(finished) if fsynced => finished,
                finished => finished.unwrap_or(proc.state.end_ns).min(proc.state.end_ns),
            };
            job.window_ns = job
                .window_ns
                .max(end.saturating_sub(proc.state.stats_start_ns));
            let usr_ns =
                (proc.stats.cpu.cpu_ns as f64 * proc.params.cost.usr_fraction).round() as u64;
            let sys_ns = proc.stats.cpu.cpu_ns - usr_ns;
            job.usr_ns += usr_ns;
            job.sys_ns += sys_ns;
            job.context_switches += proc.stats.cpu.context_switches;
            let with_samples = |mut d: DirectionResult, direction: usize| {
                d.iops_samples = proc.stats.iops_samples[direction].summary();
                d.bw_kib_samples = proc.stats.bw_kib_samples[direction].summary();
                d.slat = submission(&proc.stats.slat[direction]);
                d.lat = submission(&proc.stats.lat[direction]);
                d
            };
            job.depth_tables.add(&proc.stats.depth_tables);
            job.processes.push(ProcessResult {
                depth_tables: proc.stats.depth_tables,
                clone: proc.params.clone,
                core_affinity: proc.params.allowed_cores.clone(),
                read: with_samples(proc.stats.read.result(), 0),
                write: with_samples(proc.stats.write.result(), 1),
                usr_ns,
                sys_ns,
                context_switches: proc.stats.cpu.context_switches,
            });
            merged[proc.params.job as usize].0.merge(&proc.stats.read);
            merged[proc.params.job as usize].1.merge(&proc.stats.write);
            for direction in 0..2 {
                let pooled = &mut samples[proc.params.job as usize][direction];
                pooled.0.merge(&proc.stats.iops_samples[direction]);
                pooled.1.merge(&proc.stats.bw_kib_samples[direction]);
                let (slat, lat) = &mut totals[proc.params.job as usize][direction];
                slat.merge(&proc.stats.slat[direction]);
                lat.merge(&proc.stats.lat[direction]);
            }
        }
        // Group reporting pools the clones' window samples (fio's sum_stat): the statistics of one clone's rate.
        for (job_index, ((job, (read, write)), pooled)) in
            jobs.iter_mut().zip(&merged).zip(&samples).enumerate()
        {
            job.read = read.result();
            job.write = write.result();
            for (direction, (d, (iops, bw))) in [&mut job.read, &mut job.write]
                .into_iter()
                .zip(pooled)
                .enumerate()
            {
                d.iops_samples = iops.summary();
                d.bw_kib_samples = bw.summary();
                d.slat = submission(&totals[job_index][direction].0);
                d.lat = submission(&totals[job_index][direction].1);
            }
        }
        jobs
    }

    pub(super) fn into_result(mut self) -> SimResult {
        let request_trace = self.take_request_trace();
        let sched_notes = self.take_sched_notes();
        let jobs = self.job_results();
        // The run's window ends at the runtime, or earlier when every process finished before it (a trace
        // replay or a sized job that ended): core shares are over the time the jobs ran.
        let last_finish_ns = self
            .processes
            .iter()
            .filter_map(|p| p.state.finished_ns)
            .max()
            .unwrap_or(self.end_ns);
        let window_end_ns = self.end_ns.min(last_finish_ns);
        let cores = self
            .host
            .cores
            .iter()
            .map(|c| CoreResult {
                busy_ns: c.busy_ns,
                lock_ns: c.lock_ns,
            })
            .collect();
        SimResult {
            sim_time_ns: self.events.now_ns,
            events: self.events.processed,
            ios_issued: self.ios_issued,
            ios_completed: self.ios_completed,
            window_start_ns: self.window_start_ns,
            window_ns: if self.stonewalled {
                self.last_finish_ns.saturating_sub(self.window_start_ns)
            } else {
                window_end_ns.saturating_sub(self.window_start_ns)
            },
            jobs,
            cores,
            devices: self.devices.iter().map(|d| d.stats.clone()).collect(),
            timeseries: self.timeseries,
            request_trace,
            request_trace_truncated: self.request_trace_truncated,
            sched_notes,
        }
    }
}

/// An async engine's slat or lat as a result (None when nothing was recorded: a sync engine).
fn submission(stats: &LatencyStats) -> Option<Box<DirectionResult>> {
    (stats.ios > 0).then(|| Box::new(stats.result()))
}

/// fio's statistics windows (iops_avg_time, bw_avg_time; log_avg_msec where the job logs): once a process
/// has been measured for its job's window since the last one closed, the window's IOPS and KiB/s become one
/// sample each, per direction the job does. Windows close at samples, so one shorter than the sample interval
/// lasts a sample interval; the part of a window left when the measured time ends is dropped, as fio drops it.
fn close_stats_window(job: &JobConfig, proc: &mut Process, now: u64) {
    if proc.state.ramp != Ramp::Over || now <= proc.state.stats_start_ns || now > proc.state.end_ns
    {
        return;
    }
    let start = *proc
        .stats
        .window_start_ns
        .get_or_insert(proc.state.stats_start_ns);
    let elapsed_ns = now - start;
    if elapsed_ns < job.stats_window_ns.unwrap_or(DEFAULT_STATS_WINDOW_NS) {
        return;
    }
    let seconds = elapsed_ns as f64 / 1e9;
    for direction in 0..2 {
        let w = std::mem::take(&mut proc.stats.window[direction]);
        if job.rw.does(direction == 1) || job.trace.is_some() {
            proc.stats.iops_samples[direction].add(w.ios as f64 / seconds);
            proc.stats.bw_kib_samples[direction].add(w.bytes as f64 / 1024.0 / seconds);
        }
    }
    proc.stats.window_start_ns = Some(now);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{IoEngine, Rw};
    use crate::testkit::{config, job};

    #[test]
    fn a_sample_holds_each_jobs_iops_and_each_devices_and_schedulers_state() {
        let c = config(
            "kyber",
            vec![job("a", Rw::Randread, 1, 1), job("b", Rw::Randwrite, 1, 1)],
        );
        let mut sim = Simulation::new(&c).unwrap();
        sim.processes[0].stats.interval[0] = Counts {
            ios: 3,
            bytes: 3 * 4096,
            clat_ns: 3 * 50_000,
        };
        sim.processes[1].stats.interval[1] = Counts {
            ios: 5,
            bytes: 5 * 4096,
            clat_ns: 5 * 20_000,
        };
        sim.sample(1_000_000);
        let value = |subject: &str, metric: &str| {
            let s = sim
                .timeseries
                .iter()
                .find(|s| s.subject == subject && s.metric == metric);
            s.map(|s| (s.source.as_str(), s.value))
        };
        // Counts over the 1 ms interval, per second; the mean latency only where there was I/O.
        assert_eq!(value("a", "read_iops"), Some(("job", 3_000.0)));
        assert_eq!(value("b", "write_iops"), Some(("job", 5_000.0)));
        assert_eq!(value("a", "read_bw_bytes"), Some(("job", 3_000.0 * 4096.0)));
        assert_eq!(value("a", "read_clat_mean_ns"), Some(("job", 50_000.0)));
        assert_eq!(value("b", "write_clat_mean_ns"), Some(("job", 20_000.0)));
        assert_eq!(value("a", "write_clat_mean_ns"), None);
        assert_eq!(
            value("/dev/nvme0n1", "write_buffer_bytes"),
            Some(("device", 0.0))
        );
        assert!(sim.timeseries.iter().any(|s| s.source == "scheduler"));
        assert!(
            sim.processes
                .iter()
                .all(|p| p.stats.interval == [Counts::default(); 2]),
            "counts start again"
        );
        assert_eq!(sim.events.pop(), Some((2_000_000, Event::Sample)));
    }

    #[test]
    fn the_conservation_check_catches_a_bio_that_never_completed() {
        let c = config("none", vec![job("a", Rw::Randread, 2, 1)]);
        let mut sim = Simulation::new(&c).unwrap();
        sim.start_and_run_until(|sim| sim.ios_completed > 0 && sim.processes[0].state.inflight > 0);
        let e = sim.check_conservation().unwrap_err();
        assert!(e.starts_with("simulator invariant violated: "), "{e}");
        assert!(e.contains("bios issued"), "{e}");
        // Pretend the books balance: the process still has bios in flight.
        sim.ios_completed = sim.ios_issued;
        let e = sim.check_conservation().unwrap_err();
        assert!(e.ends_with("process 0 of job 0 did not finish"), "{e}");
    }

    #[test]
    fn a_jobs_result_gathers_its_processes_cpu_split_as_fio_reports_it() {
        let c = config("none", vec![job("a", Rw::Randread, 4, 2)]);
        let result = Simulation::new(&c).unwrap().run(&mut |_| true).unwrap();
        let job = &result.jobs[0];
        assert_eq!(job.processes.len(), 2);
        assert_eq!(job.window_ns, 5_000_000);
        let cpu: u64 = job.processes.iter().map(|p| p.usr_ns + p.sys_ns).sum();
        assert_eq!(job.usr_ns + job.sys_ns, cpu);
        // usr_fraction 0.25
        let usr = job.usr_ns as f64 / cpu as f64;
        assert!((usr - 0.25).abs() < 0.001, "{usr}");
        let ios: u64 = job.processes.iter().map(|p| p.read.ios).sum();
        assert_eq!(job.read.ios, ios);
        assert_eq!(result.window_ns, 5_000_000);
        // Each process keeps 4 reads in flight once measured: its submissions bring it to depth 4 (bucket 4-7),
        // and the job's depth levels are its processes' summed.
        for p in &job.processes {
            let [one, two, four, rest @ ..] = p.depth_tables.depth_levels;
            assert!(
                four > 0 && four >= 10 * (one + two) && rest == [0; 4],
                "{:?}",
                p.depth_tables.depth_levels
            );
        }
        let summed: u64 = job
            .processes
            .iter()
            .map(|p| p.depth_tables.depth_levels[2])
            .sum();
        assert_eq!(job.depth_tables.depth_levels[2], summed);
        // iodepth_batch_submit 1: every call submits one I/O (bucket 1-4).
        let [none, one_to_four, rest @ ..] = job.depth_tables.submit_levels;
        assert!(none == 0 && one_to_four > 0 && rest == [0; 5]);
        // With 4 in flight no reap can take in more than 4 completions (bucket 1-4), and none takes in 0.
        let [none, one_to_four, rest @ ..] = job.depth_tables.complete_levels;
        assert!(
            none == 0 && one_to_four > 0 && rest == [0; 5],
            "{:?}",
            job.depth_tables.complete_levels
        );
    }

    /// `reader` alone under mq-deadline whose hooks cost 3 us per insert and 2 us per dispatch.
    fn mq_deadline_with_hooks(reader: crate::config::JobConfig) -> crate::config::SimConfig {
        let mut c = config("mq-deadline", vec![reader]);
        let hooks = crate::config::SchedulerCost {
            insert_ns: 3_000,
            dispatch_ns: 2_000,
            complete_ns: 0,
        };
        c.host.scheduler_costs.insert("mq-deadline".into(), hooks);
        c
    }

    #[test]
    fn a_process_at_full_depth_takes_one_event_per_reap_as_fio_does() {
        // 32 in flight, submitted 16 per call under mq-deadline with hooks of 3 us per insert and 2 us per
        // dispatch: a call's submission path lasts 16 x (3 + 2) = 80 us and more, and the reads that complete
        // meanwhile wait in the ring. fio's reap takes at most iodepth_batch_complete_max events, by default
        // iodepth_batch_complete_min's 1, so every reap is of one (fio's "complete" bucket 1-4) but the last, when
        // the job stops and fio waits for all that is left.
        let mut reader = job("a", Rw::Randread, 32, 1);
        reader.iodepth_batch_submit = 16;
        let c = mq_deadline_with_hooks(reader);
        let result = Simulation::new(&c).unwrap().run(&mut |_| true).unwrap();
        let levels = result.jobs[0].depth_tables.complete_levels;
        assert!(levels[1] > 100 && levels[0] == 0, "{levels:?}");
        assert!(levels[2..].iter().sum::<u64>() <= 1, "{levels:?}");
    }

    #[test]
    fn io_urings_submission_calls_post_the_completions_that_arrived_meanwhile() {
        // One process on core 0 at depth 128: 2 us to submit, 3 + 2 us of mq-deadline hooks, 10 us of engine
        // completion work; 17 us of CPU per read, so 58.8 K reads/s and each read waits about 128 x 17 us = 2.18
        // ms. io_uring (fio 3.35 sets DEFER_TASKRUN and submits with GETEVENTS) does the task work of whatever
        // completed at every submission call, so every read waits the same 128 turns of the loop: the clat P99
        // within 15% of the P50 (measured 2.16 / 2.42 ms). libaio's completion work here is done all at once when
        // fio finds no event left to take: the blocks of work make the reads behind them wait a block longer
        // (P99 / P50 at least 1.4; measured 1.90 / 2.88 ms).
        let spread = |engine: IoEngine| {
            let mut reader = job("a", Rw::Randread, 128, 1);
            reader.ioengine = engine;
            reader.cpus_allowed = vec![0];
            (reader.ramp_ns, reader.runtime_ns) = (10_000_000, 40_000_000);
            let mut c = mq_deadline_with_hooks(reader);
            (c.host.io_uring.complete_ns, c.host.libaio.complete_ns) = (10_000, 10_000);
            let result = Simulation::new(&c).unwrap().run(&mut |_| true).unwrap();
            let read = &result.jobs[0].read;
            let p = |q: f64| read.percentiles.iter().find(|(x, _)| *x == q).unwrap().1 as f64;
            p(99.0) / p(50.0)
        };
        let (uring, aio) = (spread(IoEngine::IoUring), spread(IoEngine::Libaio));
        assert!(uring < 1.15, "io_uring {uring}, libaio {aio}");
        assert!(aio >= 1.4, "io_uring {uring}, libaio {aio}");
    }

    #[test]
    fn window_samples_are_each_windows_rates_pooled_over_the_clones_as_fio_groups_them() {
        // Two clones of a reader, measured from 0, 2 ms statistics windows, samples every 1 ms: a window closes
        // at 2 and 4 ms. Clone 0 completes 4 then 2 reads of 4 KiB: 4 / 2 ms = 2,000 IOPS and 16 KiB / 2 ms =
        // 8,000 KiB/s, then 1,000 IOPS and 4,000 KiB/s. Clone 1: 6 reads twice, 3,000 IOPS each.
        let mut reader = job("a", Rw::Randread, 1, 2);
        reader.ramp_ns = 0;
        reader.stats_window_ns = Some(2_000_000);
        let c = config("none", vec![reader]);
        let mut sim = Simulation::new(&c).unwrap();
        let reads = |n: u64| Counts {
            ios: n,
            bytes: n * 4096,
            clat_ns: n * 10_000,
        };
        for (t_ms, first, second) in [(1, 0, 0), (2, 4, 6), (3, 0, 0), (4, 2, 6)] {
            if first + second > 0 {
                sim.processes[0].stats.window[0] = reads(first);
                sim.processes[1].stats.window[0] = reads(second);
            }
            sim.sample(t_ms * 1_000_000);
        }
        let one = &sim.processes[0].stats.iops_samples[0].summary();
        // Clone 0 alone: mean 1,500, sample stddev sqrt((500^2 + 500^2) / 1) = 707.1.
        assert_eq!(
            (one.samples, one.min, one.max, one.mean),
            (2, 1_000.0, 2_000.0, 1_500.0)
        );
        assert!((one.stddev - 707.106_781).abs() < 1e-3);
        let bw = &sim.processes[0].stats.bw_kib_samples[0].summary();
        assert_eq!((bw.min, bw.max), (4_000.0, 8_000.0));
        // The job (group reporting) pools 2,000, 1,000, 3,000, 3,000: mean 2,250, squared deviations
        // 62,500 + 1,562,500 + 562,500 + 562,500 = 2,750,000, stddev sqrt(2,750,000 / 3) = 957.4.
        let jobs = sim.job_results();
        let pooled = &jobs[0].read.iops_samples;
        assert_eq!(
            (pooled.samples, pooled.min, pooled.max, pooled.mean),
            (4, 1_000.0, 3_000.0, 2_250.0)
        );
        assert!((pooled.stddev - 957.427_107).abs() < 1e-3);
        // A reader has no write samples (fio leaves them at 0).
        assert_eq!(jobs[0].write.iops_samples.samples, 0);
        assert_eq!(jobs[0].processes[1].read.iops_samples.mean, 3_000.0);
    }

    #[test]
    fn an_async_engines_lat_is_its_slat_plus_its_clat_and_a_sync_engine_has_neither() {
        // Per I/O, fio's lat runs from the submission call's start to completion: slat (the call) + clat (after
        // it). So the means add up exactly, over the same I/Os. psync's call is the I/O: no slat, no lat apart.
        let mut sync = job("s", Rw::Randread, 1, 1);
        sync.ioengine = IoEngine::Psync;
        let c = config("none", vec![job("a", Rw::Randread, 4, 1), sync]);
        let result = Simulation::new(&c).unwrap().run(&mut |_| true).unwrap();
        let read = &result.jobs[0].read;
        let (slat, lat) = (read.slat.as_ref().unwrap(), read.lat.as_ref().unwrap());
        assert_eq!((slat.ios, lat.ios), (read.ios, read.ios));
        assert!(slat.clat_mean_ns > 0.0);
        let sum = slat.clat_mean_ns + read.clat_mean_ns;
        assert!(
            (lat.clat_mean_ns - sum).abs() < 1e-6 * sum,
            "{} vs {sum}",
            lat.clat_mean_ns
        );
        assert!(result.jobs[1].read.slat.is_none() && result.jobs[1].read.lat.is_none());
    }
}
