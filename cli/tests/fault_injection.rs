//! Crash tests: the real `threadbox dev` (runc sandboxes, SQLite) is SIGKILLed at its worst
//! moments through the fault points of `threadbox_core::fault` (feature `fault-injection`):
//! mid-create, mid-pause and mid-fan-out (to the log and to Slack). A new process then starts on
//! what the dead one left, with a short lease, and its janitor and consumer repair it. After that:
//!
//! - no orphan: every runc container is the sandbox of a record that is alive;
//! - no record points at a dead sandbox, and a record's state matches its container's;
//! - no stray bundle: the sandboxes directory holds exactly the live containers;
//! - no lost event: every thread's events are gapless, chain from state to state, end at the
//!   record's state, and every one reached the lifecycle consumer (its log line);
//! - no duplicate Slack message: one status message per thread, and no notice twice.
//!
//! Needs root and runc, like the other end-to-end tests.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{dev_missing, prerequisites_met, slack, DevServer};

/// Short enough that recovery happens within the test: the janitor (every second) takes a
/// transition older than the lease for dead, and an event in flight when the process died is
/// delivered again a second later.
const QUICK: &[&str] = &["--lease", "2s", "--fanout-retry", "1s"];
const SLACK_SECRET: &str = "fault-injection-signing-secret";
const API_KEY: &str = "fault-injection-key-0123456789abcdef01";

/// Start `threadbox dev` over `data` with `THREADBOX_FAULT=fault` (or none) and Slack replies
/// going to the local sink.
async fn start(data: &Path, fault: Option<&str>, extra: &[&str]) -> DevServer {
    let args: Vec<&str> = QUICK.iter().chain(extra).copied().collect();
    DevServer::start_in(
        Some(data),
        &args,
        &[
            &slack::sink_env(API_KEY, SLACK_SECRET)[..],
            &[("THREADBOX_FAULT", fault)],
        ]
        .concat(),
    )
    .await
}

async fn get(dev: &DevServer, path: &str) -> Value {
    let response = dev
        .http
        .get(format!("{}{path}", dev.url))
        .bearer_auth(API_KEY)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let status = response.status();
    let text = response.text().await.unwrap();
    assert!(status.is_success(), "GET {path}: {status} {text}");
    serde_json::from_str(&text).unwrap()
}

/// A POST whose answer may never come: the server is meant to die while handling it.
async fn post_and_forget(dev: &DevServer, path: &str) {
    let _ = dev
        .http
        .post(format!("{}{path}", dev.url))
        .bearer_auth(API_KEY)
        .timeout(Duration::from_secs(30))
        .send()
        .await;
}

async fn post(dev: &DevServer, path: &str, body: Value) -> Value {
    let response = dev
        .http
        .post(format!("{}{path}", dev.url))
        .bearer_auth(API_KEY)
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {path}: {e}"));
    let status = response.status();
    let text = response.text().await.unwrap();
    assert!(status.is_success(), "POST {path}: {status} {text}");
    serde_json::from_str(&text).unwrap()
}

/// What a crashed server left for the next one: how it died and its log.
fn crashed(dev: DevServer, point: &str) -> String {
    let (status, stderr) = dev.wait_for_death(Duration::from_secs(60));
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(9),
        "killed by SIGKILL: {status:?}\n{stderr}"
    );
    assert!(
        stderr.contains(&format!("fault injection: SIGKILL at {point}")),
        "died elsewhere:\n{stderr}"
    );
    stderr
}

/// One record as `GET /v1/threads` shows it.
#[derive(Debug)]
struct Record {
    status: String,
    sandbox_id: Option<String>,
}

async fn records(dev: &DevServer) -> BTreeMap<String, Record> {
    let mut out = BTreeMap::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/threads?limit=100&cursor={c}"),
            None => "/v1/threads?limit=100".to_owned(),
        };
        let page = get(dev, &path).await;
        for t in page["threads"].as_array().unwrap() {
            out.insert(
                t["thread_id"].as_str().unwrap().to_owned(),
                Record {
                    status: t["status"].as_str().unwrap().to_owned(),
                    sandbox_id: t["sandbox_id"].as_str().map(str::to_owned),
                },
            );
        }
        match page["next"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return out,
        }
    }
}

async fn events(dev: &DevServer, thread: &str) -> Vec<Value> {
    let body = get(
        dev,
        &format!("/v1/threads/{thread}/events?after_seq=0&limit=1000"),
    )
    .await;
    body["events"].as_array().unwrap().clone()
}

/// runc's containers under the server's data directory: id → status.
fn containers(data: &Path) -> BTreeMap<String, String> {
    let output = Command::new("runc")
        .arg("--root")
        .arg(data.join("sandboxes").join("runc"))
        .args(["list", "--format", "json"])
        .output()
        .expect("runc list");
    let text = String::from_utf8_lossy(&output.stdout);
    let list: Value = serde_json::from_str(text.trim()).unwrap_or(Value::Null);
    list.as_array()
        .map(|items| {
            items
                .iter()
                .map(|c| {
                    (
                        c["id"].as_str().unwrap_or_default().to_owned(),
                        c["status"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The sandbox bundles on disk.
fn bundles(data: &Path) -> BTreeSet<String> {
    std::fs::read_dir(data.join("sandboxes").join("sandboxes"))
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Every invariant the crash must not break; `Err` says which one does not hold (yet).
async fn check(dev: &DevServer, data: &Path, logs: &str) -> Result<(), String> {
    let records = records(dev).await;
    let containers = containers(data);
    let alive = |c: &str| matches!(c, "running" | "paused");

    // No orphan: a container belongs to a record that is alive and points at it.
    for (id, state) in &containers {
        let owner = records
            .iter()
            .find(|(_, r)| r.sandbox_id.as_deref() == Some(id.as_str()));
        match owner {
            Some((_, r)) if !matches!(r.status.as_str(), "error" | "destroyed" | "expired") => {}
            Some((thread, r)) => {
                return Err(format!(
                    "container {id} ({state}) belongs to {thread}, which is {}",
                    r.status
                ))
            }
            None => return Err(format!("orphan container {id} ({state})")),
        }
        if !alive(state) {
            return Err(format!("container {id} is {state}"));
        }
    }
    // No record points at a dead sandbox, and each agrees with its container.
    for (thread, r) in &records {
        let Some(id) = &r.sandbox_id else { continue };
        if matches!(r.status.as_str(), "destroyed" | "expired") {
            continue;
        }
        let Some(state) = containers.get(id) else {
            return Err(format!("{thread} is {} with dead sandbox {id}", r.status));
        };
        let agrees = match r.status.as_str() {
            "active" => state == "running",
            "paused" => state == "paused",
            other => return Err(format!("{thread} still {other}")),
        };
        if !agrees {
            return Err(format!("{thread} is {} but {id} is {state}", r.status));
        }
    }
    if records.values().any(|r| r.status == "creating") {
        return Err("a record is still creating".into());
    }
    // No stray bundle.
    let live: BTreeSet<String> = containers.keys().cloned().collect();
    if bundles(data) != live {
        return Err(format!(
            "bundles {:?} but containers {live:?}",
            bundles(data)
        ));
    }
    // No lost event.
    for (thread, r) in &records {
        let events = events(dev, thread).await;
        for (i, e) in events.iter().enumerate() {
            let seq = e["seq"].as_u64().unwrap();
            if seq != i as u64 + 1 {
                return Err(format!("{thread}: event {i} has seq {seq}"));
            }
            if i > 0 && e["from"] != events[i - 1]["to"] {
                return Err(format!("{thread}: seq {seq} does not follow on: {e}"));
            }
            let logged = format!("thread_id={thread} seq={seq} ");
            let delivered = logs
                .lines()
                .chain(dev.stderr().lines())
                .any(|l| l.contains("lifecycle ") && l.contains(&logged));
            if !delivered {
                return Err(format!("{thread}: seq {seq} never reached the consumer"));
            }
        }
        let last = events.last().map(|e| e["to"].as_str().unwrap_or_default());
        if last != Some(r.status.as_str()) {
            return Err(format!(
                "{thread} is {} but its last event {last:?}",
                r.status
            ));
        }
    }
    Ok(())
}

/// Wait until every invariant holds (the janitor and the consumer need a few rounds).
async fn settles(dev: &DevServer, data: &Path, logs: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let outcome = check(dev, data, logs).await;
        match outcome {
            Ok(()) => return,
            Err(why) if Instant::now() >= deadline => panic!(
                "not repaired within 60 s: {why}\nrecords {:#?}\ncontainers {:?}\nstderr:\n{}",
                records(dev).await,
                containers(data),
                dev.stderr()
            ),
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

async fn status_of(dev: &DevServer, thread: &str) -> String {
    let shown = get(dev, &format!("/v1/threads/{thread}")).await;
    let session = shown.get("session").unwrap_or(&shown);
    session["status"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_create_the_orphan_is_reaped_and_the_thread_recovers() {
    if !prerequisites_met("fault_injection", &dev_missing()) {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let dev = start(data.path(), Some("after-provider-create"), &[]).await;
    post_and_forget(&dev, "/v1/threads/crash-create/resolve").await;
    let logs = crashed(dev, "after-provider-create");
    assert_eq!(containers(data.path()).len(), 1, "the sandbox was made");

    let dev = start(data.path(), None, &[]).await;
    settles(&dev, data.path(), &logs).await;
    assert!(containers(data.path()).is_empty(), "the orphan is gone");
    assert_eq!(status_of(&dev, "crash-create").await, "error");

    // The thread is usable again: a new sandbox, a new generation.
    let out = post(
        &dev,
        "/v1/threads/crash-create/exec",
        serde_json::json!({"cmd": "echo back"}),
    )
    .await;
    assert_eq!(out["stdout"], "back\n");
    let handle = post(&dev, "/v1/threads/crash-create/resolve", Value::Null).await;
    assert_eq!(handle["generation"], 2, "{handle}");
    settles(&dev, data.path(), &logs).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_pause_the_record_catches_up_with_the_paused_sandbox() {
    if !prerequisites_met("fault_injection", &dev_missing()) {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let idle = ["--idle-pause", "2s"];
    let dev = start(data.path(), Some("after-provider-pause"), &idle).await;
    post(
        &dev,
        "/v1/threads/crash-pause/exec",
        serde_json::json!({"cmd": "echo kept > note"}),
    )
    .await;
    // The janitor pauses the idle thread and the process dies right after the freeze.
    let logs = crashed(dev, "after-provider-pause");
    let left = containers(data.path());
    assert_eq!(left.values().collect::<Vec<_>>(), ["paused"], "{left:?}");

    let dev = start(data.path(), None, &idle).await;
    settles(&dev, data.path(), &logs).await;
    assert_eq!(status_of(&dev, "crash-pause").await, "paused");
    let events = events(&dev, "crash-pause").await;
    let last = events.last().unwrap();
    assert_eq!(
        (
            last["from"].as_str(),
            last["to"].as_str(),
            last["cause"].as_str()
        ),
        (Some("pausing"), Some("paused"), Some("reconcile")),
        "{events:#?}"
    );

    // Same sandbox, files kept.
    let out = post(
        &dev,
        "/v1/threads/crash-pause/exec",
        serde_json::json!({"cmd": "cat note"}),
    )
    .await;
    assert_eq!(out["stdout"], "kept\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_fan_out_every_event_is_delivered_after_the_restart() {
    if !prerequisites_met("fault_injection", &dev_missing()) {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let dev = start(data.path(), Some("after-deliver:log"), &[]).await;
    post_and_forget(&dev, "/v1/threads/crash-fanout/resolve").await;
    let logs = crashed(dev, "after-deliver:log");

    let dev = start(data.path(), None, &[]).await;
    settles(&dev, data.path(), &logs).await;
    // The thread works, and its new events flow too.
    let out = post(
        &dev,
        "/v1/threads/crash-fanout/exec",
        serde_json::json!({"cmd": "echo ok"}),
    )
    .await;
    assert_eq!(out["stdout"], "ok\n");
    settles(&dev, data.path(), &logs).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_a_slack_post_no_message_appears_twice() {
    if !prerequisites_met("fault_injection", &dev_missing()) {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let dev = start(data.path(), Some("after-deliver:slack"), &[]).await;
    let (_, thread) = slack::send(&dev, SLACK_SECRET, "slack:T1:C1", "```echo hello```");
    let logs = crashed(dev, "after-deliver:slack");

    let dev = start(data.path(), None, &[]).await;
    settles(&dev, data.path(), &logs).await;
    // Slack has caught up with the thread's last state, in one status message.
    let last = events(&dev, &thread).await.last().cloned().unwrap();
    let query = [("thread_id", thread.as_str())];
    let what = format!("{last} in one status message");
    let messages =
        slack::wait_for_sink(&dev, API_KEY, &query, Duration::from_secs(30), &what, |m| {
            let status: Vec<&Value> = m
                .iter()
                .filter(|m| m["text"].as_str().unwrap_or_default().contains("Sandbox *"))
                .collect();
            let shows_last = status.len() == 1
                && status[0]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .contains(&format!("*{}", last["to"].as_str().unwrap()));
            shows_last.then(|| m.to_vec())
        })
        .await;
    let texts: Vec<&str> = messages
        .iter()
        .map(|m| m["text"].as_str().unwrap_or_default())
        .collect();
    let distinct: BTreeSet<&str> = texts.iter().copied().collect();
    assert_eq!(distinct.len(), texts.len(), "a message twice: {texts:#?}");
}
