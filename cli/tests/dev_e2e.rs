//! End to end through the real binary: `threadbox dev` on a free loopback port and a temporary
//! data directory, driven over HTTP, with real runc sandboxes. Needs root and runc (CI has both;
//! `scripts/test.sh` installs runc). Without root the test says so and does nothing.

mod support;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use hyper::body::Bytes;
use serde_json::{json, Value};
use support::{dev_missing, prerequisites_met, remove_sandboxes, DevServer};

/// `threadbox dev` over the test's data directory (kept across restarts), on its own defaults:
/// the warm pool as it comes, no API keys.
async fn start(data_dir: &std::path::Path) -> DevServer {
    let env = [
        ("THREADBOX_WARM_POOL", None),
        ("THREADBOX_PORT", None),
        ("THREADBOX_DATA_DIR", None),
    ];
    DevServer::start_in(Some(data_dir), &[], &env).await
}

async fn call(
    dev: &DevServer,
    method: &str,
    path: &str,
    body: Vec<u8>,
    json: bool,
) -> (u16, Bytes) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut request = dev
        .http
        .request(method.clone(), format!("{}{path}", dev.url))
        .body(body);
    if json {
        request = request.header("content-type", "application/json");
    }
    let response = request
        .send()
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}; stderr:\n{}", dev.stderr()));
    let status = response.status().as_u16();
    (status, response.bytes().await.unwrap())
}

/// A JSON call expected to succeed with `status`.
async fn json(
    dev: &DevServer,
    method: &str,
    path: &str,
    body: Option<Value>,
    status: u16,
) -> Value {
    let sent = body.map(|b| b.to_string().into_bytes());
    let is_json = sent.is_some();
    let (got, bytes) = call(dev, method, path, sent.unwrap_or_default(), is_json).await;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    assert_eq!(got, status, "{method} {path}: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method} {path}: {e}: {text}"))
}

async fn wait_for_log(dev: &DevServer, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !dev.stderr().contains(needle) {
        assert!(
            Instant::now() < deadline,
            "no log line with {needle:?}; stderr:\n{}",
            dev.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The file the test writes in its thread's home, read back after a restart.
const NOTES: &str = "/v1/threads/e2e-1/files/home/user/notes.txt";

async fn assert_notes_kept(dev: &DevServer) {
    let read = call(dev, "GET", NOTES, Vec::new(), false).await;
    assert_eq!(read, (200, Bytes::from_static(b"kept across restarts\n")));
}

/// runc's view of the provider's containers (the provider keeps runc's root in its state dir).
struct Runc {
    root: PathBuf,
}

impl Runc {
    fn status(&self, id: &str) -> Option<String> {
        let out = Command::new("runc")
            .arg("--root")
            .arg(&self.root)
            .args(["state", id])
            .output()
            .unwrap();
        if !out.status.success() {
            return None;
        }
        let state: Value = serde_json::from_slice(&out.stdout).unwrap();
        state["status"].as_str().map(str::to_owned)
    }
}

/// Removes every container the test made, pass or fail: a stopped server leaves a live
/// thread's sandbox for its next start.
impl Drop for Runc {
    fn drop(&mut self) {
        if let Some(state) = self.root.parent() {
            remove_sandboxes(&self.root, state);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_serves_the_api_on_runc_and_stops_cleanly() {
    if !prerequisites_met(
        "dev_serves_the_api_on_runc_and_stops_cleanly",
        &dev_missing(),
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let data_dir = tmp.path().join("data");
    let runc = Runc {
        root: data_dir.join("sandboxes").join("runc"),
    };

    let dev = start(&data_dir).await;
    assert_eq!(
        json(&dev, "GET", "/healthz", None, 200).await,
        json!({ "ok": true })
    );

    let handle = json(&dev, "POST", "/v1/threads/e2e-1/resolve", None, 201).await;
    assert_eq!(handle["status"], "active");
    assert_eq!(handle["provider"], "runc");
    let sandbox_id = handle["sandbox_id"].as_str().unwrap().to_owned();
    assert_eq!(runc.status(&sandbox_id).as_deref(), Some("running"));

    let result = json(
        &dev,
        "POST",
        "/v1/threads/e2e-1/exec",
        Some(json!({ "cmd": "echo hello" })),
        200,
    )
    .await;
    assert_eq!(result["stdout"], "hello\n");
    assert_eq!(result["exit_code"], 0);
    assert_eq!(result["timed_out"], false);

    let written = call(
        &dev,
        "PUT",
        NOTES,
        b"kept across restarts\n".to_vec(),
        false,
    )
    .await;
    assert_eq!(written.0, 200, "{}", String::from_utf8_lossy(&written.1));
    assert_notes_kept(&dev).await;

    let paused = json(&dev, "POST", "/v1/threads/e2e-1/pause", None, 200).await;
    assert_eq!(paused["status"], "paused");
    assert_eq!(runc.status(&sandbox_id).as_deref(), Some("paused"));
    let resumed = json(&dev, "POST", "/v1/threads/e2e-1/resume", None, 200).await;
    assert_eq!(resumed["status"], "active");
    assert_eq!(resumed["resumed"], true);
    assert_eq!(runc.status(&sandbox_id).as_deref(), Some("running"));

    // The consumer logs every lifecycle event, in order per thread.
    wait_for_log(
        &dev,
        "lifecycle resuming -> active (user) thread_id=e2e-1 seq=6",
    )
    .await;

    let (status, stderr) = dev.terminate();
    assert!(status.success(), "exit {status:?}; stderr:\n{stderr}");
    // The thread is live, so its sandbox outlives the process, state and all.
    assert_eq!(runc.status(&sandbox_id).as_deref(), Some("running"));
    assert!(data_dir
        .join("sandboxes/sandboxes")
        .join(&sandbox_id)
        .is_dir());

    // A new start over the same data directory finds the sandbox and its files.
    let dev = start(&data_dir).await;
    assert_notes_kept(&dev).await;
    let shown = json(&dev, "GET", "/v1/threads/e2e-1", None, 200).await;
    assert_eq!(shown["session"]["sandbox_id"], sandbox_id.as_str());
    assert_eq!(shown["session"]["generation"], 1);
    let (status, stderr) = dev.terminate();
    assert!(status.success(), "exit {status:?}; stderr:\n{stderr}");
    // `runc` drops the container when this test ends.
}
