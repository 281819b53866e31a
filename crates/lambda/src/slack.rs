//! The Slack app's clients for the Lambda functions: the work queue between `slack-events` and
//! `worker`, the signing secret, the Web API client, and the status store the fan-out's Slack
//! target keeps its messages in.

use std::sync::Arc;

use super::env::{Env, SetupError};
use super::secrets::SecretSet;
use serde_json::Value;
use threadbox_aws::dynamo::{
    DynamoConfig, DynamoSessionStore, DynamoSlackStatusStore, DynamoSlackUserThreads,
};
use threadbox_aws::sdk::SdkConfig;
use threadbox_aws::sqs::{SqsQueue, SqsQueueUrls};
use threadbox_core::config::ConfigError;
use threadbox_core::ports::{
    ApiErrorCode, EphemeralMessage, FileUpload, PostMessage, Posted, SlackApi, SlackError,
    SlackFile, UpdateMessage,
};
use threadbox_slack::{SigningSecret, SlackStatusTarget};
use threadbox_slack_web::{SlackClientConfig, SlackWebClient, BOT_TOKEN_VAR};

pub const WORK_QUEUE_URL_VAR: &str = "THREADBOX_WORK_QUEUE_URL";
pub const WORK_DLQ_URL_VAR: &str = "THREADBOX_WORK_DLQ_URL";
pub const SIGNING_SECRET_VAR: &str = "SLACK_SIGNING_SECRET";

/// The FIFO work queue (`THREADBOX_WORK_QUEUE_URL`, `THREADBOX_WORK_DLQ_URL`): Slack messages
/// from the ingress to the worker, and replies the worker has to post later.
pub fn work_queue(sdk: &SdkConfig, env: &Env) -> Result<SqsQueue, SetupError> {
    Ok(SqsQueue::from_sdk_config(
        sdk,
        SqsQueueUrls {
            queue_url: env.required(WORK_QUEUE_URL_VAR)?,
            dead_letter_url: env.required(WORK_DLQ_URL_VAR)?,
        },
    ))
}

/// The app's signing secret (`SLACK_SIGNING_SECRET`), which every request from Slack is checked
/// against.
pub fn signing_secret(env: &Env) -> Result<SigningSecret, SetupError> {
    let raw = env.required(SIGNING_SECRET_VAR)?;
    SigningSecret::new(&raw).ok_or_else(|| ConfigError::Missing(SIGNING_SECRET_VAR).into())
}

/// The Web API client (`SLACK_BOT_TOKEN`, and `SLACK_API_URL` to point elsewhere than Slack).
pub fn slack_api(env: &Env) -> Result<SlackWebClient, SetupError> {
    let config = SlackClientConfig::from_env(env)?.ok_or(ConfigError::Missing(BOT_TOKEN_VAR))?;
    SlackWebClient::new(config).map_err(|e| {
        ConfigError::Invalid {
            variable: BOT_TOKEN_VAR,
            reason: format!("cannot build the Slack client: {e}"),
        }
        .into()
    })
}

/// The fan-out's Slack target (one status message per thread, edited in place), when the
/// function has a bot token; `None` without one, so a deployment without Slack fans out to the
/// other targets only. With a token the status table (`THREADBOX_SLACK_STATUS_TABLE`) is required.
pub fn slack_status_target(
    sdk: &SdkConfig,
    env: &Env,
) -> Result<Option<SlackStatusTarget>, SetupError> {
    slack_status_target_watched(sdk, env, None)
}

/// [`slack_status_target`], whose Slack client marks `secrets` stale when Slack refuses the
/// token (see [`watch_slack_auth`]).
pub fn slack_status_target_watched(
    sdk: &SdkConfig,
    env: &Env,
    secrets: Option<&Arc<SecretSet>>,
) -> Result<Option<SlackStatusTarget>, SetupError> {
    if env.get(BOT_TOKEN_VAR).is_none() {
        return Ok(None);
    }
    let table = env.required(DynamoSlackStatusStore::TABLE_VAR)?;
    // Status rows are kept as long as the session records they describe.
    let retention = DynamoConfig::retention_from_env(env)?;
    let store = DynamoSlackStatusStore::from_sdk_config(sdk, table).with_retention(retention);
    let mut api: Arc<dyn SlackApi> = Arc::new(slack_api(env)?);
    if let Some(secrets) = secrets {
        api = watch_slack_auth(api, secrets.clone());
    }
    // The card's usage line reads the thread's events and prices its running time as the
    // other functions do (`THREADBOX_PROVIDER` and the pricing variables).
    let sessions = DynamoSessionStore::from_sdk_config(sdk, DynamoConfig::from_env(env)?);
    let provider = env
        .get(threadbox_providers::PROVIDER_VAR)
        .unwrap_or_default();
    let pricing = super::settings::pricing_for_provider(env, &provider)?;
    Ok(Some(
        SlackStatusTarget::new(api, Arc::new(store)).with_usage(Arc::new(sessions), pricing),
    ))
}

/// Who used which Slack thread (`/sandbox list`, the App Home): rows on the status table
/// (`THREADBOX_SLACK_STATUS_TABLE`), kept as long as the status rows.
pub fn slack_user_threads(
    sdk: &SdkConfig,
    env: &Env,
) -> Result<DynamoSlackUserThreads, SetupError> {
    let table = env.required(DynamoSlackStatusStore::TABLE_VAR)?;
    let retention = DynamoConfig::retention_from_env(env)?;
    Ok(DynamoSlackUserThreads::from_sdk_config(sdk, table).with_retention(retention))
}

/// `api`, marking `secrets` stale whenever Slack refuses the bot token (`invalid_auth`,
/// `not_authed`, `token_revoked`): the token may have been rotated in Secrets Manager since it
/// was fetched, and the next invocation fetches it again (at most once a minute).
pub fn watch_slack_auth(api: Arc<dyn SlackApi>, secrets: Arc<SecretSet>) -> Arc<dyn SlackApi> {
    Arc::new(AuthWatched { api, secrets })
}

struct AuthWatched {
    api: Arc<dyn SlackApi>,
    secrets: Arc<SecretSet>,
}

impl AuthWatched {
    fn seen<T>(&self, result: Result<T, SlackError>) -> Result<T, SlackError> {
        if let Err(SlackError::Api { code, .. }) = &result {
            if matches!(
                code,
                ApiErrorCode::InvalidAuth | ApiErrorCode::NotAuthed | ApiErrorCode::TokenRevoked
            ) {
                tracing::warn!(%code, "Slack refused the bot token; fetching it again");
                self.secrets.mark_stale();
            }
        }
        result
    }
}

#[async_trait::async_trait]
impl SlackApi for AuthWatched {
    async fn post_message(&self, message: &PostMessage) -> Result<Posted, SlackError> {
        self.seen(self.api.post_message(message).await)
    }

    async fn update_message(&self, update: &UpdateMessage) -> Result<(), SlackError> {
        self.seen(self.api.update_message(update).await)
    }

    async fn file_info(&self, file_id: &str) -> Result<SlackFile, SlackError> {
        self.seen(self.api.file_info(file_id).await)
    }

    async fn download_file(&self, url: &str, max_bytes: u64) -> Result<Vec<u8>, SlackError> {
        self.seen(self.api.download_file(url, max_bytes).await)
    }

    async fn post_ephemeral(&self, message: &EphemeralMessage) -> Result<(), SlackError> {
        self.seen(self.api.post_ephemeral(message).await)
    }

    async fn open_view(&self, trigger_id: &str, view: &Value) -> Result<(), SlackError> {
        self.seen(self.api.open_view(trigger_id, view).await)
    }

    async fn publish_view(&self, user: &str, view: &Value) -> Result<(), SlackError> {
        self.seen(self.api.publish_view(user, view).await)
    }

    async fn upload_file(&self, upload: &FileUpload) -> Result<String, SlackError> {
        self.seen(self.api.upload_file(upload).await)
    }

    async fn is_member(&self, channel: &str, user: &str) -> Result<bool, SlackError> {
        self.seen(self.api.is_member(channel, user).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use threadbox_slack_web::API_URL_VAR;

    #[test]
    fn every_slack_setting_is_named_when_missing_or_bad() {
        let err = signing_secret(&Env::from_pairs(&[(SIGNING_SECRET_VAR, "  ")]))
            .unwrap_err()
            .to_string();
        assert_eq!(err, "SLACK_SIGNING_SECRET is not set");
        assert!(signing_secret(&Env::from_pairs(&[(SIGNING_SECRET_VAR, "s3cr3t")])).is_ok());

        let err = slack_api(&Env::from_pairs(&[])).unwrap_err().to_string();
        assert_eq!(err, "SLACK_BOT_TOKEN is not set");
        let err = slack_api(&Env::from_pairs(&[
            (BOT_TOKEN_VAR, "xoxb-1"),
            (API_URL_VAR, "not a url"),
        ]))
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("SLACK_API_URL is invalid"), "{err}");
        let shown = format!(
            "{:?}",
            slack_api(&Env::from_pairs(&[(BOT_TOKEN_VAR, "xoxb-secret-token")])).unwrap()
        );
        assert!(!shown.contains("xoxb-secret-token"), "{shown}");
    }

    /// Slack refusing the token marks the secrets stale (the token may have been rotated);
    /// other failures do not.
    #[tokio::test]
    async fn a_refused_token_marks_the_secrets_stale() {
        use threadbox_testing::slack_fake::{Fault, SlackFake};

        let slack = SlackFake::start("xoxb-good").await;
        let sdk = SdkConfig::builder().build();
        let secrets = SecretSet::fetch(&sdk, &Env::from_pairs(&[])).await.unwrap();
        let env = Env::from_pairs(&[
            (BOT_TOKEN_VAR, "xoxb-good"),
            (API_URL_VAR, &slack.api_url()),
        ]);
        let api = watch_slack_auth(Arc::new(slack_api(&env).unwrap()), secrets.clone());
        let post = PostMessage {
            channel: "C1".into(),
            thread_ts: None,
            text: "hello".into(),
            blocks: None,
        };
        slack.fail_next("chat.postMessage", Fault::Error("channel_not_found".into()));
        assert!(api.post_message(&post).await.is_err());
        assert!(!secrets.marked_stale(), "not an authentication failure");
        slack.fail_next("chat.postMessage", Fault::Error("invalid_auth".into()));
        assert!(api.post_message(&post).await.is_err());
        assert!(secrets.marked_stale());
    }

    #[tokio::test]
    async fn the_status_target_needs_a_token_and_then_its_table() {
        let sdk = SdkConfig::builder().build();
        assert!(slack_status_target(&sdk, &Env::from_pairs(&[]))
            .unwrap()
            .is_none());
        let err = slack_status_target(&sdk, &Env::from_pairs(&[(BOT_TOKEN_VAR, "xoxb-1")]))
            .err()
            .unwrap()
            .to_string();
        assert_eq!(err, "THREADBOX_SLACK_STATUS_TABLE is not set");
        let err = work_queue(&sdk, &Env::from_pairs(&[(WORK_QUEUE_URL_VAR, "https://q")]))
            .unwrap_err()
            .to_string();
        assert_eq!(err, "THREADBOX_WORK_DLQ_URL is not set");
    }
}
