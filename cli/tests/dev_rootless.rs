//! `threadbox dev` run by an ordinary user: rootless runc sandboxes, end to end through the API
//! (a command, a file, pause and resume), and the banner saying what rootless lacks. The data
//! directory sits in the user's home, private (0700) as homes are.
//!
//! Started by root (CI), the test makes the account `threadbox-rootless-dev` if missing and runs
//! the server as it through `runuser`; every process of that account is killed at the end, so
//! the account is this test's alone. Without root it skips: it needs to become another user.

mod support;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const USER: &str = "threadbox-rootless-dev";

fn required() -> bool {
    std::env::var_os("THREADBOX_REQUIRE_SANDBOXES").is_some()
}

fn skip(why: &str) {
    if required() {
        panic!("THREADBOX_REQUIRE_SANDBOXES is set but {why}");
    }
    eprintln!("SKIPPED: {why}");
}

/// Everything the account runs, killed; then its data directory removed.
struct Cleanup {
    dir: tempfile::TempDir,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = Command::new("pkill").args(["-KILL", "-u", USER]).status();
        std::thread::sleep(Duration::from_millis(200));
        let _ = std::fs::remove_dir_all(self.dir.path());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordinary_user_runs_threadbox_dev_with_rootless_sandboxes() {
    if !rustix::process::geteuid().is_root() {
        return skip("this test needs root to become an ordinary user");
    }
    if let Err(why) = threadbox_testing::accounts::ensure_system_account(USER) {
        return skip(&why);
    }
    let cleanup = Cleanup {
        dir: tempfile::tempdir().unwrap(),
    };
    let home = cleanup.dir.path();
    let status = Command::new("chown")
        .arg(format!("{USER}:"))
        .arg(home)
        .status()
        .unwrap();
    assert!(status.success());
    // Private, as a home is on most machines: the data directory below it must still work.
    std::fs::set_permissions(home, std::fs::Permissions::from_mode(0o700)).unwrap();

    let mut server = Command::new("runuser")
        .args(["-u", USER, "--"])
        .arg(env!("CARGO_BIN_EXE_threadbox"))
        .args(support::DEV_ARGS)
        .arg(home.join("data"))
        .env("HOME", home)
        .env("RUST_LOG", "warn")
        .env_remove("THREADBOX_API_KEYS")
        .env_remove("THREADBOX_API_KEYS_FILE")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(home.join("dev.stderr")).unwrap())
        .process_group(0)
        .spawn()
        .expect("start threadbox dev as an ordinary user");
    let stdout = server.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut banner = Vec::new();
    let url = loop {
        let Ok(line) = rx.recv_timeout(Duration::from_secs(60)) else {
            let stderr = std::fs::read_to_string(home.join("dev.stderr")).unwrap_or_default();
            panic!("no API address printed; banner {banner:#?}\nstderr:\n{stderr}");
        };
        if let Some(url) = line.trim().strip_prefix("API") {
            break url.trim().to_owned();
        }
        banner.push(line);
    };
    // The rest of the banner, then the server's own words.
    std::thread::sleep(Duration::from_millis(300));
    banner.extend(rx.try_iter());
    let banner = banner.join("\n");
    assert!(banner.contains("rootless"), "{banner}");
    assert!(
        banner.contains("no memory, CPU or process-count limits"),
        "{banner}"
    );
    assert!(banner.contains("SIGSTOP"), "{banner}");

    let http = reqwest::Client::new();
    let exec = |cmd: &str| {
        let (http, url) = (http.clone(), url.clone());
        let cmd = cmd.to_owned();
        async move {
            let response = http
                .post(format!("{url}/v1/threads/rootless/exec"))
                .json(&json!({ "cmd": cmd }))
                .send()
                .await
                .unwrap();
            let status = response.status();
            let body: Value = response.json().await.unwrap();
            assert!(status.is_success(), "{status}: {body}");
            body
        }
    };
    let ran = exec("id -un; echo kept > note.txt; cat note.txt").await;
    assert_eq!(ran["stdout"], "user\nkept\n", "{ran}");
    // The file API reaches the same home.
    let file = http
        .get(format!(
            "{url}/v1/threads/rootless/files/home/user/note.txt"
        ))
        .send()
        .await
        .unwrap();
    assert!(file.status().is_success(), "{}", file.status());
    assert_eq!(file.text().await.unwrap(), "kept\n");

    let paused = http
        .post(format!("{url}/v1/threads/rootless/pause"))
        .send()
        .await
        .unwrap();
    assert!(paused.status().is_success(), "{}", paused.status());
    let thread: Value = http
        .get(format!("{url}/v1/threads/rootless"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(thread["session"]["status"], "paused", "{thread}");
    assert_eq!(thread["sandbox"]["state"], "paused", "{thread}");

    // The next command resumes it, files kept.
    let started = Instant::now();
    let ran = exec("cat note.txt").await;
    assert_eq!(ran["stdout"], "kept\n", "{ran}");
    assert!(started.elapsed() < Duration::from_secs(30));

    let _ = rustix::process::kill_process_group(
        rustix::process::Pid::from_raw(server.id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    );
    let _ = server.wait();
    drop(cleanup);
}
