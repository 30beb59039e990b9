//! Telling a trace's format from its first line with content, and refusing what is not a trace with a message that
//! says what would be accepted.

use std::io::{BufRead, Read};

use super::blkparse::{parse_device, BLKPARSE_FIELDS};
use super::csv::{MSR_FIELDS, SYSTOR17_FIELDS};
use super::text::show;
use crate::config::TraceFormat;

/// Tell the format from the first non-empty line. Errors carry the line number where there is one.
pub(super) fn detect<R: BufRead>(input: &mut R) -> Result<TraceFormat, (Option<u64>, String)> {
    // gzip's magic bytes: the SNIA and MSR traces are distributed compressed.
    if input
        .fill_buf()
        .is_ok_and(|buf| buf.starts_with(&[0x1f, 0x8b]))
    {
        return Err((
            None,
            "gzip-compressed: decompress it first (gunzip), iosched reads the text".into(),
        ));
    }
    let mut line = String::new();
    let mut line_no = 0;
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
        if !text.is_empty() {
            return format_of_line(text).map_err(|message| (Some(line_no), message));
        }
    }
}

/// The format a trace's first line with content says it has: a blkparse event line, or a CSV line (or header) with
/// the fields of SYSTOR '17 or MSR Cambridge.
fn format_of_line(text: &str) -> Result<TraceFormat, String> {
    if text.starts_with("fio version") {
        return Err(
            "fio's own iolog format is not supported: give a trace as SYSTOR '17 CSV, MSR Cambridge CSV or blkparse text".into(),
        );
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
    Err(format!(
        "cannot tell the trace format from {}: expected SYSTOR '17 CSV ({SYSTOR17_FIELDS}), MSR Cambridge \
         CSV ({MSR_FIELDS}) or blkparse text ({BLKPARSE_FIELDS}); name it with read_iolog_format \
         (systor17, msr, blkparse)",
        show(text)
    ))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;
    use crate::config::BlkparseAction;
    use crate::trace::TraceReader;
    use std::io::Cursor;

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
    fn a_header_names_its_format_in_any_case_and_a_data_line_by_its_type_field() {
        let header = "timestamp, response, iotype, lun, offset, size";
        assert_eq!(format_of_line(header), Ok(TraceFormat::Systor17));
        assert_eq!(
            format_of_line("1.5,,,0,0,4096"),
            Ok(TraceFormat::Systor17),
            "a blank IOType"
        );
        let msr = "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime";
        assert_eq!(format_of_line(msr), Ok(TraceFormat::Msr));
        assert_eq!(format_of_line("1,hm,0,WRITE,0,512,9"), Ok(TraceFormat::Msr));
        assert_eq!(
            format_of_line("8,16 0 1 0.1 5 D W 0 + 8 [dd]"),
            Ok(TraceFormat::Blkparse)
        );
        assert!(format_of_line("1,hm,0,Trim,0,512,9").is_err());
    }
}
