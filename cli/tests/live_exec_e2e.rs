//! Commands over the live-events WebSocket, end to end: the real `threadbox dev` (runc
//! sandboxes) with WebSocket clients sending `exec` frames on `GET /v1/ws`.
//!
//! Output arrives line by line while the command runs, stderr apart from stdout, then the exit;
//! a token without the `exec` capability runs nothing; and a socket that closes kills the
//! commands that asked `kill_on_disconnect`, and only those. Needs root and runc, like `dev_e2e`.

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::live::{connect, mint_with_cli, next, send, Socket};
use support::{dev_missing, prerequisites_met, DevServer};

/// What one command sent: its output frames with when each arrived, and its last frame.
struct Ran {
    output: Vec<(Instant, Value)>,
    last: Value,
    last_at: Instant,
}

impl Ran {
    fn stream(&self, name: &str) -> String {
        self.output
            .iter()
            .filter(|(_, f)| f["stream"] == name)
            .map(|(_, f)| f["text"].as_str().expect("text output"))
            .collect()
    }
}

/// Frames for `request_id` until its `exec_exit` or error frame (frames of other requests are
/// skipped).
async fn run_to_end(socket: &mut Socket, dev: &DevServer, request_id: &str) -> Ran {
    let mut output = Vec::new();
    loop {
        let frame = next(socket, dev).await;
        if frame["request_id"] != request_id {
            continue;
        }
        match frame["type"].as_str() {
            Some("exec_output") => output.push((Instant::now(), frame)),
            Some("exec_exit" | "error") => {
                return Ran {
                    output,
                    last: frame,
                    last_at: Instant::now(),
                }
            }
            _ => panic!("unexpected frame {frame}"),
        }
    }
}

fn exec(request_id: &str, thread: &str, cmd: &str) -> Value {
    json!({"action": "exec", "request_id": request_id, "thread_id": thread, "cmd": cmd})
}

/// Run `cmd` to its end on `socket` and return its stdout, asserting it exited 0.
async fn stdout_of(socket: &mut Socket, dev: &DevServer, thread: &str, cmd: &str) -> String {
    let id = format!("q{}", uuid_ish());
    send(socket, exec(&id, thread, cmd)).await;
    let ran = run_to_end(socket, dev, &id).await;
    assert_eq!(ran.last["type"], "exec_exit", "{cmd}: {}", ran.last);
    assert_eq!(ran.last["exit_code"], 0, "{cmd}: {}", ran.last);
    ran.stream("stdout")
}

fn uuid_ish() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_streams_line_by_line_and_a_watch_only_token_runs_nothing() {
    if !prerequisites_met(
        "output_streams_line_by_line_and_a_watch_only_token_runs_nothing",
        &dev_missing(),
    ) {
        return;
    }
    let dev = DevServer::start(&[]).await;
    let thread = "live-exec-1";

    // A watch-only token (the default) is refused, and nothing runs: no thread is even made.
    let watching = dev
        .post("/v1/tokens", Some(json!({"threads": [thread]})))
        .await;
    assert_eq!(watching["exec"], false);
    let mut ws = connect(&dev, watching["token"].as_str().unwrap()).await;
    send(
        &mut ws,
        exec("r0", thread, "echo ran > /home/user/should-not-exist"),
    )
    .await;
    let refused = next(&mut ws, &dev).await;
    assert_eq!(refused["type"], "error", "{refused}");
    assert_eq!(refused["code"], "exec_not_allowed", "{refused}");
    assert_eq!(refused["request_id"], "r0");
    assert_eq!(refused["thread_id"], thread);
    let status = dev
        .http
        .get(format!("{}/v1/threads/{thread}", dev.url))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 404, "no thread was made");
    // The connection still works for what the token allows.
    send(&mut ws, json!({"action": "subscribe", "thread_id": thread})).await;
    assert_eq!(next(&mut ws, &dev).await["type"], "subscribed");
    drop(ws);

    // A token that may run commands, from the API.
    let minted = dev
        .post(
            "/v1/tokens",
            Some(json!({"threads": [thread], "ttl_seconds": 600, "exec": true})),
        )
        .await;
    assert_eq!(minted["exec"], true);
    let mut ws = connect(&dev, minted["token"].as_str().unwrap()).await;
    send(
        &mut ws,
        exec(
            "r1",
            thread,
            "echo first; sleep 1; echo oops >&2; sleep 1; echo second; exit 3",
        ),
    )
    .await;
    let ran = run_to_end(&mut ws, &dev, "r1").await;
    assert_eq!(
        ran.last,
        json!({
            "type": "exec_exit", "request_id": "r1", "exit_code": 3,
            "duration_ms": ran.last["duration_ms"], "timed_out": false, "truncated": false,
            "out_of_memory": false,
        })
    );
    assert!(
        ran.last["duration_ms"].as_u64().unwrap() >= 2000,
        "{}",
        ran.last
    );
    assert_eq!(ran.stream("stdout"), "first\nsecond\n");
    assert_eq!(ran.stream("stderr"), "oops\n");
    // Seen as it happened: the first line well before the end, each line in its own frame.
    let (first_at, first) = &ran.output[0];
    assert_eq!(first["stream"], "stdout", "{first}");
    assert_eq!(first["text"], "first\n", "{first}");
    let early = ran.last_at - *first_at;
    assert!(
        early >= Duration::from_millis(1500),
        "the first line came only {early:?} before the exit"
    );
    let kinds: Vec<(&str, &str)> = ran
        .output
        .iter()
        .map(|(_, f)| (f["stream"].as_str().unwrap(), f["text"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("stdout", "first\n"),
            ("stderr", "oops\n"),
            ("stdout", "second\n")
        ]
    );

    // Bytes that are not UTF-8 come as base64, as in the HTTP stream's events.
    send(&mut ws, exec("r2", thread, r"printf 'a\377b'")).await;
    let ran = run_to_end(&mut ws, &dev, "r2").await;
    assert_eq!(ran.last["exit_code"], 0);
    let pieces: Vec<Value> = ran.output.iter().map(|(_, f)| f.clone()).collect();
    assert_eq!(
        pieces,
        vec![
            json!({"type":"exec_output","request_id":"r2","stream":"stdout","text":"a"}),
            json!({"type":"exec_output","request_id":"r2","stream":"stdout","base64":"/w=="}),
            json!({"type":"exec_output","request_id":"r2","stream":"stdout","text":"b"}),
        ]
    );

    // A command that cannot run is an error frame naming the request; the socket stays.
    send(
        &mut ws,
        json!({"action": "exec", "request_id": "r3", "thread_id": thread, "cmd": "ls", "timeout_ms": 0}),
    )
    .await;
    let refused = next(&mut ws, &dev).await;
    assert_eq!(refused["code"], "invalid_request", "{refused}");
    assert_eq!(refused["request_id"], "r3");
    assert_eq!(
        stdout_of(
            &mut ws,
            &dev,
            thread,
            "test -e /home/user/should-not-exist || echo absent"
        )
        .await,
        "absent\n",
        "the refused command never ran"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_socket_kills_only_the_commands_that_asked() {
    if !prerequisites_met(
        "a_closed_socket_kills_only_the_commands_that_asked",
        &dev_missing(),
    ) {
        return;
    }
    let dev = DevServer::start(&[]).await;
    let thread = "live-exec-2";
    // From the CLI this time.
    let token = mint_with_cli(dev.data_dir(), thread, true);

    let mut ws = connect(&dev, &token).await;
    // Made first, so both commands below start in a running sandbox at once.
    assert_eq!(stdout_of(&mut ws, &dev, thread, "echo up").await, "up\n");
    for (id, kill, cmd) in [
        (
            "doomed",
            true,
            "echo started; sleep 31.5; echo done > /home/user/doomed",
        ),
        (
            "kept",
            false,
            "echo started; sleep 3.5; echo done > /home/user/kept",
        ),
    ] {
        send(
            &mut ws,
            json!({"action": "exec", "request_id": id, "thread_id": thread, "cmd": cmd,
                   "kill_on_disconnect": kill}),
        )
        .await;
    }
    let mut started = Vec::new();
    while started.len() < 2 {
        let frame = next(&mut ws, &dev).await;
        assert_eq!(frame["type"], "exec_output", "{frame}");
        assert_eq!(frame["text"], "started\n", "{frame}");
        started.push(frame["request_id"].as_str().unwrap().to_owned());
    }
    started.sort();
    assert_eq!(started, ["doomed", "kept"]);
    ws.close(None).await.unwrap();
    drop(ws);

    // From a second connection: the doomed command's process goes, the kept one's stays.
    let mut ws = connect(&dev, &token).await;
    let processes = "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '";
    let deadline = Instant::now() + Duration::from_secs(10);
    let seen = loop {
        let seen = stdout_of(&mut ws, &dev, thread, processes).await;
        if !seen.contains("sleep 31.5") || Instant::now() > deadline {
            break seen;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        !seen.contains("sleep 31.5"),
        "the kill_on_disconnect command still runs: {seen}"
    );
    assert!(
        seen.contains("sleep 3.5"),
        "the other command should still run: {seen}"
    );

    // The kept one finishes its work; the doomed one never does.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        stdout_of(
            &mut ws,
            &dev,
            thread,
            "cat /home/user/kept; test -e /home/user/doomed || echo no-doomed"
        )
        .await,
        "done\nno-doomed\n"
    );
}
