//! The Slack Web API client against the fake: request shape and auth, typed `ok:false` errors,
//! 429 with `Retry-After`, and file downloads under a size cap.

#[path = "support/slack.rs"]
mod support;

use std::time::Duration;

use threadbox_shared::slack::{ApiErrorCode, PostMessage, SlackApi, SlackError, UpdateMessage};
use threadbox_shared::testing::slack_fake::Fault;

use support::{client, client_with_token, fake};

fn post(thread_ts: Option<&str>, text: &str) -> PostMessage {
    PostMessage {
        channel: "C1".into(),
        thread_ts: thread_ts.map(str::to_owned),
        text: text.into(),
    }
}

#[tokio::test]
async fn posts_and_updates_are_well_formed() {
    let fake = fake().await;
    let api = client(&fake);
    let posted = api
        .post_message(&post(Some("1700000000.000100"), "hello"))
        .await
        .unwrap();
    assert_eq!(posted.channel, "C1");
    api.update_message(&UpdateMessage {
        channel: "C1".into(),
        ts: posted.ts.clone(),
        text: "hello again".into(),
    })
    .await
    .unwrap();
    let dm = api.post_message(&post(None, "top level")).await.unwrap();

    let messages = fake.messages();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0].ts, posted.ts);
    assert_eq!(messages[0].thread_ts.as_deref(), Some("1700000000.000100"));
    assert_eq!(messages[0].text, "hello again");
    assert_eq!(messages[0].history, vec!["hello"]);
    assert_eq!(
        (messages[1].ts.as_str(), messages[1].thread_ts.as_deref()),
        (dm.ts.as_str(), None)
    );
    assert!(fake.rejections().is_empty(), "{:?}", fake.rejections());
}

#[tokio::test]
async fn ok_false_answers_become_typed_errors() {
    let fake = fake().await;
    let api = client(&fake);
    fake.fail_next("chat.postMessage", Fault::Error("channel_not_found".into()));
    let err = api.post_message(&post(None, "x")).await.unwrap_err();
    assert_eq!(err.code(), Some(&ApiErrorCode::ChannelNotFound));
    assert!(!err.is_retryable());

    fake.fail_next("chat.postMessage", Fault::Error("internal_error".into()));
    assert!(api
        .post_message(&post(None, "x"))
        .await
        .unwrap_err()
        .is_retryable());

    let err = api
        .update_message(&UpdateMessage {
            channel: "C1".into(),
            ts: "1700000000.999999".into(),
            text: "x".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(&ApiErrorCode::MessageNotFound));

    let wrong = client_with_token(&fake, "xoxb-wrong");
    let err = wrong.post_message(&post(None, "x")).await.unwrap_err();
    assert_eq!(err.code(), Some(&ApiErrorCode::InvalidAuth));
    assert!(!err.is_retryable());
}

#[tokio::test]
async fn a_429_carries_retry_after() {
    let fake = fake().await;
    let api = client(&fake);
    fake.fail_next(
        "chat.update",
        Fault::RateLimited {
            retry_after_secs: 7,
        },
    );
    let err = api
        .update_message(&UpdateMessage {
            channel: "C1".into(),
            ts: "1700000000.000001".into(),
            text: "x".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(
        err,
        SlackError::RateLimited {
            method: "chat.update".into(),
            retry_after: Some(Duration::from_secs(7))
        }
    );
    assert!(err.is_retryable());

    fake.fail_next("chat.postMessage", Fault::ServerError);
    let err = api.post_message(&post(None, "x")).await.unwrap_err();
    assert!(matches!(err, SlackError::Transport { .. }), "{err:?}");
}

#[tokio::test]
async fn files_download_with_the_token_and_stop_at_the_cap() {
    let fake = fake().await;
    let api = client(&fake);
    let file = fake.add_file("data.csv", b"a,b\n1,2\n".to_vec());
    let url = file.url_private_download.clone().unwrap();
    assert_eq!(api.download_file(&url, 1024).await.unwrap(), b"a,b\n1,2\n");
    assert!(matches!(
        api.download_file(&url, 4).await,
        Err(SlackError::TooLarge { size: 8, limit: 4 })
    ));
    let info = api.file_info(&file.id).await.unwrap();
    assert_eq!(info, file);
    assert_eq!(
        api.file_info("F404").await.unwrap_err().code(),
        Some(&ApiErrorCode::FileNotFound)
    );

    // Slack's sign-in page instead of the file is an error, not the file's contents.
    let wrong = client_with_token(&fake, "xoxb-wrong");
    assert!(wrong.download_file(&url, 1024).await.is_err());
    // And the token is never sent to a host that is not Slack's.
    assert!(matches!(
        api.download_file("https://example.com/files/F1/x", 1024)
            .await,
        Err(SlackError::Unsupported(_))
    ));
}
