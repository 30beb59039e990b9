//! What a run reports: time-series samples while it runs; at its end, the check that every bio, tag and slot came
//! back, and the `SimResult` (per-job and per-process latency and CPU, cores, devices).

use super::Simulation;
use crate::engine::Event;
use crate::metrics::LatencyStats;
use crate::result::{CoreResult, JobResult, ProcessResult, Sample, SimResult};

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
        for (job, counts) in self.interval_ios.iter_mut().enumerate() {
            let name = &self.config.jobs[job].name;
            for (direction, metric) in [(0, "read_iops"), (1, "write_iops")] {
                self.timeseries.push(Sample {
                    t_ns: now,
                    source: "job".into(),
                    subject: name.clone(),
                    metric: metric.into(),
                    value: counts[direction] as f64 / seconds,
                });
            }
            *counts = [0, 0];
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
        for proc in self.processes.iter().filter(|p| p.is_job_process()) {
            let job = &mut jobs[proc.params.job as usize];
            let end = proc
                .state
                .finished_ns
                .unwrap_or(proc.state.end_ns)
                .min(proc.state.end_ns);
            job.window_ns = job
                .window_ns
                .max(end.saturating_sub(proc.state.stats_start_ns));
            let usr_ns =
                (proc.stats.cpu.cpu_ns as f64 * proc.params.cost.usr_fraction).round() as u64;
            let sys_ns = proc.stats.cpu.cpu_ns - usr_ns;
            job.usr_ns += usr_ns;
            job.sys_ns += sys_ns;
            job.context_switches += proc.stats.cpu.context_switches;
            job.processes.push(ProcessResult {
                clone: proc.params.clone,
                core_affinity: proc.params.allowed_cores.clone(),
                read: proc.stats.read.result(),
                write: proc.stats.write.result(),
                usr_ns,
                sys_ns,
                context_switches: proc.stats.cpu.context_switches,
            });
            merged[proc.params.job as usize].0.merge(&proc.stats.read);
            merged[proc.params.job as usize].1.merge(&proc.stats.write);
        }
        for (job, (read, write)) in jobs.iter_mut().zip(&merged) {
            job.read = read.result();
            job.write = write.result();
        }
        jobs
    }

    pub(super) fn into_result(self) -> SimResult {
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Rw;
    use crate::testkit::{config, job};

    #[test]
    fn a_sample_holds_each_jobs_iops_and_each_devices_and_schedulers_state() {
        let c = config(
            "kyber",
            vec![job("a", Rw::Randread, 1, 1), job("b", Rw::Randwrite, 1, 1)],
        );
        let mut sim = Simulation::new(&c).unwrap();
        sim.interval_ios = vec![[3, 0], [0, 5]];
        sim.sample(1_000_000);
        let value = |subject: &str, metric: &str| {
            let s = sim
                .timeseries
                .iter()
                .find(|s| s.subject == subject && s.metric == metric);
            s.map(|s| (s.source.as_str(), s.value))
        };
        // Counts over the 1 ms interval, per second.
        assert_eq!(value("a", "read_iops"), Some(("job", 3_000.0)));
        assert_eq!(value("b", "write_iops"), Some(("job", 5_000.0)));
        assert_eq!(
            value("/dev/nvme0n1", "write_buffer_bytes"),
            Some(("device", 0.0))
        );
        assert!(sim.timeseries.iter().any(|s| s.source == "scheduler"));
        assert_eq!(sim.interval_ios, vec![[0, 0], [0, 0]], "counts start again");
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
    }
}
