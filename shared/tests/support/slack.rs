//! What the Slack test files share: the fake with a client pointed at it, and builders.

#![allow(dead_code)] // each test file uses its own subset

use std::sync::Arc;

use threadbox_shared::adapters::slack_web::{BotToken, SlackClientConfig, SlackWebClient};
use threadbox_shared::domain::{Cause, LifecycleEvent, Millis, Status, ThreadId};
use threadbox_shared::slack::SlackApi;
use threadbox_shared::testing::slack_fake::SlackFake;

pub const TOKEN: &str = "xoxb-test-token";

pub async fn fake() -> SlackFake {
    SlackFake::start(TOKEN).await
}

pub fn client_with_token(fake: &SlackFake, token: &str) -> Arc<SlackWebClient> {
    let config = SlackClientConfig::new(BotToken::new(token).unwrap())
        .with_api_url(&fake.api_url())
        .unwrap();
    Arc::new(SlackWebClient::new(config).unwrap())
}

pub fn client(fake: &SlackFake) -> Arc<dyn SlackApi> {
    client_with_token(fake, TOKEN)
}

pub fn event(id: &str, thread: &str, seq: u64, to: Status, cause: Cause) -> LifecycleEvent {
    LifecycleEvent {
        event_id: id.to_owned(),
        thread_id: ThreadId::parse(thread).unwrap(),
        seq,
        generation: 1,
        from: None,
        to,
        cause,
        at: Millis(1_767_225_600_000),
        sandbox_id: Some("sb-1".into()),
        detail: None,
    }
}
