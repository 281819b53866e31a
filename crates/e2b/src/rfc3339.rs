//! RFC 3339 timestamps (E2B's `startedAt`/`endAt`) to and from epoch milliseconds, without a
//! date-time dependency: the civil-calendar conversion is a few lines of arithmetic.

use threadbox_core::domain::Millis;

/// `2024-05-01T12:00:00Z`, `2024-05-01T12:00:00.123456789+02:00` and the like.
pub fn parse(text: &str) -> Option<Millis> {
    let b = text.trim().as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<i64> {
        let s = std::str::from_utf8(b.get(from..to)?).ok()?;
        s.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| s.parse().ok())?
    };
    let (year, month, day) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (hour, minute, second) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut i = 19;
    let mut millis = 0i64;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return None;
        }
        let digits = &text.trim()[start..i];
        let first3: String = digits.chars().chain("000".chars()).take(3).collect();
        millis = first3.parse().ok()?;
    }
    let offset_secs = match b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if i + 6 == b.len() && b[i + 3] == b':' => {
            let secs = num(i + 1, i + 3)? * 3600 + num(i + 4, i + 6)? * 60;
            if *sign == b'+' {
                secs
            } else {
                -secs
            }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_secs;
    Some(Millis(secs * 1000 + millis))
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`, in UTC. (The provider only reads timestamps; the contract fake
/// writes them.)
pub fn format(at: Millis) -> String {
    let secs = at.0.div_euclid(1000);
    let millis = at.0.rem_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

// Howard Hinnant's days-from-civil and its inverse (proleptic Gregorian calendar).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants() {
        assert_eq!(parse("1970-01-01T00:00:00Z"), Some(Millis(0)));
        assert_eq!(
            parse("2024-02-29T12:34:56Z"),
            Some(Millis(1_709_210_096_000))
        );
        assert_eq!(
            parse("2024-02-29T12:34:56.789123456Z"),
            Some(Millis(1_709_210_096_789))
        );
        assert_eq!(
            parse("2024-02-29T14:34:56.7+02:00"),
            Some(Millis(1_709_210_096_700))
        );
        assert_eq!(
            format(Millis(1_709_210_096_789)),
            "2024-02-29T12:34:56.789Z"
        );
        assert_eq!(format(Millis(0)), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn round_trips_and_rejects_junk() {
        for ms in [0, 1, 999, 86_399_999, 951_782_400_000, 4_102_444_800_123] {
            assert_eq!(parse(&format(Millis(ms))), Some(Millis(ms)), "{ms}");
        }
        for bad in [
            "",
            "2024-02-29",
            "2024-13-01T00:00:00Z",
            "2024-02-29T12:34:56",
            "2024-02-29T12:34:56.Z",
            "yesterday",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
