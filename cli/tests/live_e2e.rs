//! Live events end to end: the real `threadbox dev` (runc sandboxes, SQLite, the lifecycle
//! consumer) with WebSocket clients on `GET /v1/ws`.
//!
//! A subscriber sees a thread's events live, disconnects, misses some, reconnects with the last
//! seq it saw, and gets exactly the missed ones in order, then live ones, with no repeats; and
//! every kind of bad token is refused. Needs root and runc, like `dev_e2e`.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use threadbox_shared::domain::{Millis, ThreadId, ThreadScope};
use threadbox_shared::live::{TokenKey, TokenSecret};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{client_async, WebSocketStream};

const SECRET: &str = "live-e2e-test-secret-0123456789abcdef";
const WAIT: Duration = Duration::from_secs(30);

type Socket = WebSocketStream<TcpStream>;

/// `threadbox dev` on a free port; killed on drop.
struct Dev {
    child: Child,
    addr: String,
    stderr_path: std::path::PathBuf,
    http: reqwest::Client,
}

impl Dev {
    fn start(data_dir: &Path, stderr_path: &Path) -> Dev {
        let stderr = std::fs::File::create(stderr_path).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_threadbox"))
            .args([
                "dev",
                "--port",
                "0",
                "--janitor-interval",
                "1s",
                "--data-dir",
            ])
            .arg(data_dir)
            .env_remove("THREADBOX_API_KEYS")
            .env_remove("THREADBOX_PORT")
            .env_remove("THREADBOX_DATA_DIR")
            .env("THREADBOX_TOKEN_SECRET", SECRET)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start threadbox dev");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(at) = line.find("http://127.0.0.1:") {
                    let addr = line[at + "http://".len()..].split_whitespace().next();
                    let _ = tx.send(addr.unwrap().to_owned());
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| {
                panic!(
                    "no address printed; stderr:\n{}",
                    std::fs::read_to_string(stderr_path).unwrap_or_default()
                )
            });
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .unwrap();
        Dev {
            child,
            addr,
            stderr_path: stderr_path.to_owned(),
            http,
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    async fn wait_healthy(&self) {
        let deadline = Instant::now() + WAIT;
        let url = format!("http://{}/healthz", self.addr);
        while !matches!(self.http.get(&url).send().await, Ok(r) if r.status() == 200) {
            assert!(
                Instant::now() < deadline,
                "never healthy:\n{}",
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn post(&self, path: &str, body: Option<Value>, status: u16) -> Value {
        let mut request = self.http.post(format!("http://{}{path}", self.addr));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let got = response.status().as_u16();
        let text = response.text().await.unwrap();
        assert_eq!(got, status, "POST {path}: {text}\n{}", self.stderr());
        serde_json::from_str(&text).unwrap()
    }

    /// Open `/v1/ws` with `token`: the socket, or the refusal's status and JSON body.
    async fn connect(&self, token: Option<&str>) -> Result<Socket, (u16, Value)> {
        let url = match token {
            Some(t) => format!("ws://{}/v1/ws?token={t}", self.addr),
            None => format!("ws://{}/v1/ws", self.addr),
        };
        let stream = TcpStream::connect(&self.addr).await.unwrap();
        match client_async(url, stream).await {
            Ok((socket, _)) => Ok(socket),
            Err(tungstenite::Error::Http(response)) => {
                let status = response.status().as_u16();
                let body = response.into_body().unwrap_or_default();
                Err((status, serde_json::from_slice(&body).unwrap_or(Value::Null)))
            }
            Err(e) => panic!("WebSocket handshake failed: {e}"),
        }
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Removes the test's containers, pass or fail.
struct Runc {
    root: std::path::PathBuf,
}

impl Drop for Runc {
    fn drop(&mut self) {
        let Ok(out) = Command::new("runc")
            .arg("--root")
            .arg(&self.root)
            .args(["list", "-q"])
            .output()
        else {
            return;
        };
        for id in String::from_utf8_lossy(&out.stdout).lines() {
            let _ = Command::new("runc")
                .arg("--root")
                .arg(&self.root)
                .args(["delete", "-f", id])
                .status();
        }
    }
}

async fn send(socket: &mut Socket, message: Value) {
    socket
        .send(Message::Text(message.to_string().into()))
        .await
        .unwrap();
}

/// The next JSON frame from the server.
async fn next(socket: &mut Socket, dev: &Dev) -> Value {
    loop {
        let message = tokio::time::timeout(WAIT, socket.next())
            .await
            .unwrap_or_else(|_| panic!("no frame within {WAIT:?}; stderr:\n{}", dev.stderr()))
            .expect("the server closed the socket")
            .unwrap();
        match message {
            Message::Text(text) => return serde_json::from_str(text.as_str()).unwrap(),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("unexpected frame {other:?}"),
        }
    }
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

fn mint_with_cli(data_dir: &Path, thread: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_threadbox"))
        .args(["token", "--thread", thread, "--ttl", "10m", "--data-dir"])
        .arg(data_dir)
        .env("THREADBOX_TOKEN_SECRET", SECRET)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_reconnects_gets_exactly_what_it_missed_then_live_events() {
    if !is_root() {
        assert!(
            std::env::var_os("THREADBOX_REQUIRE_SANDBOXES").is_none(),
            "THREADBOX_REQUIRE_SANDBOXES is set but this test is not running as root"
        );
        eprintln!("live events end-to-end test needs root for runc; not run");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let data_dir = tmp.path().join("data");
    let _runc = Runc {
        root: data_dir.join("sandboxes").join("runc"),
    };
    let dev = Dev::start(&data_dir, &tmp.path().join("dev.stderr"));
    dev.wait_healthy().await;
    let thread = "live-e2e-1";

    // A token from the API, for this thread only.
    let minted = dev
        .post(
            "/v1/tokens",
            Some(json!({"threads": [thread], "ttl_seconds": 600})),
            201,
        )
        .await;
    let token = minted["token"].as_str().unwrap().to_owned();

    let mut ws = dev.connect(Some(&token)).await.unwrap();
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
        .post(&format!("/v1/threads/{thread}/resolve"), None, 201)
        .await;
    assert_eq!(resolved["status"], "active");
    dev.post(&format!("/v1/threads/{thread}/pause"), None, 200)
        .await;
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
        dev.post(&format!("/v1/threads/{thread}/{step}"), None, 200)
            .await;
    }

    // Reconnect (a token from the CLI this time) and pick up after the last seq seen.
    let token = mint_with_cli(&data_dir, thread);
    let mut ws = dev.connect(Some(&token)).await.unwrap();
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
    dev.post(&format!("/v1/threads/{thread}/pause"), None, 200)
        .await;
    let live = events(&mut ws, &dev, thread, 2).await;
    assert_eq!(
        live,
        vec![(11, "pausing".to_owned()), (12, "paused".to_owned())]
    );
    expect_nothing_more(&mut ws, &dev, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tokens_and_bad_messages_are_refused_clearly() {
    if !is_root() {
        assert!(
            std::env::var_os("THREADBOX_REQUIRE_SANDBOXES").is_none(),
            "THREADBOX_REQUIRE_SANDBOXES is set but this test is not running as root"
        );
        eprintln!(
            "live events end-to-end test needs root for runc (threadbox dev's preflight); not run"
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let data_dir = tmp.path().join("data");
    let _runc = Runc {
        root: data_dir.join("sandboxes").join("runc"),
    };
    let dev = Dev::start(&data_dir, &tmp.path().join("dev.stderr"));
    dev.wait_healthy().await;

    let now = Millis(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64,
    );
    let ours = TokenKey::new(TokenSecret::new(SECRET).unwrap());
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
        let (status, body) = dev.connect(token).await.expect_err("refused");
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
    let mut ws = dev.connect(Some(&token)).await.unwrap();
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
