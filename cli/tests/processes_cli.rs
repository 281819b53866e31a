//! `threadbox processes` against the real `threadbox dev` on runc: a background command started,
//! its output followed to its end (and its exit status told), read from an offset; a long one
//! listed, followed until Ctrl-C (which stops following, not the process), then killed and seen
//! ended by the signal; input written to a third; an unknown process and a bad signal refused
//! with the documented exit statuses.
//!
//! Needs root and runc; skipped without them, or failed when `THREADBOX_REQUIRE_SANDBOXES` is set.

mod support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{dev_missing, prerequisites_met, DevServer};
use tokio::io::{AsyncBufReadExt, BufReader};

const READY: &str = "import time; print('ready', flush=True); time.sleep(60)";

fn command(dev: &DevServer, args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_threadbox"));
    command
        .arg("processes")
        .args(args)
        .env("THREADBOX_URL", &dev.url)
        .env_remove("THREADBOX_API_KEY")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

/// Run `threadbox processes <args>` to its end (within 60 s).
async fn processes(dev: &DevServer, args: &[&str]) -> std::process::Output {
    tokio::time::timeout(Duration::from_secs(60), command(dev, args).output())
        .await
        .unwrap_or_else(|_| panic!("`processes {args:?}` did not end within 60 s"))
        .unwrap()
}

fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap()
}

/// Start a process; its id, as `start` prints it.
async fn start(dev: &DevServer, args: &[&str]) -> String {
    let mut all = vec!["start", "cli"];
    all.extend_from_slice(args);
    let started = processes(dev, &all).await;
    assert!(started.status.success(), "{}", text(&started.stderr));
    let id = text(&started.stdout).trim().to_owned();
    assert!(
        !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric()),
        "{id:?}"
    );
    id
}

async fn listed(dev: &DevServer) -> Vec<Value> {
    let list = processes(dev, &["list", "cli", "--json"]).await;
    assert!(list.status.success(), "{}", text(&list.stderr));
    let list: Value = serde_json::from_slice(&list.stdout).unwrap();
    list["processes"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_starts_follows_lists_writes_to_and_kills_background_processes() {
    if !prerequisites_met(
        "the_cli_starts_follows_lists_writes_to_and_kills_background_processes",
        &dev_missing(),
    ) {
        return;
    }
    let dev = DevServer::start(&[]).await;

    // Followed to its end: the output raw as it comes, how it ended on stderr.
    let short = start(&dev, &["-c", "echo one; sleep 1; echo two; exit 3"]).await;
    let followed = processes(&dev, &["logs", "cli", &short, "--follow"]).await;
    assert!(followed.status.success(), "{}", text(&followed.stderr));
    assert_eq!(text(&followed.stdout), "one\ntwo\n");
    assert!(
        text(&followed.stderr).contains(&format!("process {short} exited with status 3")),
        "{}",
        text(&followed.stderr)
    );
    let rest = processes(&dev, &["logs", "cli", &short, "--after", "4"]).await;
    assert!(rest.status.success(), "{}", text(&rest.stderr));
    assert_eq!(text(&rest.stdout), "two\n");

    // A long one: followed until Ctrl-C, which leaves it running.
    let long = start(
        &dev,
        &["--idle-timeout", "2m", "--", "python3", "-u", "-c", READY],
    )
    .await;
    let mut follow = command(&dev, &["logs", "cli", &long, "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(follow.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("no output within 30 s")
        .unwrap();
    assert_eq!(first.as_deref(), Some("ready"));
    let interrupt = std::process::Command::new("kill")
        .args(["-INT", &follow.id().unwrap().to_string()])
        .status()
        .unwrap();
    assert!(interrupt.success());
    let stopped = tokio::time::timeout(Duration::from_secs(20), follow.wait_with_output())
        .await
        .expect("the follow did not stop on Ctrl-C")
        .unwrap();
    assert_eq!(
        stopped.status.code(),
        Some(130),
        "{}",
        text(&stopped.stderr)
    );
    assert!(
        text(&stopped.stderr).contains("still runs"),
        "{}",
        text(&stopped.stderr)
    );

    let all = listed(&dev).await;
    let state = |id: &str, all: &[Value]| {
        all.iter()
            .find(|p| p["id"] == id)
            .map(|p| (p["state"].clone(), p["exit_code"].clone()))
            .unwrap_or_else(|| panic!("{id} not listed: {all:?}"))
    };
    assert_eq!(state(&short, &all), ("exited".into(), 3.into()));
    assert_eq!(state(&long, &all), ("running".into(), Value::Null));
    let table = processes(&dev, &["list", "cli"]).await;
    let table = text(&table.stdout);
    assert!(table.starts_with("ID "), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with(long.as_str()) && l.contains(" running ")),
        "{table}"
    );

    // Input, to a process that reads a line.
    let reader = start(&dev, &["-c", "read line; echo got $line"]).await;
    let typed = processes(&dev, &["input", "cli", &reader, "hello", "--newline"]).await;
    assert!(typed.status.success(), "{}", text(&typed.stderr));
    let echoed = processes(&dev, &["logs", "cli", &reader, "--follow"]).await;
    assert_eq!(
        text(&echoed.stdout),
        "got hello\n",
        "{}",
        text(&echoed.stderr)
    );

    // Killed: TERM by default, seen ended by it.
    let killed = processes(&dev, &["kill", "cli", &long]).await;
    assert!(killed.status.success(), "{}", text(&killed.stderr));
    assert_eq!(text(&killed.stdout), format!("{long}: sent TERM\n"));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let all = listed(&dev).await;
        if state(&long, &all).0 == "exited" {
            assert_eq!(state(&long, &all).1, 143, "{all:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still running after TERM: {all:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // An unknown process is "not found" (3) with the API's message; a bad signal a usage error.
    let unknown = processes(&dev, &["kill", "cli", "nosuch1"]).await;
    assert_eq!(unknown.status.code(), Some(3), "{}", text(&unknown.stderr));
    assert!(
        text(&unknown.stderr).starts_with("error: ")
            && text(&unknown.stderr).contains("(unknown_process)"),
        "{}",
        text(&unknown.stderr)
    );
    let bad = processes(&dev, &["kill", "cli", &long, "--signal", "USR1"]).await;
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad.stderr));
}
