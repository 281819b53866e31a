//! Reading an index the way real DynamoDB allows: its global secondary indexes are eventually
//! consistent, so a query right after a write may not show it yet (moto and SQLite always do,
//! which would hide a suite that relies on it). Suites read an index through [`eventually`]:
//! again and again, for up to [`INDEX_SETTLE`], until the answer is the one they expect, and
//! then assert on the last answer, so a real failure still shows what was read.

use std::future::Future;
use std::time::{Duration, Instant};

/// How long a suite waits for an index to show a write (DynamoDB's GSIs typically take well
/// under a second).
pub const INDEX_SETTLE: Duration = Duration::from_secs(5);

/// The first answer of `read` that `settled` accepts, or the last one after [`INDEX_SETTLE`].
pub async fn eventually<T, F, Fut>(mut read: F, settled: impl Fn(&T) -> bool) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    let started = Instant::now();
    loop {
        let answer = read().await;
        if settled(&answer) || started.elapsed() >= INDEX_SETTLE {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
