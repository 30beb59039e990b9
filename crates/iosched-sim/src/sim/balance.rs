//! Linux's periodic load balancing (kernel/sched/fair.c `rebalance_domains` -> `load_balance`, the 5.5+
//! `calculate_imbalance`): now and then each core compares how many processes are runnable on it with the busiest
//! core's and pulls one that waits there (not the one running).
//!
//! Why: processes that never sleep (their completions keep coming) are only moved by it. Without it, the 16 QD-128
//! background readers beside the L-app of seed 000 Fig. 11a at N = 16 (17 unpinned processes on 10 cores, none)
//! kept the cores they were placed on: the 4 alone on a core got 361 K each, the 12 sharing one 185 K (1.95x apart,
//! 2 s measured); the artifact's got 196-219 K over 120 s (1.12x). With it a waiting process moves to a core running
//! one process on that core's third attempt, so every process takes its turn alone: 195-286 K over 2 s (1.47x),
//! 203-253 K over 10 s (1.25x).
//!
//! What the kernel does, for a host of one scheduling domain (the model's cores: no SMT or NUMA levels; topology.c
//! `sd_init` for the MC level): a core balances when its interval has passed, checked at its tick. The interval is
//! `balance_interval` (from `min_interval` = the domain's core count in ms, doubled after a balanced attempt up to
//! `max_interval` = twice that, back to the minimum after an unbalanced one), times `busy_factor` = 16 while the core
//! is busy. An idle core pulls a process from the busiest core when that one has more than one runnable (the
//! "has spare" case: one task). A busy core pulls only when the busiest is above the domain's average and it is
//! below it; the imbalance is the smaller distance to the average, and a process's load (1024 for one always
//! runnable) must fit it after being halved once per failed attempt (`detach_tasks`, `shift_load` by
//! `nr_balance_failed`). So a core running one process beside a core running two, on a domain of 17 processes on 10
//! cores (average 1.7), sees an imbalance of 0.3 x 1024 = 307: 1024 and 512 do not fit, 256 does, and the third
//! attempt moves one. A core running two pulls from one running three only while two is below the average, and
//! only as 100 x 3 > 117 x 2 (`imbalance_pct`: both overloaded, they must be that far apart).
//!
//! Simplifications: a core's load is the number of its processes runnable now (running, or waiting in its run
//! queue), not PELT's decaying averages, so a process counts 1024 while runnable and nothing while asleep; an idle
//! core pulls at its next tick, where the kernel's core going idle pulls at once (`newidle_balance`) and an idle one
//! is kicked from a busy core's tick; the process moved is the one that has waited longest (the kernel takes the
//! least recently run); no cache-hot test (a busy core moves a process only on its third attempt, past
//! `cache_nice_tries`, where the kernel ignores it too); a process waiting to retry a request tag is not moved
//! (its bio's hardware queue is its old core's); no active balancing of a running process (it needs more than
//! three failed attempts, and a waiting process is moved on the third). The same balancer stands for every kernel
//! version (the 5.5 rework changed how the imbalance is computed, not what moves here).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::runqueue::Resume;
use super::Simulation;
use crate::engine::Event;

/// `sd->busy_factor` (topology.c `sd_init`): a busy core balances this many times less often.
const BUSY_FACTOR: u64 = 16;
/// `sd->imbalance_pct` of the MC level: a loaded core pulls only from one 17% above it.
const IMBALANCE_PCT: u64 = 117;
/// A process's load while runnable: its weight at nice 0 (`NICE_0_LOAD`, scaled down as the kernel compares it).
const LOAD: u64 = 1024;

/// One core's balancing state (`struct sched_domain` of its MC level).
#[derive(Debug, Clone, Copy)]
pub(super) struct CoreBalance {
    /// When the core balances next (`rq->next_balance`).
    next_ns: u64,
    /// `sd->balance_interval`, in ms.
    interval_ms: u64,
    /// `sd->nr_balance_failed`.
    failed: u32,
    /// The busiest core its last attempt found.
    last_busiest: u32,
}

/// The host's load balancer: active only where some job process may run on more than one core.
#[derive(Debug, Default)]
pub(super) struct Balancer {
    cores: Vec<CoreBalance>,
    /// `sd->min_interval` (the domain's core count, in ms).
    min_interval_ms: u64,
}

impl Balancer {
    /// The balancer for `cores` cores, or an inactive one (no events) when no process can move.
    pub(super) fn new(cores: u32, active: bool) -> Self {
        if !active || cores < 2 {
            return Self::default();
        }
        let min_interval_ms = u64::from(cores);
        Self {
            cores: vec![
                CoreBalance {
                    next_ns: 0,
                    interval_ms: min_interval_ms,
                    failed: 0,
                    last_busiest: 0,
                };
                cores as usize
            ],
            min_interval_ms,
        }
    }

    pub(super) fn active(&self) -> bool {
        !self.cores.is_empty()
    }
}

/// What one balancing attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attempt {
    /// Nothing to pull, or nothing worth pulling: the interval grows.
    Balanced,
    /// Unbalanced: a process moved, or none fitted the imbalance yet.
    Unbalanced { moved: bool },
}

impl Simulation<'_> {
    /// The first balancing tick, one jiffy after the start, if the balancer is active.
    pub(super) fn schedule_first_balance_tick(&mut self) {
        if self.balancer.active() {
            let at = self.config.host.next_tick_ns(0);
            self.events.schedule(at, Event::BalanceTick);
        }
    }

    /// A tick on every core (the kernel's ticks are aligned across CPUs): each core whose balance is due balances,
    /// in core order. The ticks stop with the run.
    pub(super) fn balance_tick(&mut self, now: u64) {
        for core in 0..self.balancer.cores.len() as u32 {
            if now >= self.balancer.cores[core as usize].next_ns {
                self.balance(core, now);
            }
        }
        let next = self.config.host.next_tick_ns(now);
        if next <= self.end_ns && self.active_processes > 0 {
            self.events.schedule(next, Event::BalanceTick);
        }
    }

    /// How many processes are runnable on `core` at `now`: the one running there (its own work booked beyond now,
    /// or inside its submission call; not an interrupt or kworker booked there) and those waiting in its run queue.
    fn runnable_on(&self, core: u32, now: u64) -> u64 {
        let (runner, until_ns) = self.core_runner[core as usize];
        let running = (runner as usize) < self.processes.len()
            && self.processes[runner as usize].state.core == core
            && (until_ns > now || self.in_call_on(core));
        u64::from(running) + self.run_queues[core as usize].waiting.len() as u64
    }

    /// Whether `woken`, waiting on some core, may move to `core`.
    fn may_move_to(&self, woken: &super::runqueue::Woken, core: u32) -> bool {
        let proc = &self.processes[woken.process as usize];
        proc.is_job_process()
            && !matches!(woken.resume, Resume::TagRetry(_))
            && proc.params.allowed_cores.len() > 1
            && proc.params.allowed_cores.contains(&core)
    }

    /// How many processes are runnable on each core at `now`.
    fn runnable(&self, now: u64) -> Vec<u64> {
        (0..self.balancer.cores.len() as u32)
            .map(|c| self.runnable_on(c, now))
            .collect()
    }

    /// `core` balances at `now` (`load_balance` on its MC domain) and sets when it balances next.
    fn balance(&mut self, core: u32, now: u64) {
        let runnable = self.runnable(now);
        let busy = runnable[core as usize] > 0;
        let attempt = self.balance_attempt(core, &runnable);
        let min_interval_ms = self.balancer.min_interval_ms;
        let state = &mut self.balancer.cores[core as usize];
        match attempt {
            Attempt::Balanced => {
                state.failed = 0;
                state.interval_ms = (state.interval_ms * 2).min(2 * min_interval_ms);
            }
            Attempt::Unbalanced { moved } => {
                state.failed = if moved { 0 } else { state.failed + 1 };
                state.interval_ms = min_interval_ms;
            }
        }
        let interval_ms = state.interval_ms * if busy { BUSY_FACTOR } else { 1 };
        state.next_ns = now + interval_ms * 1_000_000;
    }

    /// One attempt of `core`, given how many processes are runnable on each core.
    fn balance_attempt(&mut self, core: u32, runnable: &[u64]) -> Attempt {
        let cores = runnable.len() as u32;
        // The busiest core with a process that could move here (`find_busiest_queue`). Ties, which the kernel's
        // decaying load averages seldom have, go round robin from the core after this one's last choice: taking the
        // lowest-numbered left the pairs on the high-numbered cores in place for good.
        let after = self.balancer.cores[core as usize].last_busiest;
        let Some(busiest) = (1..=cores)
            .map(|i| (after + i) % cores)
            .filter(|&c| c != core)
            .filter(|&c| {
                self.run_queues[c as usize]
                    .waiting
                    .iter()
                    .any(|Reverse(w)| self.may_move_to(w, core))
            })
            .fold(None, |best: Option<u32>, c| match best {
                Some(b) if runnable[b as usize] >= runnable[c as usize] => Some(b),
                _ => Some(c),
            })
        else {
            return Attempt::Balanced;
        };
        self.balancer.cores[core as usize].last_busiest = busiest;
        let (local, most) = (runnable[core as usize], runnable[busiest as usize]);
        if local == 0 {
            // An idle core pulls one process from a core with more than one runnable (`migrate_task`).
            if most < 2 {
                return Attempt::Balanced;
            }
            self.move_waiting(busiest, core);
            return Attempt::Unbalanced { moved: true };
        }
        let average = runnable.iter().sum::<u64>() * LOAD / u64::from(cores);
        let (local_load, busiest_load) = (local * LOAD, most * LOAD);
        if busiest_load <= local_load || local_load >= average {
            return Attempt::Balanced;
        }
        if local >= 2 && 100 * busiest_load <= IMBALANCE_PCT * local_load {
            return Attempt::Balanced; // both overloaded, not enough apart
        }
        let imbalance = (busiest_load - average).min(average - local_load);
        let failed = self.balancer.cores[core as usize].failed;
        if LOAD.checked_shr(failed).unwrap_or(0) > imbalance {
            return Attempt::Unbalanced { moved: false };
        }
        self.move_waiting(busiest, core);
        Attempt::Unbalanced { moved: true }
    }

    /// Move the process that has waited longest in `from`'s run queue (among those that may run on `to`) to `to`'s
    /// run queue, its lag behind min_vruntime kept (`migrate_task_rq_fair`); it may preempt the process running
    /// there, as a woken one may (`attach_task` -> `check_preempt_curr`).
    fn move_waiting(&mut self, from: u32, to: u32) {
        let mut waiting = std::mem::take(&mut self.run_queues[from as usize].waiting).into_vec();
        let index = (0..waiting.len())
            .filter(|&i| self.may_move_to(&waiting[i].0, to))
            .min_by_key(|&i| waiting[i].0.seq)
            .expect("a process that may move");
        let Reverse(mut woken) = waiting.swap_remove(index);
        self.run_queues[from as usize].waiting = BinaryHeap::from(waiting);
        self.move_vruntime(woken.process, to);
        woken.vruntime_ns = self.processes[woken.process as usize].state.vruntime_ns;
        self.requeue(to, woken);
        self.preempt_on_wakeup(to, woken.process);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Rw;
    use crate::testkit::{config, job};

    /// Three QD-32 readers allowed on both cores of the test host (Linux 6.3), each I/O costing 40 us to submit:
    /// CPU-bound, so none ever sleeps (as `processes_that_never_sleep_share_a_core_in_slices_not_one_io_at_a_time`
    /// in runqueue.rs).
    fn three_cpu_bound_readers(runtime_ns: u64) -> crate::config::SimConfig {
        let mut j = job("r", Rw::Randread, 32, 3);
        j.runtime_ns = runtime_ns;
        let mut c = config("none", vec![j]);
        c.host.kernel = "6.3".into();
        c.host.io_uring.submit_ns = 40_000;
        c
    }

    /// `core`'s attempt at `now`, on the cores' state then.
    fn attempt(sim: &mut Simulation, core: u32, now: u64) -> Attempt {
        let runnable = sim.runnable(now);
        sim.balance_attempt(core, &runnable)
    }

    #[test]
    fn a_core_running_one_process_pulls_a_waiting_one_from_a_core_running_two_on_its_second_attempt(
    ) {
        // Core 0 runs process 0 with process 1 waiting; core 1 runs process 2. The domain's average is 3 x 1024 / 2
        // = 1536; core 1 is at 1024, core 0 at 2048: an imbalance of min(2048 - 1536, 1536 - 1024) = 512. A
        // process's 1024 does not fit it; halved once (`nr_balance_failed` = 1) it does. Core 0, above the average,
        // never pulls.
        let c = three_cpu_bound_readers(10_000_000);
        let mut sim = Simulation::new(&c).unwrap();
        for (process, core) in [(0, 0), (2, 1)] {
            sim.processes[process].state.core = core;
            sim.core_runner[core as usize] = (process as u32, 1_000_000);
        }
        sim.processes[1].state.core = 0;
        sim.queue_woken(0, 1, Resume::Issue);
        let now = 500_000;
        assert_eq!(attempt(&mut sim, 0, now), Attempt::Balanced);
        assert_eq!(
            attempt(&mut sim, 1, now),
            Attempt::Unbalanced { moved: false }
        );
        sim.balancer.cores[1].failed = 1;
        assert_eq!(
            attempt(&mut sim, 1, now),
            Attempt::Unbalanced { moved: true }
        );
        assert!(sim.run_queues[0].waiting.is_empty());
        assert_eq!(sim.run_queues[1].waiting.len(), 1);
        assert_eq!(sim.processes[1].state.core, 1);
        // An idle core pulls at once from a core with two runnable, and from none with one.
        let mut sim = Simulation::new(&c).unwrap();
        sim.processes[0].state.core = 0;
        sim.core_runner[0] = (0, 1_000_000);
        sim.processes[1].state.core = 0;
        sim.queue_woken(0, 1, Resume::Issue);
        assert_eq!(
            attempt(&mut sim, 1, now),
            Attempt::Unbalanced { moved: true }
        );
        assert_eq!(attempt(&mut sim, 0, now), Attempt::Balanced);
    }

    #[test]
    fn over_a_run_every_cpu_bound_process_takes_its_turn_alone_on_a_core() {
        // Two cores take two of the three at a time: one reader alone on a core, two sharing the other in 6 ms
        // slices. Balancing on 2 cores: `min_interval` 2 ms, x 16 while busy = 32 ms; the lone reader's core moves
        // the other core's waiting reader to itself on every second attempt, 64 ms apart, so in 1 s the lone
        // place changes hands ~15 times: the three do 14.7 / 16.2 / 17.4 K I/Os (1.18x apart). Without balancing
        // the first lone reader keeps its core: 24.1 K against 12.1 K each for the other two (1.99x).
        let c = three_cpu_bound_readers(1_000_000_000);
        let per_process = |balance: bool| {
            let mut sim = Simulation::new(&c).unwrap();
            if !balance {
                sim.balancer = Balancer::new(2, false);
            }
            let r = sim.run(&mut |_| true).unwrap();
            let ios: Vec<u64> = r.jobs[0].processes.iter().map(|p| p.read.ios).collect();
            let (min, max) = (*ios.iter().min().unwrap(), *ios.iter().max().unwrap());
            (max as f64 / min as f64, ios.iter().sum::<u64>())
        };
        let (spread_alone, total_alone) = per_process(false);
        assert!(spread_alone > 1.8, "{spread_alone}");
        let (spread, total) = per_process(true);
        assert!(spread < 1.25, "{spread}");
        // The cores were busy throughout either way: moving processes costs no throughput.
        assert!(
            total as f64 > 0.98 * total_alone as f64,
            "{total} {total_alone}"
        );
    }
}
