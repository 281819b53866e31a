//! Slack without Slack: a `threadbox dev` with a signing secret and no bot token, so replies
//! land in its local sink; mentions go in through `threadbox slack send`, and replies are read
//! back from `GET /v1/slack/sink`.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::DevServer;

/// The environment of a server whose Slack replies go to its local sink: events signed with
/// `secret`, the API (the sink too) behind `key`.
pub fn sink_env<'a>(key: &'a str, secret: &'a str) -> [(&'a str, Option<&'a str>); 4] {
    [
        ("THREADBOX_API_KEYS", Some(key)),
        ("SLACK_SIGNING_SECRET", Some(secret)),
        ("SLACK_BOT_TOKEN", None),
        ("SLACK_API_URL", None),
    ]
}

/// `threadbox slack send` signed with `secret`, as a person mentioning the app, which must
/// succeed: what it printed, and the thread the message landed in.
pub fn send(dev: &DevServer, secret: &str, thread: &str, text: &str) -> (String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_threadbox"))
        .args(["slack", "send", "--url", &dev.url, "--thread", thread, text])
        .env("SLACK_SIGNING_SECRET", secret)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run threadbox slack send");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "slack send failed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let landed = stdout
        .lines()
        .find_map(|l| l.strip_prefix("sent ").and_then(|r| r.split(" to ").nth(1)))
        .expect("the thread id is printed")
        .trim()
        .to_owned();
    (stdout, landed)
}

/// The messages the sink holds for `query` (`thread_id` or `channel`), read with `key`.
pub async fn sink(dev: &DevServer, key: &str, query: &[(&str, &str)]) -> Vec<Value> {
    let response = dev
        .http
        .get(format!("{}/v1/slack/sink", dev.url))
        .query(query)
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    let body: Value = response.json().await.unwrap();
    body["messages"].as_array().unwrap().clone()
}

/// Read the sink for `query` with `key` (every 200 ms, for up to `within`) until `found` picks
/// something out of its messages, and return that; panics naming `what` with the last messages.
pub async fn wait_for_sink<T>(
    dev: &DevServer,
    key: &str,
    query: &[(&str, &str)],
    within: Duration,
    what: &str,
    found: impl Fn(&[Value]) -> Option<T>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        let messages = sink(dev, key, query).await;
        if let Some(found) = found(&messages) {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "no {what} in {query:?}: {messages:#?}\nstderr:\n{}",
            dev.stderr()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
