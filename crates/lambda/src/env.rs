//! The one error a function's start-up can fail with. Settings are read through
//! [`threadbox_core::config::Env`], re-exported here for the functions' `main`s.

use std::fmt;

pub use threadbox_core::config::{ConfigError, Env};
use threadbox_core::ports::ProviderError;

/// Why a function could not start. Every variant names what to fix; none carries a secret.
#[derive(thiserror::Error)]
pub enum SetupError {
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("cannot start the {provider} sandbox provider: {error}")]
    Provider {
        provider: &'static str,
        error: ProviderError,
    },
}

// `main` returns this, and Rust prints a returned error with `Debug`: make that the message, so
// the function's init failure in CloudWatch reads "THREADBOX_... is not set", not a struct dump.
impl fmt::Debug for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setup_error_prints_its_message_even_through_debug() {
        let err = SetupError::from(ConfigError::Missing("THREADBOX_API_KEYS"));
        assert_eq!(format!("{err:?}"), "THREADBOX_API_KEYS is not set");
    }
}
