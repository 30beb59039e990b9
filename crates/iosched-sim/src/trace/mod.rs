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
use std::io::{BufRead, BufReader, Seek, SeekFrom};

use serde::Serialize;

use crate::config::{BlkparseAction, TraceFormat};

mod blkparse;
mod csv;
mod detect;
mod text;

use blkparse::{parse_blkparse, parse_device};
use csv::{parse_msr, parse_systor17};
use detect::detect;
use text::show;

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

/// Helpers for the tests of this module's files: a reader over text, and its records or its error.
#[cfg(test)]
mod test_support {
    use super::*;
    use std::io::Cursor;

    pub(super) fn reader(
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

    pub(super) fn records(
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

    pub(super) fn error(text: &str, format: Option<TraceFormat>) -> String {
        records(text, format, None).unwrap_err().to_string()
    }

    pub(super) fn rec(time_ns: u64, write: bool, offset_bytes: u64, bytes: u64) -> TraceRecord {
        TraceRecord {
            time_ns,
            write,
            offset_bytes,
            bytes,
        }
    }

    pub(super) const SYSTOR: &str = "Timestamp,Response,IOType,LUN,Offset,Size\n\
        1456095145.133076000,0.000806000,R,0,899056122368,131072\n\
        1456095145.133100500,0.000100000,W,1,4096,4096\n\
        1456095145.200000000,0.000100000,,0,8192,4096\n\
        1456095146.5,0.0001,w,0,0,512\n";
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;

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
