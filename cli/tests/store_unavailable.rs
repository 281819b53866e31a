//! The session store unavailable under the real `threadbox dev`: its SQLite file locked by
//! another process, and a file that is not a database at start. Callers must get a clear error
//! naming the cause (HTTP 503 `store_unavailable` with `Retry-After`; a start that refuses with
//! the file's name), and nothing may be half done: no record, no sandbox, no command run.
//! Needs root and runc, like the other end-to-end tests.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{dev_missing, prerequisites_met, DevServer};

/// A request the server answers with an error; returns its status, `Retry-After` and body.
async fn call(dev: &DevServer, path: &str, body: Option<Value>) -> (u16, Option<String>, Value) {
    let mut request = dev.http.post(format!("{}{path}", dev.url));
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = response.json().await.unwrap_or(Value::Null);
    (status, retry_after, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_database_is_a_clear_503_and_leaves_nothing_half_done() {
    if !prerequisites_met("store_unavailable", &dev_missing()) {
        return;
    }
    let dev = DevServer::start(&[]).await;
    dev.post("/v1/threads/locked-before/resolve", None).await;
    let sandboxes_before = dev.containers();
    assert_eq!(sandboxes_before.len(), 1);

    // Another process takes the write lock and keeps it (as a stuck migration or a backup
    // tool would). Readers still read (WAL); every write waits out the busy timeout and fails.
    let db = dev.data_dir().join("threadbox.db");
    let locker = rusqlite::Connection::open(&db).unwrap();
    locker.execute_batch("BEGIN EXCLUSIVE").unwrap();

    let started = Instant::now();
    let (status, retry_after, body) = call(&dev, "/v1/threads/locked-new/resolve", None).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "store_unavailable", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("database is locked"),
        "names the cause: {message}"
    );
    assert!(
        message.contains("threadbox.db"),
        "names the file: {message}"
    );
    assert!(retry_after.is_some(), "503 says when to retry");
    let (status, _, body) = call(
        &dev,
        "/v1/threads/locked-before/exec",
        Some(json!({"cmd": "touch /home/user/ran"})),
    )
    .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "store_unavailable", "{body}");
    // Two calls, each within one 10 s budget however many of dev's loops queue for the
    // connection ahead of it.
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "bounded by the busy timeout: {:?}",
        started.elapsed()
    );

    locker.execute_batch("ROLLBACK").unwrap();
    drop(locker);

    // Nothing half done: no record and no sandbox for the new thread, and the command that
    // was refused never ran.
    let missing = dev
        .http
        .get(format!("{}/v1/threads/locked-new", dev.url))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status().as_u16(), 404);
    assert_eq!(dev.containers(), sandboxes_before);
    let out = dev
        .post(
            "/v1/threads/locked-before/exec",
            Some(json!({"cmd": "test -e /home/user/ran && echo ran || echo never"})),
        )
        .await;
    assert_eq!(out["stdout"], "never\n");

    // And the store works again.
    let handle = dev.post("/v1/threads/locked-new/resolve", None).await;
    assert_eq!(handle["status"], "active");
}

#[test]
fn a_file_that_is_not_a_database_stops_the_start_naming_it() {
    if !prerequisites_met("store_unavailable", &dev_missing()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("threadbox.db"), vec![0x5a_u8; 8192]).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_threadbox"))
        .args(["dev", "--port", "0", "--data-dir"])
        .arg(&data)
        .env_remove("THREADBOX_API_KEYS")
        .env("RUST_LOG", "warn")
        .output()
        .expect("run threadbox dev");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "started on garbage: {stderr}");
    assert!(stderr.contains("threadbox.db"), "names the file: {stderr}");
    assert!(
        stderr.contains("corrupt or not a database"),
        "says what is wrong: {stderr}"
    );
    assert!(
        !data.join("sandboxes").join("runc").exists()
            || std::fs::read_dir(data.join("sandboxes").join("runc"))
                .map(|d| d.count() == 0)
                .unwrap_or(true),
        "no sandbox state made"
    );
}
