//! The two CSV formats: SNIA SYSTOR '17 (seconds, R/W, LUN) and MSR Cambridge (FILETIME ticks, Read/Write, disk
//! number).

use super::text::{parse_seconds_ns, parse_size, parse_u64, show};
use super::{Line, Lun};

pub(super) const SYSTOR17_FIELDS: &str = "Timestamp,Response,IOType,LUN,Offset,Size";
pub(super) const MSR_FIELDS: &str = "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime";

/// Split a CSV line into exactly N trimmed fields, or say what was expected.
pub(super) fn fields<'a, const N: usize>(
    line: &'a str,
    names: &str,
) -> Result<[&'a str; N], String> {
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

pub(super) fn parse_systor17(line: &str, first_line: bool) -> Result<Line, String> {
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

pub(super) fn parse_msr(line: &str, first_line: bool) -> Result<Line, String> {
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

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use crate::config::TraceFormat;
    use crate::trace::summarize_reader;

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
}
