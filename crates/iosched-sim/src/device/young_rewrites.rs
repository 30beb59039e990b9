//! Rewrites of data whose previous copy is still young, and what they do to garbage collection's cost.
//!
//! Uniform random overwrites leave every written page to die at the same slow rate, and greedy collection then copies
//! the victims' valid fraction u1 = exp(-(1 - u1) / rho) (`fifo_victim_valid_fraction`). Writers that write the same
//! offsets in the same order (fio jobs run as separate processes draw the same random sequence: seed 000's Figs. 11
//! and 12 start every app as a fio process of its own) rewrite each page N times within a short while: of every N
//! host pages, N - 1 die young, before their block can be a victim. A host block then holds a share v0 of pages
//! that live long, and the FTL keeps its moved pages in blocks of their own (collected data apart from host data,
//! as FTLs commonly do; named assumption).
//!
//! The fluid limit of greedy collection (all victims at one valid fraction, as for large blocks), with pages dying
//! at the rate uniform overwrites of the live data give, has two regimes (our derivation; balance of pages written,
//! copied and freed, and of the raw space the blocks of each kind take while they age):
//! - v0 <= u1: a host block is the emptiest there is as soon as its young pages are dead, so greedy takes it at
//!   once and moves its long-lived share out; the moved data then ages in the collector's blocks as a single writer's
//!   would. Copies per host page: v0 / (1 - u1) (each long-lived page moved once, then 1 / (1 - u1) - 1 more).
//! - v0 > u1: host and collector blocks both age until they reach one valid fraction u, the smaller root of
//!   ln u = (1 - u)(ln v0 - v0 / rho); copies per host page u / (1 - u). With v0 = 1 this is u1's equation.
//!
//! The two meet at v0 = u1. `scripts/greedy-gc --writers N --gc-blocks-apart` simulates greedy page by page: with
//! 256-page blocks it gives write amplification 1.144 / 1.451 / 1.758 / 2.343 for two writers at rho 0.3 / 0.5 /
//! 0.637 / 0.8 (the formulas: 1.146 / 1.453 / 1.760 / 2.346) and 1.181 / 1.390 for three at 0.3 / 0.5 (1.182 /
//! 1.391).
//!
//! Which rewrites are young is measured, not assumed: a rewrite of a 4 KiB logical page (the mapping table's unit)
//! whose previous copy arrived within the last `window_pages` host pages. The window is 1/1024 of the raw flash
//! (1.07 GB on the 980 PRO), a named assumption: a block is never collected while it is open (192 MiB of data on the
//! 980 PRO, one block per unit), and greedy collection leaves a block whose pages are about to die while emptier
//! ones exist, at the cost of the space it holds meanwhile; a window of 0.1% of the flash takes 0.1% of it (rho
//! 0.910 -> 0.911), which changes the cost by less than the formulas' agreement with greedy page by page. Writers
//! launched a few ms apart (`separate_processes`) stay well inside it: 32 of seed 000's 64 KiB writers, launched 5 ms
//! apart, span ~200 MB of a drive's writes (with the window at the open blocks' 192 MiB, their young share fell from
//! 0.968 to 0.936). A single writer of uniform random offsets rewrites within it with a probability of window / live
//! pages (0.1% on a 1 TB drive), so its cost is unchanged.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The FTL's mapping unit: what one rewrite invalidates.
pub const LOGICAL_PAGE_BYTES: u64 = 4096;
/// The young window is the raw flash's bytes over this (module notes).
pub const YOUNG_WINDOW_SHARE_OF_RAW: u64 = 1024;

/// Hashes a page number with the crate's mixer (the map's keys are page numbers, not attacker input), all but its
/// low 4 bits: the 16 pages of an aligned 64 KiB write then sit in 16 neighbouring slots of the map, a few cache
/// lines, where a hash of each page spread them over 16 random ones (`YoungRewrites::last_written`).
#[derive(Default)]
struct PageHasher(u64);

impl Hasher for PageHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = crate::mix(self.0 ^ b as u64);
        }
    }
    fn write_u64(&mut self, value: u64) {
        // hashbrown places a key by the hash's low bits and tells keys apart in a probe by its top 7: the group's
        // hash places the page, the page's own tells it from its neighbours.
        const TOP_7: u64 = 0x7f << 57;
        self.0 =
            (crate::mix(value) & TOP_7) | (crate::mix(value >> 4) & !TOP_7 & !15) | (value & 15);
    }
}

/// Host pages written, the rewrites among them that found their previous copy young, and each page's last write.
pub(super) struct YoungRewrites {
    window_pages: u64,
    written_pages: u64,
    young_rewrites: u64,
    /// `last_written`'s size at which stale entries go: twice what the last sweep kept, and at most a window and a
    /// half. A drive's map then stays near what the window holds (a window of pages for a writer of uniform random
    /// offsets; a small share of it for writers that rewrite the same pages), as when each entry went on time.
    sweep_at: u64,
    /// Each page written with the sequence number of its last write. An entry older than the window is stale: a
    /// rewrite that finds one is not young, as if it were absent, so stale entries are dropped in bulk, once the map
    /// holds `sweep_at` pages (`record`). The map is a drive's largest structure (8 MiB on the 980 PRO) and each
    /// access to it a cache miss: dropping each entry as it left the window, from a queue of the window's pages,
    /// took two more accesses per page, and hashing pages apart one per page of a 64 KiB write; on Fig. 11d's 8
    /// drives with 32 writers under none (its run at 0.3 of its length, `perf`) they made `send_to_driver`, where
    /// this is inlined, 42% of the cycles. Now that run takes 0.70x the time, in 48 MiB instead of 74
    /// (docs/simulator.md, "Performance").
    last_written: HashMap<u64, u64, BuildHasherDefault<PageHasher>>,
}

impl YoungRewrites {
    pub fn new(window_pages: u64) -> Self {
        let window_pages = window_pages.max(1);
        Self {
            window_pages,
            written_pages: 0,
            young_rewrites: 0,
            sweep_at: Self::sweep_at(window_pages, 0),
            last_written: HashMap::default(),
        }
    }

    /// A host write of `bytes` at `offset_bytes` reached the drive.
    pub fn record(&mut self, offset_bytes: u64, bytes: u32) {
        let first = offset_bytes / LOGICAL_PAGE_BYTES;
        let end = (offset_bytes + bytes.max(1) as u64).div_ceil(LOGICAL_PAGE_BYTES);
        for page in first..end {
            let seq = self.written_pages;
            self.written_pages += 1;
            if let Some(previous) = self.last_written.insert(page, seq) {
                if seq - previous < self.window_pages {
                    self.young_rewrites += 1;
                }
            }
        }
        // Keep what the next write can find young: entries of the last `window_pages` writes (at most that many).
        if self.last_written.len() as u64 > self.sweep_at {
            let oldest_kept = self.written_pages.saturating_sub(self.window_pages);
            self.last_written.retain(|_, seq| *seq >= oldest_kept);
            self.sweep_at = Self::sweep_at(self.window_pages, self.last_written.len() as u64);
        }
    }

    /// The size that triggers the next sweep after one that kept `kept` pages: the 1,024 spare keeps a small map
    /// (the first writes, a few hot pages) from sweeping at almost every write.
    fn sweep_at(window_pages: u64, kept: u64) -> u64 {
        (2 * kept + 1024).min(window_pages + window_pages / 2)
    }

    /// Logical pages written, and the young rewrites among them.
    pub fn counts(&self) -> (u64, u64) {
        (self.written_pages, self.young_rewrites)
    }

    /// The share of host pages that outlive their youth (v0): each young rewrite killed one earlier page young.
    pub fn long_lived_fraction(&self) -> f64 {
        if self.written_pages == 0 {
            return 1.0;
        }
        1.0 - self.young_rewrites as f64 / self.written_pages as f64
    }
}

/// Garbage collection's copies per host page when a share `long_lived` (v0) of host pages lives long and the rest
/// die young, with live data filling a share `rho` of the flash and `u1` the single writer's victims' valid fraction
/// at that rho (`fifo_victim_valid_fraction(rho)`). The two regimes of the module's notes.
pub fn copies_per_host_page(rho: f64, u1: f64, long_lived: f64) -> f64 {
    if u1 >= 1.0 {
        return f64::INFINITY;
    }
    let v0 = long_lived.clamp(0.0, 1.0);
    if v0 <= u1 {
        return v0 / (1.0 - u1);
    }
    // The smaller root of h(u) = ln u - (1 - u) a, a = ln v0 - v0 / rho: h is concave, -inf at 0 and >= 0 at v0 in
    // this regime (it is 0 at u1 for v0 = 1), so bisection on (0, v0] finds it.
    let a = v0.ln() - v0 / rho;
    let h = |u: f64| u.ln() - (1.0 - u) * a;
    let (mut lo, mut hi) = (f64::MIN_POSITIVE, v0);
    if h(hi) < 0.0 {
        return v0 / (1.0 - v0); // not reached for 0 < rho < 1 (kept finite for any input)
    }
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if h(mid) < 0.0 {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo < 1e-13 {
            break;
        }
    }
    let u = 0.5 * (lo + hi);
    u / (1.0 - u)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::fifo_victim_valid_fraction;

    fn write_amplification(rho: f64, writers: u32) -> f64 {
        1.0 + copies_per_host_page(rho, fifo_victim_valid_fraction(rho), 1.0 / writers as f64)
    }

    /// One writer: v0 = 1 gives back the single writer's u1 / (1 - u1). At rho 0.91, u1 = 0.8256 (the FIFO fixed
    /// point), WA = 1 / (1 - 0.8256) = 5.733.
    #[test]
    fn one_writer_costs_what_uniform_overwrites_cost() {
        let u1 = fifo_victim_valid_fraction(0.91);
        assert!((copies_per_host_page(0.91, u1, 1.0) - u1 / (1.0 - u1)).abs() < 1e-9);
        assert!((write_amplification(0.91, 1) - 5.733).abs() < 1e-3);
    }

    /// Eight writers in lockstep at rho 0.91: v0 = 1/8 = 0.125 <= u1 = 0.8256, so the first regime: copies per host
    /// page 0.125 / 0.1744 = 0.717, WA 1.717; two at rho 0.5: v0 = 0.5 > u1 = 0.2032, the second regime, WA 1.453
    /// (greedy simulated page by page with 256-page blocks: 1.451). Negative control: the single writer's cost,
    /// 5.733 and 1.255, is far from both.
    #[test]
    fn lockstep_writers_cost_what_greedy_collection_gives_them() {
        assert!((write_amplification(0.91, 8) - 1.717).abs() < 1e-3);
        assert!((write_amplification(0.5, 2) - 1.453).abs() < 1e-3);
        assert!((write_amplification(0.637, 2) - 1.760).abs() < 1e-3);
        assert!((write_amplification(0.91, 1) - 1.717).abs() > 1.0);
        assert!((write_amplification(0.5, 1) - 1.453).abs() > 0.15);
    }

    /// The regimes meet at v0 = u1: both give u1 / (1 - u1) there.
    #[test]
    fn the_two_regimes_meet() {
        for rho in [0.5, 0.8, 0.91] {
            let u1 = fifo_victim_valid_fraction(rho);
            let below = copies_per_host_page(rho, u1, u1);
            let above = copies_per_host_page(rho, u1, u1 + 1e-9);
            assert!(
                (below - above).abs() < 1e-6,
                "rho {rho}: {below} vs {above}"
            );
        }
    }

    /// The map drops stale entries in bulk, not each as it leaves the window; whether a rewrite is young must not
    /// depend on that. Against the definition kept literally (a queue of the window's last pages, each page's entry
    /// dropped as it leaves), 20,000 writes of 4-64 KiB give the same count after every write: over 2 MiB (512
    /// pages) with a window of 100, so that many rewrites fall just inside, at or just past the window's edge, and
    /// with a window of 4,096 over a mostly hot range, where the map sweeps before it holds a window and a half.
    /// Negative control: the same reference with a window one page shorter counts differently.
    #[test]
    fn dropping_stale_entries_in_bulk_counts_what_the_window_defines() {
        use std::collections::VecDeque;
        struct Literal {
            window: u64,
            written: u64,
            young: u64,
            last: HashMap<u64, u64>,
            recent: VecDeque<u64>,
        }
        impl Literal {
            fn record(&mut self, offset_bytes: u64, bytes: u32) {
                let first = offset_bytes / LOGICAL_PAGE_BYTES;
                for page in first..(offset_bytes + bytes as u64).div_ceil(LOGICAL_PAGE_BYTES) {
                    let seq = self.written;
                    self.written += 1;
                    if let Some(previous) = self.last.insert(page, seq) {
                        if seq - previous < self.window {
                            self.young += 1;
                        }
                    }
                    self.recent.push_back(page);
                    if self.recent.len() as u64 > self.window {
                        let old_seq = self.written - self.recent.len() as u64;
                        let old_page = self.recent.pop_front().unwrap();
                        if self.last.get(&old_page) == Some(&old_seq) {
                            self.last.remove(&old_page);
                        }
                    }
                }
            }
        }
        let literal = |window| Literal {
            window,
            written: 0,
            young: 0,
            last: HashMap::new(),
            recent: VecDeque::new(),
        };
        // A window of 100 over 512 pages of writes anywhere; then one of 4,096 where 9 writes in 10 go to a hot
        // 512 pages (so the map keeps ~1,000 pages and sweeps at ~3,000, below a window and a half, 6,144).
        for (window, pages, hot_share) in [(100, 512, 0), (4096, 65_536, 90)] {
            let (mut reference, mut narrower) = (literal(window), literal(window - 1));
            let mut rewrites = YoungRewrites::new(window);
            let mut state = 7u64;
            let mut smallest_sweep = u64::MAX;
            for _ in 0..20_000 {
                state = crate::mix(state);
                let bytes = 4096 << (state % 5); // 4-64 KiB
                let range = if state % 100 < hot_share { 512 } else { pages };
                let offset = (state >> 8) % (range - bytes as u64 / 4096 + 1) * 4096;
                rewrites.record(offset, bytes as u32);
                reference.record(offset, bytes as u32);
                narrower.record(offset, bytes as u32);
                assert_eq!(rewrites.counts(), (reference.written, reference.young));
                smallest_sweep = smallest_sweep.min(rewrites.sweep_at);
            }
            assert!(rewrites.last_written.len() as u64 <= window + window / 2 + 16);
            assert_ne!(reference.young, narrower.young, "window {window}");
            if hot_share > 0 {
                assert!(
                    smallest_sweep < window + window / 2 - 1000,
                    "{smallest_sweep}"
                );
            }
        }
    }

    /// Two writers of the same 16 pages (a 64 KiB write each, in turn) with a window of 64 pages: the second copy
    /// of each page is a young rewrite, so 16 of 32 pages die young and v0 = 0.5. A third write of the same range
    /// 100 pages later (past the window) is not young: 16 of 48 + 100 = 148 pages, v0 = 1 - 16/148.
    #[test]
    fn rewrites_within_the_window_are_young() {
        let mut rewrites = YoungRewrites::new(64);
        rewrites.record(1 << 20, 65536);
        rewrites.record(1 << 20, 65536);
        assert!((rewrites.long_lived_fraction() - 0.5).abs() < 1e-12);
        for i in 0..25 {
            rewrites.record((8 << 20) + i * 16384, 16384); // 100 other pages
        }
        rewrites.record(1 << 20, 65536);
        assert!((rewrites.long_lived_fraction() - (1.0 - 16.0 / 148.0)).abs() < 1e-12);
        // Negative control: without the other pages the third copy is young too.
        let mut close = YoungRewrites::new(64);
        for _ in 0..3 {
            close.record(1 << 20, 65536);
        }
        assert!((close.long_lived_fraction() - 16.0 / 48.0).abs() < 1e-12);
    }
}
