//! The operator CLI against the real `threadbox dev` on runc: the README's tour as a test. A
//! command's output and exit status pass through `threads exec`; a followed event stream shows
//! the janitor pausing the idle thread (cause `idle`); `resume` and `show` report it back.
//!
//! Needs root and runc; skipped without them, or failed when `THREADBOX_REQUIRE_SANDBOXES` is set.

mod support;

use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::Value;
use support::{dev_missing, prerequisites_met, DevServer};
use tokio::io::{AsyncBufReadExt, BufReader};

async fn threads(dev: &DevServer, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_threadbox"))
        .arg("threads")
        .args(args)
        .env("THREADBOX_URL", &dev.url)
        .env_remove("THREADBOX_API_KEY")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap()
}

fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_runs_code_and_watches_the_idle_pause_on_runc() {
    if !prerequisites_met(
        "the_cli_runs_code_and_watches_the_idle_pause_on_runc",
        &dev_missing(),
    ) {
        return;
    }
    let dev = DevServer::start(&["--idle-pause", "3s"]).await;

    // Output is passed through raw, stdout and stderr apart, and the status is the command's.
    let run = threads(
        &dev,
        &["exec", "tour", "-c", "echo out; echo err >&2; exit 7"],
    )
    .await;
    assert_eq!(run.status.code(), Some(7), "{}", text(&run.stderr));
    assert_eq!(text(&run.stdout), "out\n");
    assert_eq!(text(&run.stderr), "err\n");
    let run = threads(&dev, &["exec", "tour", "--", "cat", "/etc/hostname"]).await;
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert!(
        text(&run.stdout).starts_with("tb-tour-"),
        "{}",
        text(&run.stdout)
    );

    // Follow the thread's events while the janitor pauses it for being idle.
    let mut follow = tokio::process::Command::new(env!("CARGO_BIN_EXE_threadbox"))
        .args(["threads", "events", "tour", "--follow", "--json"])
        .args(["--interval", "200ms", "--url", &dev.url])
        .env_remove("THREADBOX_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(follow.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let paused = loop {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("no idle pause within 30s; saw {seen:?}"))
            .unwrap()
            .expect("still following");
        let event: Value = serde_json::from_str(&line).unwrap();
        seen.push(format!("{} ({})", event["to"], event["cause"]));
        if event["to"] == "paused" {
            break event;
        }
    };
    assert_eq!(paused["cause"], "idle", "{seen:?}");
    follow.kill().await.unwrap();

    let list = threads(&dev, &["list"]).await;
    assert!(list.status.success());
    assert!(
        text(&list.stdout)
            .lines()
            .any(|l| l.starts_with("tour") && l.contains(" paused ")),
        "{}",
        text(&list.stdout)
    );

    let resumed = threads(&dev, &["resume", "tour"]).await;
    assert!(resumed.status.success(), "{}", text(&resumed.stderr));
    assert!(
        text(&resumed.stdout).starts_with("tour: active, sandbox rc-"),
        "{}",
        text(&resumed.stdout)
    );
    assert!(text(&resumed.stdout).ends_with(", resumed\n"));

    let shown = threads(&dev, &["show", "tour"]).await;
    let shown = text(&shown.stdout);
    assert!(shown.contains("  pausing → paused       idle "), "{shown}");
    assert!(shown.contains("  resuming → active      user "), "{shown}");
}

/// `threads exec` streams: a line the command prints comes out while the command still runs.
/// Over the API, a client that goes away leaves its command running to its end, unless it
/// asked `kill_on_disconnect`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_streams_as_it_happens_and_disconnecting_kills_only_when_asked() {
    if !prerequisites_met(
        "output_streams_as_it_happens_and_disconnecting_kills_only_when_asked",
        &dev_missing(),
    ) {
        return;
    }
    let dev = DevServer::start(&[]).await;
    let mut run = tokio::process::Command::new(env!("CARGO_BIN_EXE_threadbox"))
        .args([
            "threads",
            "exec",
            "live",
            "-c",
            "echo first; sleep 3; echo second",
        ])
        .env("THREADBOX_URL", &dev.url)
        .env_remove("THREADBOX_API_KEY")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(run.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(2), lines.next_line())
        .await
        .expect("the first line comes before the command ends")
        .unwrap();
    assert_eq!(first.as_deref(), Some("first"));
    assert!(run.try_wait().unwrap().is_none(), "still running");
    assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("second"));
    assert!(run.wait().await.unwrap().success());

    // Leave after the first event; the command goes on (or not) without us. The one to kill
    // sleeps long enough for the server to notice the disconnect on a loaded machine.
    for (kill, file, sleep) in [(false, "kept", 1), (true, "killed", 5)] {
        let mut response = dev
            .http
            .post(format!("{}/v1/threads/live/exec", dev.url))
            .header("accept", "text/event-stream")
            .json(&serde_json::json!({
                "cmd": format!("echo started; sleep {sleep}; echo done > {file}"),
                "kill_on_disconnect": kill,
            }))
            .send()
            .await
            .unwrap();
        let first = response.chunk().await.unwrap().unwrap();
        assert!(
            String::from_utf8_lossy(&first).contains("started"),
            "{first:?}"
        );
        drop(response);
    }
    tokio::time::sleep(Duration::from_secs(7)).await;
    let listing = dev
        .post(
            "/v1/threads/live/exec",
            Some(serde_json::json!({"cmd": "ls kept killed 2>&1"})),
        )
        .await;
    let seen = listing["stdout"].as_str().unwrap();
    assert!(seen.contains("kept\n"), "{seen}");
    assert!(seen.contains("'killed': No such file"), "{seen}");
}
