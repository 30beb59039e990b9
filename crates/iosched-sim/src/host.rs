//! The host: CPU cores that run the I/O paths of processes, and locks whose waiters spin.
//!
//! A core runs one piece of work at a time, in the order the work was asked for (no preemption). Work is booked
//! when it becomes runnable: `run` returns when it ends. Switching a core to another process costs a context switch;
//! a process woken from sleep pays the sleep/wake path. Busy time is counted only inside the measurement window.
//!
//! Where unpinned processes run follows what Linux's scheduler (CFS, kernel/sched/fair.c) does in effect, reduced
//! to what this model has (no run queues, no load tracking, one cache domain):
//! - at fork (`ForkPlacement`): the allowed core with the fewest processes so far, ties round-robin;
//! - a running process stays on its core (the simulation asks `Host::wake_core` only when it was asleep);
//! - on wake-up (`Host::wake_core`, `select_idle_sibling`): its previous core if idle, else the next idle allowed
//!   core in circular order after it, else (where Linux would queue it and let load balancing move it later) the
//!   allowed core that frees soonest.
//!
//! Not modelled: `wake_affine` (the waker's CPU as the target: for an I/O completion the interrupt arrives on the
//! submitting CPU, usually the previous one anyway), `recent_used_cpu`, SMT siblings and several cache domains,
//! and the scan limit of `select_idle_cpu`. Load balancing of queued work is the simulation's (sim/balance.rs).

use std::collections::VecDeque;

pub struct Core {
    pub free_at_ns: u64,
    /// Whose work was booked here last, a kernel thread's included.
    last_process: u32,
    /// The user process whose address space (and FPU registers) the core holds: the last one that ran here. A
    /// kernel thread borrows them (`context_switch` gives it the previous `active_mm`: lazy TLB).
    mm_owner: u32,
    /// Processes switched in on this core so far (`Host::refill_ns`).
    switch_ins: u64,
    pub busy_ns: u64,
    pub lock_ns: u64,
}

impl Core {
    /// Count the work over [`start_ns`, `end_ns`) that falls in the measurement `window` as this core's busy time
    /// and as CPU time of `account` (the process or kworker it ran for). Returns the time counted.
    #[inline]
    fn count_busy(
        &mut self,
        window: (u64, u64),
        start_ns: u64,
        end_ns: u64,
        account: &mut CpuAccount,
    ) -> u64 {
        let counted = overlap(start_ns, end_ns, window.0, window.1);
        self.busy_ns += counted;
        account.cpu_ns += counted;
        counted
    }
}

/// Per-process CPU accounting, as fio reports it.
#[derive(Debug, Clone, Default)]
pub struct CpuAccount {
    pub cpu_ns: u64,
    pub context_switches: u64,
}

/// The cores' private caches and a process's state in them (`HostConfig::core_cache_bytes`, `process_cache_bytes`,
/// `cache_refill_ns`; any of them 0: off).
#[derive(Debug, Clone, Copy, Default)]
pub struct CacheFootprint {
    pub core_cache_bytes: u64,
    pub process_cache_bytes: u64,
    pub refill_ns: u64,
}

pub struct Host {
    pub cores: Vec<Core>,
    pub context_switch_ns: u64,
    cache: CacheFootprint,
    /// Per tracked process (`price_switch_ins`; empty when the mechanism is off): the core it was last switched in
    /// on and that core's `switch_ins` then (u32::MAX: never).
    last_switch_in: Vec<(u32, u64)>,
    /// Ids from here on are kernel threads (`price_switch_ins`; every id is a user process until it is called).
    user_processes: u32,
    /// `HostConfig::package_idle_wake_ns` and `package_idle_ns`: the extra cost of a wake-up into an idle package.
    pub package_idle_wake_ns: u64,
    pub package_idle_ns: u64,
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
                    mm_owner: u32::MAX,
                    switch_ins: 0,
                    busy_ns: 0,
                    lock_ns: 0,
                })
                .collect(),
            context_switch_ns,
            cache: CacheFootprint::default(),
            last_switch_in: Vec::new(),
            user_processes: u32::MAX,
            package_idle_wake_ns: 0,
            package_idle_ns: 0,
            window_start_ns: 0,
            window_end_ns: u64::MAX,
        }
    }

    /// The extra CPU time of a wake-up at `at_ns`: `package_idle_wake_ns` if no core has had work booked during the
    /// `package_idle_ns` before it (the whole package idle that long), else 0. Every core's booked work ends at its
    /// `free_at_ns`, so one pass over the cores tells; a core with work booked past `at_ns` is busy.
    #[inline]
    pub fn package_idle_extra_ns(&self, at_ns: u64) -> u64 {
        if self.package_idle_wake_ns == 0 {
            return 0;
        }
        let idle_since = at_ns.saturating_sub(self.package_idle_ns);
        if self.cores.iter().all(|c| c.free_at_ns <= idle_since) {
            self.package_idle_wake_ns
        } else {
            0
        }
    }

    pub fn set_window(&mut self, start_ns: u64, end_ns: u64) {
        self.window_start_ns = start_ns;
        self.window_end_ns = end_ns;
    }

    /// Book `work_ns` of CPU for `process` on `core`, runnable from `at_ns`. Returns (start, end) of the work.
    ///
    /// Switching to another process costs `context_switch_ns` and a cache refill, paid by the process switched in.
    /// A kernel thread (an id from `user_processes` on, such as the kblockd worker) runs on the address space of the
    /// user process before it, so when that process comes back the core still holds its page tables, TLB entries
    /// and FPU registers (Linux 6.3 `context_switch`: a thread without `mm` borrows `active_mm`; `switch_mm_irqs_off`
    /// of the same mm and `switch_fpu_finish` with `fpregs_state_valid` reload nothing): a process → kernel thread →
    /// process round trip costs one switch, the kernel thread's, not two. Simplification: the kernel thread's switch
    /// costs a full `context_switch_ns`, and the process's way back in none.
    #[inline]
    pub fn run(
        &mut self,
        core: u32,
        process: u32,
        at_ns: u64,
        work_ns: u64,
        account: &mut CpuAccount,
    ) -> (u64, u64) {
        let switch_in = self.counts_switch_in(core, process);
        let c = &mut self.cores[core as usize];
        let mut cost = work_ns;
        if c.last_process != process {
            let kernel_thread = process >= self.user_processes;
            let back_after_kernel_thread = !kernel_thread && c.mm_owner == process;
            if switch_in {
                cost += self.context_switch_ns;
                account.context_switches += 1;
            }
            c.last_process = process;
            if !kernel_thread {
                c.mm_owner = process;
            }
            if !back_after_kernel_thread {
                cost += self.refill_ns(core, process);
            }
        }
        self.run_in_interrupt(core, at_ns, cost, account)
    }

    /// Price switch-ins for the user processes 0..`user_processes`: the simulation's kernel threads, such as the
    /// kblockd worker, have ids beyond them (see `run`). Refills follow `cache` for the user processes only; with
    /// any of its three values 0 nothing is tracked, so no switch-in pays a refill.
    pub fn price_switch_ins(&mut self, cache: CacheFootprint, user_processes: usize) {
        let on = cache.refill_ns > 0 && cache.process_cache_bytes > 0 && cache.core_cache_bytes > 0;
        self.cache = cache;
        self.user_processes = user_processes as u32;
        self.last_switch_in = if on {
            vec![(u32::MAX, 0); user_processes]
        } else {
            Vec::new()
        };
    }

    /// Count `process` switched in on `core` and return what refilling its state in the core's private cache
    /// costs (`HostConfig::core_cache_bytes`): the share of its state evicted since it was last switched in there,
    /// estimated as the share of the states switched in since (its own included) that the cache cannot hold, or
    /// all of it when it last ran on another core (or never ran). Simplifications: each switch-in counts as a
    /// state of its own (a process switched in twice since counts twice); interrupt work and the kblockd worker's
    /// state evict nothing, and the worker pays no refill.
    fn refill_ns(&mut self, core: u32, process: u32) -> u64 {
        let c = &mut self.cores[core as usize];
        c.switch_ins += 1;
        let switch_ins = c.switch_ins;
        let cache = self.cache;
        let Some(last) = self.last_switch_in.get_mut(process as usize) else {
            return 0; // untracked: the mechanism is off, or a kernel thread
        };
        let (last_core, then) = std::mem::replace(last, (core, switch_ins));
        if last_core != core {
            return cache.refill_ns;
        }
        let states_bytes = (switch_ins - then) * cache.process_cache_bytes;
        let resident = (cache.core_cache_bytes as f64 / states_bytes as f64).min(1.0);
        (cache.refill_ns as f64 * (1.0 - resident)).round() as u64
    }

    /// Book `work_ns` on `core` from `at_ns` (after the work booked there) as interrupt work: it runs in whatever
    /// context the core is in, so it costs no context switch and leaves whose work the core ran last unchanged.
    /// Returns (start, end) of the work. (`run` is this plus the switch to its process.)
    #[inline]
    pub fn run_in_interrupt(
        &mut self,
        core: u32,
        at_ns: u64,
        work_ns: u64,
        account: &mut CpuAccount,
    ) -> (u64, u64) {
        let window = (self.window_start_ns, self.window_end_ns);
        let c = &mut self.cores[core as usize];
        let start = at_ns.max(c.free_at_ns);
        let end = start + work_ns;
        c.free_at_ns = end;
        c.count_busy(window, start, end, account);
        (start, end)
    }

    /// Run `work_ns` on `core` from `at_ns` at once, ahead of the work booked there (CFS's wake-up preemption):
    /// the core's booked backlog ends that much later. Waking (`switch_in`), it costs two context switches more
    /// (in, and back to the preempted process); work that follows on directly does not. Simplification: the events
    /// of work already booked keep their times, so for those few microseconds the core does two things; its busy
    /// time and capacity are right. Returns (start, end) of the work.
    pub fn run_preempting(
        &mut self,
        core: u32,
        process: u32,
        at_ns: u64,
        work_ns: u64,
        switch_in: bool,
        account: &mut CpuAccount,
    ) -> (u64, u64) {
        let refill = if switch_in {
            self.refill_ns(core, process)
        } else {
            0
        };
        let window = (self.window_start_ns, self.window_end_ns);
        let c = &mut self.cores[core as usize];
        let switches = if switch_in { 2 } else { 0 };
        let cost = work_ns + switches * self.context_switch_ns + refill;
        account.context_switches += switches / 2;
        let (start, end) = (at_ns, at_ns + cost);
        c.free_at_ns = c.free_at_ns.max(at_ns) + cost;
        c.count_busy(window, start, end, account);
        (start, end)
    }

    /// Extend the work that just ran on `core` by `lock_ns` in lock functions (spinning, and moving the lock to
    /// this core) and then `held_ns` of work under the lock. Returns when the core is free again.
    ///
    /// Only `lock_ns` counts as lock time: it is what a profile attributes to the spinlock functions
    /// (native_queued_spin_lock_slowpath and friends), as seed 000's Fig. 8 counts it.
    #[inline]
    pub fn extend_for_lock(
        &mut self,
        core: u32,
        lock_ns: u64,
        held_ns: u64,
        account: &mut CpuAccount,
    ) -> u64 {
        let window = (self.window_start_ns, self.window_end_ns);
        let c = &mut self.cores[core as usize];
        let start = c.free_at_ns;
        let lock_end = start + lock_ns;
        c.free_at_ns = lock_end + held_ns;
        c.count_busy(window, start, c.free_at_ns, account);
        c.lock_ns += overlap(start, lock_end, window.0, window.1);
        c.free_at_ns
    }

    /// Count `lock_ns` of the work that just ran on `core` from `start_ns` as lock time without adding any: the
    /// uncontended lock and unlock calls inside that work (`HostConfig::uncontended_lock_ns`), which a profile
    /// attributes to the lock functions although nobody waits.
    #[inline]
    pub fn count_lock_calls(&mut self, core: u32, start_ns: u64, lock_ns: u64) {
        let window = (self.window_start_ns, self.window_end_ns);
        self.cores[core as usize].lock_ns +=
            overlap(start_ns, start_ns + lock_ns, window.0, window.1);
    }

    /// Work booked on `core` from its lock section on ends `delay_ns` later: a request made earlier in time pushed
    /// its lock holding back (`SpinLock::acquire`'s `displaced`). The delay is spent spinning.
    pub fn delay_for_lock(&mut self, core: u32, delay_ns: u64, account: &mut CpuAccount) {
        let window = (self.window_start_ns, self.window_end_ns);
        let c = &mut self.cores[core as usize];
        let start = c.free_at_ns;
        c.free_at_ns += delay_ns;
        c.lock_ns += c.count_busy(window, start, c.free_at_ns, account);
    }

    /// Is the core idle at `at_ns` (a process waiting for I/O on it has gone to sleep)?
    #[inline]
    pub fn idle_at(&self, core: u32, at_ns: u64) -> bool {
        self.cores[core as usize].free_at_ns <= at_ns
    }

    /// Whether booking `process`'s work on `core` now pays and counts a context switch (`run`): another user
    /// process ran there last, or a kernel thread on another process's address space.
    pub fn counts_switch_in(&self, core: u32, process: u32) -> bool {
        let c = &self.cores[core as usize];
        c.last_process != process
            && c.last_process != u32::MAX
            && (process >= self.user_processes || c.mm_owner != process)
    }

    /// Whether the work booked last on `core` is `process`'s (its own, such as a completion's path, ends the
    /// backlog there).
    pub fn booked_last_by(&self, core: u32, process: u32) -> bool {
        self.cores[core as usize].last_process == process
    }

    /// Where an unpinned process runs its next piece of work, given the core it ran on last (`previous`):
    /// Linux's wake-up placement (kernel/sched/fair.c `select_idle_sibling`) reduced to what the model has. Its
    /// previous core if idle; else the first idle core of `allowed` after `previous`, in circular order (the
    /// kernel's `select_idle_cpu` scans the LLC from the target on, wrapping around, so no core number is
    /// favoured); else, where the kernel would queue the task and let load balancing move it, the core that frees
    /// soonest (ties: `previous`, then the same circular order). `allowed` must be sorted and contain `previous`.
    #[inline]
    pub fn wake_core(&self, allowed: &[u32], previous: u32, at_ns: u64) -> u32 {
        let (mut best, mut best_free_at) = (previous, u64::MAX);
        for core in wake_order(allowed, previous) {
            let free_at = self.cores[core as usize].free_at_ns;
            if free_at <= at_ns {
                return core;
            }
            if free_at < best_free_at {
                (best, best_free_at) = (core, free_at);
            }
        }
        best
    }
}

/// The order in which a wake-up looks at `allowed` cores (sorted, containing `previous`): `previous` first, then
/// the cores after it in circular order (the kernel's `select_idle_cpu` scans from the target on, wrapping around).
/// `previous` comes round again at the end.
#[inline]
pub fn wake_order(allowed: &[u32], previous: u32) -> impl Iterator<Item = u32> + Clone + '_ {
    let (low, high) = allowed.split_at(allowed.partition_point(|&core| core <= previous));
    std::iter::once(previous)
        .chain(high.iter().copied())
        .chain(low.iter().copied())
}

/// Where forked processes start: Linux places a new task on the idlest allowed CPU (kernel/sched/fair.c
/// `find_idlest_cpu` at fork), so the processes fio forks for its jobs end up spread over their allowed cores, each
/// on the core with the fewest processes so far. Ties go round-robin (the first such core at or after the one
/// after the last placement), so that jobs' processes do not all start on their lowest allowed cores.
#[derive(Debug, Clone)]
pub struct ForkPlacement {
    placed: Vec<u32>,
    next: u32,
}

impl ForkPlacement {
    pub fn new(cores: u32) -> Self {
        Self {
            placed: vec![0; cores as usize],
            next: 0,
        }
    }

    /// Count a pinned process on its core (it keeps its core; the others avoid it where they can).
    pub fn pin(&mut self, core: u32) {
        self.placed[core as usize] += 1;
    }

    /// The starting core of a process allowed on `allowed` (sorted, not empty).
    pub fn place(&mut self, allowed: &[u32]) -> u32 {
        let after = allowed.partition_point(|&core| core < self.next);
        let (low, high) = allowed.split_at(after);
        let mut best = high
            .first()
            .or(low.first())
            .copied()
            .expect("allowed cores");
        for &core in high.iter().chain(low) {
            if self.placed[core as usize] < self.placed[best as usize] {
                best = core;
            }
        }
        self.placed[best as usize] += 1;
        self.next = best + 1;
        best
    }
}

/// Cache lines a hand-off of a scheduler's lock moves (`HostConfig::lock_handoff_ns` prices them together, ~6 in
/// every host preset's provenance): the lock word, and the scheduler state the hook touches under it (list and tree
/// heads, counters, the neighbouring request). A profile charges the lock word's miss to the lock functions (what
/// seed 000's Fig. 8 counts) and the others to the hook that takes them; a wait-queue lock, taken and released at
/// once around a list on its own line, is all lock-function time.
pub const HANDOFF_CACHE_LINES: u64 = 6;

/// Cache lines a hand-off of a wait queue's lock moves: the head's line (its spinlock and list head share a
/// `wait_queue_head`, 24 bytes) and the entry linked or unlinked under it (a waiter's `wait_queue_entry`, in the
/// waiting hardware queue's own data). Priced per line as `HANDOFF_CACHE_LINES`.
pub const WAIT_QUEUE_HANDOFF_LINES: u64 = 2;

/// A spinlock: one holder at a time; a CPU that finds it held spins (burning CPU) until it is free.
///
/// Taking the lock on a different core than its last holder costs a hand-off (`handoff_ns`): the lock word and
/// the data it protects migrate between the cores' caches, and the lock stays busy meanwhile. That is why a
/// contended device-wide lock serves fewer requests per second than its uncontended hold time suggests. When a
/// caller had to spin, each of its `acquisitions` for this request is taken to be a separate hand-off (other
/// cores got the lock in between); without contention only a change of core costs one.
///
/// The lock is causal: it serves requests in the order of the times they are made (a queued spinlock's waiters
/// queue in arrival order), not in the order the simulation books them. A core that is busy when its scheduler
/// work becomes runnable books that work, and so its request for the lock, at the later time its core reaches it;
/// meanwhile other cores ask for the lock at earlier times. So the lock keeps a calendar of its holdings that are
/// not over yet, in request order. A request at `at_ns` goes after every holding requested at or before `at_ns`:
/// it is granted when the last of them releases, or at once if the lock is free then, and never before it is made.
/// Holdings booked earlier but requested later than `at_ns` come after it: each is granted anew when its
/// predecessor releases, and any that ends later than booked is reported (`displaced`) so that the caller extends
/// its holder's core by the delay (the waiting it did not know about when it was booked).
#[derive(Debug, Clone)]
pub struct SpinLock {
    /// Holdings not released by the latest `now_ns` seen, in request order (which is also grant order).
    holdings: VecDeque<Holding>,
    /// The holding released last among those dropped from `holdings`: its release and its core.
    floor_release_ns: u64,
    floor_core: u32,
    latest_request_ns: u64,
    pub handoff_ns: u64,
    pub acquisitions: u64,
    pub contended: u64,
    pub spin_ns: u64,
    pub handoffs: u64,
    /// Requests made at an earlier time than one booked before them, and the delay they caused to such holdings.
    pub out_of_order: u64,
    pub displaced_ns: u64,
    /// Holdings the last `acquire` delayed (read and clear by the caller).
    pub displaced: Vec<Displaced>,
}

#[derive(Debug, Clone, Copy)]
struct Holding {
    request_ns: u64,
    release_ns: u64,
    core: u32,
    owner: u32,
    acquisitions: u32,
    hold_ns: u64,
}

/// A holding that a request made earlier in time pushed back: its core (and the process it runs for) is busy
/// `delay_ns` longer than booked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Displaced {
    pub core: u32,
    pub owner: u32,
    pub delay_ns: u64,
}

impl Default for SpinLock {
    fn default() -> Self {
        Self::new(0)
    }
}

/// What one booking of a lock cost the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockBooking {
    /// Waiting for the previous holder.
    pub spin_ns: u64,
    /// Moving the lock and its data to this core.
    pub handoff_ns: u64,
    /// When the caller releases the lock (and its core is free again).
    pub release_ns: u64,
}

const NO_CORE: u32 = u32::MAX;

impl SpinLock {
    pub fn new(handoff_ns: u64) -> Self {
        Self {
            holdings: VecDeque::new(),
            floor_release_ns: 0,
            floor_core: NO_CORE,
            latest_request_ns: 0,
            handoff_ns,
            acquisitions: 0,
            contended: 0,
            spin_ns: 0,
            handoffs: 0,
            out_of_order: 0,
            displaced_ns: 0,
            displaced: Vec::new(),
        }
    }

    /// When a request made at `at_ns` by `core` after a holder (`previous_core`, releasing at
    /// `previous_release_ns`) is granted, how many hand-offs it pays, and when it releases.
    #[inline]
    fn grant(
        &self,
        previous_core: u32,
        previous_release_ns: u64,
        core: u32,
        at_ns: u64,
        acquisitions: u32,
        hold_ns: u64,
    ) -> (u64, u64, u64) {
        let granted = at_ns.max(previous_release_ns);
        let handoffs = if granted > at_ns {
            acquisitions as u64
        } else if previous_core != core && previous_core != NO_CORE {
            1
        } else {
            0
        };
        (
            granted,
            handoffs,
            granted + handoffs * self.handoff_ns + hold_ns,
        )
    }

    /// Take the lock `acquisitions` times back to back from `core` for `owner` (a process), holding it `hold_ns` in
    /// all, asking at `at_ns` (no earlier than `now_ns`, the simulation's current time). Holdings this pushes back
    /// are left in `displaced`.
    #[inline]
    pub fn acquire(
        &mut self,
        core: u32,
        owner: u32,
        now_ns: u64,
        at_ns: u64,
        hold_ns: u64,
        acquisitions: u32,
    ) -> LockBooking {
        debug_assert!(at_ns >= now_ns);
        self.displaced.clear();
        // Holdings released by now can no longer be affected: a request is never made in the past.
        while let Some(first) = self.holdings.front() {
            if first.release_ns > now_ns {
                break;
            }
            (self.floor_release_ns, self.floor_core) = (first.release_ns, first.core);
            self.holdings.pop_front();
        }
        if at_ns < self.latest_request_ns {
            self.out_of_order += 1;
        }
        self.latest_request_ns = self.latest_request_ns.max(at_ns);
        let position = self.holdings.partition_point(|h| h.request_ns <= at_ns);
        let (previous_core, previous_release) = match position {
            0 => (self.floor_core, self.floor_release_ns),
            _ => {
                let p = &self.holdings[position - 1];
                (p.core, p.release_ns)
            }
        };
        let (granted, handoffs, release) = self.grant(
            previous_core,
            previous_release,
            core,
            at_ns,
            acquisitions,
            hold_ns,
        );
        let spin = granted - at_ns;
        self.acquisitions += acquisitions as u64;
        self.contended += (spin > 0) as u64;
        self.spin_ns += spin;
        self.handoffs += handoffs;
        let holding = Holding {
            request_ns: at_ns,
            release_ns: release,
            core,
            owner,
            acquisitions,
            hold_ns,
        };
        if position == self.holdings.len() {
            // Requests mostly come in time order: appending skips VecDeque::insert's general shifting (a third of
            // the lock's bookings, ~3% of the Kyber 1-SSD bench's instructions under callgrind); the loop below then
            // has nothing to push back.
            self.holdings.push_back(holding);
        } else {
            self.holdings.insert(position, holding);
        }
        // Those requested later but booked earlier come after this one now.
        let (mut previous_core, mut previous_release) = (core, release);
        for i in position + 1..self.holdings.len() {
            let h = self.holdings[i];
            let (_, _, new_release) = self.grant(
                previous_core,
                previous_release,
                h.core,
                h.request_ns,
                h.acquisitions,
                h.hold_ns,
            );
            if new_release <= h.release_ns {
                break; // granted no later than booked: it and those after it stand
            }
            let delay_ns = new_release - h.release_ns;
            self.holdings[i].release_ns = new_release;
            self.spin_ns += delay_ns;
            self.displaced_ns += delay_ns;
            self.displaced.push(Displaced {
                core: h.core,
                owner: h.owner,
                delay_ns,
            });
            (previous_core, previous_release) = (h.core, new_release);
        }
        LockBooking {
            spin_ns: spin,
            handoff_ns: handoffs * self.handoff_ns,
            release_ns: release,
        }
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

    /// A completion hook of process 2 arrives while process 1 runs (context switch 1 us): in the interrupt it takes
    /// its 500 ns after 1's work (2,000 -> 2,500) with no switch, and 1's next work follows at once. Booked as 2's
    /// own work it would have cost two switches: one to 2 and one back to 1 (2,000 -> 5,500).
    #[test]
    fn interrupt_work_costs_no_context_switch() {
        let mut host = Host::new(1, 1_000);
        let (mut a, mut b) = (CpuAccount::default(), CpuAccount::default());
        host.run(0, 1, 0, 2_000, &mut a);
        assert_eq!(host.run_in_interrupt(0, 1_000, 500, &mut b), (2_000, 2_500));
        assert_eq!(
            host.run(0, 1, 2_500, 1_000, &mut a),
            (2_500, 3_500),
            "1 goes on, no switch back"
        );
        assert_eq!(
            (a.context_switches, b.context_switches, b.cpu_ns),
            (0, 0, 500)
        );
        // Negative control: the same hook as process 2's own work.
        let mut host = Host::new(1, 1_000);
        let (mut a, mut b) = (CpuAccount::default(), CpuAccount::default());
        host.run(0, 1, 0, 2_000, &mut a);
        assert_eq!(host.run(0, 2, 1_000, 500, &mut b), (2_000, 3_500));
        assert_eq!(host.run(0, 1, 3_500, 1_000, &mut a), (3_500, 5_500));
        assert_eq!((a.context_switches, b.context_switches), (1, 1));
    }

    /// A kernel thread borrows the address space of the process before it, so that process comes back without a
    /// switch of its own. Two user processes (ids 0 and 1), a kernel thread (id 7), 1,000 ns switches, one core:
    /// process 0 runs 0 -> 2,000; the kernel thread switches in and runs 500 (2,000 -> 3,500, its one switch);
    /// process 0 goes on at once, 1,000 (3,500 -> 4,500): the round trip cost one switch, not two.
    #[test]
    fn a_process_comes_back_after_a_kernel_thread_without_a_switch_of_its_own() {
        let mut host = Host::new(1, 1_000);
        host.price_switch_ins(CacheFootprint::default(), 2);
        let (mut process, mut thread) = (CpuAccount::default(), CpuAccount::default());
        host.run(0, 0, 0, 2_000, &mut process);
        assert_eq!(host.run(0, 7, 2_000, 500, &mut thread), (2_000, 3_500));
        assert_eq!(host.run(0, 0, 3_500, 1_000, &mut process), (3_500, 4_500));
        assert_eq!((process.context_switches, thread.context_switches), (0, 1));
        // Negative control: user process 1 in the kernel thread's place loaded its own address space, so 0 pays
        // its way back in (3,500 -> 5,500).
        let mut host = Host::new(1, 1_000);
        host.price_switch_ins(CacheFootprint::default(), 2);
        let (mut process, mut other) = (CpuAccount::default(), CpuAccount::default());
        host.run(0, 0, 0, 2_000, &mut process);
        assert_eq!(host.run(0, 1, 2_000, 500, &mut other), (2_000, 3_500));
        assert_eq!(host.run(0, 0, 3_500, 1_000, &mut process), (3_500, 5_500));
        // And a process other than the one whose address space the thread borrowed pays its switch as usual:
        // 0, the thread, then 1 (5,500 -> 5,500 + 1,000 + 1,000).
        host.run(0, 7, 5_500, 0, &mut other);
        assert_eq!(host.run(0, 1, 6_500, 1_000, &mut other), (6_500, 8_500));
    }

    /// A process switched in refills what the states switched in since pushed out of the core's cache. A 1 MiB
    /// cache, 48 KiB states, 2,200 ns to refill a whole one, a 1,000 ns context switch:
    /// - first run on a core: nothing of it there, 2,200 (no switch: the core ran nothing before);
    /// - two processes taking turns: 2 x 48 = 96 KiB since, all of it fits: the switch only, 1,000;
    /// - 32 taking turns: 32 x 48 = 1,536 KiB since, the cache holds 1,024 / 1,536 = 2/3 of each state:
    ///   1,000 + 2,200 / 3 = 1,733;
    /// - on another core than last time: all of it, 2,200 (that core's first work: no switch);
    /// - the core's last process again: no switch, no refill, 0; and with the mechanism off a switch costs 1,000.
    #[test]
    fn a_switch_in_refills_what_the_states_switched_in_since_pushed_out() {
        let cached = |cores| {
            let mut host = Host::new(cores, 1_000);
            let cache = CacheFootprint {
                core_cache_bytes: 1 << 20,
                process_cache_bytes: 48 << 10,
                refill_ns: 2_200,
            };
            host.price_switch_ins(cache, 32);
            host
        };
        let mut acc = CpuAccount::default();
        let mut cost = |host: &mut Host, core: u32, process: u32| {
            let at = host.cores[core as usize].free_at_ns;
            let (start, end) = host.run(core, process, at, 0, &mut acc);
            end - start
        };
        let mut host = cached(2);
        assert_eq!(cost(&mut host, 0, 0), 2_200, "first run: cold");
        assert_eq!(
            cost(&mut host, 0, 1),
            1_000 + 2_200,
            "another's first run: cold"
        );
        assert_eq!(cost(&mut host, 0, 0), 1_000, "two taking turns: 96 KiB fit");
        assert_eq!(cost(&mut host, 0, 1), 1_000, "two taking turns: 96 KiB fit");
        assert_eq!(cost(&mut host, 1, 1), 2_200, "migrated: all of it");
        assert_eq!(
            cost(&mut host, 1, 1),
            0,
            "the core's last process: no switch"
        );
        let mut host = cached(1);
        for p in 0..32 {
            cost(&mut host, 0, p);
        }
        for p in 0..32 {
            assert_eq!(
                cost(&mut host, 0, p),
                1_000 + 733,
                "32 taking turns, process {p}"
            );
        }
        let mut off = Host::new(1, 1_000);
        assert_eq!(cost(&mut off, 0, 0), 0);
        assert_eq!(cost(&mut off, 0, 1), 1_000, "off: the switch only");
        assert_eq!(cost(&mut off, 0, 0), 1_000, "off: the switch only");
        // Any of the three values 0 turns it off too (the hosts of seeds 001-004).
        let mut zero = Host::new(1, 1_000);
        let no_core_cache = CacheFootprint {
            core_cache_bytes: 0,
            process_cache_bytes: 48 << 10,
            refill_ns: 2_200,
        };
        zero.price_switch_ins(no_core_cache, 32);
        assert_eq!(cost(&mut zero, 0, 0), 0, "off: first run is free");
        assert_eq!(cost(&mut zero, 0, 1), 1_000, "off: the switch only");
    }

    /// Two cores, a wake-up into an idle package costing 2,570 ns extra once every core has been idle 20 us (the
    /// Xeon preset's values). Core 0 works 0-5,000; at 30,000 both cores have been idle since 5,000, i.e. 25 us >= 20
    /// us: the wake-up pays. At 20,000 they have been idle only 15 us; and with core 1 busy until 40,000 the package
    /// is not idle at 30,000 either: neither pays (the negative controls).
    #[test]
    fn a_wake_up_pays_extra_only_after_the_whole_package_idled_long_enough() {
        let mut host = Host::new(2, 0);
        host.package_idle_wake_ns = 2_570;
        host.package_idle_ns = 20_000;
        let mut a = CpuAccount::default();
        host.run(0, 1, 0, 5_000, &mut a);
        assert_eq!(host.package_idle_extra_ns(30_000), 2_570, "idle 25 us");
        assert_eq!(
            host.package_idle_extra_ns(25_000),
            2_570,
            "idle exactly 20 us"
        );
        assert_eq!(host.package_idle_extra_ns(20_000), 0, "idle only 15 us");
        host.run(1, 2, 10_000, 30_000, &mut a);
        assert_eq!(
            host.package_idle_extra_ns(30_000),
            0,
            "core 1 busy until 40,000"
        );
        assert_eq!(
            host.package_idle_extra_ns(60_000),
            2_570,
            "both idle since 40,000"
        );
        // Off (every other host preset): never anything.
        host.package_idle_wake_ns = 0;
        assert_eq!(host.package_idle_extra_ns(1_000_000), 0);
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
        let mut lock = SpinLock::new(0);
        let at = |lock: &mut SpinLock, core, t| {
            let b = lock.acquire(core, core, t, t, 1_000, 1);
            (b.spin_ns, b.release_ns)
        };
        assert_eq!(at(&mut lock, 0, 0), (0, 1_000));
        assert_eq!(
            at(&mut lock, 1, 400),
            (600, 2_000),
            "spins until the holder releases at 1000"
        );
        assert_eq!(at(&mut lock, 1, 5_000), (0, 6_000));
        assert_eq!(
            (lock.acquisitions, lock.contended, lock.spin_ns),
            (3, 1, 600)
        );
    }

    #[test]
    fn a_lock_changing_cores_pays_a_hand_off_per_acquisition_under_contention() {
        let mut lock = SpinLock::new(300);
        let first = lock.acquire(0, 0, 0, 0, 1_000, 3);
        assert_eq!(
            (first.handoff_ns, first.release_ns),
            (0, 1_000),
            "first use: nothing to move"
        );
        let same_core = lock.acquire(0, 0, 2_000, 2_000, 1_000, 3);
        assert_eq!(
            same_core.handoff_ns, 0,
            "the lock is still in this core's cache"
        );
        let other_core = lock.acquire(1, 1, 4_000, 4_000, 1_000, 3);
        assert_eq!(
            (other_core.handoff_ns, other_core.release_ns),
            (300, 5_300),
            "uncontended: one move of the lock to core 1"
        );
        let contended = lock.acquire(2, 2, 5_000, 5_000, 1_000, 3);
        assert_eq!(contended.spin_ns, 300);
        assert_eq!(
            (contended.handoff_ns, contended.release_ns),
            (900, 7_200),
            "contended: each of the three acquisitions is a hand-off"
        );
        assert_eq!(lock.handoffs, 4);
    }

    /// Two cores, one lock, hold 1000 ns, no hand-off cost. At time 0 core 0 is busy until 10000, so its request is
    /// booked first but made at 10000; core 1 asks at 2000 (booked second). The lock is idle at 2000: core 1 takes
    /// it at once, without spinning, and releases at 3000; core 0 is granted at 10000 as booked. Neither is
    /// granted before it asked.
    #[test]
    fn a_request_booked_ahead_does_not_hold_an_idle_lock_against_earlier_requests() {
        let mut lock = SpinLock::new(0);
        let ahead = lock.acquire(0, 0, 0, 10_000, 1_000, 1);
        assert_eq!((ahead.spin_ns, ahead.release_ns), (0, 11_000));
        let now = lock.acquire(1, 1, 2_000, 2_000, 1_000, 1);
        assert_eq!(
            (now.spin_ns, now.release_ns),
            (0, 3_000),
            "an idle lock is not spun on"
        );
        assert!(
            lock.displaced.is_empty(),
            "3000 <= 10000: core 0's holding stands"
        );
        assert_eq!((lock.spin_ns, lock.out_of_order), (0, 1));
    }

    /// Requests are served in the order they are made, whatever the order they are booked in. Core 0's request at
    /// 5000 is booked first; core 1's at 4500 second. Core 1 asked first: granted at 4500, release 5500. Core 0
    /// then waits for it: granted at 5500 (spinning 500), release 6500, 500 later than booked, which is reported
    /// so that its core is extended. A third request, core 1 at 6000, comes after both: spins until 6500.
    #[test]
    fn out_of_order_requests_are_served_in_request_time_order() {
        let mut lock = SpinLock::new(0);
        let first_booked = lock.acquire(0, 7, 4_000, 5_000, 1_000, 1);
        assert_eq!(first_booked.release_ns, 6_000);
        let first_made = lock.acquire(1, 8, 4_000, 4_500, 1_000, 1);
        assert_eq!((first_made.spin_ns, first_made.release_ns), (0, 5_500));
        assert_eq!(
            lock.displaced,
            vec![Displaced {
                core: 0,
                owner: 7,
                delay_ns: 500
            }]
        );
        let third = lock.acquire(1, 8, 4_600, 6_000, 1_000, 1);
        assert_eq!((third.spin_ns, third.release_ns), (500, 7_500));
        assert!(lock.displaced.is_empty());
        assert_eq!(lock.spin_ns, 500 + 500);
    }

    /// A request made while the lock is held waits for that holder, and every request later pushes back those
    /// made after it, in chain: holdings at [1000, 2000) (core 0, asked at 1000) and [2200, 3200) (core 1, asked
    /// at 2200, booked ahead); core 2 asks at 1500: it spins until 2000 and releases at 3000, so core 1's holding
    /// starts at 3000 (it spins 800 instead of 0) and ends at 4000, 800 later.
    #[test]
    fn a_request_made_while_the_lock_is_held_waits_for_the_holder_then_goes_before_later_requests()
    {
        let mut lock = SpinLock::new(0);
        lock.acquire(0, 0, 1_000, 1_000, 1_000, 1);
        lock.acquire(1, 1, 1_000, 2_200, 1_000, 1);
        let waiter = lock.acquire(2, 2, 1_500, 1_500, 1_000, 1);
        assert_eq!((waiter.spin_ns, waiter.release_ns), (500, 3_000));
        assert_eq!(
            lock.displaced,
            vec![Displaced {
                core: 1,
                owner: 1,
                delay_ns: 800
            }]
        );
        // Released holdings are forgotten, but the last holder is remembered: core 1 asks again at 5000, on the
        // core that released last, so without a hand-off.
        let later = lock.acquire(1, 1, 5_000, 5_000, 1_000, 1);
        assert_eq!((later.spin_ns, later.release_ns), (0, 6_000));
        assert_eq!(lock.holdings.len(), 1);
    }

    #[test]
    fn a_woken_process_returns_to_its_idle_previous_core() {
        let mut host = Host::new(4, 0);
        let mut a = CpuAccount::default();
        host.run(0, 1, 0, 5_000, &mut a);
        assert_eq!(host.wake_core(&[0, 1, 2, 3], 2, 1_000), 2, "idle: stays");
        assert_eq!(
            host.wake_core(&[0, 1, 2, 3], 0, 6_000),
            0,
            "its core is idle again"
        );
    }

    #[test]
    fn a_woken_process_whose_core_is_busy_takes_the_next_idle_core_in_circular_order() {
        let mut host = Host::new(4, 0);
        let mut a = CpuAccount::default();
        for core in [0, 2] {
            host.run(core, 1, 0, 5_000, &mut a);
        }
        assert_eq!(host.wake_core(&[0, 1, 2, 3], 2, 1_000), 3, "after 2: 3");
        host.run(3, 1, 0, 5_000, &mut a);
        assert_eq!(
            host.wake_core(&[0, 1, 2, 3], 3, 1_000),
            1,
            "after 3, wrapping: 0 is busy, 1 idle"
        );
        assert_eq!(
            host.wake_core(&[0, 2, 3], 3, 1_000),
            3,
            "idle core 1 is not allowed; the allowed ones all free at 5000: it stays"
        );
    }

    #[test]
    fn a_woken_process_with_all_cores_busy_goes_where_work_ends_soonest() {
        let mut host = Host::new(3, 0);
        let mut a = CpuAccount::default();
        host.run(0, 1, 0, 5_000, &mut a);
        host.run(1, 1, 0, 2_000, &mut a);
        host.run(2, 1, 0, 5_000, &mut a);
        assert_eq!(host.wake_core(&[0, 1, 2], 0, 1_000), 1);
        assert_eq!(
            host.wake_core(&[0, 2], 2, 1_000),
            2,
            "a tie keeps the previous core"
        );
    }

    #[test]
    fn forked_processes_spread_one_per_core_then_round_robin() {
        let mut fork = ForkPlacement::new(16);
        let all: Vec<u32> = (0..16).collect();
        // 4 jobs x 4 unpinned processes on 16 cores: one per core.
        let cores: Vec<u32> = (0..16).map(|_| fork.place(&all)).collect();
        assert_eq!(cores, all);
        // 16 more: a second round over the same cores.
        let second: Vec<u32> = (0..16).map(|_| fork.place(&all)).collect();
        assert_eq!(second, all);
    }

    #[test]
    fn forked_processes_avoid_cores_of_pinned_ones_and_respect_their_allowed_cores() {
        let mut fork = ForkPlacement::new(4);
        fork.pin(0);
        fork.pin(1);
        let all = [0, 1, 2, 3];
        assert_eq!(
            (0..4).map(|_| fork.place(&all)).collect::<Vec<_>>(),
            vec![2, 3, 0, 1]
        );
        assert_eq!(fork.place(&[1, 3]), 3, "3 has one process, 1 has two");
        assert_eq!(
            fork.place(&[1, 3]),
            1,
            "both have two: round-robin, after 3 wraps to 1"
        );
    }
}
