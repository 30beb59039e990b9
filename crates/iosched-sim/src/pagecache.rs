//! Buffered I/O: the page cache, readahead and writeback, as far as IOzone-style file workloads need them.
//!
//! # Model
//!
//! * **Files.** A buffered job's file is a contiguous region of the device (`offset` + clone × `offset_increment`,
//!   `size` long): ext4's block allocation and metadata are not modelled. Jobs that name the same region share its
//!   pages; regions must otherwise not overlap.
//! * **Pages** (4 KiB) are absent, being read, up to date (clean), dirty, under writeback, or under writeback and
//!   dirtied again. The cache holds at most `capacity_bytes`; a new page beyond that evicts the oldest clean page
//!   (FIFO, not the kernel's two LRU lists).
//! * **Reads** (`generic_file_buffered_read` with `ondemand_readahead`, Linux 4.19 mm/readahead.c): a read that
//!   finds a page absent starts a synchronous readahead window there, `get_init_ra_size(request, read_ahead_kb)`
//!   pages with `window − request` of them as the asynchronous tail whose first page carries the readahead
//!   marker; a read that reaches the marker starts the next window (`get_next_ra_size`) ahead of the reader.
//!   Windows stop at the end of the file. The reader waits until the pages it asked for are up to date, then copies
//!   them out.
//! * **Writes** copy into the cache and dirty the pages. Dirty throttling (`balance_dirty_pages`) is a hard limit:
//!   a writer whose write leaves more than `dirty_ratio` % of the cache dirty or under writeback sleeps until
//!   writeback brings it back to the limit (the kernel's proportional pacing between the free-run ceiling and the
//!   limit is not modelled; in steady state both run writers at the writeback rate).
//! * **Writeback** (one flusher thread per device, `wb_workfn`): runs while more than `dirty_background_ratio` % is
//!   dirty or under writeback, or a writer is throttled. It takes files in the order they were first dirtied and
//!   writes each for a chunk of `MIN_WRITEBACK_PAGES` (4 MiB) before moving to the next, continuing where it
//!   stopped (`writeback_index`); each request is a run of contiguous dirty pages up to `max_sectors_kb`,
//!   asynchronous, submitted one at a time: the flusher sleeps while the block layer has no free request.
//! * **fsync** (fio's `end_fsync`, `fsync_on_close`): the caller writes its file's dirty pages back itself, in
//!   file order, one request at a time (`next_writeback_of`), and waits until none is dirty or under writeback.
//!
//! # Not modelled
//!
//! Periodic (`dirty_expire_centisecs`, 30 s) writeback, ext4 metadata and journal writes (an fsync's journal commit
//! and the drive cache flush that ends it), delayed-allocation work, page allocation and reclaim costs (a page costs
//! the same to dirty whether new or cached), readahead thrashing and random-read heuristics, mmap.

use std::collections::{BTreeSet, HashMap, VecDeque};

pub const PAGE_BYTES: u64 = 4096;
/// MIN_WRITEBACK_PAGES: 4 MiB of 4 KiB pages (fs/fs-writeback.c).
pub const WRITEBACK_CHUNK_PAGES: u64 = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Page {
    Absent,
    Reading,
    Clean,
    Dirty,
    Writeback,
    /// Under writeback and dirtied again: written again once this writeback ends.
    WritebackDirty,
}

struct File {
    device: u32,
    offset_bytes: u64,
    pages: Vec<Page>,
    /// Dirty pages not under writeback, in file order: what the flusher writes next.
    dirty: BTreeSet<u64>,
    writeback_index: u64,
    chunk_written: u64,
    in_wb_queue: bool,
    /// Pages under writeback (fsync waits for them).
    writeback: u64,
}

#[derive(Debug, Clone)]
pub struct PageCacheLimits {
    pub capacity_pages: u64,
    pub background_pages: u64,
    pub dirty_limit_pages: u64,
}

pub struct PageCache {
    pub limits: PageCacheLimits,
    files: Vec<File>,
    by_region: HashMap<(u32, u64, u64), usize>,
    cached: u64,
    dirty: u64,
    writeback: u64,
    fifo: VecDeque<(u32, u64)>,
    /// Files with dirty pages, in the order the flusher takes them.
    wb_queue: VecDeque<usize>,
}

/// A run of pages of one file: (file, first page, count).
pub type Run = (usize, u64, u64);

impl PageCache {
    pub fn new(limits: PageCacheLimits) -> Self {
        Self {
            limits,
            files: Vec::new(),
            by_region: HashMap::new(),
            cached: 0,
            dirty: 0,
            writeback: 0,
            fifo: VecDeque::new(),
            wb_queue: VecDeque::new(),
        }
    }

    /// The file at this device region (created on first use). Regions must be identical or disjoint.
    pub fn file(
        &mut self,
        device: u32,
        offset_bytes: u64,
        size_bytes: u64,
    ) -> Result<usize, String> {
        if let Some(&f) = self.by_region.get(&(device, offset_bytes, size_bytes)) {
            return Ok(f);
        }
        let end = offset_bytes + size_bytes;
        if let Some((&(_, o, s), _)) = self
            .by_region
            .iter()
            .find(|(&(d, o, s), _)| d == device && o < end && offset_bytes < o + s)
        {
            return Err(format!(
                "buffered jobs' files overlap: bytes {offset_bytes}..{end} and {o}..{} of the same device (files \
                 must be the same region or disjoint)",
                o + s
            ));
        }
        let pages = size_bytes.div_ceil(PAGE_BYTES);
        self.files.push(File {
            device,
            offset_bytes,
            pages: vec![Page::Absent; pages as usize],
            dirty: BTreeSet::new(),
            writeback_index: 0,
            chunk_written: 0,
            in_wb_queue: false,
            writeback: 0,
        });
        let f = self.files.len() - 1;
        self.by_region.insert((device, offset_bytes, size_bytes), f);
        Ok(f)
    }

    pub fn device_of(&self, file: usize) -> u32 {
        self.files[file].device
    }

    pub fn offset_of(&self, file: usize) -> u64 {
        self.files[file].offset_bytes
    }

    pub fn pages_of(&self, file: usize) -> u64 {
        self.files[file].pages.len() as u64
    }

    pub fn page(&self, file: usize, page: u64) -> Page {
        self.files[file].pages[page as usize]
    }

    pub fn cached_pages(&self) -> u64 {
        self.cached
    }

    /// Pages dirty or under writeback (NR_FILE_DIRTY + NR_WRITEBACK, as balance_dirty_pages counts them).
    pub fn dirty_and_writeback(&self) -> u64 {
        self.dirty + self.writeback
    }

    pub fn over_background(&self) -> bool {
        self.dirty_and_writeback() > self.limits.background_pages
    }

    pub fn over_dirty_limit(&self) -> bool {
        self.dirty_and_writeback() > self.limits.dirty_limit_pages
    }

    pub fn has_dirty(&self) -> bool {
        !self.wb_queue.is_empty()
    }

    fn set(&mut self, file: usize, page: u64, to: Page) {
        let from = self.files[file].pages[page as usize];
        if from == to {
            return;
        }
        let dirty = |p: Page| matches!(p, Page::Dirty | Page::WritebackDirty) as u64;
        let wb = |p: Page| matches!(p, Page::Writeback | Page::WritebackDirty) as u64;
        self.dirty = self.dirty + dirty(to) - dirty(from);
        self.writeback = self.writeback + wb(to) - wb(from);
        if from == Page::Absent {
            self.cached += 1;
            self.fifo.push_back((file as u32, page));
        } else if to == Page::Absent {
            self.cached -= 1;
        }
        let f = &mut self.files[file];
        f.writeback = f.writeback + wb(to) - wb(from);
        f.pages[page as usize] = to;
        if to == Page::Dirty {
            f.dirty.insert(page);
            if !f.in_wb_queue {
                f.in_wb_queue = true;
                self.wb_queue.push_back(file);
            }
        } else if from == Page::Dirty {
            f.dirty.remove(&page);
        }
        if from == Page::Absent {
            self.evict();
        }
    }

    /// Drop the oldest clean pages while the cache is over its capacity.
    fn evict(&mut self) {
        let mut budget = self.fifo.len();
        while self.cached > self.limits.capacity_pages && budget > 0 {
            budget -= 1;
            let Some((f, p)) = self.fifo.pop_front() else {
                break;
            };
            match self.files[f as usize].pages[p as usize] {
                Page::Clean => {
                    self.files[f as usize].pages[p as usize] = Page::Absent;
                    self.cached -= 1;
                }
                Page::Absent => {} // a stale entry: the page was dropped already
                _ => self.fifo.push_back((f, p)), // in use: keep it
            }
        }
    }

    /// fio's `invalidate`: drop the file's clean pages (dirty ones and those under I/O stay).
    pub fn invalidate_clean(&mut self, file: usize) {
        for p in 0..self.pages_of(file) {
            if self.page(file, p) == Page::Clean {
                self.set(file, p, Page::Absent);
            }
        }
    }

    /// A write() copied into pages `first..first + count`: they are dirty now.
    pub fn write(&mut self, file: usize, first: u64, count: u64) {
        for p in first..first + count {
            let to = match self.page(file, p) {
                Page::Writeback | Page::WritebackDirty => Page::WritebackDirty,
                _ => Page::Dirty,
            };
            self.set(file, p, to);
        }
    }

    /// Every page of `first..first + count` can be copied out (up to date, or dirty).
    pub fn readable(&self, file: usize, first: u64, count: u64) -> bool {
        (first..first + count).all(|p| !matches!(self.page(file, p), Page::Absent | Page::Reading))
    }

    /// Mark the absent pages of `first..first + count` as being read; returns the runs to read from the device.
    pub fn start_read(&mut self, file: usize, first: u64, count: u64) -> Vec<Run> {
        let end = (first + count).min(self.pages_of(file));
        let mut runs: Vec<Run> = Vec::new();
        for p in first..end {
            if self.page(file, p) != Page::Absent {
                continue;
            }
            self.set(file, p, Page::Reading);
            match runs.last_mut() {
                Some((_, s, n)) if *s + *n == p => *n += 1,
                _ => runs.push((file, p, 1)),
            }
        }
        runs
    }

    /// A read of pages `first..first + count` completed.
    pub fn end_read(&mut self, file: usize, first: u64, count: u64) {
        for p in first..first + count {
            if self.page(file, p) == Page::Reading {
                self.set(file, p, Page::Clean);
            }
        }
    }

    /// The flusher's next request: up to `max_pages` contiguous dirty pages of the current file, now under
    /// writeback. None when nothing is dirty.
    pub fn next_writeback(&mut self, max_pages: u64) -> Option<Run> {
        while let Some(&file) = self.wb_queue.front() {
            let f = &self.files[file];
            let start = f
                .dirty
                .range(f.writeback_index..)
                .next()
                .or_else(|| f.dirty.iter().next())
                .copied();
            let Some(start) = start else {
                self.files[file].in_wb_queue = false;
                self.files[file].chunk_written = 0;
                self.wb_queue.pop_front();
                continue;
            };
            let mut count = 0;
            while count < max_pages && f.dirty.contains(&(start + count)) {
                count += 1;
            }
            for p in start..start + count {
                self.set(file, p, Page::Writeback);
            }
            let f = &mut self.files[file];
            f.writeback_index = start + count;
            f.chunk_written += count;
            if f.dirty.is_empty() || f.chunk_written >= WRITEBACK_CHUNK_PAGES {
                // This file had its chunk (or is clean): the next one's turn.
                f.chunk_written = 0;
                self.wb_queue.pop_front();
                if f.dirty.is_empty() {
                    f.in_wb_queue = false;
                } else {
                    self.wb_queue.push_back(file);
                }
            }
            return Some((file, start, count));
        }
        None
    }

    /// fsync's next request for `file` (write_cache_pages with WB_SYNC_ALL over the whole file): its first run of
    /// up to `max_pages` contiguous dirty pages, now under writeback. None when none of its pages is dirty.
    pub fn next_writeback_of(&mut self, file: usize, max_pages: u64) -> Option<Run> {
        let f = &self.files[file];
        let start = *f.dirty.iter().next()?;
        let mut count = 0;
        while count < max_pages && f.dirty.contains(&(start + count)) {
            count += 1;
        }
        for p in start..start + count {
            self.set(file, p, Page::Writeback);
        }
        // The flusher's queue drops the file when it next finds nothing dirty there (`next_writeback`).
        Some((file, start, count))
    }

    /// Whether any page of `file` is under writeback.
    pub fn under_writeback(&self, file: usize) -> bool {
        self.files[file].writeback > 0
    }

    /// Whether any page of `file` is dirty and not under writeback.
    pub fn file_has_dirty(&self, file: usize) -> bool {
        !self.files[file].dirty.is_empty()
    }

    /// Writeback of pages `first..first + count` completed: clean, or dirty again if written meanwhile.
    pub fn end_writeback(&mut self, file: usize, first: u64, count: u64) {
        for p in first..first + count {
            let to = match self.page(file, p) {
                Page::WritebackDirty => Page::Dirty,
                Page::Writeback => Page::Clean,
                other => other,
            };
            self.set(file, p, to);
        }
    }
}

/// A reader's readahead state (`struct file_ra_state`), in pages.
#[derive(Debug, Clone, Default)]
pub struct Readahead {
    pub start: u64,
    pub size: u64,
    pub async_size: u64,
    /// read_ahead_kb in pages.
    pub max: u64,
}

/// get_init_ra_size.
fn init_size(request: u64, max: u64) -> u64 {
    let size = request.max(1).next_power_of_two();
    if size <= max / 32 {
        size * 4
    } else if size <= max / 4 {
        size * 2
    } else {
        max
    }
}

/// get_next_ra_size.
fn next_size(cur: u64, max: u64) -> u64 {
    if cur < max / 16 {
        4 * cur
    } else if cur <= max / 2 {
        2 * cur
    } else {
        max
    }
}

impl Readahead {
    pub fn new(max_pages: u64) -> Self {
        Self {
            max: max_pages.max(1),
            ..Default::default()
        }
    }

    fn marker(&self) -> u64 {
        self.start + self.size - self.async_size
    }

    /// A read of pages `first..first + count` of `file`: start the readahead windows it triggers and return the runs
    /// to read from the device. The sequential cases of ondemand_readahead: a miss starts an initial window at
    /// the missing page; reaching the marker page starts the next window.
    pub fn on_read(
        &mut self,
        cache: &mut PageCache,
        file: usize,
        first: u64,
        count: u64,
    ) -> Vec<Run> {
        let mut runs = Vec::new();
        if let Some(miss) = (first..first + count).find(|&p| cache.page(file, p) == Page::Absent) {
            let request = first + count - miss;
            self.start = miss;
            self.size = init_size(request, self.max).max(request);
            self.async_size = if self.size > request {
                self.size - request
            } else {
                self.size
            };
            runs.extend(cache.start_read(file, self.start, self.size));
        }
        if self.size > 0 && (first..first + count).contains(&self.marker()) && self.async_size > 0 {
            self.start += self.size;
            self.size = next_size(self.size, self.max);
            self.async_size = self.size;
            if self.start < cache.pages_of(file) {
                runs.extend(cache.start_read(file, self.start, self.size));
            }
        }
        runs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(capacity: u64) -> PageCache {
        PageCache::new(PageCacheLimits {
            capacity_pages: capacity,
            background_pages: 10,
            dirty_limit_pages: 20,
        })
    }

    #[test]
    fn sequential_64k_reads_keep_one_128k_window_ahead() {
        let mut c = cache(1 << 20);
        let f = c.file(0, 0, 1 << 20).unwrap(); // 256 pages
        let mut ra = Readahead::new(32); // read_ahead_kb = 128
        let mut windows = Vec::new();
        for i in 0..6 {
            let runs = ra.on_read(&mut c, f, 16 * i, 16);
            windows.push(runs.iter().map(|&(_, s, n)| (s, n)).collect::<Vec<_>>());
            c.end_read(f, 0, 256);
        }
        // A miss starts an initial window of 128 KiB with its marker at page 16; reading the marker starts the next
        // window and moves the marker to its first page, so every second 64 KiB read starts one, a window ahead.
        assert_eq!(
            windows,
            vec![
                vec![(0, 32)],
                vec![(32, 32)],
                vec![(64, 32)],
                vec![],
                vec![(96, 32)],
                vec![]
            ]
        );
    }

    #[test]
    fn windows_stop_at_the_end_of_the_file() {
        let mut c = cache(1 << 20);
        let f = c.file(0, 0, 96 * 1024).unwrap(); // 24 pages
        let mut ra = Readahead::new(32);
        let runs = ra.on_read(&mut c, f, 0, 16);
        assert_eq!(runs, vec![(f, 0, 24)]);
    }

    #[test]
    fn dirty_pages_are_written_back_in_file_order_chunk_by_chunk() {
        let mut c = cache(1 << 20);
        let a = c.file(0, 0, 8 << 20).unwrap();
        let b = c.file(0, 8 << 20, 8 << 20).unwrap();
        c.write(a, 0, 2048);
        c.write(b, 0, 2048);
        assert_eq!(c.dirty_and_writeback(), 4096);
        let mut order = Vec::new();
        while let Some((f, s, n)) = c.next_writeback(320) {
            order.push((f, s, n));
        }
        // File a for 1024 pages (4 MiB: 320 + 320 + 320 + 64), then b, then a again.
        assert_eq!(
            &order[..4],
            &[(a, 0, 320), (a, 320, 320), (a, 640, 320), (a, 960, 320)]
        );
        assert_eq!(order[4], (b, 0, 320));
        assert!(order.iter().map(|&(_, _, n)| n).sum::<u64>() == 4096);
        assert_eq!(
            c.dirty_and_writeback(),
            4096,
            "under writeback still counts"
        );
        c.end_writeback(a, 0, 320);
        assert_eq!(c.dirty_and_writeback(), 4096 - 320);
        assert_eq!(c.page(a, 0), Page::Clean);
    }

    #[test]
    fn a_page_dirtied_under_writeback_is_written_again() {
        let mut c = cache(1 << 20);
        let f = c.file(0, 0, 1 << 20).unwrap();
        c.write(f, 0, 4);
        assert_eq!(c.next_writeback(64), Some((f, 0, 4)));
        c.write(f, 1, 1);
        assert_eq!(c.page(f, 1), Page::WritebackDirty);
        assert_eq!(c.next_writeback(64), None, "not while its writeback runs");
        c.end_writeback(f, 0, 4);
        assert_eq!(c.page(f, 1), Page::Dirty);
        assert_eq!(c.next_writeback(64), Some((f, 1, 1)));
    }

    #[test]
    fn clean_pages_are_evicted_oldest_first_and_invalidate_drops_only_clean_ones() {
        let mut c = cache(8);
        let f = c.file(0, 0, 1 << 20).unwrap();
        let runs = c.start_read(f, 0, 6);
        assert_eq!(runs, vec![(f, 0, 6)]);
        c.end_read(f, 0, 6);
        c.write(f, 6, 4); // 10 pages: the two oldest clean ones go
        assert_eq!(c.cached_pages(), 8);
        assert_eq!(
            (c.page(f, 0), c.page(f, 1), c.page(f, 2)),
            (Page::Absent, Page::Absent, Page::Clean)
        );
        c.invalidate_clean(f);
        assert_eq!(c.cached_pages(), 4, "the dirty pages stay");
        assert!(
            c.file(0, 512 << 10, 1 << 20).is_err(),
            "overlapping files are refused"
        );
    }
}
