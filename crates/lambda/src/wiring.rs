//! Building a function's clients from the environment, once per process (in `main`, before the
//! runtime starts polling), so that every invocation reuses the same connections.

use std::sync::Arc;

use super::env::{Env, SetupError};
use super::secrets::SecretSet;
use super::settings::Settings;
use threadbox_api::http::ApiAuth;
use threadbox_aws::dynamo::{
    DynamoCheckpointStore, DynamoDedupe, DynamoSessionStore, DynamoWindowCounter,
};
use threadbox_aws::sdk::{load_config, ClientSettings, SdkConfig};
use threadbox_aws::sqs::{SqsQueue, SqsQueueUrls};
use threadbox_core::config::ConfigError;
use threadbox_core::ports::{SandboxProvider, SystemClock};
use threadbox_core::usecases::{Threadbox, WarmPool};
use threadbox_providers::ProviderSetup;
use threadbox_runc::RuncConfig;
use threadbox_slack::RateLimits;

pub const API_KEYS_VAR: &str = "THREADBOX_API_KEYS";

/// The AWS SDK's configuration from its standard settings, with the adapters' timeouts and
/// retries (see `adapters::aws`). Make every client of the process from this one value.
pub async fn aws_config() -> SdkConfig {
    load_config(&ClientSettings::default()).await
}

/// The use cases over DynamoDB, the SQS lifecycle queue, the configured sandbox provider and the
/// system clock, with checkpoint records on the sessions table (`DynamoCheckpointStore`) within
/// `THREADBOX_CHECKPOINTS_KEPT` and `THREADBOX_CHECKPOINT_BYTES`: a provider without checkpoints
/// (E2B) then answers their routes `unsupported`, naming itself, and a destroy anywhere
/// (janitor, pause-queue, a request) forgets the thread's records. E2B refusing its API key marks `secrets` stale, so a rotated key is fetched
/// again (at most once a minute) instead of failing every call until the next refresh.
pub async fn threadbox(
    sdk: &SdkConfig,
    env: &Env,
    secrets: &Arc<SecretSet>,
) -> Result<Threadbox, SetupError> {
    let settings = Settings::from_env(env)?;
    let provider = provider(&settings, secrets).await?;
    // Scope budgets count on the dedupe table; without one set, nothing needs it.
    let budget_counter = if settings.use_cases.budgets.needs_counter() {
        Some(window_counter(sdk, env)?)
    } else {
        None
    };
    let checkpoints = Arc::new(DynamoCheckpointStore::from_sdk_config(
        sdk,
        &settings.dynamo.sessions_table,
    ));
    let store = Arc::new(DynamoSessionStore::from_sdk_config(sdk, settings.dynamo));
    let tb = Threadbox::new(
        store.clone(),
        provider,
        Arc::new(SqsQueue::from_sdk_config(sdk, settings.lifecycle_queue)),
        Arc::new(SystemClock),
        settings.use_cases,
    )
    // Always with the pool's store: at size 0 the janitor drains members a larger size made.
    .with_warm_pool(WarmPool {
        store,
        size: settings.warm_pool,
        max_age: settings.warm_pool_max_age,
    })
    .with_checkpoints(checkpoints, settings.checkpoints);
    Ok(match budget_counter {
        Some(counter) => tb.with_budget_counter(Arc::new(counter)),
        None => tb,
    })
}

async fn provider(
    settings: &Settings,
    secrets: &Arc<SecretSet>,
) -> Result<Arc<dyn SandboxProvider>, SetupError> {
    let secrets = secrets.clone();
    let setup = ProviderSetup {
        runc: RuncConfig::new(&settings.runc_state_dir),
        on_refused_key: Some(Arc::new(move || secrets.mark_stale())),
    };
    threadbox_providers::open(&settings.provider, setup)
        .await
        .map_err(|error| SetupError::Provider {
            provider: settings.provider.name(),
            error,
        })
}

/// The lifecycle queue (`THREADBOX_LIFECYCLE_QUEUE_URL`, `THREADBOX_LIFECYCLE_DLQ_URL`), for the
/// fan-out to settle its records (visibility, dead letters).
pub fn lifecycle_queue(sdk: &SdkConfig, env: &Env) -> Result<SqsQueue, SetupError> {
    Ok(SqsQueue::from_sdk_config(
        sdk,
        Settings::lifecycle_queue_from_env(env)?,
    ))
}

/// The queue the janitor hands claimed pauses and destroys to, and the `pause` function's
/// queue handler consumes (`THREADBOX_TRANSITION_QUEUE_URL`, `THREADBOX_TRANSITION_DLQ_URL`);
/// `None` when the queue URL is not set (the janitor then carries transitions out itself).
pub fn transition_queue(sdk: &SdkConfig, env: &Env) -> Result<Option<SqsQueue>, SetupError> {
    let Some(queue_url) = env.get(TRANSITION_QUEUE_URL_VAR) else {
        return Ok(None);
    };
    Ok(Some(SqsQueue::from_sdk_config(
        sdk,
        SqsQueueUrls {
            queue_url,
            dead_letter_url: env.required(TRANSITION_DLQ_URL_VAR)?,
        },
    )))
}

pub const TRANSITION_QUEUE_URL_VAR: &str = "THREADBOX_TRANSITION_QUEUE_URL";
pub const TRANSITION_DLQ_URL_VAR: &str = "THREADBOX_TRANSITION_DLQ_URL";

/// The fan-out's memory of what each target has (`THREADBOX_DEDUPE_TABLE`).
pub fn dedupe(sdk: &SdkConfig, env: &Env) -> Result<DynamoDedupe, SetupError> {
    let table = env.required(DynamoDedupe::TABLE_VAR)?;
    Ok(DynamoDedupe::from_sdk_config(sdk, table))
}

/// Counters for rate limits and scope budgets, on the dedupe table (`THREADBOX_DEDUPE_TABLE`).
pub fn window_counter(sdk: &SdkConfig, env: &Env) -> Result<DynamoWindowCounter, SetupError> {
    let table = env.required(DynamoDedupe::TABLE_VAR)?;
    Ok(DynamoWindowCounter::from_sdk_config(sdk, table))
}

/// Slack messages acted on per minute (`THREADBOX_SLACK_THREAD_RATE`,
/// `THREADBOX_SLACK_TEAM_RATE`; each optional, a positive whole number).
pub fn slack_rates(env: &Env) -> Result<RateLimits, SetupError> {
    let defaults = RateLimits::default();
    let read = |variable: &'static str, default: u64| -> Result<u64, SetupError> {
        match env.get(variable) {
            None => Ok(default),
            Some(text) => match text.trim().parse::<u64>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(ConfigError::Invalid {
                    variable,
                    reason: format!("{text:?} is not a positive whole number of messages a minute"),
                }
                .into()),
            },
        }
    };
    Ok(RateLimits {
        per_thread: read("THREADBOX_SLACK_THREAD_RATE", defaults.per_thread)?,
        per_team: read("THREADBOX_SLACK_TEAM_RATE", defaults.per_team)?,
    })
}

/// The API keys HTTP callers must present (`THREADBOX_API_KEYS`, comma-separated). Required: a
/// function behind API Gateway is on the internet, and the API's keyless mode is for loopback.
pub fn api_auth(env: &Env) -> Result<ApiAuth, SetupError> {
    let keys = env.required(API_KEYS_VAR)?;
    ApiAuth::parse(&keys).map_err(|e| {
        ConfigError::Invalid {
            variable: API_KEYS_VAR,
            reason: e.to_string(),
        }
        .into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_keys_are_required_and_never_shown() {
        let err = api_auth(&Env::from_pairs(&[])).unwrap_err().to_string();
        assert_eq!(err, "THREADBOX_API_KEYS is not set");
        let err = api_auth(&Env::from_pairs(&[(API_KEYS_VAR, " , ")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("holds no key"), "{err}");
        let (one, two) = ("k-one".repeat(8), "k-two".repeat(8));
        let auth = api_auth(&Env::from_pairs(&[(API_KEYS_VAR, &format!("{one},{two}"))])).unwrap();
        assert!(auth.accepts(one.as_bytes()) && auth.accepts(two.as_bytes()));
        assert!(!format!("{auth:?}").contains("k-one"));
        let err = api_auth(&Env::from_pairs(&[(API_KEYS_VAR, "k-one")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("at least 32"), "{err}");
    }

    #[test]
    fn slack_rates_default_and_refuse_nonsense() {
        assert_eq!(
            slack_rates(&Env::from_pairs(&[])).unwrap(),
            RateLimits::default()
        );
        let set = Env::from_pairs(&[
            ("THREADBOX_SLACK_THREAD_RATE", "3"),
            ("THREADBOX_SLACK_TEAM_RATE", "30"),
        ]);
        assert_eq!(
            slack_rates(&set).unwrap(),
            RateLimits {
                per_thread: 3,
                per_team: 30
            }
        );
        for bad in ["0", "-1", "ten"] {
            let env = Env::from_pairs(&[("THREADBOX_SLACK_THREAD_RATE", bad)]);
            let err = slack_rates(&env).unwrap_err().to_string();
            assert!(err.contains("THREADBOX_SLACK_THREAD_RATE"), "{err}");
        }
    }

    #[tokio::test]
    async fn the_dedupe_table_is_required() {
        let sdk = SdkConfig::builder().build();
        let err = dedupe(&sdk, &Env::from_pairs(&[])).unwrap_err().to_string();
        assert_eq!(err, "THREADBOX_DEDUPE_TABLE is not set");
        let store = dedupe(
            &sdk,
            &Env::from_pairs(&[(DynamoDedupe::TABLE_VAR, "tb-dedupe")]),
        )
        .unwrap();
        assert_eq!(store.table(), "tb-dedupe");
    }
}
