//! Block I/O traces: streaming readers for three public formats.
//!
//! - SNIA SYSTOR '17 (VDI) CSV: `Timestamp,Response,IOType,LUN,Offset,Size`. Unix seconds with a fraction, the
//!   response time in seconds, `R`/`W` (blank: neither, skipped), the LUN, byte offset and size. The real files
//!   have a header line and hold one LUN each (`<YYYYMMDDHH>-LUN<n>.csv`).
//! - MSR Cambridge CSV: `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`. Windows FILETIME (100 ns
//!   ticks), `Read`/`Write`, byte offset and size; usually no header.
//! - blkparse's default text output: `%D %2c %8s %5T.%9t %5p %2a %3d`, then for I/O events `sector + blocks
//!   [process]`. Only one action is replayed: D (issued to the driver) or Q (queued); every other event line is
//!   skipped, and the per-CPU summary blkparse prints at the end ends the trace. Sectors and blocks are 512 B.
//!
//! A trace is read a line at a time, when the replay needs its next record, so memory stays the same however long
//! the trace is and each line is parsed once. The same reader validates a whole trace before a run (`summarize`),
//! which is how bad input is reported with the file, the line and what was expected instead of surfacing mid-run.
//!
//! Times are relative to the file's first record (of any LUN), so jobs replaying different LUNs of one file keep
//! their recorded alignment. A record earlier than the first one counts as time 0. Records that are neither reads
//! nor writes (blank SYSTOR IOType, blkparse discards and flushes without data) and zero-length ones are skipped.

use std::collections::BTreeSet;
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};

use serde::Serialize;

use crate::config::{BlkparseAction, TraceFormat};

/// One read or write of a trace. `time_ns` is relative to the file's first record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceRecord {
    pub time_ns: u64,
    pub write: bool,
    pub offset_bytes: u64,
    pub bytes: u64,
}

/// Bad trace input: the file, the line (1-based; None for the file as a whole) and what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceError {
    pub path: String,
    pub line: Option<u64>,
    pub message: String,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}: line {line}: {}", self.path, self.message),
            None => write!(f, "{}: {}", self.path, self.message),
        }
    }
}

/// Which records a replay takes: all, one LUN / disk number, or one blkparse device (major, minor).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LunFilter {
    Any,
    Number(u64),
    Device(u64, u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lun {
    Number(u64),
    Device(u64, u64),
}

impl fmt::Display for Lun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lun::Number(n) => write!(f, "{n}"),
            Lun::Device(major, minor) => write!(f, "{major},{minor}"),
        }
    }
}

/// What one line holds.
enum Line {
    /// Nothing to replay: a header.
    Skip,
    /// A blkparse event of another action: not replayed, but it marks the trace's time and lists its device.
    Other { raw_time: u64, lun: Lun },
    /// A record at `raw_time` (format units: ns, or 100 ns ticks for MSR); `io` is None when it is neither a read
    /// nor a write, or has no data.
    Event {
        raw_time: u64,
        lun: Lun,
        io: Option<(bool, u64, u64)>,
    },
    /// blkparse's summary begins: the trace is over.
    End,
}

/// Distinct LUNs a summary lists at most (a trace with more is unusual; the list says it was cut).
const MAX_LUNS_LISTED: usize = 64;
const SECTOR_BYTES: u64 = 512;

pub struct TraceReader<R> {
    name: String,
    input: R,
    format: TraceFormat,
    action: BlkparseAction,
    filter: LunFilter,
    line: String,
    line_no: u64,
    past_first_line: bool,
    first_raw_time: Option<u64>,
    ended: bool,
    /// Records not replayed: other LUNs, neither read nor write, no data.
    pub skipped: u64,
    /// Records of any LUN seen so far, and the latest time of any line (relative to the first): a replay that
    /// loops uses them for the period of one pass.
    pub all_records: u64,
    pub last_time_ns: u64,
    luns: BTreeSet<(u64, u64)>,
    luns_truncated: bool,
}

impl TraceReader<BufReader<File>> {
    /// Open a trace file. `format` None: detected from its first line. `lun`: see `parse_lun`.
    pub fn open(
        path: &str,
        format: Option<TraceFormat>,
        lun: Option<&str>,
        action: BlkparseAction,
    ) -> Result<Self, TraceError> {
        let file = File::open(path).map_err(|e| TraceError {
            path: path.into(),
            line: None,
            message: format!("cannot open: {e}"),
        })?;
        Self::new(
            path,
            BufReader::with_capacity(1 << 16, file),
            format,
            lun,
            action,
        )
    }
}

impl<R: BufRead + Seek> TraceReader<R> {
    pub fn new(
        name: &str,
        mut input: R,
        format: Option<TraceFormat>,
        lun: Option<&str>,
        action: BlkparseAction,
    ) -> Result<Self, TraceError> {
        let error = |line: Option<u64>, message: String| TraceError {
            path: name.into(),
            line,
            message,
        };
        let format = match format {
            Some(f) => f,
            None => detect(&mut input).map_err(|(line, m)| error(line, m))?,
        };
        input
            .seek(SeekFrom::Start(0))
            .map_err(|e| error(None, format!("cannot read: {e}")))?;
        let filter = match lun {
            None => LunFilter::Any,
            Some(text) => parse_lun(format, text).map_err(|m| error(None, m))?,
        };
        Ok(Self {
            name: name.into(),
            input,
            format,
            action,
            filter,
            line: String::new(),
            line_no: 0,
            past_first_line: false,
            first_raw_time: None,
            ended: false,
            skipped: 0,
            all_records: 0,
            last_time_ns: 0,
            luns: BTreeSet::new(),
            luns_truncated: false,
        })
    }

    pub fn format(&self) -> TraceFormat {
        self.format
    }

    /// The next record to replay, None at the end of the trace.
    pub fn next_record(&mut self) -> Result<Option<TraceRecord>, TraceError> {
        while !self.ended {
            self.line.clear();
            let read = self
                .input
                .read_line(&mut self.line)
                .map_err(|e| TraceError {
                    path: self.name.clone(),
                    line: Some(self.line_no + 1),
                    message: if e.kind() == std::io::ErrorKind::InvalidData {
                        "not UTF-8 text (a compressed or binary file? decompress it first)".into()
                    } else {
                        format!("cannot read: {e}")
                    },
                })?;
            if read == 0 {
                self.ended = true;
                break;
            }
            self.line_no += 1;
            let text = self.line.trim().trim_start_matches('\u{feff}');
            if text.is_empty() {
                continue;
            }
            // A CSV header may only be the first line with content.
            let first = !std::mem::replace(&mut self.past_first_line, true);
            let parsed = match self.format {
                TraceFormat::Systor17 => parse_systor17(text, first),
                TraceFormat::Msr => parse_msr(text, first),
                TraceFormat::Blkparse => parse_blkparse(text, self.action),
            };
            let parsed = parsed.map_err(|message| TraceError {
                path: self.name.clone(),
                line: Some(self.line_no),
                message,
            })?;
            match parsed {
                Line::Skip => continue,
                Line::End => self.ended = true,
                Line::Other { raw_time, lun } => {
                    self.time_ns(raw_time);
                    self.note_lun(lun);
                }
                Line::Event { raw_time, lun, io } => {
                    if let Some(record) = self.event(raw_time, lun, io) {
                        return Ok(Some(record));
                    }
                }
            }
        }
        Ok(None)
    }

    /// `raw_time` relative to the file's first record, in ns.
    fn time_ns(&mut self, raw_time: u64) -> u64 {
        let first = *self.first_raw_time.get_or_insert(raw_time);
        let ticks = raw_time.saturating_sub(first);
        let time_ns = match self.format {
            TraceFormat::Msr => ticks.saturating_mul(100),
            _ => ticks,
        };
        self.last_time_ns = self.last_time_ns.max(time_ns);
        time_ns
    }

    fn note_lun(&mut self, lun: Lun) {
        let key = match lun {
            Lun::Number(n) => (n, u64::MAX),
            Lun::Device(major, minor) => (major, minor),
        };
        if !self.luns.contains(&key) {
            if self.luns.len() < MAX_LUNS_LISTED {
                self.luns.insert(key);
            } else {
                self.luns_truncated = true;
            }
        }
    }

    fn event(
        &mut self,
        raw_time: u64,
        lun: Lun,
        io: Option<(bool, u64, u64)>,
    ) -> Option<TraceRecord> {
        let time_ns = self.time_ns(raw_time);
        self.all_records += 1;
        self.note_lun(lun);
        let wanted = match (self.filter, lun) {
            (LunFilter::Any, _) => true,
            (LunFilter::Number(want), Lun::Number(n)) => want == n,
            (LunFilter::Device(a, b), Lun::Device(major, minor)) => (a, b) == (major, minor),
            _ => false,
        };
        match io {
            Some((write, offset_bytes, bytes)) if wanted => Some(TraceRecord {
                time_ns,
                write,
                offset_bytes,
                bytes,
            }),
            _ => {
                self.skipped += 1;
                None
            }
        }
    }

    /// Start again from the first line (a looping replay). Times stay relative to the first record.
    pub fn rewind(&mut self) -> Result<(), TraceError> {
        self.input
            .seek(SeekFrom::Start(0))
            .map_err(|e| TraceError {
                path: self.name.clone(),
                line: None,
                message: format!("cannot read: {e}"),
            })?;
        self.line_no = 0;
        self.past_first_line = false;
        self.ended = false;
        Ok(())
    }

    /// LUNs (disk numbers, devices) seen so far, as `replay_lun` takes them.
    pub fn luns(&self) -> Vec<String> {
        self.luns
            .iter()
            .map(|&(a, b)| {
                if b == u64::MAX {
                    Lun::Number(a).to_string()
                } else {
                    Lun::Device(a, b).to_string()
                }
            })
            .collect()
    }
}

/// What a whole trace holds for one replay selection: for validation before a run, and for checking a replay.
#[derive(Debug, Clone, Serialize)]
pub struct TraceSummary {
    pub format: TraceFormat,
    /// Records the replay issues, by direction, with their bytes as recorded.
    pub records: u64,
    pub reads: u64,
    pub writes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub max_bytes: u64,
    /// Records not replayed (other LUNs, neither read nor write, no data).
    pub skipped: u64,
    /// Time of the first and last replayed record, relative to the file's first record.
    pub first_ns: u64,
    pub last_ns: u64,
    /// Latest record time of any LUN: the span of the file.
    pub span_ns: u64,
    pub luns: Vec<String>,
    pub luns_truncated: bool,
}

/// Read a whole trace as a replay would (same parser, same selection) and total it up.
pub fn summarize(
    path: &str,
    format: Option<TraceFormat>,
    lun: Option<&str>,
    action: BlkparseAction,
) -> Result<TraceSummary, TraceError> {
    let mut reader = TraceReader::open(path, format, lun, action)?;
    summarize_reader(&mut reader)
}

pub fn summarize_reader<R: BufRead + Seek>(
    reader: &mut TraceReader<R>,
) -> Result<TraceSummary, TraceError> {
    let mut s = TraceSummary {
        format: reader.format,
        records: 0,
        reads: 0,
        writes: 0,
        read_bytes: 0,
        write_bytes: 0,
        max_bytes: 0,
        skipped: 0,
        first_ns: 0,
        last_ns: 0,
        span_ns: 0,
        luns: Vec::new(),
        luns_truncated: false,
    };
    while let Some(r) = reader.next_record()? {
        if s.records == 0 {
            s.first_ns = r.time_ns;
        }
        s.records += 1;
        s.last_ns = s.last_ns.max(r.time_ns);
        s.max_bytes = s.max_bytes.max(r.bytes);
        if r.write {
            s.writes += 1;
            s.write_bytes += r.bytes;
        } else {
            s.reads += 1;
            s.read_bytes += r.bytes;
        }
    }
    s.skipped = reader.skipped;
    s.span_ns = reader.last_time_ns;
    s.luns = reader.luns();
    s.luns_truncated = reader.luns_truncated;
    Ok(s)
}

/// `replay_lun` as the format names LUNs: a number for systor17 (LUN) and msr (DiskNumber), `major,minor` for
/// blkparse.
fn parse_lun(format: TraceFormat, text: &str) -> Result<LunFilter, String> {
    let text = text.trim();
    match format {
        TraceFormat::Systor17 | TraceFormat::Msr => text.parse::<u64>().map(LunFilter::Number).map_err(|_| {
            let (name, what) = if format == TraceFormat::Msr {
                ("an msr", "disks")
            } else {
                ("a systor17", "LUNs")
            };
            format!(
                "replay_lun: {name} trace numbers its {what}: expected an integer >= 0, got {}",
                show(text)
            )
        }),
        TraceFormat::Blkparse => parse_device(text)
            .map(|(a, b)| LunFilter::Device(a, b))
            .ok_or_else(|| {
                format!(
                    "replay_lun: a blkparse trace names its devices major,minor: expected e.g. 259,0, got {}",
                    show(text)
                )
            }),
    }
}

fn parse_device(text: &str) -> Option<(u64, u64)> {
    let (major, minor) = text.split_once(',')?;
    Some((major.trim().parse().ok()?, minor.trim().parse().ok()?))
}

const SYSTOR17_FIELDS: &str = "Timestamp,Response,IOType,LUN,Offset,Size";
const MSR_FIELDS: &str = "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime";
const BLKPARSE_FIELDS: &str =
    "major,minor cpu sequence seconds.nanoseconds pid action rwbs [sector + blocks] [process]";

/// Tell the format from the first non-empty line. Errors carry the line number where there is one.
fn detect<R: BufRead>(input: &mut R) -> Result<TraceFormat, (Option<u64>, String)> {
    let mut head = [0u8; 2];
    let mut line = String::new();
    let mut line_no = 0;
    // gzip's magic bytes: the SNIA and MSR traces are distributed compressed.
    if let Ok(buf) = input.fill_buf() {
        if buf.len() >= 2 {
            head.copy_from_slice(&buf[..2]);
            if head == [0x1f, 0x8b] {
                return Err((
                    None,
                    "gzip-compressed: decompress it first (gunzip), iosched reads the text".into(),
                ));
            }
        }
    }
    loop {
        line.clear();
        let read = input
            .by_ref()
            .take(1 << 20)
            .read_line(&mut line)
            .map_err(|e| {
                (
                    Some(line_no + 1),
                    if e.kind() == std::io::ErrorKind::InvalidData {
                        "not UTF-8 text (a compressed or binary file? decompress it first)".into()
                    } else {
                        format!("cannot read: {e}")
                    },
                )
            })?;
        if read == 0 {
            return Err((None, "empty trace: no records".into()));
        }
        line_no += 1;
        let text = line.trim().trim_start_matches('\u{feff}'); // a byte-order mark from Windows tools
        if text.is_empty() {
            continue;
        }
        if text.starts_with("fio version") {
            return Err((
                Some(line_no),
                "fio's own iolog format is not supported: give a trace as SYSTOR '17 CSV, MSR Cambridge CSV or blkparse text".into(),
            ));
        }
        let tokens: Vec<&str> = text.split_whitespace().collect();
        if tokens.len() >= 7 && parse_device(tokens[0]).is_some() {
            return Ok(TraceFormat::Blkparse);
        }
        let fields: Vec<&str> = text.split(',').map(str::trim).collect();
        let is_header = |names: &str| {
            names
                .split(',')
                .zip(&fields)
                .all(|(n, f)| n.eq_ignore_ascii_case(f))
                && names.split(',').count() == fields.len()
        };
        if fields.len() == 6
            && (is_header(SYSTOR17_FIELDS) || matches!(fields[2], "R" | "W" | "r" | "w" | ""))
        {
            return Ok(TraceFormat::Systor17);
        }
        if fields.len() == 7
            && (is_header(MSR_FIELDS)
                || fields[3].eq_ignore_ascii_case("read")
                || fields[3].eq_ignore_ascii_case("write"))
        {
            return Ok(TraceFormat::Msr);
        }
        return Err((
            Some(line_no),
            format!(
                "cannot tell the trace format from {}: expected SYSTOR '17 CSV ({SYSTOR17_FIELDS}), MSR Cambridge \
                 CSV ({MSR_FIELDS}) or blkparse text ({BLKPARSE_FIELDS}); name it with read_iolog_format \
                 (systor17, msr, blkparse)",
                show(text)
            ),
        ));
    }
}

/// Split a CSV line into exactly N trimmed fields, or say what was expected.
fn fields<'a, const N: usize>(line: &'a str, names: &str) -> Result<[&'a str; N], String> {
    let mut out = [""; N];
    let mut count = 0;
    for part in line.split(',') {
        if count < N {
            out[count] = part.trim();
        }
        count += 1;
    }
    if count != N {
        return Err(format!(
            "expected {N} comma-separated fields ({names}), got {count} in {}",
            show(line)
        ));
    }
    Ok(out)
}

fn parse_systor17(line: &str, first_line: bool) -> Result<Line, String> {
    let [timestamp, response, io_type, lun, offset, size] = fields::<6>(line, SYSTOR17_FIELDS)?;
    if first_line && timestamp.eq_ignore_ascii_case("timestamp") {
        return Ok(Line::Skip);
    }
    let raw_time = parse_seconds_ns(timestamp).map_err(|e| format!("Timestamp: {e}"))?;
    // The recorded response time is not replayed (the simulated device makes its own): a number, or blank.
    if !response.is_empty() {
        parse_seconds_ns(response).map_err(|e| format!("Response: {e}"))?;
    }
    let write = match io_type {
        "R" | "r" => Some(false),
        "W" | "w" => Some(true),
        "" => None, // the SYSTOR '17 README: IOType is R, W or blank
        other => {
            return Err(format!(
                "IOType: expected R, W or blank, got {}",
                show(other)
            ))
        }
    };
    let lun = parse_u64(lun).map_err(|e| format!("LUN: {e}"))?;
    let offset = parse_u64(offset).map_err(|e| format!("Offset: {e}"))?;
    let size = parse_size(size)?;
    Ok(Line::Event {
        raw_time,
        lun: Lun::Number(lun),
        io: write.filter(|_| size > 0).map(|w| (w, offset, size)),
    })
}

fn parse_msr(line: &str, first_line: bool) -> Result<Line, String> {
    let [timestamp, _host, disk, io_type, offset, size, response] = fields::<7>(line, MSR_FIELDS)?;
    if first_line && timestamp.eq_ignore_ascii_case("timestamp") {
        return Ok(Line::Skip);
    }
    let raw_time = parse_u64(timestamp).map_err(|_| {
        format!(
            "Timestamp: expected Windows FILETIME ticks (an integer), got {}",
            show(timestamp)
        )
    })?;
    let disk = parse_u64(disk).map_err(|e| format!("DiskNumber: {e}"))?;
    let write = if io_type.eq_ignore_ascii_case("read") {
        false
    } else if io_type.eq_ignore_ascii_case("write") {
        true
    } else {
        return Err(format!(
            "Type: expected Read or Write, got {}",
            show(io_type)
        ));
    };
    let offset = parse_u64(offset).map_err(|e| format!("Offset: {e}"))?;
    let size = parse_size(size)?;
    if !response.is_empty() {
        parse_u64(response).map_err(|e| format!("ResponseTime: {e}"))?;
    }
    Ok(Line::Event {
        raw_time,
        lun: Lun::Number(disk),
        io: (size > 0).then_some((write, offset, size)),
    })
}

fn parse_blkparse(line: &str, action: BlkparseAction) -> Result<Line, String> {
    let mut tokens = line.split_whitespace();
    let first = tokens.next().unwrap_or("");
    let Some((major, minor)) = parse_device(first) else {
        if is_blkparse_summary(line) {
            return Ok(Line::End);
        }
        return Err(format!(
            "expected a blkparse event line ({BLKPARSE_FIELDS}), got {}",
            show(line)
        ));
    };
    let mut next = |what: &str| {
        tokens.next().ok_or_else(|| {
            format!(
                "{what}: missing (expected {BLKPARSE_FIELDS}) in {}",
                show(line)
            )
        })
    };
    let cpu = next("cpu")?;
    parse_u64(cpu).map_err(|e| format!("cpu: {e}"))?;
    let sequence = next("sequence")?;
    parse_u64(sequence).map_err(|e| format!("sequence: {e}"))?;
    let time = next("time")?;
    let raw_time = parse_seconds_ns(time).map_err(|e| format!("time: {e}"))?;
    let pid = next("pid")?;
    parse_u64(pid).map_err(|e| format!("pid: {e}"))?;
    let event = next("action")?;
    let rwbs = next("rwbs")?;
    let lun = Lun::Device(major, minor);
    let wanted = match action {
        BlkparseAction::D => "D",
        BlkparseAction::Q => "Q",
    };
    if event != wanted {
        if !is_action(event) {
            return Err(format!(
                "action: expected one letter (Q, G, I, D, C, ...), got {}",
                show(event)
            ));
        }
        // Other actions (G, I, M, C, P, U, A, X, m messages, ...) are not replayed but mark the trace's time.
        return Ok(Line::Other { raw_time, lun });
    }
    // D and Q of a data request: `sector + blocks [process]`; a flush without data has no sector.
    let (Some(sector), Some(plus)) = (tokens.next(), tokens.next()) else {
        return Ok(Line::Event {
            raw_time,
            lun,
            io: None,
        });
    };
    if plus != "+" {
        return Ok(Line::Event {
            raw_time,
            lun,
            io: None,
        });
    }
    let sector = parse_u64(sector).map_err(|e| format!("sector: {e}"))?;
    let blocks = tokens
        .next()
        .ok_or_else(|| format!("blocks: missing after \"+\" in {}", show(line)))?;
    let blocks = parse_u64(blocks).map_err(|e| format!("blocks: {e}"))?;
    // RWBS: an optional F (preflush), then R, W, D (discard), E (secure erase) or N, then modifiers.
    let write = match rwbs.trim_start_matches('F').chars().next() {
        Some('R') => Some(false),
        Some('W') => Some(true),
        Some('D' | 'E' | 'N') | None => None,
        Some(_) => {
            return Err(format!(
                "rwbs: expected R, W, D, E or N (with F/A/S/M modifiers), got {}",
                show(rwbs)
            ))
        }
    };
    let bytes = blocks
        .checked_mul(SECTOR_BYTES)
        .filter(|&b| b <= u32::MAX as u64)
        .ok_or_else(|| {
            format!("blocks: {blocks} sectors is more than one I/O can carry (4 GiB)")
        })?;
    let offset = sector
        .checked_mul(SECTOR_BYTES)
        .ok_or_else(|| format!("sector: {sector} is beyond any device"))?;
    Ok(Line::Event {
        raw_time,
        lun,
        io: write.filter(|_| bytes > 0).map(|w| (w, offset, bytes)),
    })
}

/// blkparse's actions are one letter (A B C D F G I M P Q S T U X) or `m` for a message.
fn is_action(token: &str) -> bool {
    token.len() == 1 && token.chars().all(|c| c.is_ascii_alphabetic())
}

/// The summary blkparse prints after the events: `CPU0 (259,0):`, `Total (259,0):`, ...
fn is_blkparse_summary(line: &str) -> bool {
    let head = line.split(" (").next().unwrap_or("");
    (head.starts_with("CPU") && head[3..].chars().all(|c| c.is_ascii_digit()) && head.len() > 3)
        || head == "Total"
}

fn parse_size(text: &str) -> Result<u64, String> {
    let size = parse_u64(text).map_err(|e| format!("Size: {e}"))?;
    if size > u32::MAX as u64 {
        return Err(format!(
            "Size: {size} bytes is more than one I/O can carry (4 GiB)"
        ));
    }
    Ok(size)
}

fn parse_u64(text: &str) -> Result<u64, String> {
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        if let Ok(v) = text.parse() {
            return Ok(v);
        }
    }
    Err(format!("expected an integer >= 0, got {}", show(text)))
}

/// Decimal seconds (`1456095145.133076000`, `0.5`, `12`) to integer nanoseconds, exactly (no floating point);
/// digits beyond nanoseconds are dropped.
fn parse_seconds_ns(text: &str) -> Result<u64, String> {
    let bad = || {
        format!(
            "expected seconds like 1456095145.133076000, got {}",
            show(text)
        )
    };
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty() && fraction.is_empty() {
        return Err(bad());
    }
    if !whole.bytes().all(|b| b.is_ascii_digit()) || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let seconds: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| bad())?
    };
    let mut nanos: u64 = 0;
    for i in 0..9 {
        let digit = fraction.as_bytes().get(i).map_or(0, |b| (b - b'0') as u64);
        nanos = nanos * 10 + digit;
    }
    seconds
        .checked_mul(1_000_000_000)
        .and_then(|ns| ns.checked_add(nanos))
        .ok_or_else(bad)
}

/// A value as error messages quote it (cut after 80 characters).
fn show(text: &str) -> String {
    let cut: String = text.chars().take(80).collect();
    let ellipsis = if cut.len() < text.len() { "…" } else { "" };
    format!("\"{}{ellipsis}\"", cut.replace('"', "\\\""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn reader(
        text: &str,
        format: Option<TraceFormat>,
        lun: Option<&str>,
    ) -> Result<TraceReader<Cursor<Vec<u8>>>, TraceError> {
        TraceReader::new(
            "t.csv",
            Cursor::new(text.as_bytes().to_vec()),
            format,
            lun,
            BlkparseAction::D,
        )
    }

    fn records(
        text: &str,
        format: Option<TraceFormat>,
        lun: Option<&str>,
    ) -> Result<Vec<TraceRecord>, TraceError> {
        let mut r = reader(text, format, lun)?;
        let mut out = Vec::new();
        while let Some(rec) = r.next_record()? {
            out.push(rec);
        }
        Ok(out)
    }

    fn error(text: &str, format: Option<TraceFormat>) -> String {
        records(text, format, None).unwrap_err().to_string()
    }

    fn rec(time_ns: u64, write: bool, offset_bytes: u64, bytes: u64) -> TraceRecord {
        TraceRecord {
            time_ns,
            write,
            offset_bytes,
            bytes,
        }
    }

    const SYSTOR: &str = "Timestamp,Response,IOType,LUN,Offset,Size\n\
        1456095145.133076000,0.000806000,R,0,899056122368,131072\n\
        1456095145.133100500,0.000100000,W,1,4096,4096\n\
        1456095145.200000000,0.000100000,,0,8192,4096\n\
        1456095146.5,0.0001,w,0,0,512\n";

    #[test]
    fn systor17_records_are_relative_to_the_first_and_blank_iotypes_are_skipped() {
        let got = records(SYSTOR, None, None).unwrap();
        assert_eq!(
            got,
            vec![
                rec(0, false, 899_056_122_368, 131_072),
                rec(24_500, true, 4096, 4096),
                rec(1_366_924_000, true, 0, 512),
            ]
        );
        let mut r = reader(SYSTOR, None, None).unwrap();
        let s = summarize_reader(&mut r).unwrap();
        assert_eq!(
            (s.format, s.records, s.skipped, s.reads, s.writes),
            (TraceFormat::Systor17, 3, 1, 1, 2)
        );
        assert_eq!(s.luns, vec!["0", "1"]);
    }

    #[test]
    fn a_byte_order_mark_and_blank_response_times_are_accepted() {
        let text = "\u{feff}\r\nTimestamp,Response,IOType,LUN,Offset,Size\r\n1.0,,R,0,0,4096\r\n";
        assert_eq!(
            records(text, None, None).unwrap(),
            vec![rec(0, false, 0, 4096)]
        );
        let msr = "\u{feff}128166372003061629,hm,1,Read,0,4096,\n";
        assert_eq!(
            records(msr, None, None).unwrap(),
            vec![rec(0, false, 0, 4096)]
        );
        assert!(error("1.0,x,R,0,0,4096\n", None)
            .ends_with("Response: expected seconds like 1456095145.133076000, got \"x\""));
    }

    #[test]
    fn a_lun_is_selected_and_the_others_skipped_with_the_same_time_zero() {
        let got = records(SYSTOR, None, Some("1")).unwrap();
        assert_eq!(got, vec![rec(24_500, true, 4096, 4096)]);
        let got = records(SYSTOR, None, Some("7")).unwrap();
        assert!(got.is_empty());
        assert_eq!(
            reader(SYSTOR, None, Some("x")).err().unwrap().to_string(),
            "t.csv: replay_lun: a systor17 trace numbers its LUNs: expected an integer >= 0, got \"x\""
        );
    }

    #[test]
    fn msr_ticks_are_100_ns_and_disks_select() {
        let text = "128166372003061629,hm,1,Read,3154152448,4096,1331\n\
                    128166372003061639,hm,0,Write,0,65536,200\n\
                    128166372003071629,hm,1,write,512,512,2\n";
        assert_eq!(
            records(text, None, None).unwrap(),
            vec![
                rec(0, false, 3_154_152_448, 4096),
                rec(1_000, true, 0, 65_536),
                rec(1_000_000, true, 512, 512)
            ]
        );
        assert_eq!(
            records(text, Some(TraceFormat::Msr), Some("0")).unwrap(),
            vec![rec(1_000, true, 0, 65_536)]
        );
        let header = format!("Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n{text}");
        assert_eq!(records(&header, None, None).unwrap().len(), 3);
    }

    const BLKPARSE: &str = "\
  259,0    3        1     0.000000000   697  Q   R 223490 + 8 [fio]
  259,0    3        2     0.000001000   697  G   R 223490 + 8 [fio]
  259,0    3        3     0.000001829   697  P   N [fio]
  259,0    3        4     0.000002197   697  Q  WS 1000 + 16 [fio]
  259,0    3        5     0.000002500   697  M  WS 1016 + 8 [fio]
  259,0    3        6     0.000003000   697  U   N [fio] 1
  259,0    3        7     0.000004000   697  D   R 223490 + 8 [fio]
  259,1    3        8     0.000005000   697  D  WS 1000 + 24 [fio]
  259,0    3        9     0.000005500   697  D  FN [fio]
  259,0    3       10     0.000006000   697  D   D 5000 + 2048 [fstrim]
  259,0    0        1     0.000090000     0  C   R 223490 + 8 [0]
  259,0    3       11     0.000100000   697  m   N cfq697 some message
CPU0 (259,0):
 Reads Queued:           1,        4KiB\t Writes Queued:           1,        8KiB
Total (259,0):
Throughput (R/W): 4KiB/s / 8KiB/s
";

    #[test]
    fn blkparse_replays_d_or_q_events_and_stops_at_the_summary() {
        assert_eq!(
            records(BLKPARSE, None, None).unwrap(),
            vec![
                rec(4_000, false, 223_490 * 512, 4096),
                rec(5_000, true, 512_000, 12_288)
            ]
        );
        let mut r = TraceReader::new(
            "t",
            Cursor::new(BLKPARSE.as_bytes().to_vec()),
            None,
            None,
            BlkparseAction::Q,
        )
        .unwrap();
        let mut q = Vec::new();
        while let Some(x) = r.next_record().unwrap() {
            q.push(x);
        }
        assert_eq!(
            q,
            vec![
                rec(0, false, 223_490 * 512, 4096),
                rec(2_197, true, 512_000, 8192)
            ]
        );
        assert_eq!(
            records(BLKPARSE, None, Some("259,1")).unwrap(),
            vec![rec(5_000, true, 512_000, 12_288)]
        );
        assert_eq!(records(BLKPARSE, None, Some(" 259 , 0 ")).unwrap().len(), 1);
        let mut r = reader(BLKPARSE, None, None).unwrap();
        assert_eq!(
            summarize_reader(&mut r).unwrap().luns,
            vec!["259,0", "259,1"]
        );
    }

    #[test]
    fn malformed_lines_name_the_file_the_line_and_what_was_expected() {
        let cases: &[(&str, Option<TraceFormat>, &str)] = &[
            (
                "Timestamp,Response,IOType,LUN,Offset,Size\n1.0,0.1,R,0,0,4096\n1.1,0.1,X,0,0,4096\n",
                None,
                "t.csv: line 3: IOType: expected R, W or blank, got \"X\"",
            ),
            (
                "1.0,0.1,R,0,0,4096\n1.1,0.1,R,0,-5,4096\n",
                None,
                "t.csv: line 2: Offset: expected an integer >= 0, got \"-5\"",
            ),
            (
                "1.0,0.1,R,0,0,4096\n1.1,0.1,R,0,0\n",
                None,
                "t.csv: line 2: expected 6 comma-separated fields (Timestamp,Response,IOType,LUN,Offset,Size), got 5 in \"1.1,0.1,R,0,0\"",
            ),
            (
                "1.0,0.1,R,0,0,4096\n1e3,0.1,R,0,0,4096\n",
                None,
                "t.csv: line 2: Timestamp: expected seconds like 1456095145.133076000, got \"1e3\"",
            ),
            (
                "1.0,0.1,R,0,0,4096\n\n\n2.0,0.1,R,0,0,99999999999\n",
                None,
                "t.csv: line 4: Size: 99999999999 bytes is more than one I/O can carry (4 GiB)",
            ),
            (
                "128166372003061629,hm,1,Read,0,4096,1\n128166372003061629,hm,1,Trim,0,4096,1\n",
                None,
                "t.csv: line 2: Type: expected Read or Write, got \"Trim\"",
            ),
            (
                "128166372003061629,hm,1,Read,0,4096,1\n1.5,hm,1,Read,0,4096,1\n",
                None,
                "t.csv: line 2: Timestamp: expected Windows FILETIME ticks (an integer), got \"1.5\"",
            ),
            (
                "  8,0  3  1  0.000000000  697  D  R 10 + 8 [fio]\n  8,0  3  2  0.00000x  697  D  R 10 + 8 [fio]\n",
                None,
                "t.csv: line 2: time: expected seconds like 1456095145.133076000, got \"0.00000x\"",
            ),
            (
                "  8,0  3  1  0.000000000  697  D  R 10 + 8 [fio]\nhello world\n",
                None,
                "t.csv: line 2: expected a blkparse event line (major,minor cpu sequence seconds.nanoseconds pid action rwbs [sector + blocks] [process]), got \"hello world\"",
            ),
            (
                "  8,0  3  1  0.000000000  697  D  R 10 + x [fio]\n",
                None,
                "t.csv: line 1: blocks: expected an integer >= 0, got \"x\"",
            ),
            (
                "  8,0  3  1  0.000000000  697  D  Z 10 + 8 [fio]\n",
                None,
                "t.csv: line 1: rwbs: expected R, W, D, E or N (with F/A/S/M modifiers), got \"Z\"",
            ),
            (
                "1.0,0.1,R,0,0,4096\n",
                Some(TraceFormat::Msr),
                "t.csv: line 1: expected 7 comma-separated fields (Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime), got 6 in \"1.0,0.1,R,0,0,4096\"",
            ),
        ];
        for (text, format, want) in cases {
            assert_eq!(&error(text, *format), want, "{text}");
        }
    }

    #[test]
    fn unknown_formats_are_refused_with_what_would_be_accepted() {
        let e = reader("\n\nhello,world\n", None, None).err().unwrap();
        assert_eq!(e.line, Some(3));
        assert!(
            e.message.starts_with(
                "cannot tell the trace format from \"hello,world\": expected SYSTOR '17 CSV"
            ),
            "{e}"
        );
        assert!(e.message.contains("read_iolog_format"), "{e}");
        let e = reader("fio version 2 iolog\n/dev/sda add\n", None, None)
            .err()
            .unwrap();
        assert!(
            e.to_string()
                .starts_with("t.csv: line 1: fio's own iolog format is not supported"),
            "{e}"
        );
        let e = reader("\n \n", None, None).err().unwrap();
        assert_eq!(e.to_string(), "t.csv: empty trace: no records");
        let gz = TraceReader::new(
            "t.gz",
            Cursor::new(vec![0x1f, 0x8b, 8, 0]),
            None,
            None,
            BlkparseAction::D,
        );
        assert!(gz.err().unwrap().message.starts_with("gzip-compressed"));
        let binary = TraceReader::new(
            "b",
            Cursor::new(vec![0xff, 0xfe, b'\n']),
            Some(TraceFormat::Msr),
            None,
            BlkparseAction::D,
        )
        .unwrap()
        .next_record()
        .unwrap_err();
        assert!(binary.message.starts_with("not UTF-8 text"), "{binary}");
    }

    #[test]
    fn decimal_seconds_convert_exactly() {
        assert_eq!(
            parse_seconds_ns("1456095145.133076000"),
            Ok(1_456_095_145_133_076_000)
        );
        assert_eq!(parse_seconds_ns("0.5"), Ok(500_000_000));
        assert_eq!(parse_seconds_ns("12"), Ok(12_000_000_000));
        assert_eq!(parse_seconds_ns(".000000001999"), Ok(1));
        assert!(
            parse_seconds_ns("").is_err()
                && parse_seconds_ns(".").is_err()
                && parse_seconds_ns("-1").is_err()
        );
        assert!(parse_seconds_ns("99999999999999999999").is_err());
    }

    #[test]
    fn rewinding_replays_the_same_records_with_the_same_time_zero() {
        let mut r = reader(SYSTOR, None, None).unwrap();
        let mut first = Vec::new();
        while let Some(x) = r.next_record().unwrap() {
            first.push(x);
        }
        r.rewind().unwrap();
        let mut second = Vec::new();
        while let Some(x) = r.next_record().unwrap() {
            second.push(x);
        }
        assert_eq!(first, second);
    }
}
