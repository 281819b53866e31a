//! slack-events: Slack's three request URLs, `POST /slack/events` (the Events API),
//! `/slack/interactions` (buttons and modals) and `/slack/commands` (`/sandbox`).
//!
//! The shared ingress does the whole job within Slack's three seconds: verify the `v0`
//! signature on the raw body (a bad or stale one is a 401), answer `url_verification` with its
//! challenge, drop an event id or click seen before (Slack's retries), open Reset's
//! confirmation modal, and queue the work on the FIFO work queue (one group per thread) for the
//! worker; then a 200. API Gateway hands the body over byte for byte (JSON is not
//! base64-encoded; a form body may be, and `lambda_http` decodes it), so the signature is
//! checked on what Slack signed.

use std::sync::Arc;

use axum::Router;
use threadbox_core::ports::SystemClock;
use threadbox_lambda::{Setup, SetupError};
use threadbox_slack::{router, SlackIngress};
use threadbox_slack_web::BOT_TOKEN_VAR;

/// The handler: the ingress's routes.
pub fn app(ingress: SlackIngress) -> Router {
    router(ingress)
}

/// What `main` serves: [`app`] over the signing secret and the bot token, the dedupe table and
/// the work queue from the environment.
pub async fn build(setup: Setup) -> Result<Router, SetupError> {
    let Setup { sdk, env, secrets } = setup;
    let mut ingress = SlackIngress::new(
        Some(threadbox_lambda::signing_secret(&env)?),
        Arc::new(threadbox_lambda::dedupe(&sdk, &env)?),
        Arc::new(threadbox_lambda::work_queue(&sdk, &env)?),
        Arc::new(SystemClock),
    );
    // The bot token opens Reset's confirmation modal, which cannot wait for the worker. Without
    // one (the local Lambda loop) a Reset click is refused with a clear error and everything else
    // works.
    if env.get(BOT_TOKEN_VAR).is_some() {
        let api = Arc::new(threadbox_lambda::slack_api(&env)?);
        ingress = ingress.with_api(threadbox_lambda::watch_slack_auth(api, secrets));
    }
    Ok(app(ingress))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::Value;
    use threadbox_core::ports::{DurableQueue, ReceivedMessage};
    use threadbox_slack::{SigningSecret, WorkItem};
    use threadbox_sqlite::{QueueConfig, SqliteDedupe, SqliteQueue};
    use threadbox_testing::ManualClock;
    use threadbox_tests::lambda::{fixture_json, invoke_http};

    use super::*;

    /// The secret the Slack fixtures are signed with, at the manual clock's start.
    const FIXTURE_SECRET: &str = "fixture-signing-secret-not-a-real-one";

    struct Local {
        router: Router,
        work: Arc<SqliteQueue>,
        clock: Arc<ManualClock>,
        _dir: tempfile::TempDir,
    }

    fn local() -> Local {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("threadbox.db");
        let work = Arc::new(SqliteQueue::open(&path, "work", QueueConfig::default()).unwrap());
        let clock = Arc::new(ManualClock::default());
        let ingress = SlackIngress::new(
            SigningSecret::new(FIXTURE_SECRET),
            Arc::new(SqliteDedupe::open(&path).unwrap()),
            work.clone(),
            clock.clone(),
        );
        Local {
            router: app(ingress),
            work,
            clock,
            _dir: dir,
        }
    }

    impl Local {
        /// What the work queue holds now.
        async fn queued(&self) -> Vec<ReceivedMessage> {
            self.work
                .receive(10, Duration::from_secs(30))
                .await
                .unwrap()
        }

        /// The one item on the work queue, and its FIFO group.
        async fn only_item(&self, why: &str) -> (WorkItem, String) {
            let queued = self.queued().await;
            assert_eq!(queued.len(), 1, "{why}");
            let item = serde_json::from_str(&queued[0].body).unwrap();
            (item, queued[0].group_id.clone())
        }
    }

    #[tokio::test]
    async fn a_mention_is_queued_once_for_its_thread() {
        let local = local();
        let event = fixture_json("apigw-http-slack-app-mention.json");
        let answer = invoke_http(local.router.clone(), &event).await;
        assert_eq!(answer.status, 200, "{:?}", answer.json());
        assert_eq!(answer.json()["outcome"], "accepted");
        let thread = "slack:T0001:C0001:1767225590.000100";
        assert_eq!(answer.json()["thread_id"], thread);

        // Slack retries when the ack is slow: the same event id is acknowledged, not queued.
        let mut retry = event.clone();
        retry["headers"]["x-slack-retry-num"] = Value::from("1");
        retry["headers"]["x-slack-retry-reason"] = Value::from("http_timeout");
        let answer = invoke_http(local.router.clone(), &retry).await;
        assert_eq!(answer.status, 200);
        assert_eq!(answer.json()["outcome"], "duplicate");

        let (item, group) = local.only_item("queued once").await;
        assert_eq!(group, thread);
        let WorkItem::Message(message) = item else {
            panic!("a message: {item:?}");
        };
        assert!(message.addressed);
        assert!(
            message.text.contains("echo hello from slack"),
            "{}",
            message.text
        );
    }

    /// API Gateway hands a form body over base64-encoded: the signature is checked on the
    /// decoded bytes (what Slack signed), and the click is queued in its thread's FIFO group.
    #[tokio::test]
    async fn a_button_click_is_queued_once_in_its_threads_group() {
        let local = local();
        let event = fixture_json("apigw-http-slack-interaction.json");
        assert_eq!(event["isBase64Encoded"], true);
        let answer = invoke_http(local.router.clone(), &event).await;
        assert_eq!(answer.status, 200, "{:?}", answer.json());
        let again = invoke_http(local.router.clone(), &event).await;
        assert_eq!(again.status, 200);

        let (item, group) = local
            .only_item("a redelivered click is not queued twice")
            .await;
        let thread = "slack:T0001:C0001:1767225590.000100";
        assert_eq!(group, thread);
        let WorkItem::Action(action) = item else {
            panic!("a click: {item:?}");
        };
        assert_eq!(action.thread_id.as_str(), thread);
        assert_eq!(action.user, "U0001");
        let answer_in = action.answer_in.expect("answered in the channel");
        assert_eq!(answer_in.channel, "C0001");
        assert_eq!(answer_in.thread_ts.as_deref(), Some("1767225590.000100"));
    }

    #[tokio::test]
    async fn a_slash_command_is_queued_and_a_forged_one_refused() {
        let local = local();
        let event = fixture_json("apigw-http-slack-command.json");
        let answer = invoke_http(local.router.clone(), &event).await;
        assert_eq!(answer.status, 200);

        let mut forged = event.clone();
        forged["headers"]["x-slack-signature"] =
            Value::from("v0=0000000000000000000000000000000000000000000000000000000000000000");
        forged["headers"]["x-slack-request-timestamp"] = Value::from("1767225601");
        let answer = invoke_http(local.router.clone(), &forged).await;
        assert_eq!(answer.status, 401);

        let (item, group) = local.only_item("the forged one is not queued").await;
        let WorkItem::Slash(command) = item else {
            panic!("a slash command: {item:?}");
        };
        assert_eq!(
            (command.team.as_str(), command.channel.as_str()),
            ("T0001", "C0001")
        );
        assert_eq!(command.text, "list");
        assert_eq!(group, "slack:T0001:C0001");
    }

    #[tokio::test]
    async fn url_verification_is_answered_with_the_challenge() {
        let local = local();
        let event = fixture_json("apigw-http-slack-url-verification.json");
        let answer = invoke_http(local.router.clone(), &event).await;
        assert_eq!(answer.status, 200);
        assert_eq!(
            answer.json()["challenge"],
            "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
        );
    }

    #[tokio::test]
    async fn bad_signatures_stale_requests_and_bad_bodies_change_nothing() {
        let local = local();
        let event = fixture_json("apigw-http-slack-app-mention.json");

        // One byte of the body changed after signing.
        let mut tampered = event.clone();
        let body = tampered["body"].as_str().unwrap().replace("hello", "HELLO");
        tampered["body"] = Value::from(body);
        let answer = invoke_http(local.router.clone(), &tampered).await;
        assert_eq!(answer.status, 401);
        assert!(answer.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("does not match"));

        let mut unsigned = event.clone();
        unsigned["headers"]
            .as_object_mut()
            .unwrap()
            .remove("x-slack-signature");
        let answer = invoke_http(local.router.clone(), &unsigned).await;
        assert_eq!(answer.status, 401);

        // A replay ten minutes later.
        local.clock.advance(Duration::from_secs(600));
        let answer = invoke_http(local.router.clone(), &event).await;
        assert_eq!(answer.status, 401);
        assert!(answer.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("away from now"));

        assert!(local.queued().await.is_empty());
    }
}
