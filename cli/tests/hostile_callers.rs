//! The real `threadbox dev` against callers that mean harm: web pages reaching the keyless local
//! API (DNS rebinding, cross-site requests, `<img>` loads of file URLs) and bad numbers. Each
//! attack gets its 4xx and changes nothing. Needs root and runc, like the other end-to-end tests.

mod support;

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{json, Value};
use support::{dev_missing, prerequisites_met, DevServer};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{client_async, WebSocketStream};

/// Send `method path` with extra headers; the status and the error code, if any.
async fn send(
    dev: &DevServer,
    method: reqwest::Method,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, Option<String>) {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        map.insert(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    let response = dev
        .http
        .request(method, format!("{}{path}", dev.url))
        .headers(map)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    let code = body["error"]["code"].as_str().map(str::to_owned);
    (status, code)
}

fn port(dev: &DevServer) -> String {
    dev.url.rsplit(':').next().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_keys_only_this_machines_tools_get_in() {
    if !prerequisites_met("hostile_callers", &dev_missing()) {
        return;
    }
    let dev = DevServer::start(&[]).await;
    let get = reqwest::Method::GET;
    let post = reqwest::Method::POST;
    dev.post("/v1/threads/mine/resolve", None).await;
    let rebound = format!("rebind.evil.example:{}", port(&dev));

    // DNS rebinding: the page's own name in Host, no Origin (a same-origin GET from its view).
    for path in [
        "/v1/threads",
        "/v1/threads/mine",
        "/v1/threads/mine/files/home/user?list=true",
        "/",
        "/v1/slack/sink",
    ] {
        let answer = send(&dev, get.clone(), path, &[("host", &rebound)]).await;
        assert_eq!(answer, (403, Some("forbidden_host".into())), "GET {path}");
    }
    let answer = send(
        &dev,
        post.clone(),
        "/v1/threads/mine/reset",
        &[("host", &rebound)],
    )
    .await;
    assert_eq!(answer, (403, Some("forbidden_host".into())));
    let wrong_port = send(&dev, get.clone(), "/v1/threads", &[("host", "127.0.0.1:1")]).await;
    assert_eq!(wrong_port, (403, Some("forbidden_host".into())));

    // A cross-site <img> of a file URL: no Origin, Sec-Fetch-Site says cross-site.
    let img = send(
        &dev,
        get.clone(),
        "/v1/threads/victim/files/home/user/secret.txt",
        &[
            ("sec-fetch-site", "cross-site"),
            ("sec-fetch-dest", "image"),
        ],
    )
    .await;
    assert_eq!(img, (403, Some("forbidden_origin".into())));
    // A cross-site form POST, and an opaque origin.
    let form = send(
        &dev,
        post.clone(),
        "/v1/threads/victim/resolve",
        &[("origin", "https://evil.example")],
    )
    .await;
    assert_eq!(form, (403, Some("forbidden_origin".into())));
    let null = send(
        &dev,
        post.clone(),
        "/v1/threads/victim/resolve",
        &[("origin", "null")],
    )
    .await;
    assert_eq!(null, (403, Some("forbidden_origin".into())));
    // The live-events upgrade from a page elsewhere.
    let upgrade = send(
        &dev,
        get.clone(),
        "/v1/ws?token=anything",
        &[
            ("connection", "Upgrade"),
            ("upgrade", "websocket"),
            ("sec-websocket-version", "13"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("origin", "https://evil.example"),
        ],
    )
    .await;
    assert_eq!(upgrade, (403, Some("forbidden_origin".into())));

    // Nothing of the victim's was created by any of that.
    let victim = send(&dev, get.clone(), "/v1/threads/victim", &[]).await;
    assert_eq!(victim, (404, Some("unknown_thread".into())));
    // A GET of an unknown thread's file (same-origin) is a 404 that creates nothing either.
    let unknown = send(
        &dev,
        get.clone(),
        "/v1/threads/victim/files/home/user/a.txt",
        &[],
    )
    .await;
    assert_eq!(unknown, (404, Some("unknown_thread".into())));
    let listed = dev.get("/v1/threads").await;
    let ids: Vec<&str> = listed["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["thread_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["mine"], "{listed}");

    // This machine's tools: curl (loopback Host, no browser headers), localhost, the dashboard's
    // own same-origin requests.
    let local = format!("localhost:{}", port(&dev));
    for headers in [
        vec![],
        vec![("host", local.as_str())],
        vec![("sec-fetch-site", "same-origin"), ("origin", &dev.url)],
    ] {
        let answer = send(&dev, get.clone(), "/v1/threads/mine", &headers).await;
        assert_eq!(answer.0, 200, "{headers:?}");
    }
}

type Socket = WebSocketStream<TcpStream>;

async fn open_socket(dev: &DevServer, token: &str) -> Socket {
    let addr = dev.url.trim_start_matches("http://");
    let stream = TcpStream::connect(addr).await.unwrap();
    let (socket, _) = client_async(format!("ws://{addr}/v1/ws?token={token}"), stream)
        .await
        .expect("the upgrade itself is accepted");
    socket
}

/// The next frame, if it comes within a second.
async fn next_frame(socket: &mut Socket) -> Option<Message> {
    tokio::time::timeout(Duration::from_secs(1), socket.next())
        .await
        .ok()
        .flatten()
        .map(Result::unwrap)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_token_cannot_open_sockets_without_end() {
    if !prerequisites_met("hostile_callers", &dev_missing()) {
        return;
    }
    let dev = DevServer::start(&[]).await;
    let minted = dev
        .post(
            "/v1/tokens",
            Some(json!({"threads": "*", "ttl_seconds": 600})),
        )
        .await;
    let token = minted["token"].as_str().unwrap().to_owned();

    let mut open = Vec::new();
    for _ in 0..20 {
        let mut socket = open_socket(&dev, &token).await;
        socket
            .send(Message::text(r#"{"action":"ping"}"#))
            .await
            .unwrap();
        let pong = next_frame(&mut socket).await.expect("a pong");
        assert!(pong.to_text().unwrap().contains("pong"), "{pong:?}");
        open.push(socket);
    }
    // The 21st is closed at once, saying why.
    let mut refused = open_socket(&dev, &token).await;
    match next_frame(&mut refused).await {
        Some(Message::Close(Some(frame))) => {
            assert_eq!(frame.code, CloseCode::Policy);
            assert!(
                frame.reason.contains("too_many_connections") && frame.reason.contains("limit 20"),
                "{}",
                frame.reason
            );
        }
        other => panic!("expected a policy close, got {other:?}"),
    }
    // A freed place can be used again.
    open.pop().unwrap().close(None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut again = open_socket(&dev, &token).await;
    again
        .send(Message::text(r#"{"action":"ping"}"#))
        .await
        .unwrap();
    let pong = next_frame(&mut again)
        .await
        .expect("a pong after a place freed");
    assert!(pong.to_text().unwrap().contains("pong"), "{pong:?}");
}

/// Code in a sandbox cannot take the server down through what it leaves: a home holding a chain
/// of directories 30,000 deep is destroyed by a reset with the process alive (a recursive
/// removal overflowed the stack and aborted threadbox dev, on every restart again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deep_tree_left_in_a_sandbox_does_not_crash_a_reset() {
    if !prerequisites_met("hostile_callers", &dev_missing()) {
        return;
    }
    let dev = DevServer::start(&[]).await;
    let made = dev
        .post(
            "/v1/threads/deep/exec",
            Some(json!({"argv": ["python3", "-c",
                "import os\nfor _ in range(30000):\n    os.mkdir('d'); os.chdir('d')\nprint('made')"]})),
        )
        .await;
    assert_eq!(made["stdout"], "made\n", "{made}");
    let first = dev.get("/v1/threads/deep").await["session"]["sandbox_id"].clone();
    let reset = dev.post("/v1/threads/deep/reset", None).await;
    assert_eq!(reset["status"], "active", "{reset}");
    assert_ne!(reset["sandbox_id"], first, "a fresh sandbox");
    let health = dev.get("/healthz").await;
    assert_eq!(health["ok"], true, "the server is alive");
    let old = first.as_str().unwrap();
    assert!(
        !dev.data_dir()
            .join("sandboxes/sandboxes")
            .join(old)
            .exists(),
        "the old sandbox's files are gone"
    );
}

/// Six hundred long commands at once: the API keeps answering, commands past the caps are
/// refused at once with the limit named (429 for the thread's own cap, 503 for the host's),
/// and what was admitted runs to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_hundred_long_commands_leave_the_api_answering() {
    if !prerequisites_met("hostile_callers", &dev_missing()) {
        return;
    }
    // Six hundred sockets on each side: lift the soft descriptor limit to the hard one (the
    // server inherits it).
    let nofile = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    if let Some(hard) = nofile.maximum {
        let _ = rustix::process::setrlimit(
            rustix::process::Resource::Nofile,
            rustix::process::Rlimit {
                current: Some(hard.min(65_536)),
                maximum: Some(hard),
            },
        );
    }
    let dev = DevServer::start(&["--max-commands-per-thread", "4", "--max-commands", "40"]).await;
    let threads: Vec<String> = (0..20).map(|i| format!("flood-{i}")).collect();
    for thread in &threads {
        dev.post(&format!("/v1/threads/{thread}/resolve"), None)
            .await;
    }
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    let send = |i: usize| {
        let url = format!("{}/v1/threads/{}/exec", dev.url, threads[i / 30]);
        let client = client.clone();
        tokio::spawn(async move {
            let response = client
                .post(url)
                // Longer than the flood takes to send even on a loaded machine: a command
                // that ended early would free its slot for a later one, and more than the
                // cap would run in all (though never at once).
                .json(&json!({"cmd": "sleep 15"}))
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let retry = response.headers().contains_key("retry-after");
            let body: Value = response.json().await.unwrap_or(Value::Null);
            (
                status,
                retry,
                body["error"]["code"].as_str().map(str::to_owned),
            )
        })
    };
    // Thirty per thread. The first thread's thirty go first, and the rest only once its
    // cap (4) has refused the other 26: so its own refusals are seen whatever order the
    // runtime sends the flood in (all at once, the host's cap of 40 could fill with two or
    // three per thread before any thread reached four).
    let mut requests: Vec<_> = (0..30).map(send).collect();
    let first_thread_refused = std::time::Instant::now();
    while requests.iter().filter(|r| r.is_finished()).count() < 26 {
        assert!(
            first_thread_refused.elapsed() < Duration::from_secs(60),
            "the first thread's cap did not refuse its extra commands"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    requests.extend((30..600).map(send));
    // While they run, the API answers.
    let mut slowest = Duration::ZERO;
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let asked = std::time::Instant::now();
        let listed = dev.get("/v1/threads").await;
        slowest = slowest.max(asked.elapsed());
        assert_eq!(listed["threads"].as_array().unwrap().len(), 20);
    }
    let mut ran = 0;
    let mut refused = std::collections::BTreeMap::new();
    for request in requests {
        match request.await.unwrap() {
            (200, _, _) => ran += 1,
            (status @ (429 | 503), true, Some(code)) => {
                *refused.entry((status, code)).or_insert(0) += 1
            }
            other => panic!("unexpected answer {other:?}"),
        }
    }
    eprintln!(
        "600 commands: {ran} ran, refused {refused:?}; GET /v1/threads answered within \
         {slowest:?} at worst; all answered after {:?}",
        started.elapsed()
    );
    assert!(
        slowest < Duration::from_secs(2),
        "the API stalled for {slowest:?}"
    );
    assert!((1..=40).contains(&ran), "{ran} ran");
    assert_eq!(ran + refused.values().sum::<usize>(), 600);
    assert!(
        refused.contains_key(&(429, "too_many_commands_in_thread".to_owned())),
        "{refused:?}"
    );
    assert!(
        refused.contains_key(&(503, "too_many_commands".to_owned())),
        "{refused:?}"
    );
}

/// A sandbox that fills its disk meets its quota and nothing else does: "No space left on
/// device" inside, an upload through the file API refused with 507 `no_space`, while another thread's
/// sandbox still writes and the store still records its lifecycle. The usage shows in the
/// thread's details, through the API and `threadbox threads show`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_filling_its_disk_meets_its_quota_and_nothing_else_does() {
    if !prerequisites_met("hostile_callers", &dev_missing()) {
        return;
    }
    let dev = DevServer::start(&["--disk-quota", "64MiB", "--disk-files", "4096"]).await;
    let fill = dev
        .post(
            "/v1/threads/filler/exec",
            Some(json!({"cmd": "head -c 200000000 /dev/zero > big; echo status=$?"})),
        )
        .await;
    assert!(
        fill["stderr"]
            .as_str()
            .unwrap()
            .contains("No space left on device")
            && fill["stdout"] == "status=1\n",
        "{fill}"
    );

    let upload = dev
        .http
        .put(format!(
            "{}/v1/threads/filler/files/home/user/more",
            dev.url
        ))
        .body(vec![1u8; 8 << 20])
        .send()
        .await
        .unwrap();
    let status = upload.status().as_u16();
    let body: Value = upload.json().await.unwrap();
    assert_eq!(status, 507, "{body}");
    assert_eq!(body["error"]["code"], "no_space", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no space left"),
        "{body}"
    );

    let neighbour = dev
        .post(
            "/v1/threads/neighbour/exec",
            Some(json!({"cmd": "echo written > f && cat f"})),
        )
        .await;
    assert_eq!(neighbour["stdout"], "written\n", "{neighbour}");
    let neighbour = dev.get("/v1/threads/neighbour").await;
    assert_eq!(neighbour["session"]["status"], "active", "{neighbour}");
    assert!(
        !neighbour["events"].as_array().unwrap().is_empty(),
        "the store still records: {neighbour}"
    );

    let filler = dev.get("/v1/threads/filler").await;
    let disk = &filler["sandbox"]["disk"];
    let (used, limit) = (
        disk["used_bytes"].as_u64().unwrap(),
        disk["limit_bytes"].as_u64().unwrap(),
    );
    assert!(limit <= 64 << 20 && used > limit * 9 / 10, "{filler}");
    assert_eq!(disk["limit_inodes"], 4096, "{filler}");

    let show = tokio::process::Command::new(env!("CARGO_BIN_EXE_threadbox"))
        .args(["threads", "show", "filler"])
        .env("THREADBOX_URL", &dev.url)
        .env_remove("THREADBOX_API_KEY")
        .env("NO_COLOR", "1")
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&show.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("disk "))
        .unwrap_or_else(|| panic!("no disk line in:\n{text}"));
    assert!(
        line.contains(" MiB of ") && line.ends_with("of 4096 files"),
        "{line}"
    );
}
