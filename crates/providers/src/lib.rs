//! Which sandbox provider a process uses, chosen by configuration (`THREADBOX_PROVIDER`), and
//! the one place that builds it. It sits above `adapters` (it names them) and below the wiring
//! of each process: `threadbox dev` and the Lambda functions both call [`open`].
//!
//! The choice is made once at start-up from the environment, so the same binary runs on runc
//! locally and on E2B in production, and `threadbox dev` can run on E2B too.

use threadbox_core::config::{ConfigError, Env};

/// The variable that selects the provider: `runc` (the default) or `e2b`.
pub const PROVIDER_VAR: &str = "THREADBOX_PROVIDER";

/// The variable mapping image names to E2B templates (`NAME=TEMPLATE_ID,...`), for settings
/// that name images.
pub use threadbox_e2b::TEMPLATES_VAR as E2B_TEMPLATES_VAR;

/// The provider chosen for this process, with its settings (whose `Debug` redacts the key).
#[derive(Clone, Debug)]
pub enum ProviderConfig {
    /// Local containers; the runc provider reads its own settings.
    Runc,
    /// E2B, with its settings already validated.
    E2b(Box<threadbox_e2b::E2bConfig>),
}

impl ProviderConfig {
    /// Read the choice (and, for E2B, its settings) from `env`.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let choice = env.get(PROVIDER_VAR).unwrap_or_default();
        match choice.as_str() {
            "" | "runc" => Ok(ProviderConfig::Runc),
            "e2b" => Ok(ProviderConfig::E2b(Box::new(
                threadbox_e2b::E2bConfig::from_env(env)?,
            ))),
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
            ProviderConfig::E2b(_) => "e2b",
        }
    }
}

/// What building a provider needs besides the choice: the runc provider's settings (its state
/// directory and limits are the caller's), and what to do when E2B refuses the API key (the
/// Lambda functions mark their secrets stale so a rotated key is fetched again).
pub struct ProviderSetup {
    pub runc: threadbox_runc::RuncConfig,
    pub on_refused_key: Option<std::sync::Arc<dyn Fn() + Send + Sync>>,
}

/// Build the provider `config` names.
pub async fn open(
    config: &ProviderConfig,
    setup: ProviderSetup,
) -> Result<
    std::sync::Arc<dyn threadbox_core::ports::SandboxProvider>,
    threadbox_core::ports::ProviderError,
> {
    use std::sync::Arc;
    Ok(match config {
        ProviderConfig::Runc => Arc::new(threadbox_runc::RuncProvider::open(setup.runc).await?),
        ProviderConfig::E2b(e2b) => {
            let mut provider = threadbox_e2b::E2bProvider::new((**e2b).clone())?;
            if let Some(hook) = setup.on_refused_key {
                provider = provider.on_refused_key(move || hook());
            }
            Arc::new(provider)
        }
    })
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
