//! The Linux version a run models, and every change of a modelled behaviour between the versions the seeds ran
//! (4.15, 4.19, 5.2, 6.3) and current kernels (6.12, 6.18).
//!
//! A behaviour that differs by version selects on [`KernelVersion::has`] with one of the [`Change`]s below, each
//! naming the commit that changed it, as read in the kernel sources of the versions on either side. A version is
//! placed by these changes alone: each behaviour takes the side of its change, so a version the simulator does not
//! model distinctly (5.4, 6.1, 6.6, ...) behaves as the nearest modelled one in everything modelled. The table in
//! docs/simulator.md ("Kernel versions") lists them; a test keeps the two in step.

use std::fmt;

/// A Linux version as "MAJOR.MINOR" (the release as it left mainline) or "MAJOR.MINOR.PATCH" (a stable release of
/// that line, which may carry backports: [`Change::backports`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KernelVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl KernelVersion {
    pub const fn new(major: u32, minor: u32) -> Self {
        Self {
            major,
            minor,
            patch: 0,
        }
    }

    pub const fn stable(major: u32, minor: u32, patch: u32) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }

    /// The newest version whose behaviour the simulator models: what a policy built without a version follows.
    pub const NEWEST: Self = Self::new(6, 18);

    /// "6.3" → 6.3, "6.12.117" → 6.12.117: two or three decimal numbers.
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "expected a kernel version \"MAJOR.MINOR\" or \"MAJOR.MINOR.PATCH\" such as \"6.3\" or \
                 \"6.12.117\", got {text:?}"
            )
        };
        let number = |s: &str| -> Result<u32, String> {
            if s.is_empty() || s.len() > 3 || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            s.parse().map_err(|_| bad())
        };
        let parts: Vec<&str> = text.split('.').collect();
        let version = match parts[..] {
            [major, minor] => Self::new(number(major)?, number(minor)?),
            [major, minor, patch] => Self::stable(number(major)?, number(minor)?, number(patch)?),
            _ => return Err(bad()),
        };
        if version.major < 2 {
            return Err(bad());
        }
        Ok(version)
    }

    /// Whether this version has `change`: it is at or after the version that brought it, or a stable release of
    /// a line the change was backported to, at or after the backport.
    pub fn has(self, change: &Change) -> bool {
        self >= change.since
            || change
                .backports
                .iter()
                .any(|b| b.major == self.major && b.minor == self.minor && self.patch >= b.patch)
    }
}

impl Default for KernelVersion {
    fn default() -> Self {
        Self::NEWEST
    }
}

impl fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.patch == 0 {
            write!(f, "{}.{}", self.major, self.minor)
        } else {
            write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
        }
    }
}

/// One change of a modelled behaviour.
#[derive(Debug, Clone, Copy)]
pub struct Change {
    /// The first MAJOR.MINOR with the new behaviour.
    pub since: KernelVersion,
    /// The upstream commit (12 hex digits), or "" where the sources on both sides were read but the commit was not
    /// pinned (then `title` names it).
    pub commit: &'static str,
    /// The commit's subject line.
    pub title: &'static str,
    /// What changes, in the simulator's terms.
    pub behaviour: &'static str,
    /// Stable releases of older lines known to carry it (the first release read with it, not necessarily the
    /// first that had it).
    pub backports: &'static [KernelVersion],
}

const fn v(major: u32, minor: u32) -> KernelVersion {
    KernelVersion::new(major, minor)
}

/// BFQ limits tags for writes and async I/O (`bfq_limit_depth`, per-word depths); before, BFQ has no limit_depth.
/// First released in 4.16 (read: absent in 4.15, present in 4.19).
pub const BFQ_LIMIT_DEPTH: Change = Change {
    since: v(4, 16),
    commit: "a52a69ea89dc",
    title: "block, bfq: limit tags for writes and async I/O",
    behaviour: "BFQ gives async requests 1/2 and sync writes 3/4 of each sbitmap word of the scheduler tags \
                (3/16 and 6/16 while a queue is weight-raised); before, BFQ limits nothing",
    backports: &[],
};

/// sbitmap_queue_min_shallow_depth: the wake batch accounts for the smallest shallow depth (Omar Sandoval's May 2018
/// series, 4.18; read: absent in 4.15, present in 4.19).
pub const SBITMAP_MIN_SHALLOW_DEPTH: Change = Change {
    since: v(4, 18),
    commit: "",
    title: "sbitmap: fix missed wakeups caused by sbitmap_queue_get_shallow()",
    behaviour: "an elevator's smallest shallow depth (BFQ's, Kyber's) lowers the tags' wake batch; before, the \
                batch is depth / 8 within 1..=8 whatever the elevator",
    backports: &[],
};

/// blk_mq_get_tag sleeps exclusively (read: prepare_to_wait in 4.15, prepare_to_wait_exclusive in 4.19; the
/// commit is not pinned here).
pub const BLK_MQ_TAG_EXCLUSIVE_WAIT: Change = Change {
    since: v(4, 19),
    commit: "",
    title: "blk_mq_get_tag: prepare_to_wait_exclusive (not pinned)",
    behaviour: "a wake-up of a tag wait queue wakes up to wake_batch sleepers; before, every sleeper on that wait \
                queue wakes",
    backports: &[],
};

/// sbitmap_get starts a non-round-robin search at bit 0 of the hint's word (read: the hint's bit in 4.19, bit 0 in
/// 5.2; commit not pinned).
pub const SBITMAP_GET_FROM_WORD_START: Change = Change {
    since: v(5, 0),
    commit: "",
    title: "sbitmap: don't loop for find_next_zero_bit() for !round_robin (not pinned)",
    behaviour: "an unlimited tag allocation takes the lowest free bit of its CPU's hint word; before, the first free \
                bit from the hint on",
    backports: &[],
};

/// sbitmap defers clearing a freed bit: it goes into its word's `cleared` mask and back into the word only when an
/// allocation finds no free bit in its range of that word (`sbitmap_deferred_clear`; with b2dbff1bb893 also for
/// shallow gets, both in 5.0).
pub const SBITMAP_DEFERRED_CLEAR: Change = Change {
    since: v(5, 0),
    commit: "ea86ea2cdced",
    title: "sbitmap: ammortize cost of clearing bits",
    behaviour: "a freed tag stays taken for allocations until one finds no free bit in its range of that word, \
                which then takes back every bit freed there; so a freed low bit is left to a shallow allocation \
                (BFQ's depth 1) rather than taken at once by the next deep one from its CPU's hint; before, a freed \
                bit is free at once",
    backports: &[],
};

/// mq-deadline reserves a quarter of its tags for synchronous reads (`async_depth`, shown and settable in sysfs).
pub const MQ_DEADLINE_ASYNC_DEPTH: Change = Change {
    since: v(5, 14),
    commit: "07757588e507",
    title: "block/mq-deadline: Reserve 25% of scheduler tags for synchronous requests",
    behaviour: "mq-deadline limits every request but a sync read to async_depth (default 3/4 of nr_requests), \
                given to the sbitmap as a per-word shallow depth, so with 64-bit words it limits nothing; \
                before, mq-deadline has no limit and no async_depth tunable",
    backports: &[],
};

/// mq-deadline queues requests per I/O priority class and serves the highest class with requests queued.
pub const MQ_DEADLINE_PRIO_LEVELS: Change = Change {
    since: v(5, 14),
    commit: "c807ab520fc3",
    title: "block/mq-deadline: Add I/O priority support",
    behaviour: "requests queue per I/O priority class (real-time, best-effort, idle) and dispatch serves the highest \
                class with requests queued; before, mq-deadline ignores I/O priorities (one FIFO per direction)",
    backports: &[],
};

/// mq-deadline holds a lower priority class while a higher one has requests in flight, and ages it.
pub const MQ_DEADLINE_PRIO_AGING: Change = Change {
    since: v(5, 15),
    commit: "322cff70d46c",
    title: "block/mq-deadline: Prioritize high-priority requests",
    behaviour: "no lower class is dispatched while a higher one has requests inserted and not completed (in flight \
                included), except requests older than prio_aging_expire (10 s, a new tunable); before, a lower \
                class is served whenever no higher one has requests queued",
    backports: &[],
};

/// BFQ's soft real-time detection remembers past bandwidth: a queue starts with `soft_rt_next_start` = its creation
/// time, and each new value is at least the old one. Before, a new queue's is "never" (bfq_greatest_from_now) until
/// first computed, and each computation forgets the old value. (Read: greatest_from_now in a 4.12-era source, the
/// creation time in 5.x and 6.x sources; the Jan 2018 series that carries it went into 4.16, commit not pinned.)
pub const BFQ_SOFTRT_PAST_IO: Change = Change {
    since: v(4, 16),
    commit: "",
    title: "block, bfq: consider also past I/O in soft real-time detection",
    behaviour: "a new BFQ queue may be deemed soft real-time from its creation on, and soft_rt_next_start never \
                moves back; before, a queue is never soft real-time until its first soft_rt_next_start is computed",
    backports: &[],
};

/// BFQ's injection limit while the in-service queue waits: 0 for a queue with a short think time, 1 otherwise,
/// reset every second. (Read in linux-5.2.1's bfq-iosched.c: the limit was meant to adapt, but its baseline is
/// taken only when no request is in the driver, checked before the completing request leaves it, so it never is
/// and the limit never moves; the March 2019 series that brought it went into 5.2, commit not pinned.)
pub const BFQ_INJECT_LIMIT_BY_THINK_TIME: Change = Change {
    since: v(5, 2),
    commit: "",
    title: "block, bfq: tune service injection basing on request service times",
    behaviour: "the in-service queue lets other queues' requests be injected while fewer than its limit are in the \
                driver: 0 if its think time is short (a large request may still go into an empty driver once it \
                has idled a slice_idle), 1 if long; before, the simulator injects while the driver is empty",
    backports: &[],
};

/// BFQ's injection limit adapts to measured service times (the Aug 2019 series that fixed the baseline, went into
/// 5.4; commit not pinned).
pub const BFQ_ADAPTIVE_INJECTION: Change = Change {
    since: v(5, 4),
    commit: "",
    title: "block, bfq: update base request service times when possible",
    behaviour: "the limit rises by one each time the in-service queue's request, measured with injected I/O in the \
                driver, took under 1.5x the baseline measured with the driver empty, falls by one when not (at \
                most every 10 ms), and is reset to 0 or 1 a second after its last decrease or when the queue's \
                think time changes class before a baseline exists",
    backports: &[],
};

/// BFQ computes an interactive queue's bandwidth too, and forgets it when interactive raising ends.
pub const BFQ_SOFTRT_AFTER_INTERACTIVE: Change = Change {
    since: v(5, 12),
    commit: "",
    title: "block, bfq: avoid spurious switches to soft_rt of interactive queues",
    behaviour: "an expiring empty queue gets its soft_rt_next_start computed also while interactively raised, and \
                the end of interactive raising resets it to now (the queue may turn soft real-time at once); \
                before, an interactive queue's is left alone at expiry and kept when raising ends",
    backports: &[],
};

/// BFQ merges the sync queues of processes that start I/O together (stable merging).
pub const BFQ_STABLE_MERGE: Change = Change {
    since: v(5, 13),
    commit: "430a67f9d616",
    title: "block, bfq: merge bursts of newly-created queues",
    behaviour: "a new sync BFQ queue created within 180 ms of the last created queue of its group, with the same \
                ioprio, is merged into it (one queue, one weight, for all those processes); the queue new ones \
                merge into moves on after 600 ms",
    backports: &[],
};

/// BFQ caps each queue's (and group's) tags by its weight share; over it, depth 1.
pub const BFQ_REQUEST_OVER_LIMIT: Change = Change {
    since: v(5, 18),
    commit: "76f1df88bbc2",
    title: "bfq: Limit number of requests consumed by each cgroup",
    behaviour: "a BFQ queue on a service tree holding at least its weight's share of the limit (weight / weight \
                sum of its tree) allocates with shallow depth 1; the tags' min_shallow_depth becomes 1 (wake batch \
                1)",
    backports: &[],
};

/// The sbitmap wake-up counts freed bits once per bitmap and wakes from one wait queue per batch. Backported to
/// 6.1.y: Debian's linux-source-6.1 6.1.192-3 (the VM lab's `--kernel 6.1.0-N`) has it, and not 106397376c03.
pub const SBITMAP_SINGLE_WAKE_COUNT: Change = Change {
    since: v(6, 2),
    commit: "4f8126bb2308",
    title: "sbitmap: Use single per-bitmap counting to wake up queued tags",
    behaviour: "every wake_batch freed tags (counted while anyone waits) wake up to wake_batch sleepers of the first \
                wait queue that has any; before, each wait queue counts its own wake_batch. Non-exclusive waiters \
                (Kyber's hardware queues waiting for a token) count as none woken, so every wait queue's are woken",
    backports: &[KernelVersion::stable(6, 1, 192)],
};

/// The sbitmap wake-up goes on to the next wait queues until it woke a whole batch.
pub const SBITMAP_WAKE_WHOLE_BATCH: Change = Change {
    since: v(6, 5),
    commit: "106397376c03",
    title: "sbitmap: fix batching wakeup",
    behaviour: "a batch wakes up to wake_batch sleepers across the wait queues in turn; before, from one wait \
                queue only",
    backports: &[],
};

/// The fair scheduling class becomes EEVDF (kernel/sched/fair.c): a fixed base slice, lag-based placement,
/// picks by virtual deadline among eligible tasks, and no wake-up granularity.
pub const EEVDF: Change = Change {
    since: v(6, 6),
    commit: "147f3efaa241",
    title: "sched/fair: Implement an EEVDF-like scheduling policy",
    behaviour: "a core's running process keeps it for the base slice (0.75 ms x (1 + ilog2(CPUs))) or until it \
                sleeps, without wake-up preemption, and processes woken together onto a core others share are \
                picked by virtual runtime; before (CFS), the scaled latency is shared out as slices and a woken \
                process lagging by more than the wake-up granularity preempts",
    backports: &[],
};

/// mq-deadline scales async_depth to a per-word depth; default async_depth becomes nr_requests. Backported to 6.1.y
/// (read in Debian's linux-source-6.1 6.1.192-3).
pub const MQ_DEADLINE_WORD_DEPTH: Change = Change {
    since: v(6, 11),
    commit: "39823b47bbd4",
    title: "block/mq-deadline: Fix the tag reservation code",
    behaviour: "async_depth defaults to nr_requests and is scaled to the word (dd_to_word_depth), so a smaller one \
                set in sysfs limits; min_shallow_depth 1 (wake batch 1)",
    backports: &[KernelVersion::stable(6, 1, 192)],
};

/// sbitmap shallow depths cover the whole bitmap, spread over its words. Backported to 6.12.y: Debian's
/// linux-source-6.12 6.12.117-1~deb12u1 (the VM lab's kernel) has BFQ's depths as fractions of nr_requests, Kyber's
/// async depth as 75% of nr_requests and mq-deadline's async_depth unscaled.
pub const SBITMAP_WHOLE_SHALLOW_DEPTH: Change = Change {
    since: v(6, 17),
    commit: "42e6c6ce03fd",
    title: "lib/sbitmap: convert shallow_depth from one word to the whole sbitmap",
    behaviour: "a shallow depth is a share of the whole tag set (each word gets its part); BFQ's and Kyber's depths \
                become fractions of nr_requests; the wake batch is min(depth, min_shallow_depth) / 8 within 1..=8",
    backports: &[KernelVersion::stable(6, 12, 117)],
};

/// Kyber limits sync writes too. Mainline after 6.19; backported to the 6.18.y and 6.19.y stable lines (this
/// machine's 6.18.44 has it), so "6.18" here means such a stable release.
pub const KYBER_LIMITS_SYNC_WRITES: Change = Change {
    since: v(6, 18),
    commit: "1db61b0afdd7",
    title: "blk-mq-sched: unify elevators checking for async requests",
    behaviour: "Kyber's 75% async depth also applies to sync (direct) writes; before, only to async requests (no \
                read is ever async)",
    backports: &[],
};

/// ext4's direct I/O goes through iomap: an asynchronous direct write's completion is punted to the file system's
/// workqueue (`iomap_dio_bio_end_io` -> `queue_work(s_dio_done_wq)`: writes may have to update the file's metadata),
/// a kernel thread woken on the core that took the interrupt. Before, fs/direct-io.c completed an overwrite of
/// allocated blocks in the interrupt (unless the file had pages in the page cache). (xfs has used iomap for direct
/// I/O since 4.10, before every modelled version; io_uring's way around the workqueue, IOCB_DIO_CALLER_COMP, was
/// disabled before 6.6 shipped, 838b35bb6a89.)
pub const EXT4_IOMAP_DIO: Change = Change {
    since: v(5, 5),
    commit: "378f32bab371",
    title: "ext4: introduce direct I/O write using iomap infrastructure",
    behaviour: "an io_uring or libaio direct write on a file on ext4 completes in a workqueue thread woken on the \
                completing core (two context switches there); before, in the interrupt",
    backports: &[],
};

/// f2fs's direct I/O goes through iomap (as [`EXT4_IOMAP_DIO`] for ext4).
pub const F2FS_IOMAP_DIO: Change = Change {
    since: v(5, 17),
    commit: "a1e09b03e6f5",
    title: "f2fs: use iomap for direct I/O",
    behaviour: "an io_uring or libaio direct write on a file on f2fs completes in a workqueue thread woken on the \
                completing core (two context switches there); before, in the interrupt",
    backports: &[],
};

/// Every modelled change, oldest first.
pub const CHANGES: &[&Change] = &[
    &BFQ_LIMIT_DEPTH,
    &BFQ_SOFTRT_PAST_IO,
    &SBITMAP_MIN_SHALLOW_DEPTH,
    &BLK_MQ_TAG_EXCLUSIVE_WAIT,
    &SBITMAP_GET_FROM_WORD_START,
    &SBITMAP_DEFERRED_CLEAR,
    &BFQ_INJECT_LIMIT_BY_THINK_TIME,
    &BFQ_ADAPTIVE_INJECTION,
    &EXT4_IOMAP_DIO,
    &BFQ_SOFTRT_AFTER_INTERACTIVE,
    &BFQ_STABLE_MERGE,
    &MQ_DEADLINE_ASYNC_DEPTH,
    &MQ_DEADLINE_PRIO_LEVELS,
    &MQ_DEADLINE_PRIO_AGING,
    &F2FS_IOMAP_DIO,
    &BFQ_REQUEST_OVER_LIMIT,
    &SBITMAP_SINGLE_WAKE_COUNT,
    &SBITMAP_WAKE_WHOLE_BATCH,
    &EEVDF,
    &MQ_DEADLINE_WORD_DEPTH,
    &SBITMAP_WHOLE_SHALLOW_DEPTH,
    &KYBER_LIMITS_SYNC_WRITES,
];

/// The scheduler tags of one hardware queue as an elevator's `limit_depth` sees them: `nr_requests` bits in sbitmap
/// words of 2^`shift` bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedTags {
    pub nr_requests: u32,
    pub shift: u32,
}

impl SchedTags {
    pub fn new(nr_requests: u32) -> Self {
        Self {
            nr_requests,
            shift: sbitmap_shift(nr_requests),
        }
    }

    pub fn bits_per_word(self) -> u32 {
        1 << self.shift
    }
}

/// include/linux/sbitmap.h `sbitmap_calculate_shift` (64-bit longs): the largest word of at most 64 bits such that
/// the bitmap spans at least 4 words, if it has 4 bits or more.
pub fn sbitmap_shift(depth: u32) -> u32 {
    let mut shift = 6u32;
    if depth >= 4 {
        while (4u32 << shift) > depth {
            shift -= 1;
        }
    }
    shift
}

/// How freed bits wake what waits on an sbitmap queue's 8 wait queues (lib/sbitmap.c), by kernel version: threads
/// asleep for a request tag (blk-mq, exclusive waiters since 4.19) and Kyber's hardware queues waiting for a token
/// (non-exclusive entries: `sbitmap_add_wait_queue` uses `add_wait_queue`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WakeRule {
    /// Before 6.2: each wait queue counts freed bits itself (`wait_cnt`, from `wake_batch` down); the count goes to
    /// the first wait queue with waiters from `wake_index`, and when it runs out that queue is woken and
    /// `wake_index` moves past it. `exclusive` (4.19+): up to `wake_batch` sleepers; else (4.15) all of them.
    /// Non-exclusive entries are all woken either way.
    PerQueueCount { exclusive: bool },
    /// 6.2 to 6.4 ([`SBITMAP_SINGLE_WAKE_COUNT`]): freed bits are counted once for the bitmap while anyone waits;
    /// every `wake_batch` of them go through the wait queues from `wake_index` (advancing it past each) and stop at
    /// the first where `wake_up_nr` woke an exclusive waiter (up to `wake_batch` of them). Non-exclusive entries are
    /// called but count as none woken (`wake_up_nr` returns the exclusive ones, ee7dc86b6d3e), so with only those
    /// waiting, as Kyber's token waits, every wait queue's entries are woken.
    OneQueuePerBatch,
    /// 6.5+ ([`SBITMAP_WAKE_WHOLE_BATCH`]): as above, going on to the next wait queues until `wake_batch`
    /// exclusive waiters are woken.
    AcrossQueues,
}

impl WakeRule {
    pub fn of(kernel: KernelVersion) -> Self {
        if kernel.has(&SBITMAP_WAKE_WHOLE_BATCH) {
            WakeRule::AcrossQueues
        } else if kernel.has(&SBITMAP_SINGLE_WAKE_COUNT) {
            WakeRule::OneQueuePerBatch
        } else {
            WakeRule::PerQueueCount {
                exclusive: kernel.has(&BLK_MQ_TAG_EXCLUSIVE_WAIT),
            }
        }
    }
}

/// lib/sbitmap.c `sbq_calc_wake_batch`: freed tags per wake-up of an sbitmap queue's sleepers on `kernel`, for
/// `depth` bits in words of 2^`shift`, with the smallest shallow depth set on it (None: never set).
pub fn sbq_calc_wake_batch(
    kernel: KernelVersion,
    depth: u32,
    shift: u32,
    min_shallow_depth: Option<u32>,
) -> u32 {
    let min_shallow = min_shallow_depth.unwrap_or(u32::MAX);
    let reach = if kernel.has(&SBITMAP_WHOLE_SHALLOW_DEPTH) {
        depth.min(min_shallow)
    } else if kernel.has(&SBITMAP_MIN_SHALLOW_DEPTH) {
        // Each word can be limited to min_shallow_depth bits; a partial last word counts its own bits.
        let word_bits = 1u32 << shift;
        let shallow = word_bits.min(min_shallow);
        (depth >> shift) * shallow + (depth & (word_bits - 1)).min(shallow)
    } else {
        depth
    };
    (reach / 8).clamp(1, 8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_order_and_print_as_major_dot_minor() {
        let v63 = KernelVersion::parse("6.3").unwrap();
        assert_eq!(v63, KernelVersion::new(6, 3));
        assert!(
            KernelVersion::parse("6.18").unwrap() > v63,
            "6.18 is after 6.3, not before"
        );
        assert!(KernelVersion::parse("4.19").unwrap() < KernelVersion::parse("5.2").unwrap());
        assert_eq!(KernelVersion::new(4, 15).to_string(), "4.15");
        let v = KernelVersion::parse("6.12.117").unwrap();
        assert_eq!(v, KernelVersion::stable(6, 12, 117));
        assert_eq!(v.to_string(), "6.12.117");
        assert!(v > KernelVersion::new(6, 12) && v < KernelVersion::new(6, 13));
        for bad in [
            "6", "6.3.8.1", "v6.3", "6.x", "", ".3", "6.", "1.0", "6.3-rc1", "6.12.",
        ] {
            let err = KernelVersion::parse(bad).unwrap_err();
            assert!(err.contains("MAJOR.MINOR"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_version_has_the_changes_up_to_it() {
        let v = |s| KernelVersion::parse(s).unwrap();
        assert!(!v("6.3").has(&MQ_DEADLINE_WORD_DEPTH));
        assert!(v("6.11").has(&MQ_DEADLINE_WORD_DEPTH));
        assert!(v("5.18").has(&BFQ_REQUEST_OVER_LIMIT) && !v("5.17").has(&BFQ_REQUEST_OVER_LIMIT));
        assert!(
            v("6.3").has(&SBITMAP_SINGLE_WAKE_COUNT) && !v("6.3").has(&SBITMAP_WAKE_WHOLE_BATCH)
        );
        // A backport: 6.12.117 has the whole-bitmap shallow depth of 6.17, 6.12 as released does not.
        assert!(v("6.12.117").has(&SBITMAP_WHOLE_SHALLOW_DEPTH));
        assert!(
            !v("6.12").has(&SBITMAP_WHOLE_SHALLOW_DEPTH)
                && !v("6.12.116").has(&SBITMAP_WHOLE_SHALLOW_DEPTH)
        );
        assert!(
            !v("6.11.200").has(&SBITMAP_WHOLE_SHALLOW_DEPTH),
            "another line"
        );
        assert!(
            v("6.3.8").has(&BFQ_REQUEST_OVER_LIMIT) && !v("6.3.8").has(&MQ_DEADLINE_WORD_DEPTH)
        );
        let mut since: Vec<KernelVersion> = CHANGES.iter().map(|c| c.since).collect();
        let listed = since.clone();
        since.sort();
        assert_eq!(since, listed, "CHANGES oldest first");
        for c in CHANGES {
            assert!(c.commit.is_empty() || c.commit.len() == 12, "{}", c.title);
        }
    }

    #[test]
    fn the_word_size_is_computed_as_sbitmap_calculate_shift_does() {
        // 256 scheduler tags: 4 words of 64; 64 tags: 4 words of 16; 1023 driver tags: 16 words of 64.
        assert_eq!(sbitmap_shift(256), 6);
        assert_eq!(sbitmap_shift(255), 5);
        assert_eq!(sbitmap_shift(64), 4);
        assert_eq!(sbitmap_shift(1023), 6);
        assert_eq!(sbitmap_shift(8), 1);
        assert_eq!(sbitmap_shift(3), 6, "below 4 bits the word stays at 64");
        assert_eq!(SchedTags::new(256).bits_per_word(), 64);
    }

    #[test]
    fn the_wake_batch_formula_follows_the_version() {
        let v = |s| KernelVersion::parse(s).unwrap();
        // mq-deadline on 6.3 sets min_shallow_depth = async_depth = 192: 64 per word counts, 4 words, batch 8.
        assert_eq!(sbq_calc_wake_batch(v("6.3"), 256, 6, Some(192)), 8);
        // BFQ on 6.3 sets 1: one bit per word, 4 in all, batch 1.
        assert_eq!(sbq_calc_wake_batch(v("6.3"), 256, 6, Some(1)), 1);
        // BFQ on 5.2 sets its smallest word depth, 3/16 of 64 = 12: 48 in all, batch 6.
        assert_eq!(sbq_calc_wake_batch(v("5.2"), 256, 6, Some(12)), 6);
        // 4.15 has no min_shallow_depth: 256 / 8, at most 8.
        assert_eq!(sbq_calc_wake_batch(v("4.15"), 256, 6, Some(12)), 8);
        // 6.18: min(depth, min_shallow) / 8: Kyber's 192 → 8; 12 → 1.
        assert_eq!(sbq_calc_wake_batch(v("6.18"), 256, 6, Some(192)), 8);
        assert_eq!(sbq_calc_wake_batch(v("6.18"), 256, 6, Some(12)), 1);
        assert_eq!(sbq_calc_wake_batch(v("6.3"), 16, 2, None), 2);
    }
}
