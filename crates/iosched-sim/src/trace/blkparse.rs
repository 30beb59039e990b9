//! blkparse's default text output: one action (D or Q) is replayed, other event lines only mark the trace's time,
//! and the per-CPU summary blkparse prints after the events ends the trace.

use super::text::{parse_seconds_ns, parse_u64, show};
use super::{Line, Lun, SECTOR_BYTES};
use crate::config::BlkparseAction;

pub(super) const BLKPARSE_FIELDS: &str =
    "major,minor cpu sequence seconds.nanoseconds pid action rwbs [sector + blocks] [process]";

pub(super) fn parse_device(text: &str) -> Option<(u64, u64)> {
    let (major, minor) = text.split_once(',')?;
    Some((major.trim().parse().ok()?, minor.trim().parse().ok()?))
}

pub(super) fn parse_blkparse(line: &str, action: BlkparseAction) -> Result<Line, String> {
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
    let io = request_io(tokens, rwbs, line)?;
    Ok(Line::Event { raw_time, lun, io })
}

/// The I/O of a D or Q line: (write, offset, bytes) from its `sector + blocks [process]` and its RWBS field; None
/// for a request without data (a flush has no sector) or one that is neither a read nor a write.
fn request_io<'a>(
    mut tokens: impl Iterator<Item = &'a str>,
    rwbs: &str,
    line: &str,
) -> Result<Option<(bool, u64, u64)>, String> {
    let (Some(sector), Some("+")) = (tokens.next(), tokens.next()) else {
        return Ok(None);
    };
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
    Ok(write.filter(|_| bytes > 0).map(|w| (w, offset, bytes)))
}

/// blkparse's actions are one letter (A B C D F G I M P Q S T U X) or `m` for a message.
pub(super) fn is_action(token: &str) -> bool {
    token.len() == 1 && token.chars().all(|c| c.is_ascii_alphabetic())
}

/// The summary blkparse prints after the events: `CPU0 (259,0):`, `Total (259,0):`, ...
pub(super) fn is_blkparse_summary(line: &str) -> bool {
    let head = line.split(" (").next().unwrap_or("");
    (head.starts_with("CPU") && head[3..].chars().all(|c| c.is_ascii_digit()) && head.len() > 3)
        || head == "Total"
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;
    use crate::trace::{summarize_reader, TraceReader};
    use std::io::Cursor;

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
    fn the_summary_starts_at_a_cpu_or_total_heading_and_flushes_carry_no_io() {
        assert!(is_blkparse_summary("CPU12 (8,0):") && is_blkparse_summary("Total (8,0):"));
        assert!(!is_blkparse_summary("CPU (8,0):") && !is_blkparse_summary("CPUx (8,0):"));
        let flush = parse_blkparse("8,0 1 2 0.5 9 D FN [kworker]", BlkparseAction::D).unwrap();
        assert!(matches!(
            flush,
            Line::Event {
                io: None,
                raw_time: 500_000_000,
                ..
            }
        ));
        let read = parse_blkparse("8,0 1 2 0.5 9 D RA 16 + 8 [fio]", BlkparseAction::D).unwrap();
        assert!(matches!(
            read,
            Line::Event {
                io: Some((false, 8192, 4096)),
                ..
            }
        ));
    }
}
