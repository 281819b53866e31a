//! Time as the domain sees it: plain epoch milliseconds handed in by the caller's clock.

use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch. The domain never reads a clock; use cases pass `now` in.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
#[serde(transparent)]
pub struct Millis(pub i64);

impl Millis {
    pub const fn from_secs(secs: i64) -> Self {
        Self(secs * 1000)
    }
    pub fn plus(self, d: std::time::Duration) -> Self {
        Self(self.0.saturating_add(d.as_millis() as i64))
    }
    pub fn minus(self, d: std::time::Duration) -> Self {
        Self(self.0.saturating_sub(d.as_millis() as i64))
    }
    /// How long after `earlier` this is; zero when it is not later.
    pub fn since(self, earlier: Millis) -> std::time::Duration {
        std::time::Duration::from_millis(self.0.saturating_sub(earlier.0).max(0) as u64)
    }
}
