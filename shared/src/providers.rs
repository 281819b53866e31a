//! Which sandbox provider a process uses, chosen by configuration (`THREADBOX_PROVIDER`). It
//! sits above `adapters` (it names them) and beside the wiring that builds them.
//!
//! The choice is made once at start-up from the environment, so the same binary runs on runc
//! locally and on E2B in production. Building the provider is left to the caller (`threadbox
//! dev`, each Lambda's `main`): each provider has its own constructor and owns its resources.

use crate::config::{ConfigError, Env};

/// The variable that selects the provider: `runc` (the default) or `e2b`.
pub const PROVIDER_VAR: &str = "THREADBOX_PROVIDER";

/// The provider chosen for this process, with its settings (whose `Debug` redacts the key).
#[derive(Clone, Debug)]
pub enum ProviderConfig {
    /// Local containers; the runc provider reads its own settings.
    Runc,
    /// E2B, with its settings already validated.
    #[cfg(feature = "e2b")]
    E2b(Box<crate::adapters::e2b::E2bConfig>),
}

impl ProviderConfig {
    /// Read the choice (and, for E2B, its settings) from `env`.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let choice = env.get(PROVIDER_VAR).unwrap_or_default();
        match choice.as_str() {
            "" | "runc" => Ok(ProviderConfig::Runc),
            #[cfg(feature = "e2b")]
            "e2b" => Ok(ProviderConfig::E2b(Box::new(
                crate::adapters::e2b::E2bConfig::from_env(env)?,
            ))),
            #[cfg(not(feature = "e2b"))]
            "e2b" => Err(ConfigError::Invalid {
                variable: PROVIDER_VAR,
                reason: "this build has no E2B support (cargo feature `e2b`)".into(),
            }),
            other => Err(ConfigError::Invalid {
                variable: PROVIDER_VAR,
                reason: format!("unknown provider {other:?}; expected \"runc\" or \"e2b\""),
            }),
        }
    }

    /// The provider's short name, as stored on session records.
    pub fn name(&self) -> &'static str {
        match self {
            ProviderConfig::Runc => "runc",
            #[cfg(feature = "e2b")]
            ProviderConfig::E2b(_) => "e2b",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runc_is_the_default() {
        let config = ProviderConfig::from_env(&Env::from_pairs(&[])).unwrap();
        assert_eq!(config.name(), "runc");
    }

    #[test]
    fn an_unknown_provider_names_the_variable() {
        let err =
            ProviderConfig::from_env(&Env::from_pairs(&[(PROVIDER_VAR, "docker")])).unwrap_err();
        assert!(
            err.to_string().starts_with("THREADBOX_PROVIDER is invalid"),
            "{err}"
        );
    }
}
