//! The Slack Web API client against the fake: request shape and auth, typed `ok:false` errors,
//! 429 with `Retry-After`, file downloads under a size cap, ephemeral messages, views, the
//! external upload flow, paged membership checks, and Block Kit limits.

#[path = "support/slack.rs"]
mod support;

use std::time::Duration;

use serde_json::{json, Value};
use threadbox_core::ports::{EphemeralMessage, FileUpload};
use threadbox_slack::{ApiErrorCode, PostMessage, SlackApi, SlackError, UpdateMessage};
use threadbox_slack_web::MAX_MEMBER_PAGES;
use threadbox_testing::slack_fake::{Fault, SlackFake, TRIGGER_PREFIX, UPLOAD_STEP};

use support::{client, client_with_token, fake};

fn post(thread_ts: Option<&str>, text: &str) -> PostMessage {
    PostMessage {
        channel: "C1".into(),
        thread_ts: thread_ts.map(str::to_owned),
        text: text.into(),
        blocks: None,
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
        blocks: None,
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
            blocks: None,
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
            blocks: None,
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

fn section(text: &str) -> Value {
    json!({ "type": "section", "text": { "type": "mrkdwn", "text": text } })
}

fn button(action_id: &str, label: &str) -> Value {
    json!({
        "type": "button",
        "action_id": action_id,
        "text": { "type": "plain_text", "text": label },
        "value": action_id,
    })
}

fn modal(title: &str) -> Value {
    json!({
        "type": "modal",
        "callback_id": "run_command",
        "title": { "type": "plain_text", "text": title },
        "submit": { "type": "plain_text", "text": "Run" },
        "blocks": [{
            "type": "input",
            "block_id": "command",
            "label": { "type": "plain_text", "text": "Command" },
            "element": { "type": "plain_text_input", "action_id": "command" },
        }],
    })
}

fn home(text: &str) -> Value {
    json!({ "type": "home", "blocks": [section(text)] })
}

fn api_code(err: &SlackError) -> &str {
    err.code()
        .map(ApiErrorCode::as_str)
        .unwrap_or("(not an API error)")
}

fn assert_no_rejections(fake: &SlackFake) {
    assert!(fake.rejections().is_empty(), "{:?}", fake.rejections());
}

#[tokio::test]
async fn ephemeral_messages_reach_one_user_in_the_thread() {
    let fake = fake().await;
    let api = client(&fake);
    let blocks = vec![section("only *you* can see this")];
    api.post_ephemeral(&EphemeralMessage {
        channel: "C1".into(),
        user: "U1".into(),
        thread_ts: Some("1700000000.000100".into()),
        text: "only you can see this".into(),
        blocks: Some(blocks.clone()),
    })
    .await
    .unwrap();

    let ephemerals = fake.ephemerals();
    assert_eq!(ephemerals.len(), 1);
    let e = &ephemerals[0];
    assert_eq!((e.channel.as_str(), e.user.as_str()), ("C1", "U1"));
    assert_eq!(e.thread_ts.as_deref(), Some("1700000000.000100"));
    assert_eq!(e.text, "only you can see this");
    assert_eq!(e.blocks.as_ref(), Some(&blocks));
    assert!(fake.messages().is_empty(), "not a message everyone sees");

    // Slack refuses an ephemeral message to someone outside the channel.
    fake.set_members("C2", &["U1"]);
    let err = api
        .post_ephemeral(&EphemeralMessage {
            channel: "C2".into(),
            user: "U2".into(),
            thread_ts: None,
            text: "x".into(),
            blocks: None,
        })
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), "user_not_in_channel");
    assert_no_rejections(&fake);
}

#[tokio::test]
async fn a_modal_opens_once_per_trigger_and_home_views_publish_per_user() {
    let fake = fake().await;
    let api = client(&fake);
    let trigger = fake.issue_trigger();
    api.open_view(&trigger, &modal("Run a command"))
        .await
        .unwrap();
    let opened = fake.opened_views();
    assert_eq!(opened.len(), 1);
    assert_eq!(opened[0].trigger_id, trigger);
    assert_eq!(opened[0].view, modal("Run a command"));

    // A trigger is good for one view, as Slack's are.
    let err = api.open_view(&trigger, &modal("Again")).await.unwrap_err();
    assert_eq!(api_code(&err), "exchanged_trigger_id");
    // One the test makes with the documented prefix works too.
    api.open_view(&format!("{TRIGGER_PREFIX}mine"), &modal("Mine"))
        .await
        .unwrap();
    assert_no_rejections(&fake);

    // No trigger, or a made-up one, is refused.
    for bad in ["", "12345.98765.abcd"] {
        let err = api.open_view(bad, &modal("Run")).await.unwrap_err();
        assert_eq!(api_code(&err), "invalid_trigger_id", "{bad:?}");
    }
    assert_eq!(fake.rejections().len(), 2);

    api.publish_view("U1", &home("first")).await.unwrap();
    api.publish_view("U1", &home("second")).await.unwrap();
    api.publish_view("U2", &home("other")).await.unwrap();
    assert_eq!(fake.published_view("U1"), Some(home("second")));
    assert_eq!(fake.publish_count("U1"), 2);
    assert_eq!(fake.publish_count("U2"), 1);
    assert_eq!(fake.publish_count("U3"), 0);
    assert_eq!(fake.published_view("U3"), None);

    // A modal is not a home view, and a modal title has 24 characters at most.
    let err = api.publish_view("U1", &modal("Run")).await.unwrap_err();
    assert_eq!(api_code(&err), "invalid_arguments");
    let err = api
        .open_view(&fake.issue_trigger(), &modal(&"t".repeat(25)))
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), "invalid_arguments");
    let detail = fake.rejections().last().unwrap().detail.clone().unwrap();
    assert!(detail.contains("/view/title/text"), "{detail}");
}

fn upload_of(bytes: Vec<u8>) -> FileUpload {
    FileUpload {
        channel: "C1".into(),
        thread_ts: Some("1700000000.000100".into()),
        filename: "output.txt".into(),
        title: "Command output".into(),
        initial_comment: "`ls -R` printed 100 KB".into(),
        bytes,
    }
}

/// 100 KB that no off-by-one or truncation can pass for the original.
fn hundred_kb() -> Vec<u8> {
    (0..100 * 1024u32).map(|i| (i * 31 % 251) as u8).collect()
}

#[tokio::test]
async fn a_100_kb_upload_lands_whole_in_the_thread() {
    let fake = fake().await;
    let api = client(&fake);
    let bytes = hundred_kb();
    let id = api.upload_file(&upload_of(bytes.clone())).await.unwrap();

    let upload = fake.upload(&id).expect("the fake knows the file");
    assert_eq!(
        upload.bytes.as_deref(),
        Some(bytes.as_slice()),
        "exact bytes"
    );
    assert_eq!(upload.declared_length, 100 * 1024);
    assert_eq!(upload.filename, "output.txt");
    assert_eq!(upload.title.as_deref(), Some("Command output"));
    assert_eq!(upload.channel.as_deref(), Some("C1"));
    assert_eq!(upload.thread_ts.as_deref(), Some("1700000000.000100"));
    assert_eq!(
        upload.initial_comment.as_deref(),
        Some("`ls -R` printed 100 KB")
    );
    assert!(upload.completed);
    // The fake's upload URL is on the API host itself, which may have the token.
    assert!(upload.authorization_sent);
    assert_no_rejections(&fake);
}

#[tokio::test]
async fn the_token_stays_off_an_upload_url_elsewhere() {
    let fake = fake().await;
    let api = client(&fake);
    // `localhost` reaches the fake, but is not the configured `127.0.0.1`.
    fake.set_upload_host("localhost");
    let id = api
        .upload_file(&upload_of(b"hello".to_vec()))
        .await
        .unwrap();
    let upload = fake.upload(&id).unwrap();
    assert_eq!(upload.bytes.as_deref(), Some(&b"hello"[..]));
    assert!(upload.completed);
    assert!(!upload.authorization_sent);
    assert_no_rejections(&fake);
}

#[tokio::test]
async fn a_fault_in_each_upload_step_is_a_typed_error() {
    let fake = fake().await;
    let api = client(&fake);
    let upload = upload_of(b"a,b\n1,2\n".to_vec());

    // Step 1: no upload URL.
    fake.fail_next(
        "files.getUploadURLExternal",
        Fault::RateLimited {
            retry_after_secs: 3,
        },
    );
    let err = api.upload_file(&upload).await.unwrap_err();
    assert_eq!(
        err,
        SlackError::RateLimited {
            method: "files.getUploadURLExternal".into(),
            retry_after: Some(Duration::from_secs(3)),
        }
    );
    assert!(fake.uploads().is_empty());

    // Step 2: the upload service fails, then refuses.
    fake.fail_next(UPLOAD_STEP, Fault::ServerError);
    let err = api.upload_file(&upload).await.unwrap_err();
    assert!(
        matches!(&err, SlackError::Transport { method, .. } if method == UPLOAD_STEP),
        "{err:?}"
    );
    assert!(err.is_retryable());
    fake.fail_next(UPLOAD_STEP, Fault::Error("expired_url".into()));
    let err = api.upload_file(&upload).await.unwrap_err();
    assert_eq!(
        err,
        SlackError::Api {
            method: UPLOAD_STEP.into(),
            code: ApiErrorCode::Other("upload_rejected_http_400".into()),
        }
    );
    assert!(!err.is_retryable());

    // Step 3: the bytes arrived, but sharing them did not.
    fake.fail_next(
        "files.completeUploadExternal",
        Fault::Error("not_in_channel".into()),
    );
    let err = api.upload_file(&upload).await.unwrap_err();
    assert_eq!(err.code(), Some(&ApiErrorCode::NotInChannel));

    let uploads = fake.uploads();
    assert_eq!(uploads.len(), 3, "one file started per attempt past step 1");
    assert!(uploads[..2].iter().all(|u| u.bytes.is_none()));
    assert!(uploads[2].bytes.is_some());
    assert!(uploads.iter().all(|u| !u.completed));
    // The client stopped at each failed step rather than completing a file with no bytes.
    assert_no_rejections(&fake);
}

#[tokio::test]
async fn membership_is_read_across_every_page() {
    let fake = fake().await;
    let api = client(&fake);
    let members = ["U1", "U2", "U3", "U4", "U5", "U6", "U7"];
    fake.set_members("C1", &members);
    let pages = |fake: &SlackFake| {
        fake.calls()
            .iter()
            .filter(|c| c.method == "conversations.members")
            .count()
    };

    assert!(api.is_member("C1", "U1").await.unwrap());
    assert_eq!(pages(&fake), 1, "found on the first page");
    assert!(api.is_member("C1", "U7").await.unwrap());
    assert_eq!(pages(&fake), 1 + 4, "U7 is on the fourth page of two");
    assert!(!api.is_member("C1", "U8").await.unwrap());
    assert_eq!(pages(&fake), 1 + 4 + 4, "every page read before saying no");

    // A channel the bot cannot see.
    let err = api.is_member("C404", "U1").await.unwrap_err();
    assert_eq!(err.code(), Some(&ApiErrorCode::ChannelNotFound));
    assert_no_rejections(&fake);

    // A cursor that never ends is cut off, not followed forever.
    let crowd: Vec<String> = (0..=MAX_MEMBER_PAGES).map(|i| format!("U{i:04}")).collect();
    let crowd: Vec<&str> = crowd.iter().map(String::as_str).collect();
    fake.set_members("C2", &crowd);
    fake.set_members_page_size(1);
    let before = pages(&fake);
    let err = api.is_member("C2", "U9999").await.unwrap_err();
    assert!(matches!(err, SlackError::Unsupported(_)), "{err:?}");
    assert_eq!(pages(&fake) - before, MAX_MEMBER_PAGES);
    // Below the cap, the last page still counts.
    assert!(api
        .is_member("C2", &format!("U{:04}", MAX_MEMBER_PAGES - 1))
        .await
        .unwrap());
}

#[tokio::test]
async fn blocks_travel_with_posts_and_updates() {
    let fake = fake().await;
    let api = client(&fake);
    let first = vec![section("*creating*"), json!({ "type": "divider" })];
    let posted = api
        .post_message(&PostMessage {
            blocks: Some(first.clone()),
            ..post(None, "creating")
        })
        .await
        .unwrap();
    let second = vec![
        section("*running*"),
        json!({ "type": "actions", "elements": [button("stop", "Stop")] }),
    ];
    api.update_message(&UpdateMessage {
        channel: "C1".into(),
        ts: posted.ts,
        text: "running".into(),
        blocks: Some(second.clone()),
    })
    .await
    .unwrap();
    let message = &fake.messages()[0];
    assert_eq!(message.blocks.as_ref(), Some(&second));
    assert_eq!(message.blocks_history, vec![Some(first)]);
    assert_no_rejections(&fake);
}

#[tokio::test]
async fn blocks_over_slacks_limits_are_refused() {
    let fake = fake().await;
    let api = client(&fake);
    let with_blocks = |blocks: Vec<Value>| PostMessage {
        blocks: Some(blocks),
        ..post(None, "fallback")
    };

    let dividers = vec![json!({ "type": "divider" }); 51];
    let too_long = vec![section(&"x".repeat(3001))];
    let duplicate_ids =
        vec![json!({ "type": "actions", "elements": [button("go", "A"), button("go", "B")] })];
    let untyped = vec![json!({ "text": { "type": "mrkdwn", "text": "no type" } })];
    for (blocks, pointer) in [
        (dividers, "/blocks]"),
        (too_long, "/blocks/0/text/text"),
        (duplicate_ids, "/blocks/0/elements/1/action_id"),
        (untyped, "/blocks/0/type"),
    ] {
        let err = api.post_message(&with_blocks(blocks)).await.unwrap_err();
        assert_eq!(api_code(&err), "invalid_blocks");
        assert!(!err.is_retryable());
        let detail = fake.rejections().last().unwrap().detail.clone().unwrap();
        assert!(detail.contains(pointer), "{detail} should name {pointer}");
    }
    assert!(fake.messages().is_empty());

    // Exactly at the limits is fine.
    let at_limit = vec![json!({ "type": "divider" }); 50];
    api.post_message(&with_blocks(at_limit)).await.unwrap();
    api.post_message(&with_blocks(vec![section(&"x".repeat(3000))]))
        .await
        .unwrap();

    // Ephemeral messages are held to the same limits.
    let err = api
        .post_ephemeral(&EphemeralMessage {
            channel: "C1".into(),
            user: "U1".into(),
            thread_ts: None,
            text: "x".into(),
            blocks: Some(vec![json!({ "type": "video" })]),
        })
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), "invalid_blocks");
}

#[tokio::test]
async fn a_429_on_the_new_methods_carries_retry_after() {
    let fake = fake().await;
    let api = client(&fake);
    fake.fail_next(
        "views.publish",
        Fault::RateLimited {
            retry_after_secs: 9,
        },
    );
    let err = api.publish_view("U1", &home("x")).await.unwrap_err();
    assert_eq!(
        err,
        SlackError::RateLimited {
            method: "views.publish".into(),
            retry_after: Some(Duration::from_secs(9)),
        }
    );
    assert_eq!(err.retry_after(), Some(Duration::from_secs(9)));

    fake.set_members("C1", &["U1", "U2", "U3"]);
    fake.fail_next(
        "conversations.members",
        Fault::RateLimited {
            retry_after_secs: 2,
        },
    );
    let err = api.is_member("C1", "U3").await.unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(2)));
    assert!(err.is_retryable());
    // The next try starts over and finds them.
    assert!(api.is_member("C1", "U3").await.unwrap());
}
