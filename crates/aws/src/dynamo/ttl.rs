//! DynamoDB TTL's clock: epoch seconds from the system clock (storage housekeeping, not domain
//! time). Expiries round up so TTL never removes an item early; "now" rounds down for the
//! conditions and reads that treat an item past its TTL as absent, since DynamoDB deletes such
//! items lazily (within days).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// Now in whole epoch seconds, rounded down: an item whose TTL is below this has expired.
pub(super) fn now_secs() -> i64 {
    i64::try_from(now().as_secs()).unwrap_or(i64::MAX)
}

/// The TTL of something written now that may go after `ttl`, in epoch seconds rounded up.
pub(super) fn expiry_in(ttl: Duration) -> i64 {
    let at = now().saturating_add(ttl);
    let secs = at
        .as_secs()
        .saturating_add(u64::from(at.subsec_nanos() > 0));
    i64::try_from(secs).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retention_too_long_to_count_saturates() {
        assert_eq!(expiry_in(Duration::MAX), i64::MAX);
    }
}
