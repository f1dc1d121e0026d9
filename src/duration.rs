//! Durations in Go's syntax (`10s`, `1h30m`, `250ms`), as operators write them in
//! cloud-controller-manager flags and as upstream prints them in event messages.

use std::fmt;
use std::time::Duration;

/// Why a string is not a Go duration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DurationError(String);

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DurationError {}

/// Parses a Go duration: a sequence of decimal numbers with units `ns`, `us` (or
/// `µs`), `ms`, `s`, `m`, `h`, such as `300ms`, `1.5h` or `2h45m`. `0` alone is
/// allowed; negative durations are not (no flag of this program takes one).
pub fn parse(input: &str) -> Result<Duration, DurationError> {
    let bad = |why: &str| {
        DurationError(format!(
            "invalid duration {input:?}: {why} (examples: 10s, 1m30s, 12h, 250ms)"
        ))
    };
    if input == "0" {
        return Ok(Duration::ZERO);
    }
    if input.is_empty() {
        return Err(bad("empty"));
    }
    if input.starts_with('-') {
        return Err(bad("negative durations are not allowed"));
    }
    let s = input.strip_prefix('+').unwrap_or(input);
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return Err(bad("expected a number"));
        }
        let number: f64 = rest[..num_len]
            .parse()
            .map_err(|_| bad("malformed number"))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => return Err(bad("missing unit")),
            _ => return Err(bad("unknown unit")),
        };
        rest = &rest[unit_len..];
        total += number * unit;
    }
    if !total.is_finite() || total > 1e12 {
        return Err(bad("too large"));
    }
    Ok(Duration::from_secs_f64(total))
}

/// Formats like Go's `time.Duration.String`: `1.5s`, `150ms`, `2m3s`, `1h0m0s`.
pub fn format(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_string();
    }
    if nanos < 1_000 {
        return format!("{nanos}ns");
    }
    if nanos < 1_000_000 {
        return format!("{}µs", trim_fraction(nanos, 1_000));
    }
    if nanos < 1_000_000_000 {
        return format!("{}ms", trim_fraction(nanos, 1_000_000));
    }
    let total_secs = d.as_secs();
    let (h, m) = (total_secs / 3600, (total_secs % 3600) / 60);
    let secs = trim_fraction(nanos % 60_000_000_000, 1_000_000_000);
    match (h, m) {
        (0, 0) => format!("{secs}s"),
        (0, m) => format!("{m}m{secs}s"),
        (h, m) => format!("{h}h{m}m{secs}s"),
    }
}

/// `value / unit` with the fractional part written out and trailing zeros removed.
fn trim_fraction(value: u128, unit: u128) -> String {
    let whole = value / unit;
    let frac = value % unit;
    if frac == 0 {
        return whole.to_string();
    }
    let width = unit.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse("1.5h").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse("0").unwrap(), Duration::ZERO);
        assert_eq!(
            parse("2h45m0.5s").unwrap(),
            Duration::from_millis(9_900_500)
        );
    }

    #[test]
    fn rejects_what_go_rejects_and_negatives() {
        for bad in ["", "10", "s", "10x", "1..5s", "-5s", "5 s"] {
            let err = parse(bad).unwrap_err().to_string();
            assert!(err.contains("examples"), "{bad}: {err}");
        }
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(format(Duration::from_millis(1200)), "1.2s");
        assert_eq!(format(Duration::from_millis(150)), "150ms");
        assert_eq!(format(Duration::from_secs(123)), "2m3s");
        assert_eq!(format(Duration::from_secs(3600)), "1h0m0s");
        assert_eq!(format(Duration::from_micros(1500)), "1.5ms");
        assert_eq!(format(Duration::ZERO), "0s");
    }
}
