//! A clock that only moves when a test says so.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use threadbox_core::domain::Millis;
use threadbox_core::ports::Clock;

#[derive(Debug)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    pub fn new(start: Millis) -> Self {
        Self(AtomicI64::new(start.0))
    }
    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(by.as_millis() as i64, Ordering::SeqCst);
    }
    pub fn set(&self, to: Millis) {
        self.0.store(to.0, Ordering::SeqCst);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        // 2026-01-01T00:00:00Z: far from zero, so "ago" arithmetic never goes negative.
        Self::new(Millis(1_767_225_600_000))
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Millis {
        Millis(self.0.load(Ordering::SeqCst))
    }
}
