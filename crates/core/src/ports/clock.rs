//! The clock port: the only way use cases learn the time, so tests can move it.

use crate::domain::Millis;

pub trait Clock: Send + Sync {
    fn now(&self) -> Millis;
}

/// The wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Millis {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Millis(since.as_millis() as i64)
    }
}
