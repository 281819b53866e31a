//! Live events end to end: the real `threadbox dev` (runc sandboxes, SQLite, the lifecycle
//! consumer) with WebSocket clients on `GET /v1/ws`.
//!
//! A subscriber sees a thread's events live, disconnects, misses some, reconnects with the last
//! seq it saw, and gets exactly the missed ones in order, then live ones, with no repeats; and
//! every kind of bad token is refused. Needs root and runc, like `dev_e2e`.

mod support;

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use support::live::{mint_with_cli, next, send, try_connect, Socket};
use support::{dev_missing, prerequisites_met, DevServer};
use threadbox_api::live::{TokenKey, TokenSecret};
use threadbox_core::domain::{Millis, ThreadId, ThreadScope};
use tokio_tungstenite::tungstenite::Message;

type Dev = DevServer;

/// The key the server signs with: the secret it generated in its data directory.
fn server_key(dev: &Dev) -> TokenKey {
    let secret = std::fs::read_to_string(dev.data_dir().join("token-secret")).unwrap();
    TokenKey::new(TokenSecret::new(secret).unwrap())
}

/// The seqs of the next `n` frames, each of which must be an event of `thread`.
async fn events(socket: &mut Socket, dev: &Dev, thread: &str, n: usize) -> Vec<(u64, String)> {
    let mut got = Vec::new();
    for _ in 0..n {
        let frame = next(socket, dev).await;
        assert_eq!(frame["type"], "event", "{frame}");
        assert_eq!(frame["event"]["thread_id"], thread, "{frame}");
        got.push((
            frame["event"]["seq"].as_u64().unwrap(),
            frame["event"]["to"].as_str().unwrap().to_owned(),
        ));
    }
    got
}

/// Nothing arrives for `quiet` (a ping round trip proves the socket is still being served).
async fn expect_nothing_more(socket: &mut Socket, dev: &Dev, quiet: Duration) {
    if let Ok(Some(Ok(Message::Text(text)))) = tokio::time::timeout(quiet, socket.next()).await {
        panic!("unexpected frame: {text}");
    }
    send(socket, json!({"action": "ping"})).await;
    assert_eq!(next(socket, dev).await["type"], "pong");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_reconnects_gets_exactly_what_it_missed_then_live_events() {
    if !prerequisites_met(
        "a_subscriber_that_reconnects_gets_exactly_what_it_missed_then_live_events",
        &dev_missing(),
    ) {
        return;
    }
    let dev = Dev::start(&[]).await;
    let thread = "live-e2e-1";

    // A token from the API, for this thread only.
    let minted = dev
        .post(
            "/v1/tokens",
            Some(json!({"threads": [thread], "ttl_seconds": 600})),
        )
        .await;
    let token = minted["token"].as_str().unwrap().to_owned();

    let mut ws = try_connect(&dev, Some(&token)).await.unwrap();
    send(
        &mut ws,
        json!({"action": "subscribe", "thread_id": thread, "after_seq": 0}),
    )
    .await;
    let subscribed = next(&mut ws, &dev).await;
    assert_eq!(
        subscribed,
        json!({"type": "subscribed", "thread_id": thread, "after_seq": 0, "last_seq": 0, "status": null})
    );

    // Live: resolve and pause over HTTP; the events stream in as they happen.
    let resolved = dev
        .post(&format!("/v1/threads/{thread}/resolve"), None)
        .await;
    assert_eq!(resolved["status"], "active");
    dev.post(&format!("/v1/threads/{thread}/pause"), None).await;
    let live = events(&mut ws, &dev, thread, 4).await;
    assert_eq!(
        live,
        vec![
            (1, "creating".to_owned()),
            (2, "active".to_owned()),
            (3, "pausing".to_owned()),
            (4, "paused".to_owned()),
        ]
    );
    let last_seen = live.last().unwrap().0;
    ws.close(None).await.unwrap();
    drop(ws);

    // Missed while away: resume, then pause and resume again.
    for step in ["resume", "pause", "resume"] {
        dev.post(&format!("/v1/threads/{thread}/{step}"), None)
            .await;
    }

    // Reconnect (a token from the CLI this time) and pick up after the last seq seen.
    let token = mint_with_cli(dev.data_dir(), thread, false);
    let mut ws = try_connect(&dev, Some(&token)).await.unwrap();
    send(
        &mut ws,
        json!({"action": "subscribe", "thread_id": thread, "after_seq": last_seen}),
    )
    .await;
    let subscribed = next(&mut ws, &dev).await;
    assert_eq!(subscribed["type"], "subscribed", "{subscribed}");
    assert_eq!(subscribed["after_seq"], 4);
    assert_eq!(subscribed["last_seq"], 10);
    assert_eq!(subscribed["status"], "active");
    let missed = events(&mut ws, &dev, thread, 6).await;
    assert_eq!(
        missed,
        vec![
            (5, "resuming".to_owned()),
            (6, "active".to_owned()),
            (7, "pausing".to_owned()),
            (8, "paused".to_owned()),
            (9, "resuming".to_owned()),
            (10, "active".to_owned()),
        ],
        "exactly the missed events, in order"
    );
    // The live fan-out of those same events reaches this connection too; none may repeat.
    expect_nothing_more(&mut ws, &dev, Duration::from_secs(2)).await;

    // And then live ones.
    dev.post(&format!("/v1/threads/{thread}/pause"), None).await;
    let live = events(&mut ws, &dev, thread, 2).await;
    assert_eq!(
        live,
        vec![(11, "pausing".to_owned()), (12, "paused".to_owned())]
    );
    expect_nothing_more(&mut ws, &dev, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tokens_and_bad_messages_are_refused_clearly() {
    if !prerequisites_met(
        "bad_tokens_and_bad_messages_are_refused_clearly",
        &dev_missing(),
    ) {
        return;
    }
    let dev = Dev::start(&[]).await;

    let now = Millis(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64,
    );
    let ours = server_key(&dev);
    let theirs = TokenKey::new(TokenSecret::new("not-the-server-secret-0123456789abcdef").unwrap());
    let only = |id: &str| ThreadScope::only([ThreadId::parse(id).unwrap()]).unwrap();
    let forged = theirs
        .mint(ThreadScope::Any, Duration::from_secs(600), now)
        .unwrap()
        .token;
    let expired = ours
        .mint(
            ThreadScope::Any,
            Duration::from_secs(60),
            now.minus(Duration::from_secs(3600)),
        )
        .unwrap()
        .token;
    for (token, code) in [
        (None, "token_missing"),
        (Some("garbage"), "token_malformed"),
        (Some(forged.as_str()), "token_bad_signature"),
        (Some(expired.as_str()), "token_expired"),
    ] {
        let (status, body) = try_connect(&dev, token).await.expect_err("refused");
        assert_eq!(status, 401, "{token:?}: {body}");
        assert_eq!(body["error"]["code"], code, "{token:?}: {body}");
        assert!(body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    }

    // A valid token for one thread: another thread is refused with an error frame, bad JSON
    // too, and the connection stays usable.
    let token = ours
        .mint(only("mine"), Duration::from_secs(600), now)
        .unwrap()
        .token;
    let mut ws = try_connect(&dev, Some(&token)).await.unwrap();
    send(
        &mut ws,
        json!({"action": "subscribe", "thread_id": "someone-else", "after_seq": 0}),
    )
    .await;
    let refused = next(&mut ws, &dev).await;
    assert_eq!(refused["type"], "error");
    assert_eq!(refused["code"], "thread_not_allowed");
    assert_eq!(refused["thread_id"], "someone-else");
    ws.send(Message::Text("{not json".into())).await.unwrap();
    let refused = next(&mut ws, &dev).await;
    assert_eq!(refused["code"], "bad_json", "{refused}");
    send(&mut ws, json!({"action": "subscribe", "thread_id": "mine"})).await;
    let subscribed = next(&mut ws, &dev).await;
    assert_eq!(subscribed["type"], "subscribed", "{subscribed}");
    assert_eq!(subscribed["status"], Value::Null);
}
