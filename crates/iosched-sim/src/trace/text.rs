//! Numbers and quoting shared by the parsers: integers, sizes, exact decimal seconds, and values as error messages
//! quote them.

pub(super) fn parse_size(text: &str) -> Result<u64, String> {
    let size = parse_u64(text).map_err(|e| format!("Size: {e}"))?;
    if size > u32::MAX as u64 {
        return Err(format!(
            "Size: {size} bytes is more than one I/O can carry (4 GiB)"
        ));
    }
    Ok(size)
}

pub(super) fn parse_u64(text: &str) -> Result<u64, String> {
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        if let Ok(v) = text.parse() {
            return Ok(v);
        }
    }
    Err(format!("expected an integer >= 0, got {}", show(text)))
}

/// Decimal seconds (`1456095145.133076000`, `0.5`, `12`) to integer nanoseconds, exactly (no floating point);
/// digits beyond nanoseconds are dropped.
pub(super) fn parse_seconds_ns(text: &str) -> Result<u64, String> {
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
pub(super) fn show(text: &str) -> String {
    let cut: String = text.chars().take(80).collect();
    let ellipsis = if cut.len() < text.len() { "…" } else { "" };
    format!("\"{}{ellipsis}\"", cut.replace('"', "\\\""))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn values_are_quoted_escaped_and_cut_in_messages() {
        assert_eq!(show("a\"b"), "\"a\\\"b\"");
        let long = "x".repeat(100);
        assert_eq!(show(&long), format!("\"{}…\"", "x".repeat(80)));
        assert_eq!(
            parse_u64("+1"),
            Err("expected an integer >= 0, got \"+1\"".into())
        );
        assert_eq!(
            parse_size("4294967296"),
            Err("Size: 4294967296 bytes is more than one I/O can carry (4 GiB)".into())
        );
        assert_eq!(parse_size("4096"), Ok(4096));
    }
}
