//! Durations on the command line: "90s", "10m", "7d", "1h30m", "250ms".
//!
//! Small enough to write rather than depend on: a sequence of `<number><unit>` parts, units ms,
//! s, m, h, d. A bare number is refused, because "10" could mean seconds or minutes.

use std::time::Duration;

/// Parse a duration for clap's `value_parser`; the error names what was wrong.
pub fn parse(raw: &str) -> Result<Duration, String> {
    let text = raw.trim();
    if text.is_empty() {
        return Err("empty duration; write it like 90s, 10m, 7d or 1h30m".into());
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!(
                "{raw:?}: expected a number at {rest:?}; write it like 90s, 10m, 7d or 1h30m"
            ));
        }
        let number: u64 = rest[..digits]
            .parse()
            .map_err(|_| format!("{raw:?}: {} is too large", &rest[..digits]))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let part = match unit {
            "ms" => Some(Duration::from_millis(number)),
            "s" => Some(Duration::from_secs(number)),
            "m" => number.checked_mul(60).map(Duration::from_secs),
            "h" => number.checked_mul(60 * 60).map(Duration::from_secs),
            "d" => number.checked_mul(24 * 60 * 60).map(Duration::from_secs),
            "" => {
                return Err(format!(
                    "{raw:?}: {number} needs a unit (ms, s, m, h or d), like {number}s"
                ))
            }
            other => {
                return Err(format!(
                    "{raw:?}: unknown unit {other:?}; use ms, s, m, h or d"
                ))
            }
        };
        total = part
            .and_then(|p| total.checked_add(p))
            .ok_or_else(|| format!("{raw:?} is too long"))?;
    }
    Ok(total)
}

/// The inverse, for messages: the largest whole unit that fits ("10m", "7d", "90s").
pub fn format(d: Duration) -> String {
    let secs = d.as_secs();
    if d.subsec_millis() != 0 || secs == 0 {
        return format!("{}ms", d.as_millis());
    }
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
        if secs.is_multiple_of(size) {
            return format!("{}{unit}", secs / size);
        }
    }
    format!("{secs}s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_single_and_combined_units() {
        let cases = [
            ("90s", 90),
            ("10m", 600),
            ("7d", 7 * 86_400),
            ("2h", 7_200),
            ("1h30m", 5_400),
            (" 60s ", 60),
            ("0s", 0),
        ];
        for (text, secs) in cases {
            assert_eq!(parse(text), Ok(Duration::from_secs(secs)), "{text}");
        }
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("1s500ms"), Ok(Duration::from_millis(1500)));
    }

    #[test]
    fn refuses_ambiguous_or_broken_input_with_a_reason() {
        let cases = [
            ("", "empty"),
            ("10", "needs a unit"),
            ("10x", "unknown unit \"x\""),
            ("m10", "expected a number"),
            ("1.5h", "unknown unit \".\""),
            ("-5s", "expected a number"),
            ("99999999999999999999s", "too large"),
            ("999999999999999999d", "too long"),
        ];
        for (text, needle) in cases {
            let err = parse(text).unwrap_err();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }

    #[test]
    fn formats_with_the_largest_whole_unit() {
        for text in ["90s", "10m", "7d", "2h", "250ms"] {
            assert_eq!(format(parse(text).unwrap()), text);
        }
        assert_eq!(format(Duration::from_secs(5_400)), "90m");
    }
}
