//! The host: CPU cores that run the I/O paths of processes, and locks whose waiters spin.
//!
//! A core runs one piece of work at a time, in the order the work was asked for (no preemption). Work is booked
//! when it becomes runnable: `run` returns when it ends. Switching a core to another process costs a context switch;
//! a process woken from sleep pays the sleep/wake path. Busy time is counted only inside the measurement window.

pub struct Core {
    pub free_at_ns: u64,
    last_process: u32,
    pub busy_ns: u64,
    pub lock_ns: u64,
}

/// Per-process CPU accounting, as fio reports it.
#[derive(Debug, Clone, Default)]
pub struct CpuAccount {
    pub cpu_ns: u64,
    pub context_switches: u64,
}

pub struct Host {
    pub cores: Vec<Core>,
    pub context_switch_ns: u64,
    window_start_ns: u64,
    window_end_ns: u64,
}

/// Overlap of [start, end) with [window_start, window_end).
#[inline]
fn overlap(start: u64, end: u64, window_start: u64, window_end: u64) -> u64 {
    end.min(window_end).saturating_sub(start.max(window_start))
}

impl Host {
    pub fn new(cores: u32, context_switch_ns: u64) -> Self {
        Self {
            cores: (0..cores)
                .map(|_| Core {
                    free_at_ns: 0,
                    last_process: u32::MAX,
                    busy_ns: 0,
                    lock_ns: 0,
                })
                .collect(),
            context_switch_ns,
            window_start_ns: 0,
            window_end_ns: u64::MAX,
        }
    }

    pub fn set_window(&mut self, start_ns: u64, end_ns: u64) {
        self.window_start_ns = start_ns;
        self.window_end_ns = end_ns;
    }

    /// Book `work_ns` of CPU for `process` on `core`, runnable from `at_ns`. Returns (start, end) of the work.
    #[inline]
    pub fn run(
        &mut self,
        core: u32,
        process: u32,
        at_ns: u64,
        work_ns: u64,
        account: &mut CpuAccount,
    ) -> (u64, u64) {
        let window = (self.window_start_ns, self.window_end_ns);
        let c = &mut self.cores[core as usize];
        let start = at_ns.max(c.free_at_ns);
        let mut cost = work_ns;
        if c.last_process != process {
            if c.last_process != u32::MAX {
                cost += self.context_switch_ns;
                account.context_switches += 1;
            }
            c.last_process = process;
        }
        let end = start + cost;
        c.free_at_ns = end;
        let counted = overlap(start, end, window.0, window.1);
        c.busy_ns += counted;
        account.cpu_ns += counted;
        (start, end)
    }

    /// Extend the work that just ran on `core` by `extra_ns` spent on a lock (spinning or holding).
    #[inline]
    pub fn extend_for_lock(&mut self, core: u32, extra_ns: u64, account: &mut CpuAccount) -> u64 {
        let window = (self.window_start_ns, self.window_end_ns);
        let c = &mut self.cores[core as usize];
        let start = c.free_at_ns;
        c.free_at_ns += extra_ns;
        let counted = overlap(start, c.free_at_ns, window.0, window.1);
        c.busy_ns += counted;
        c.lock_ns += counted;
        account.cpu_ns += counted;
        c.free_at_ns
    }

    /// Is the core idle at `at_ns` (a process waiting for I/O on it has gone to sleep)?
    #[inline]
    pub fn idle_at(&self, core: u32, at_ns: u64) -> bool {
        self.cores[core as usize].free_at_ns <= at_ns
    }

    /// Of the allowed cores, the one that can run new work soonest (a minimal run-queue model for unpinned
    /// processes); ties go to `preferred`, then to the lowest index.
    pub fn least_loaded(&self, allowed: &[u32], preferred: u32, at_ns: u64) -> u32 {
        let ready = |core: u32| self.cores[core as usize].free_at_ns.max(at_ns);
        let mut best = preferred;
        let mut best_ready = ready(preferred);
        for &core in allowed {
            let r = ready(core);
            if r < best_ready {
                best = core;
                best_ready = r;
            }
        }
        best
    }
}

/// A spinlock: one holder at a time; a CPU that finds it held spins (burning CPU) until it is free.
///
/// Acquisitions are booked in the order the simulation asks for them, which is time order because callers only
/// acquire at the current event time.
#[derive(Debug, Default, Clone)]
pub struct SpinLock {
    free_at_ns: u64,
    pub acquisitions: u64,
    pub contended: u64,
    pub spin_ns: u64,
}

impl SpinLock {
    /// Take the lock at `at_ns` and hold it for `hold_ns`. Returns (spin_ns, release_ns).
    #[inline]
    pub fn acquire(&mut self, at_ns: u64, hold_ns: u64) -> (u64, u64) {
        let spin = self.free_at_ns.saturating_sub(at_ns);
        self.acquisitions += 1;
        if spin > 0 {
            self.contended += 1;
            self.spin_ns += spin;
        }
        self.free_at_ns = at_ns + spin + hold_ns;
        (spin, self.free_at_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_on_one_core_runs_back_to_back_and_pays_for_switching_processes() {
        let mut host = Host::new(1, 1_000);
        let (mut a, mut b) = (CpuAccount::default(), CpuAccount::default());
        assert_eq!(host.run(0, 1, 0, 2_000, &mut a), (0, 2_000));
        assert_eq!(
            host.run(0, 1, 500, 2_000, &mut a),
            (2_000, 4_000),
            "queued behind the first, same process"
        );
        assert_eq!(
            host.run(0, 2, 10_000, 2_000, &mut b),
            (10_000, 13_000),
            "a switch to another process"
        );
        assert_eq!((a.context_switches, b.context_switches), (0, 1));
        assert_eq!(host.cores[0].busy_ns, 7_000);
    }

    #[test]
    fn busy_time_counts_only_inside_the_window() {
        let mut host = Host::new(1, 0);
        host.set_window(1_000, 3_000);
        let mut a = CpuAccount::default();
        host.run(0, 1, 0, 2_000, &mut a);
        host.run(0, 1, 2_500, 2_000, &mut a);
        assert_eq!(host.cores[0].busy_ns, 1_000 + 500);
        assert_eq!(a.cpu_ns, 1_500);
    }

    #[test]
    fn a_contended_lock_makes_later_takers_spin() {
        let mut lock = SpinLock::default();
        assert_eq!(lock.acquire(0, 1_000), (0, 1_000));
        assert_eq!(
            lock.acquire(400, 1_000),
            (600, 2_000),
            "spins until the holder releases at 1000"
        );
        assert_eq!(lock.acquire(5_000, 1_000), (0, 6_000));
        assert_eq!(
            (lock.acquisitions, lock.contended, lock.spin_ns),
            (3, 1, 600)
        );
    }

    #[test]
    fn unpinned_work_goes_to_the_least_loaded_core() {
        let mut host = Host::new(3, 0);
        let mut a = CpuAccount::default();
        host.run(0, 1, 0, 5_000, &mut a);
        host.run(1, 1, 0, 1_000, &mut a);
        assert_eq!(host.least_loaded(&[0, 1, 2], 0, 0), 2);
        assert_eq!(host.least_loaded(&[0, 1], 0, 0), 1);
        assert_eq!(
            host.least_loaded(&[0, 1], 1, 6_000),
            1,
            "all idle: stay on the preferred core"
        );
    }
}
