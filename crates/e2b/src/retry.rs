//! Control-plane retries, the way E2B's own SDK does them (docs/e2b.md §5).
//!
//! - A `Should-Retry` header, when present, decides alone: `true` (trimmed, any case) retries
//!   whatever the status, 500 included; any other value never retries.
//! - Without it, 429, 502, 503 and 504 are retried, and so is a connection that could not be
//!   established (the request was never written, so nothing can have happened twice).
//! - The wait is `Retry-After` in delta-seconds when the server sends one (an HTTP date is
//!   ignored, as the SDK does), else `min(base·2^attempt, max)` scaled by a uniform [0.5, 1)
//!   jitter so a fleet of callers does not retry in lockstep.
//! - At most `max_retries` retries, and no wait that would end past `budget` after the first
//!   attempt started: a caller never waits longer than one request timeout for an answer.
//!
//! Create is safe to retry because it carries an `Idempotency-Key`; the other calls are
//! idempotent by nature (a repeated pause answers 409, a repeated kill 404, both handled).

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use reqwest::header::HeaderMap;
use reqwest::{RequestBuilder, Response, StatusCode};
use tokio::time::Instant;

use super::errors::{retry_after, E2bError, Plane};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (the SDK's default is 3); 0 turns retrying off.
    pub max_retries: u32,
    /// The first backoff before jitter (SDK: 100 ms).
    pub base_delay: Duration,
    /// The longest backoff before jitter (SDK: 10 s).
    pub max_delay: Duration,
    /// No retry starts later than this after the first attempt (SDK: the request timeout).
    pub budget: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 3,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(10),
            budget: Duration::from_secs(60),
        }
    }
}

pub(crate) const SHOULD_RETRY: &str = "should-retry";

/// Whether a response with this status and these headers may be retried.
pub(crate) fn is_retryable(status: StatusCode, headers: &HeaderMap) -> bool {
    if let Some(value) = headers.get(SHOULD_RETRY) {
        return value
            .to_str()
            .map(|v| v.trim().eq_ignore_ascii_case("true"))
            .unwrap_or(false);
    }
    matches!(status.as_u16(), 429 | 502 | 503 | 504)
}

impl RetryPolicy {
    /// The jittered exponential backoff before retry number `attempt + 1`.
    pub(crate) fn backoff(&self, attempt: u32) -> Duration {
        let exp = self
            .base_delay
            .saturating_mul(2u32.saturating_pow(attempt.min(31)));
        exp.min(self.max_delay).mul_f64(0.5 + 0.5 * unit_random())
    }

    /// How long to wait before the next attempt, or `None` when retrying must stop.
    fn next_wait(
        &self,
        attempt: u32,
        started: Instant,
        server_says: Option<Duration>,
    ) -> Option<Duration> {
        if attempt >= self.max_retries {
            return None;
        }
        let wait = server_says.unwrap_or_else(|| self.backoff(attempt));
        (started.elapsed() + wait <= self.budget).then_some(wait)
    }

    /// Send the request `build` makes (built afresh for each attempt, with the same headers and
    /// body), retrying as described above. Success is any 2xx; anything else comes back as the
    /// typed error of the last attempt.
    pub(crate) async fn send(
        &self,
        operation: &'static str,
        build: impl Fn() -> RequestBuilder,
    ) -> Result<Response, E2bError> {
        let started = Instant::now();
        let mut attempt = 0u32;
        loop {
            match build().send().await {
                Ok(response) if response.status().is_success() => return Ok(response),
                Ok(response) => {
                    let status = response.status();
                    let wait = is_retryable(status, response.headers())
                        .then(|| self.next_wait(attempt, started, retry_after(response.headers())))
                        .flatten();
                    let Some(wait) = wait else {
                        return Err(E2bError::from_response(response, Plane::Control).await);
                    };
                    tracing::info!(
                        operation,
                        status = status.as_u16(),
                        attempt = attempt + 1,
                        wait_ms = wait.as_millis() as u64,
                        "E2B answered with a retryable status; retrying"
                    );
                    tokio::time::sleep(wait).await;
                }
                Err(error) if error.is_connect() => {
                    let Some(wait) = self.next_wait(attempt, started, None) else {
                        return Err(E2bError::from_transport(error));
                    };
                    tracing::info!(operation, attempt = attempt + 1, %error, "could not reach E2B; retrying");
                    tokio::time::sleep(wait).await;
                }
                // Anything else (a timeout, a reset mid-response) may have reached the server:
                // the SDK does not retry it and neither do we; the caller sees `Unavailable`.
                Err(error) => return Err(E2bError::from_transport(error)),
            }
            attempt += 1;
        }
    }
}

/// A uniform number in [0, 1) for jitter. `RandomState` is seeded randomly per process and
/// per call, which is all jitter needs; no extra dependency.
fn unit_random() -> f64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(Instant::now().elapsed().as_nanos());
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, HeaderValue::from_static(v));
        }
        map
    }

    #[test]
    fn the_sdk_statuses_retry_and_others_do_not() {
        for code in [429, 502, 503, 504] {
            assert!(is_retryable(
                StatusCode::from_u16(code).unwrap(),
                &HeaderMap::new()
            ));
        }
        for code in [400, 401, 404, 409, 422, 500] {
            assert!(!is_retryable(
                StatusCode::from_u16(code).unwrap(),
                &HeaderMap::new()
            ));
        }
    }

    #[test]
    fn should_retry_wins_both_ways() {
        let yes = headers(&[(SHOULD_RETRY, " TRUE ")]);
        let no = headers(&[(SHOULD_RETRY, "false")]);
        let junk = headers(&[(SHOULD_RETRY, "yes")]);
        assert!(is_retryable(StatusCode::INTERNAL_SERVER_ERROR, &yes));
        assert!(!is_retryable(StatusCode::SERVICE_UNAVAILABLE, &no));
        assert!(!is_retryable(StatusCode::TOO_MANY_REQUESTS, &junk));
    }

    #[test]
    fn retry_after_takes_delta_seconds_only() {
        let parse = |v: &'static str| retry_after(&headers(&[("retry-after", v)]));
        assert_eq!(parse("3"), Some(Duration::from_secs(3)));
        assert_eq!(parse("0"), Some(Duration::ZERO));
        assert_eq!(parse("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(parse("-1"), None);
        assert_eq!(parse("1.5"), None);
        assert_eq!(parse("99999999999"), None);
        assert_eq!(parse("2147483648"), None);
        assert_eq!(retry_after(&HeaderMap::new()), None);
    }

    #[test]
    fn backoff_grows_is_capped_and_jittered_down_to_half() {
        let p = RetryPolicy::default();
        for attempt in 0..40 {
            let nominal = (p.base_delay * 2u32.saturating_pow(attempt.min(31))).min(p.max_delay);
            let wait = p.backoff(attempt);
            assert!(
                wait >= nominal / 2 && wait < nominal.max(Duration::from_nanos(1)),
                "{attempt}: {wait:?}"
            );
        }
    }

    #[test]
    fn waits_stop_at_the_count_and_the_budget() {
        let p = RetryPolicy {
            max_retries: 2,
            budget: Duration::from_secs(5),
            ..RetryPolicy::default()
        };
        let now = Instant::now();
        assert!(p.next_wait(0, now, None).is_some());
        assert!(p.next_wait(1, now, Some(Duration::from_secs(4))).is_some());
        assert!(p.next_wait(2, now, None).is_none(), "count");
        assert!(
            p.next_wait(0, now, Some(Duration::from_secs(6))).is_none(),
            "budget"
        );
    }
}
