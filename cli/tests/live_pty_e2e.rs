//! Terminal sessions over the live WebSocket, end to end: the real `threadbox dev` (runc
//! sandboxes) and WebSocket clients sending `pty` frames on `GET /v1/ws`.
//!
//! `python3 -i` is opened on a terminal, typed into and resized; the socket closes and the
//! session runs on; a second connection re-attaches by session id, sees the session's output
//! from the start, types on, and gets `pty_exit` with Python's exit status. A watch-only token
//! opens nothing. Needs root and runc, like `dev_e2e`.

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::live::{connect, next, send, Socket};
use support::{dev_missing, prerequisites_met, DevServer};

/// The terminal's output as it comes, until `wanted` is in it; all of it, and the next offset.
async fn read_until(
    socket: &mut Socket,
    dev: &DevServer,
    wanted: &str,
    screen: &mut String,
    offset: &mut u64,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !screen.contains(wanted) {
        assert!(
            Instant::now() < deadline,
            "never saw {wanted:?}; so far: {screen:?}"
        );
        let frame = next(socket, dev).await;
        assert_eq!(frame["type"], "pty_output", "{frame}");
        assert_eq!(
            frame["offset"].as_u64().unwrap(),
            *offset,
            "gapless offsets"
        );
        let text = frame["text"].as_str().expect("terminal text");
        *offset += text.len() as u64;
        screen.push_str(text);
    }
}

async fn token(dev: &DevServer, thread: &str, exec: bool) -> String {
    let minted = dev
        .post(
            "/v1/tokens",
            Some(json!({"threads": [thread], "exec": exec})),
        )
        .await;
    minted["token"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_runs_on_a_terminal_and_a_second_connection_reattaches() {
    if !prerequisites_met(
        "python_runs_on_a_terminal_and_a_second_connection_reattaches",
        &dev_missing(),
    ) {
        return;
    }
    let dev = DevServer::start(&[]).await;
    let thread = "terminal";

    // A watch-only token opens nothing.
    let mut watcher = connect(&dev, &token(&dev, thread, false).await).await;
    send(
        &mut watcher,
        json!({"action": "pty", "request_id": "t0", "thread_id": thread, "cols": 80, "rows": 24}),
    )
    .await;
    let refused = next(&mut watcher, &dev).await;
    assert_eq!(refused["code"], "exec_not_allowed", "{refused}");
    assert_eq!(refused["request_id"], "t0");

    let exec_token = token(&dev, thread, true).await;
    let mut ws = connect(&dev, &exec_token).await;
    send(
        &mut ws,
        json!({"action": "pty", "request_id": "t1", "thread_id": thread,
               "argv": ["python3", "-i", "-q"], "cols": 90, "rows": 20}),
    )
    .await;
    let attached = next(&mut ws, &dev).await;
    assert_eq!(attached["type"], "pty_attached", "{attached}");
    assert_eq!(attached["offset"], 0);
    let session = attached["session"].as_str().unwrap().to_owned();
    let (mut screen, mut offset) = (String::new(), 0);
    read_until(&mut ws, &dev, ">>> ", &mut screen, &mut offset).await;

    let typed = |text: &str| {
        json!({"action": "pty_input", "request_id": "in", "thread_id": thread,
               "session": session, "text": text})
    };
    send(
        &mut ws,
        typed("import os; print(6 * 7, os.get_terminal_size().columns)\n"),
    )
    .await;
    read_until(&mut ws, &dev, "42 90\r\n", &mut screen, &mut offset).await;
    send(
        &mut ws,
        json!({"action": "pty_resize", "request_id": "rs", "thread_id": thread,
               "session": session, "cols": 132, "rows": 40}),
    )
    .await;
    // No pause needed: input and resizes of one session on one connection are written in the
    // order their frames came.
    send(&mut ws, typed("print(os.get_terminal_size())\n")).await;
    read_until(
        &mut ws,
        &dev,
        "columns=132, lines=40",
        &mut screen,
        &mut offset,
    )
    .await;
    ws.close(None).await.unwrap();
    drop(ws);

    // The session runs on without anyone attached; a new connection picks it up.
    let listed = dev.get(&format!("/v1/threads/{thread}/processes")).await;
    assert_eq!(listed["processes"][0]["state"], "running", "{listed}");
    let mut again = connect(&dev, &exec_token).await;
    send(
        &mut again,
        json!({"action": "pty", "request_id": "t2", "thread_id": thread,
               "session": session, "after": 0}),
    )
    .await;
    let attached = next(&mut again, &dev).await;
    assert_eq!(attached["type"], "pty_attached", "{attached}");
    assert_eq!(attached["session"], session.as_str());
    let (mut replay, mut from) = (String::new(), 0);
    read_until(&mut again, &dev, "columns=132", &mut replay, &mut from).await;
    assert!(
        replay.contains("42 90"),
        "the whole session is replayed: {replay:?}"
    );

    send(
        &mut again,
        json!({"action": "pty_input", "request_id": "in2", "thread_id": thread,
               "session": session, "text": "exit(5)\n"}),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "no pty_exit");
        let frame = next(&mut again, &dev).await;
        if frame["type"] == "pty_exit" {
            assert_eq!(frame["request_id"], "t2");
            assert_eq!(frame["exit_code"], 5, "{frame}");
            break;
        }
        assert_eq!(frame["type"], "pty_output", "{frame}");
    }

    // Input to a session that has ended is an error frame naming the request.
    send(
        &mut again,
        json!({"action": "pty_input", "request_id": "late", "thread_id": thread,
               "session": session, "text": "x"}),
    )
    .await;
    let late = next(&mut again, &dev).await;
    assert_eq!(late["type"], "error", "{late}");
    assert_eq!(late["request_id"], "late");
}
