//! Live events in Lambda: the WebSocket gateway for the `ws` function and the subscribers target
//! for `fanout`, over the DynamoDB subscription store, the session store's event log and API
//! Gateway's Management API.

use std::sync::Arc;

use super::env::{Env, SetupError};
use threadbox_api::live::{LiveGateway, Subscribers, TokenKey, TokenSecret};
use threadbox_aws::apigw::ApiGatewaySender;
use threadbox_aws::dynamo::{DynamoConfig, DynamoSessionStore, DynamoSubscriptionStore};
use threadbox_aws::sdk::SdkConfig;
use threadbox_core::config::ConfigError;
use threadbox_core::ports::SystemClock;

/// The secret subscription tokens are signed with (the same one `threadbox token` uses).
pub const TOKEN_SECRET_VAR: &str = "THREADBOX_TOKEN_SECRET";

/// The key that checks subscription tokens (`THREADBOX_TOKEN_SECRET`, at least 32 bytes).
pub fn token_key(env: &Env) -> Result<TokenKey, SetupError> {
    let secret =
        TokenSecret::new(env.required(TOKEN_SECRET_VAR)?).map_err(|e| ConfigError::Invalid {
            variable: TOKEN_SECRET_VAR,
            reason: e.to_string(),
        })?;
    Ok(TokenKey::new(secret))
}

/// The WebSocket subscribers over DynamoDB (`THREADBOX_SUBSCRIPTIONS_TABLE`, the session and
/// event tables) and `PostToConnection` (`THREADBOX_WS_CALLBACK_URL`), all required.
pub fn subscribers(sdk: &SdkConfig, env: &Env) -> Result<Subscribers, SetupError> {
    let table = env.required(DynamoSubscriptionStore::TABLE_VAR)?;
    let callback = env.required(ApiGatewaySender::CALLBACK_URL_VAR)?;
    let dynamo = DynamoConfig::from_env(env)?;
    Ok(Subscribers::new(
        Arc::new(DynamoSubscriptionStore::from_sdk_config(sdk, table)),
        Arc::new(ApiGatewaySender::from_sdk_config(sdk, &callback)),
        Arc::new(DynamoSessionStore::from_sdk_config(sdk, dynamo)),
        Arc::new(SystemClock),
    ))
}

/// The fan-out's WebSocket target when the function is configured for it (both
/// `THREADBOX_WS_CALLBACK_URL` and `THREADBOX_SUBSCRIPTIONS_TABLE` set); `None` when neither is,
/// and an error naming the missing one when only one is.
pub fn live_target(sdk: &SdkConfig, env: &Env) -> Result<Option<Subscribers>, SetupError> {
    let table = env.get(DynamoSubscriptionStore::TABLE_VAR);
    let callback = env.get(ApiGatewaySender::CALLBACK_URL_VAR);
    if table.is_none() && callback.is_none() {
        return Ok(None);
    }
    subscribers(sdk, env).map(Some)
}

/// The `$connect` / `$disconnect` / `$default` routes, for the `ws` function.
pub fn live_gateway(sdk: &SdkConfig, env: &Env) -> Result<LiveGateway, SetupError> {
    let key = token_key(env)?;
    Ok(LiveGateway::new(Arc::new(subscribers(sdk, env)?), key))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLES: [(&str, &str); 2] = [
        ("THREADBOX_SESSIONS_TABLE", "s"),
        ("THREADBOX_EVENTS_TABLE", "e"),
    ];

    #[tokio::test]
    async fn the_live_target_needs_both_its_settings_or_neither() {
        let sdk = SdkConfig::builder().build();
        assert!(live_target(&sdk, &Env::from_pairs(&TABLES))
            .unwrap()
            .is_none());
        let only_table = [
            TABLES[0],
            TABLES[1],
            (DynamoSubscriptionStore::TABLE_VAR, "subs"),
        ];
        let err = live_target(&sdk, &Env::from_pairs(&only_table))
            .err()
            .unwrap()
            .to_string();
        assert_eq!(err, "THREADBOX_WS_CALLBACK_URL is not set");
        let both = [
            TABLES[0],
            TABLES[1],
            (DynamoSubscriptionStore::TABLE_VAR, "subs"),
            (
                ApiGatewaySender::CALLBACK_URL_VAR,
                "https://x.execute-api.us-east-1.amazonaws.com/live",
            ),
        ];
        assert!(live_target(&sdk, &Env::from_pairs(&both))
            .unwrap()
            .is_some());
    }

    #[test]
    fn the_token_secret_is_required_and_checked() {
        let err = token_key(&Env::from_pairs(&[])).err().unwrap().to_string();
        assert_eq!(err, "THREADBOX_TOKEN_SECRET is not set");
        let err = token_key(&Env::from_pairs(&[(TOKEN_SECRET_VAR, "short")]))
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.starts_with("THREADBOX_TOKEN_SECRET is invalid"),
            "{err}"
        );
        assert!(token_key(&Env::from_pairs(&[(
            TOKEN_SECRET_VAR,
            "0123456789abcdef0123456789abcdef"
        )]))
        .is_ok());
    }
}
