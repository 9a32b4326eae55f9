//! The one size grammar of the workspace (K = 1024, as nccl-tests) and its two spellings.
//!
//! [`parse_size`] reads, around optional surrounding whitespace:
//! - the compact form of flags and tables: a plain decimal number (fractions allowed, the result
//!   a whole number of bytes) with an optional unit `K`, `M`, `G` or `T` (case-insensitive), which
//!   may be followed by `iB`: `1048576`, `1.5M`, `64m`, `1KiB`, `100B` (`64MB` is refused: GB means
//!   10^9 in tcpx-perf's output, so a size spelled that way would be ambiguous);
//! - the label form [`format_size_label`] writes: a number, one space, then `B`, `KiB`, `MiB`,
//!   `GiB` or `TiB`: `64 MiB`, `1000 B`.
//!
//! A space before a bare letter (`1 M`) is neither form and is refused, as are signs, exponents,
//! `inf`, `nan` and hex.

/// Binary units by letter.
const UNITS: [(char, u64); 4] = [('K', 1 << 10), ('M', 1 << 20), ('G', 1 << 30), ('T', 1 << 40)];

/// Parses a size (see the module docs for the grammar). The error is one line that names the fix.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let invalid = || format!("invalid size '{s}': use a number with an optional K, M or G suffix (binary)");
    let t = s.trim();
    if is_decimal_unit(t) {
        // GB is 10^9 wherever tcpx-perf prints it: a size written `64MB` would read as 64 x 10^6.
        return Err(format!(
            "invalid size '{s}': sizes are binary (K = 1024); write {0} or {0}iB, not {0}B",
            &t[..t.len() - 1]
        ));
    }
    let (num, mult) = split_unit(t).ok_or_else(invalid)?;
    // Only plain decimal numbers: f64's parser would also take "inf", "nan" and "1e3".
    if num.is_empty()
        || !num.chars().all(|c| c.is_ascii_digit() || c == '.')
        || !num.chars().any(|c| c.is_ascii_digit())
    {
        return Err(invalid());
    }
    if !num.contains('.') {
        return num
            .parse::<u64>()
            .ok()
            .and_then(|v| v.checked_mul(mult))
            .ok_or_else(|| format!("invalid size '{s}': too large"));
    }
    let v: f64 = num.parse().map_err(|_| invalid())?;
    let bytes = v * mult as f64;
    if bytes >= u64::MAX as f64 {
        return Err(format!("invalid size '{s}': too large"));
    }
    if bytes.fract() != 0.0 {
        return Err(format!("invalid size '{s}': {bytes} is not a whole number of bytes"));
    }
    Ok(bytes as u64)
}

/// `64MB`, `1kB`: a unit letter then a bare `B`, which means powers of ten in tcpx-perf's own
/// output (GB = 10^9), so it is refused as a size rather than read as binary.
fn is_decimal_unit(t: &str) -> bool {
    t.strip_suffix('B')
        .and_then(|r| r.chars().last())
        .is_some_and(|c| UNITS.iter().any(|(u, _)| c.eq_ignore_ascii_case(u)) && !t.ends_with("iB"))
}

/// Splits `t` into its number and the unit's multiplier; `None` when a space stands anywhere but
/// before a unit spelled with `B` (the label form).
fn split_unit(t: &str) -> Option<(&str, u64)> {
    let (rest, spelled_with_b) = match t.strip_suffix("iB") {
        Some(r) => (r, true),
        None => match t.strip_suffix('B') {
            Some(r) => (r, true),
            None => (t, false),
        },
    };
    let (num, mult) = match rest.chars().last() {
        Some(c) => match UNITS.iter().find(|(u, _)| c.eq_ignore_ascii_case(u)) {
            Some(&(_, m)) => (&rest[..rest.len() - 1], m),
            // "iB" without a unit letter ("5iB") is no unit.
            None if t.ends_with("iB") => return None,
            None => (rest, 1),
        },
        None => (rest, 1),
    };
    // The label form: exactly one space between the number and a unit spelled with B.
    let num = match num.strip_suffix(' ') {
        Some(n) if spelled_with_b => n,
        _ => num,
    };
    Some((num, mult))
}

/// Formats a size in the compact form with the largest binary suffix that divides it exactly:
/// `64M`, `1G`, `1536K`, `100`, `0`. [`parse_size`] reads it back to the same value. (No `T`:
/// flags and tables have always stopped at `G`.)
pub fn format_size(bytes: u64) -> String {
    if bytes == 0 {
        return "0".into();
    }
    for (suffix, unit) in UNITS[..3].iter().rev() {
        if bytes & (unit - 1) == 0 {
            return format!("{}{}", bytes / unit, suffix);
        }
    }
    bytes.to_string()
}

/// Formats a size for prose and plot axes: binary units when it is a whole number of them
/// (`64 MiB`), else bytes (`1000 B`). [`parse_size`] reads it back to the same value.
pub fn format_size_label(bytes: u64) -> String {
    for (letter, unit) in UNITS.iter().rev() {
        if bytes >= *unit && bytes.is_multiple_of(*unit) {
            return format!("{} {letter}iB", bytes / unit);
        }
    }
    format!("{bytes} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_form() {
        assert_eq!(parse_size("100"), Ok(100));
        assert_eq!(parse_size("1K"), Ok(1024));
        assert_eq!(parse_size("1k"), Ok(1024));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("2T"), Ok(2 << 40));
        assert_eq!(parse_size("1.5M"), Ok(1_572_864));
        assert_eq!(parse_size(" 2.0 "), Ok(2));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(
            parse_size("12X").unwrap_err(),
            "invalid size '12X': use a number with an optional K, M or G suffix (binary)"
        );
        for bad in [
            "", "M", "-1", "1e3", "inf", "nan", "1.2.3", ".", "1 M", "0x10", "B", "iB", "5iB", "1  MiB", "x",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} should be rejected");
        }
        assert!(parse_size("0.5").unwrap_err().contains("whole number"));
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("17179869184G").is_err());
    }

    #[test]
    fn spelled_units_as_tcpx_analyze_reads_them() {
        assert_eq!(parse_size("1KiB"), Ok(1024));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("1TiB"), Ok(1 << 40));
        assert!(parse_size("64MB").unwrap_err().contains("write 64M or 64MiB"));
        assert!(parse_size("1kB").is_err());
        assert!(parse_size("1 GB").is_err());
        assert_eq!(parse_size("100B"), Ok(100));
        assert_eq!(parse_size("1048576"), Ok(1_048_576));
    }

    #[test]
    fn label_form() {
        assert_eq!(format_size_label(1 << 30), "1 GiB");
        assert_eq!(format_size_label(3 << 20), "3 MiB");
        assert_eq!(format_size_label(2 << 40), "2 TiB");
        assert_eq!(format_size_label(1000), "1000 B");
        assert_eq!(format_size_label(0), "0 B");
        assert_eq!(parse_size("64 MiB"), Ok(64 << 20));
        assert_eq!(parse_size("1000 B"), Ok(1000));
    }

    #[test]
    fn both_spellings_round_trip() {
        assert_eq!(format_size(64 << 20), "64M");
        assert_eq!(format_size(1 << 30), "1G");
        assert_eq!(format_size(1536 << 10), "1536K");
        assert_eq!(format_size(3 << 40), "3072G");
        assert_eq!(format_size(100), "100");
        assert_eq!(format_size(0), "0");
        for v in [0, 1, 1000, 1023, 1024, 1536 << 10, 3 << 30, 5 << 40, u64::MAX] {
            assert_eq!(parse_size(&format_size(v)), Ok(v));
            assert_eq!(parse_size(&format_size_label(v)), Ok(v));
        }
    }
}
