//! Crash tests of checkpoints, restore and fork: the real `threadbox dev` (runc, SQLite) is
//! SIGKILLed at each of their fault points (`threadbox_core::fault`, feature `fault-injection`),
//! started again on what it left, and the threads are checked to be as they were or as asked,
//! never half of each: no record of a copy, no copy without a record that is listed, a restore
//! whole, a fork whole, no orphan container once the janitor has run. The provider's own points
//! (`checkpoint-warmed`, `checkpoint-before-publish`, `restore-marked`, `restore-emptied`) are crash-tested in
//! `crates/runc/tests/runc_checkpoints.rs`; `fork-copying` is here too, end to end.
//!
//! Needs root and runc, like the other end-to-end tests.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{dev_missing, prerequisites_met, DevServer};

const QUICK: &[&str] = &["--lease", "2s"];

async fn start(data: &Path, fault: Option<&str>) -> DevServer {
    DevServer::start_in(Some(data), QUICK, &[("THREADBOX_FAULT", fault)]).await
}

/// Wait for the server to die at `point`.
fn crashed(dev: DevServer, point: &str) {
    let (status, stderr) = dev.wait_for_death(Duration::from_secs(60));
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9), "{status:?}\n{stderr}");
    assert!(
        stderr.contains(&format!("fault injection: SIGKILL at {point}")),
        "died elsewhere:\n{stderr}"
    );
}

/// A request whose answer never comes: the server dies handling it.
async fn doomed(dev: &DevServer, path: &str, body: Value) {
    let _ = dev
        .http
        .post(format!("{}{path}", dev.url))
        .json(&body)
        .timeout(Duration::from_secs(60))
        .send()
        .await;
}

async fn exec(dev: &DevServer, thread: &str, cmd: &str) -> String {
    let out = dev
        .post(
            &format!("/v1/threads/{thread}/exec"),
            Some(json!({ "cmd": cmd })),
        )
        .await;
    assert_eq!(out["exit_code"], 0, "{cmd}: {out}");
    out["stdout"].as_str().unwrap().to_owned()
}

async fn causes(dev: &DevServer, thread: &str) -> Vec<String> {
    let body = dev
        .get(&format!(
            "/v1/threads/{thread}/events?after_seq=0&limit=1000"
        ))
        .await;
    body["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["cause"].as_str().unwrap().to_owned())
        .collect()
}

/// Wait until `ok` holds (the janitor needs a few rounds), or fail saying what is left.
async fn eventually<F, Fut>(what: &str, ok: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match ok().await {
            Ok(()) => return,
            Err(why) if Instant::now() >= deadline => panic!("{what} within 60 s: {why}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_between_a_copy_and_its_record_no_checkpoint_is_listed() {
    if !prerequisites_met("fault_injection_checkpoints", &dev_missing()) {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let dev = start(data.path(), Some("after-checkpoint-copy")).await;
    exec(&dev, "cp-crash", "echo kept > note").await;
    doomed(&dev, "/v1/threads/cp-crash/checkpoints", json!({})).await;
    crashed(dev, "after-checkpoint-copy");

    let dev = start(data.path(), None).await;
    let listed = dev.get("/v1/threads/cp-crash/checkpoints").await;
    assert_eq!(listed["checkpoints"], json!([]), "no record of the copy");
    assert_eq!(exec(&dev, "cp-crash", "cat note").await, "kept\n");
    let taken = dev.post("/v1/threads/cp-crash/checkpoints", None).await;
    assert!(taken["id"].as_str().unwrap().starts_with("cp-"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_a_restore_the_home_is_as_asked() {
    if !prerequisites_met("fault_injection_checkpoints", &dev_missing()) {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let dev = start(data.path(), Some("after-restore")).await;
    exec(&dev, "rs-crash", "echo one > note").await;
    let cp = dev.post("/v1/threads/rs-crash/checkpoints", None).await;
    exec(&dev, "rs-crash", "echo two > note && echo extra > more").await;
    doomed(
        &dev,
        "/v1/threads/rs-crash/restore",
        json!({ "checkpoint": cp["id"] }),
    )
    .await;
    crashed(dev, "after-restore");

    let dev = start(data.path(), None).await;
    let home = exec(
        &dev,
        "rs-crash",
        "cat note; test -e more && echo more || echo no-more",
    )
    .await;
    assert_eq!(home, "one\nno-more\n");
    assert!(!causes(&dev, "rs-crash")
        .await
        .contains(&"restore".to_owned()));
    // The checkpoint is still there, and restoring again is the same.
    let again = dev
        .post(
            "/v1/threads/rs-crash/restore",
            Some(json!({ "checkpoint": cp["id"] })),
        )
        .await;
    assert_eq!(again["checkpoint"]["id"], cp["id"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_a_fork_both_threads_are_whole() {
    if !prerequisites_met("fault_injection_checkpoints", &dev_missing()) {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let dev = start(data.path(), Some("after-fork")).await;
    exec(&dev, "fk-src", "echo shared > note").await;
    doomed(
        &dev,
        "/v1/threads/fk-src/fork",
        json!({ "thread": "fk-new" }),
    )
    .await;
    crashed(dev, "after-fork");

    let dev = start(data.path(), None).await;
    assert_eq!(exec(&dev, "fk-new", "cat note").await, "shared\n");
    assert_eq!(exec(&dev, "fk-src", "cat note").await, "shared\n");
    let shown = dev.get("/v1/threads/fk-new").await;
    assert_eq!(
        shown["session"]["generation"], 1,
        "the fork's own sandbox, not a new one: {shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_fork_copy_the_source_is_as_it_was_and_no_orphan_stays() {
    if !prerequisites_met("fault_injection_checkpoints", &dev_missing()) {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let dev = start(data.path(), Some("fork-copying")).await;
    exec(&dev, "fc-src", "echo mine > note").await;
    let source = dev.get("/v1/threads/fc-src").await["session"]["sandbox_id"]
        .as_str()
        .unwrap()
        .to_owned();
    doomed(
        &dev,
        "/v1/threads/fc-src/fork",
        json!({ "thread": "fc-new" }),
    )
    .await;
    crashed(dev, "fork-copying");

    let dev = start(data.path(), None).await;
    // The fork's half-made sandbox is nobody's: the janitor's reconciliation kills it.
    eventually("the orphan reaped", || async {
        let left = dev.containers();
        match left.iter().all(|c| *c == source) {
            true => Ok(()),
            false => Err(format!("containers {left:?}")),
        }
    })
    .await;
    assert_eq!(
        exec(&dev, "fc-src", "cat note").await,
        "mine\n",
        "the source, thawed, as it was"
    );
    let new = dev.get("/v1/threads/fc-new").await;
    assert_eq!(
        new["session"]["status"], "error",
        "the fork's record says it failed: {new}"
    );
    assert_eq!(new["session"]["forked_from"], "fc-src", "{new}");

    // The same fork again makes it: the way out of a crash is to ask once more.
    let again = dev
        .post(
            "/v1/threads/fc-src/fork",
            Some(json!({ "thread": "fc-new" })),
        )
        .await;
    assert_eq!(again["thread_id"], "fc-new", "{again}");
    assert_eq!(exec(&dev, "fc-new", "cat note").await, "mine\n");
    let made = dev.get("/v1/threads/fc-new").await;
    assert_eq!(made["session"]["status"], "active", "{made}");
    assert!(
        causes(&dev, "fc-new").await.iter().any(|c| c == "fork"),
        "the fork's event, this time"
    );
    // Made once, it is taken.
    let taken = dev
        .http
        .post(format!("{}/v1/threads/fc-src/fork", dev.url))
        .json(&json!({ "thread": "fc-new" }))
        .send()
        .await
        .unwrap();
    assert_eq!(taken.status(), reqwest::StatusCode::CONFLICT);
}
