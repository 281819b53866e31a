//! Reading settings from the environment, and the one error a function's start-up can fail with.

use std::collections::HashMap;
use std::fmt;
use std::ops::RangeInclusive;

use crate::adapters::dynamo;
use crate::adapters::provider_config::ConfigError;
use crate::ports::ProviderError;

/// Reads one variable: `Some(value)` when set.
type Lookup = Box<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Where settings come from: the process environment in a function, a map in tests.
pub struct Env {
    lookup: Lookup,
}

impl Env {
    /// The process environment.
    pub fn process() -> Self {
        Self {
            lookup: Box::new(|name| std::env::var(name).ok()),
        }
    }

    /// Exactly these variables (tests).
    pub fn from_pairs(pairs: &[(&str, &str)]) -> Self {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Self {
            lookup: Box::new(move |name| map.get(name).cloned()),
        }
    }

    /// This environment with `values` set over it (secrets fetched by reference).
    pub fn overlay(self, values: std::collections::BTreeMap<&'static str, String>) -> Self {
        if values.is_empty() {
            return self;
        }
        Self {
            lookup: Box::new(move |name| values.get(name).cloned().or_else(|| (self.lookup)(name))),
        }
    }

    /// The raw value, as adapters with their own parsing (`E2bConfig`, `DynamoConfig`) read it.
    pub fn raw(&self, name: &str) -> Option<String> {
        (self.lookup)(name)
    }

    /// The trimmed value; unset and blank are the same.
    pub fn get(&self, name: &str) -> Option<String> {
        self.raw(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    }

    pub fn required(&self, name: &'static str) -> Result<String, ConfigError> {
        self.get(name).ok_or(ConfigError::Missing(name))
    }

    /// A whole number in `range`, or `default` when unset.
    pub fn whole_number(
        &self,
        name: &'static str,
        default: u64,
        range: RangeInclusive<u64>,
    ) -> Result<u64, ConfigError> {
        let Some(raw) = self.get(name) else {
            return Ok(default);
        };
        match raw.parse::<u64>() {
            Ok(n) if range.contains(&n) => Ok(n),
            _ => Err(ConfigError::Invalid {
                variable: name,
                reason: format!(
                    "expected a whole number from {} to {}, got {raw:?}",
                    range.start(),
                    range.end()
                ),
            }),
        }
    }
}

/// Why a function could not start. Every variant names what to fix; none carries a secret.
#[derive(thiserror::Error)]
pub enum SetupError {
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Dynamo(#[from] dynamo::ConfigError),
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
    fn blank_is_unset_and_numbers_are_checked() {
        let env = Env::from_pairs(&[("A", "  "), ("N", " 12 "), ("BAD", "1h")]);
        assert_eq!(env.get("A"), None);
        assert_eq!(env.required("A").unwrap_err(), ConfigError::Missing("A"));
        assert_eq!(env.whole_number("N", 5, 1..=60).unwrap(), 12);
        assert_eq!(env.whole_number("UNSET", 5, 1..=60).unwrap(), 5);
        let err = env.whole_number("BAD", 5, 1..=60).unwrap_err().to_string();
        assert!(err.starts_with("BAD is invalid"), "{err}");
        assert!(env.whole_number("N", 5, 1..=10).is_err(), "out of range");
    }

    #[test]
    fn a_setup_error_prints_its_message_even_through_debug() {
        let err = SetupError::from(ConfigError::Missing("THREADBOX_API_KEYS"));
        assert_eq!(format!("{err:?}"), "THREADBOX_API_KEYS is not set");
    }
}
