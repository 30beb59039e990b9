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

/// The FTL's mapping unit: what one rewrite invalidates.
pub const LOGICAL_PAGE_BYTES: u64 = 4096;
/// The young window is the raw flash's bytes over this (module notes).
pub const YOUNG_WINDOW_SHARE_OF_RAW: u64 = 1024;

/// Each page written, with the sequence number of its last write: an open-addressing table with the keys beside
/// their values, so a lookup reads one place where a `HashMap` reads its control bytes and then its slot (two cache
/// misses in a table of a drive's size), and whose slot for a page is known before the write arrives
/// (`prefetch`). A page's slot is its 64 KiB group's bucket of 16 slots and its place in the group, probing on to
/// the next slot: the 16 pages of an aligned 64 KiB write sit in 256 bytes. Which pages it holds is all that is
/// read of it (never an order), so it answers as a map would.
struct PageTable {
    /// `[page + 1, sequence]`; a key of 0 is an empty slot.
    slots: Vec<[u64; 2]>,
    len: usize,
}

/// Pages per bucket: a 64 KiB group.
const BUCKET_PAGES: u64 = 16;
const MIN_SLOTS: usize = 1024;

impl PageTable {
    fn with_capacity(entries: usize) -> Self {
        // At most three quarters full, about as full as a `HashMap` keeps itself, so the table takes about the
        // memory the map took; at half full it took a third more and was no faster (Fig. 11c, 16 writers).
        let slots = (4 * entries / 3 + 1).max(MIN_SLOTS).next_power_of_two();
        Self {
            slots: vec![[0, 0]; slots],
            len: 0,
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn home(&self, page: u64) -> usize {
        let mask = self.slots.len() as u64 - 1;
        ((crate::mix(page / BUCKET_PAGES).wrapping_mul(BUCKET_PAGES) + page % BUCKET_PAGES) & mask)
            as usize
    }

    /// The slot that holds `page`, else the empty one where its probe ends (there is one: never full).
    #[inline]
    fn probe(&self, page: u64) -> usize {
        let (key, mask) = (page + 1, self.slots.len() - 1);
        let mut i = self.home(page);
        while self.slots[i][0] != key && self.slots[i][0] != 0 {
            i = (i + 1) & mask;
        }
        i
    }

    /// Sets `page`'s sequence number; returns the one it replaced.
    #[inline]
    fn insert(&mut self, page: u64, seq: u64) -> Option<u64> {
        if 4 * (self.len + 1) > 3 * self.slots.len() {
            self.rebuild(2 * (self.len + 1)); // twice the room: growth stays rare, as a `Vec`'s
        }
        let i = self.probe(page);
        let slot = &mut self.slots[i];
        if slot[0] != 0 {
            return Some(std::mem::replace(&mut slot[1], seq));
        }
        *slot = [page + 1, seq];
        self.len += 1;
        None
    }

    /// The same entries in a table sized for `entries` (growing: a new table, as a `Vec` grows).
    fn rebuild(&mut self, entries: usize) {
        let old = std::mem::replace(self, Self::with_capacity(entries));
        for [key, seq] in old.slots {
            if key != 0 {
                self.insert(key - 1, seq);
            }
        }
    }

    /// Drops the entries whose sequence number `keep` refuses, in place: each leaves a hole that the entries after
    /// it in its run move back into where their home allows (linear probing's deletion by backward shift), so no
    /// probe ever stops early. In place because a new table at every sweep left the allocator's heap holding the
    /// old ones (Fig. 11d, 32 writers on 8 drives, at 0.1 of its length: peak 73 MiB against 45).
    fn retain(&mut self, keep: impl Fn(u64) -> bool) {
        let mask = self.slots.len() - 1;
        // Start after an empty slot (there is one: the table is never full), so no run wraps past the start.
        let start = self
            .slots
            .iter()
            .position(|slot| slot[0] == 0)
            .expect("a slot left empty");
        for step in 1..=self.slots.len() {
            let i = (start + step) & mask;
            while self.slots[i][0] != 0 && !keep(self.slots[i][1]) {
                self.remove_at(i); // an entry may move into `i`: look at it too
            }
        }
    }

    fn remove_at(&mut self, slot: usize) {
        let mask = self.slots.len() - 1;
        let (mut hole, mut next) = (slot, slot);
        self.slots[hole] = [0, 0];
        self.len -= 1;
        loop {
            next = (next + 1) & mask;
            let [key, _] = self.slots[next];
            if key == 0 {
                return;
            }
            // It may fill the hole unless its home lies after the hole (cyclically), up to where it sits.
            let home = self.home(key - 1);
            if (next.wrapping_sub(home) & mask) >= (next.wrapping_sub(hole) & mask) {
                self.slots[hole] = self.slots[next];
                self.slots[next] = [0, 0];
                hole = next;
            }
        }
    }

    #[cfg(test)]
    fn get(&self, page: u64) -> Option<u64> {
        let [key, seq] = self.slots[self.probe(page)];
        (key != 0).then_some(seq)
    }

    /// Asks the CPU to bring the slots of pages `first..end` into its cache, where a later `insert` will find them.
    #[inline]
    fn prefetch(&self, first: u64, end: u64) {
        #[cfg(target_arch = "x86_64")]
        {
            const SLOTS_PER_LINE: u64 = 64 / 16;
            for page in (first..end).filter(|&p| p == first || p % SLOTS_PER_LINE == 0) {
                let slot = &self.slots[self.home(page)] as *const [u64; 2] as *const i8;
                // SAFETY: a prefetch only hints at an address (here a slot of the table); it reads nothing.
                unsafe {
                    std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(slot)
                };
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (first, end);
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
    /// this is inlined, 42% of the cycles, and that run then took 0.70x the time. A `HashMap` still missed twice
    /// per page of a 4 KiB writer, where the table misses once and the miss is asked for ahead (`prefetch`): Fig.
    /// 11c's 16 writers on 8 drives under none spent 14% of their cycles on those misses; docs/simulator.md,
    /// "Performance", has what it bought.
    last_written: PageTable,
}

impl YoungRewrites {
    pub fn new(window_pages: u64) -> Self {
        let window_pages = window_pages.max(1);
        Self {
            window_pages,
            written_pages: 0,
            young_rewrites: 0,
            sweep_at: Self::sweep_at(window_pages, 0),
            last_written: PageTable::with_capacity(0),
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
            self.last_written.retain(|seq| seq >= oldest_kept);
            self.sweep_at = Self::sweep_at(self.window_pages, self.last_written.len() as u64);
        }
    }

    /// The size that triggers the next sweep after one that kept `kept` pages: the 1,024 spare keeps a small map
    /// (the first writes, a few hot pages) from sweeping at almost every write.
    fn sweep_at(window_pages: u64, kept: u64) -> u64 {
        (2 * kept + 1024).min(window_pages + window_pages / 2)
    }

    /// A host write of `bytes` at `offset_bytes` is on its way: bring its pages' entries into the cache (a hint,
    /// with no effect on what `record` counts).
    pub fn prefetch(&self, offset_bytes: u64, bytes: u32) {
        let first = offset_bytes / LOGICAL_PAGE_BYTES;
        let end = (offset_bytes + bytes.max(1) as u64).div_ceil(LOGICAL_PAGE_BYTES);
        self.last_written.prefetch(first, end);
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
    use std::collections::HashMap;

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

    /// The table against a `HashMap` over 200,000 random steps: inserts of single pages and of 64 KiB groups (so
    /// runs of neighbouring slots form and collide), growth, and every 5,000 steps a sweep that drops about half
    /// (by sequence number, as `record` does). After every step each of the touched pages reads back what the map
    /// holds, and the lengths agree. Negative control: an entry dropped from both, from the table by emptying its
    /// slot without moving the entries after it back (deletion without the shift), leaves an entry the map still
    /// has that the table no longer finds.
    #[test]
    fn the_page_table_answers_as_a_map_does() {
        let mut table = PageTable::with_capacity(0);
        let mut map: HashMap<u64, u64> = HashMap::new();
        let mut state = 11u64;
        for step in 0..200_000u64 {
            state = crate::mix(state);
            let (first, pages) = if state % 4 == 0 {
                ((state >> 8) % 4096 * BUCKET_PAGES, BUCKET_PAGES)
            } else {
                ((state >> 8) % 65_536, 1)
            };
            for page in first..first + pages {
                assert_eq!(table.insert(page, step), map.insert(page, step));
            }
            if step % 5_000 == 4_999 {
                let oldest_kept = step - 2_500;
                table.retain(|seq| seq >= oldest_kept);
                map.retain(|_, seq| *seq >= oldest_kept);
                for (&page, &seq) in &map {
                    assert_eq!(
                        table.get(page),
                        Some(seq),
                        "page {page} after the sweep at {step}"
                    );
                }
            }
            for page in first..first + pages {
                assert_eq!(table.get(page), map.get(&page).copied());
            }
            assert_eq!(table.len(), map.len());
        }
        assert!(table.slots.len() >= 4096, "it grew: {}", table.slots.len());
        // Negative control: drop an entry from both, the table's by emptying its slot alone, where the entry after
        // it sits away from its home (it probed past the emptied slot); that entry is then no longer found.
        let hole = (0..table.slots.len() - 1)
            .find(|&i| {
                let [next_key, _] = table.slots[i + 1];
                table.slots[i][0] != 0 && next_key != 0 && table.home(next_key - 1) <= i
            })
            .expect("an entry displaced past another");
        map.remove(&(table.slots[hole][0] - 1));
        table.slots[hole] = [0, 0];
        let lost = map
            .iter()
            .filter(|(&page, &seq)| table.get(page) != Some(seq))
            .count();
        assert!(lost >= 1, "deleting without the shift lost nothing");
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
