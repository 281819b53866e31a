//! Settings from the environment, read one way everywhere: [`Env`] reads variables (the process
//! environment in a binary, a map in tests, fetched secrets laid over it in a Lambda), and
//! [`ConfigError`] names the variable at fault when one is missing or unusable, never its value
//! (it may be a secret). Each adapter reads its own settings through an `Env`
//! (`E2bConfig::from_env`, `DynamoConfig::from_env`, `SlackClientConfig::from_env`); which
//! provider a process uses is chosen in `providers`.

use std::collections::{BTreeMap, HashMap};
use std::ops::RangeInclusive;

/// A setting read from the environment is missing or unusable. The message names the variable,
/// never its value (it may be a secret).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{0} is not set")]
    Missing(&'static str),
    #[error("{variable} is invalid: {reason}")]
    Invalid {
        variable: &'static str,
        reason: String,
    },
}

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

    /// Exactly these variables, owned (tests, a fake's settings).
    pub fn from_map(vars: impl IntoIterator<Item = (String, String)>) -> Self {
        let map: HashMap<String, String> = vars.into_iter().collect();
        Self {
            lookup: Box::new(move |name| map.get(name).cloned()),
        }
    }

    /// This environment with `values` set over it (secrets fetched by reference).
    pub fn overlay(self, values: BTreeMap<&'static str, String>) -> Self {
        if values.is_empty() {
            return self;
        }
        Self {
            lookup: Box::new(move |name| values.get(name).cloned().or_else(|| (self.lookup)(name))),
        }
    }

    /// The raw value, untrimmed (for settings whose spaces matter).
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

    /// A decimal number in `range` (prices, sizes), or `None` when unset.
    pub fn decimal(
        &self,
        name: &'static str,
        range: RangeInclusive<f64>,
    ) -> Result<Option<f64>, ConfigError> {
        let Some(raw) = self.get(name) else {
            return Ok(None);
        };
        match raw.parse::<f64>() {
            Ok(n) if range.contains(&n) => Ok(Some(n)),
            _ => Err(ConfigError::Invalid {
                variable: name,
                reason: format!(
                    "expected a number from {} to {}, got {raw:?}",
                    range.start(),
                    range.end()
                ),
            }),
        }
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
        let env = Env::from_pairs(&[("P", "0.0504"), ("NAN", "NaN"), ("NEG", "-1")]);
        assert_eq!(env.decimal("P", 0.0..=1.0).unwrap(), Some(0.0504));
        assert_eq!(env.decimal("UNSET", 0.0..=1.0).unwrap(), None);
        assert!(env.decimal("NAN", 0.0..=1.0).is_err());
        assert!(env.decimal("NEG", 0.0..=1.0).is_err());
    }
}
