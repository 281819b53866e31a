//! Secrets by reference: a deployed function's environment names its secrets
//! (`<VAR>_SECRET_ID`, the name or ARN of a Secrets Manager secret), never holds them. At
//! start-up the function fetches each one with `GetSecretValue` and reads its settings from an
//! [`Env`] where `<VAR>` holds the fetched value, so every setting keeps its one name and local
//! runs (`threadbox dev`, `cargo lambda watch`) keep setting `<VAR>` itself.
//!
//! [`SecretSet`] keeps what was fetched and when. [`SecretSet::refresh`] fetches again and says
//! whether anything changed; the functions call it when the values are older than
//! [`DEFAULT_REFRESH`] (`THREADBOX_SECRETS_REFRESH_SECS`) or a client reported an authentication
//! failure ([`SecretSet::mark_stale`]), and rebuild their clients from the new values, so a
//! rotated secret is picked up without a deploy.
//!
//! Values are never logged: this module's `Debug` output names the variables only, and errors
//! name the variable and the reference, not the value.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_secretsmanager::error::DisplayErrorContext;
use aws_sdk_secretsmanager::Client;

use super::env::{Env, SetupError};
use threadbox_aws::sdk::SdkConfig;
use threadbox_core::config::ConfigError;

/// Every variable that holds a secret, and so may be given by reference.
pub const SECRET_VARS: &[&str] = &[
    "E2B_API_KEY",
    "THREADBOX_API_KEYS",
    "SLACK_SIGNING_SECRET",
    "SLACK_BOT_TOKEN",
    "THREADBOX_TOKEN_SECRET",
    // Operator credentials at egress (JSON), which E2B's egress proxy adds to a networked
    // sandbox's requests (see `adapters::e2b` and `domain::EgressCredentials`).
    "THREADBOX_EGRESS_CREDENTIALS",
];
/// `<VAR><REFERENCE_SUFFIX>` names the secret holding `<VAR>`.
pub const REFERENCE_SUFFIX: &str = "_SECRET_ID";
/// How often secrets are fetched again when nothing asked sooner.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(15 * 60);
pub const REFRESH_VAR: &str = "THREADBOX_SECRETS_REFRESH_SECS";
/// The shortest time between two fetches asked for by an authentication failure.
pub const MIN_REFRESH_GAP: Duration = Duration::from_secs(60);

/// The secrets a function was given by reference, fetched.
pub struct SecretSet {
    client: Client,
    /// Variable → the secret's ARN or name.
    references: BTreeMap<&'static str, String>,
    values: Mutex<Fetched>,
    stale: AtomicBool,
    refresh_every: Duration,
}

struct Fetched {
    values: BTreeMap<&'static str, String>,
    at: Instant,
}

impl fmt::Debug for SecretSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretSet")
            .field("variables", &self.references.keys().collect::<Vec<_>>())
            .field("values", &"[redacted]")
            .finish()
    }
}

impl SecretSet {
    /// Read the references from `env` and fetch every secret once. A variable set both plainly
    /// and by reference is an error (which one is meant?).
    pub async fn fetch(sdk: &SdkConfig, env: &Env) -> Result<Arc<Self>, SetupError> {
        let mut references = BTreeMap::new();
        for var in SECRET_VARS {
            let reference_var = format!("{var}{REFERENCE_SUFFIX}");
            if let Some(reference) = env.get(&reference_var) {
                if env.get(var).is_some() {
                    return Err(ConfigError::Invalid {
                        variable: var,
                        reason: format!(
                            "is set and also given by reference in {reference_var}; set one"
                        ),
                    }
                    .into());
                }
                references.insert(*var, reference);
            }
        }
        let refresh_every = Duration::from_secs(env.whole_number(
            REFRESH_VAR,
            DEFAULT_REFRESH.as_secs(),
            1..=24 * 3600,
        )?);
        let set = Self {
            client: Client::new(sdk),
            references,
            values: Mutex::new(Fetched {
                values: BTreeMap::new(),
                at: Instant::now(),
            }),
            stale: AtomicBool::new(false),
            refresh_every,
        };
        let values = set.fetch_all().await?;
        *set.values.lock().unwrap() = Fetched {
            values,
            at: Instant::now(),
        };
        Ok(Arc::new(set))
    }

    /// Whether any secret is given by reference.
    pub fn is_empty(&self) -> bool {
        self.references.is_empty()
    }

    async fn fetch_all(&self) -> Result<BTreeMap<&'static str, String>, SetupError> {
        let mut values = BTreeMap::new();
        for (var, reference) in &self.references {
            let output = self
                .client
                .get_secret_value()
                .secret_id(reference)
                .send()
                .await
                .map_err(|e| ConfigError::Invalid {
                    variable: var,
                    reason: format!(
                        "cannot read secret {reference:?} from Secrets Manager: {}",
                        DisplayErrorContext(&e)
                    ),
                })?;
            let value = output.secret_string.ok_or_else(|| ConfigError::Invalid {
                variable: var,
                reason: format!("secret {reference:?} has no SecretString"),
            })?;
            values.insert(*var, value);
        }
        Ok(values)
    }

    /// `env` with each secret variable given by reference holding its fetched value.
    pub fn env_over(self: &Arc<Self>, env: Env) -> Env {
        let values = self.values.lock().unwrap().values.clone();
        env.overlay(values)
    }

    /// Ask for a fetch before the next use: a client was refused for its credentials (the
    /// secret may have been rotated).
    pub fn mark_stale(&self) {
        self.stale.store(true, Ordering::SeqCst);
    }

    /// Whether a client reported an authentication failure since the last fetch.
    pub fn marked_stale(&self) -> bool {
        self.stale.load(Ordering::SeqCst)
    }

    /// Whether the values are due for a fetch: older than the refresh period, or marked stale
    /// and at least [`MIN_REFRESH_GAP`] old (a caller with a wrong key must not be able to
    /// make every request a Secrets Manager call).
    pub fn due(&self) -> bool {
        if self.is_empty() {
            return false;
        }
        let age = self.values.lock().unwrap().at.elapsed();
        age >= self.refresh_every || (self.stale.load(Ordering::SeqCst) && age >= MIN_REFRESH_GAP)
    }

    /// Fetch every secret again; `true` when any value changed. On failure the old values stay
    /// (and are tried again at the next refresh).
    pub async fn refresh(&self) -> Result<bool, SetupError> {
        self.stale.store(false, Ordering::SeqCst);
        let fresh = match self.fetch_all().await {
            Ok(fresh) => fresh,
            Err(error) => {
                // Keep serving with what we have; the next invocation tries again.
                self.values.lock().unwrap().at = Instant::now();
                return Err(error);
            }
        };
        let mut current = self.values.lock().unwrap();
        let changed = current.values != fresh;
        *current = Fetched {
            values: fresh,
            at: Instant::now(),
        };
        if changed {
            tracing::info!(
                variables = ?self.references.keys().collect::<Vec<_>>(),
                "a secret changed in Secrets Manager; rebuilding the clients that use it"
            );
        }
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_secret_set_both_ways_is_refused_without_showing_it() {
        let sdk = SdkConfig::builder().build();
        let env = Env::from_pairs(&[
            ("SLACK_BOT_TOKEN", "xoxb-plain-value"),
            ("SLACK_BOT_TOKEN_SECRET_ID", "threadbox/slack-bot-token"),
        ]);
        let err = SecretSet::fetch(&sdk, &env).await.unwrap_err().to_string();
        assert!(err.starts_with("SLACK_BOT_TOKEN is invalid"), "{err}");
        assert!(!err.contains("xoxb-plain-value"), "{err}");
    }

    #[tokio::test]
    async fn without_references_nothing_is_fetched_and_the_env_is_unchanged() {
        let sdk = SdkConfig::builder().build();
        let set = SecretSet::fetch(&sdk, &Env::from_pairs(&[("SLACK_BOT_TOKEN", "xoxb-1")]))
            .await
            .unwrap();
        assert!(set.is_empty() && !set.due());
        let env = set.env_over(Env::from_pairs(&[("SLACK_BOT_TOKEN", "xoxb-1")]));
        assert_eq!(env.get("SLACK_BOT_TOKEN").as_deref(), Some("xoxb-1"));
    }
}
