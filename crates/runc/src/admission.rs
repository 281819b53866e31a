//! The provider's caps: sandboxes on the host, commands in one sandbox and on the whole host.
//! Each is counted first and undone when over, so concurrent callers cannot all pass the check.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::config::RuncConfig;
use super::ids::validate_sandbox_id;
use super::{RuncProvider, Slot};
use threadbox_core::ports::{Limit, ProviderError};

/// Counts one running command, on its slot and across the provider, for as long as it lives.
pub(crate) struct ExecHold {
    slot: Arc<Slot>,
    commands: Arc<AtomicUsize>,
}

impl ExecHold {
    /// Take a place for one more command, or say which cap is reached. Counted first and undone
    /// when over, so concurrent callers cannot all pass the check.
    pub(crate) fn admit(
        slot: Arc<Slot>,
        commands: Arc<AtomicUsize>,
        config: &RuncConfig,
    ) -> Result<Self, ProviderError> {
        let hold = Self { slot, commands };
        let in_sandbox = hold.slot.execs.fetch_add(1, Ordering::SeqCst) + 1;
        let in_all = hold.commands.fetch_add(1, Ordering::SeqCst) + 1;
        let (per, all) = (config.max_commands_per_sandbox, config.max_commands);
        if in_sandbox > per {
            return Err(limit(
                Limit::CommandsInSandbox,
                format!(
                    "this thread already runs {per} commands at once, its limit; try again \
                     when one finishes"
                ),
                Duration::from_secs(2),
            ));
        }
        if in_all > all {
            return Err(limit(
                Limit::Commands,
                format!(
                    "this host already runs {all} commands at once, its limit; try again \
                     shortly"
                ),
                Duration::from_secs(5),
            ));
        }
        Ok(hold)
    }
}

impl Drop for ExecHold {
    fn drop(&mut self) {
        self.slot.execs.fetch_sub(1, Ordering::SeqCst);
        self.commands.fetch_sub(1, Ordering::SeqCst);
    }
}

pub(crate) fn limit(limit: Limit, message: String, retry_after: Duration) -> ProviderError {
    ProviderError::LimitReached {
        limit,
        message,
        retry_after,
    }
}

impl RuncProvider {
    /// Sandboxes with a bundle on disk: alive, paused, or being made or removed.
    pub(crate) fn count_bundles(&self) -> Result<usize, ProviderError> {
        let dir = self.config.sandboxes_dir();
        let entries = std::fs::read_dir(&dir)
            .map_err(|e| ProviderError::Internal(format!("cannot count the sandboxes: {e}")))?;
        Ok(entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|name| validate_sandbox_id(name).is_ok())
            .count())
    }
}
