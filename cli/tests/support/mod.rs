//! What the end-to-end tests that run the real `threadbox dev` share: checking the machine, and a
//! running server on a free loopback port over a temporary data directory with real runc
//! sandboxes, cleaned up (process and containers) however the test ends.

// Each test crate uses a different part of this module.
#![allow(dead_code)]

pub mod dashboard;
pub mod e2b;
pub mod live;
pub mod load;
pub mod mcp;
pub mod slack;
pub mod transfer;
pub mod webdriver;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// A program on `PATH`.
pub fn find_program(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|path| path.is_file())
    })
}

/// Whether a test can run here. Without a prerequisite it is skipped with a message, unless
/// `THREADBOX_REQUIRE_SANDBOXES` is set (CI sets it), where a skip would hide a broken machine:
/// then it fails.
pub fn prerequisites_met(test: &str, missing: &[String]) -> bool {
    if missing.is_empty() {
        return true;
    }
    assert!(
        std::env::var_os("THREADBOX_REQUIRE_SANDBOXES").is_none(),
        "THREADBOX_REQUIRE_SANDBOXES is set but {test} lacks: {}",
        missing.join(", ")
    );
    eprintln!("{test} needs {}; not run", missing.join(", "));
    false
}

/// What every `threadbox dev` test needs: root (runc makes cgroups and mounts) and runc.
pub fn dev_missing() -> Vec<String> {
    let mut missing = Vec::new();
    if !is_root() {
        missing.push("root".to_owned());
    }
    if find_program("runc").is_none() {
        missing.push("runc (apt-get install runc)".to_owned());
    }
    missing
}

/// How the tests start `threadbox dev`, its data directory to follow: a free port, and the
/// janitor every second.
pub const DEV_ARGS: [&str; 6] = [
    "dev",
    "--port",
    "0",
    "--janitor-interval",
    "1s",
    "--data-dir",
];

/// A running `threadbox dev`, stopped and its containers deleted on drop.
pub struct DevServer {
    child: Child,
    /// `http://127.0.0.1:<port>`
    pub url: String,
    pub http: reqwest::Client,
    data_dir: PathBuf,
    stderr_path: PathBuf,
    /// False once the process died on purpose and its sandboxes are left for the next start.
    cleanup: bool,
    /// Lines the server printed on stdout.
    printed: Arc<Mutex<Vec<String>>>,
    _tmp: tempfile::TempDir,
}

impl DevServer {
    /// Start it with `args` after the defaults (a free port, a temporary data directory, the
    /// janitor every second) and wait until it answers.
    pub async fn start(args: &[&str]) -> DevServer {
        Self::start_with_env(args, &[]).await
    }

    /// `start`, with environment variables set (`Some`) or removed (`None`) for the server.
    pub async fn start_with_env(args: &[&str], env: &[(&str, Option<&str>)]) -> DevServer {
        Self::start_in(None, args, env).await
    }

    /// `start_with_env` over the caller's data directory (`None`: a temporary one), so a test
    /// can start a server again on what a crashed one left.
    pub async fn start_in(
        data_dir: Option<&Path>,
        args: &[&str],
        env: &[(&str, Option<&str>)],
    ) -> DevServer {
        let tmp = tempfile::tempdir().unwrap();
        let data_dir = data_dir.map_or_else(|| tmp.path().join("data"), Path::to_path_buf);
        let stderr_path = tmp.path().join("dev.stderr");
        let mut command = Command::new(env!("CARGO_BIN_EXE_threadbox"));
        // No warm pool unless the test asks (`--warm-pool N`): members are sandboxes of their
        // own, which tests counting containers or capping sandboxes would meet.
        command.env("THREADBOX_WARM_POOL", "0");
        // No keys unless the test gives some: the developer's own must not leak in.
        command.env_remove("THREADBOX_API_KEYS");
        command.env_remove("THREADBOX_API_KEYS_FILE");
        for (name, value) in env {
            match value {
                Some(value) => command.env(name, value),
                None => command.env_remove(name),
            };
        }
        let mut child = command
            .args(DEV_ARGS)
            .arg(&data_dir)
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr_path).unwrap())
            .spawn()
            .expect("start threadbox dev");
        // The banner names the address; keep draining stdout so the child never blocks on it,
        // and keep what it printed for tests that read the banner.
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let printed = Arc::new(Mutex::new(Vec::new()));
        let printing = printed.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(url) = line.trim().strip_prefix("API") {
                    let _ = tx.send(url.trim().to_owned());
                }
                printing.lock().unwrap().push(line);
            }
        });
        let mut dev = DevServer {
            child,
            url: String::new(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(120))
                .build()
                .unwrap(),
            data_dir,
            stderr_path,
            cleanup: true,
            printed,
            _tmp: tmp,
        };
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(url) => dev.url = url,
            Err(_) => panic!("no API address printed; stderr:\n{}", dev.stderr()),
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let health = dev.http.get(format!("{}/healthz", dev.url)).send().await;
            if health.is_ok_and(|r| r.status().is_success()) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "/healthz never answered; stderr:\n{}",
                dev.stderr()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        dev
    }

    /// What the server printed on stdout so far: its banner.
    pub fn stdout_lines(&self) -> Vec<String> {
        self.printed.lock().unwrap().clone()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// POST a JSON body (or none) and return the JSON answer, asserting a 2xx status.
    pub async fn post(&self, path: &str, body: Option<Value>) -> Value {
        let mut request = self.http.post(format!("{}{path}", self.url));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}; stderr:\n{}", self.stderr()));
        let status = response.status();
        let text = response.text().await.unwrap();
        assert!(status.is_success(), "POST {path}: {status} {text}");
        serde_json::from_str(&text).unwrap()
    }

    /// GET and return the JSON answer, asserting a 2xx status.
    pub async fn get(&self, path: &str) -> Value {
        let response = self
            .http
            .get(format!("{}{path}", self.url))
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}; stderr:\n{}", self.stderr()));
        let status = response.status();
        let text = response.text().await.unwrap();
        assert!(status.is_success(), "GET {path}: {status} {text}");
        serde_json::from_str(&text).unwrap()
    }

    /// The server's data directory (its database, sandboxes and token secret).
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    fn runc_root(&self) -> PathBuf {
        self.data_dir.join("sandboxes").join("runc")
    }

    /// The ids of the server's runc containers, as `runc list` shows them.
    pub fn containers(&self) -> BTreeSet<String> {
        runc_ids(&self.runc_root()).expect("runc list")
    }

    /// The server's process id, to read its `/proc` entries.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, and wait (up to ten seconds) for it to exit, leaving its sandboxes for the next
    /// start as a live thread's outlive the process. Returns how it ended and its stderr.
    pub fn terminate(self) -> (std::process::ExitStatus, String) {
        let signalled = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(signalled.success());
        self.wait_for_death(Duration::from_secs(10))
    }

    /// Wait (up to `timeout`) for the process to die on its own, as a fault point makes it, and
    /// leave its sandboxes for the next start. Returns how it ended and its stderr.
    pub fn wait_for_death(mut self, timeout: Duration) -> (std::process::ExitStatus, String) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.cleanup = false;
                return (status, self.stderr());
            }
            assert!(
                Instant::now() < deadline,
                "threadbox dev did not die within {timeout:?}; stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for DevServer {
    fn drop(&mut self) {
        stop(&mut self.child);
        if !self.cleanup {
            return;
        }
        // The sandboxes of live threads outlive the process by design; a test must not leave
        // them behind.
        remove_sandboxes(&self.runc_root(), &self.data_dir);
    }
}

/// The ids of the runc containers under `root` (runc's `--root`), as `runc list` shows them.
pub fn runc_ids(root: &Path) -> std::io::Result<BTreeSet<String>> {
    let output = Command::new("runc")
        .arg("--root")
        .arg(root)
        .args(["list", "-q"])
        .output()?;
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect())
}

/// Delete every runc container under `root`, then detach the mounts under `state`: each sandbox
/// has mounts next to runc's state (its user namespace pin, its root tmpfs and its home volume),
/// which the provider removes with the sandbox, and here the sandboxes go behind its back.
pub fn remove_sandboxes(root: &Path, state: &Path) {
    for id in runc_ids(root).unwrap_or_default() {
        let _ = Command::new("runc")
            .arg("--root")
            .arg(root)
            .args(["delete", "-f", &id])
            .status();
    }
    unmount_all_under(state);
}

/// Detach every mount under `dir`, deepest first, so the directory can be deleted and no loop
/// device stays attached to a file in it.
pub fn unmount_all_under(dir: &Path) {
    let prefix = format!("{}/", dir.display());
    let mut mounts: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split(' ').nth(4).map(str::to_owned))
        .filter(|mount_point| mount_point.starts_with(&prefix))
        .collect();
    mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
    for mount_point in mounts {
        let _ = Command::new("umount")
            .arg("--lazy")
            .arg(&mount_point)
            .status();
    }
}

/// `threadbox <args>` against the API at `url`, as an operator runs it (no key, no colour, no
/// input).
pub fn cli_command(url: &str, args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_threadbox"));
    command
        .args(args)
        .env("THREADBOX_URL", url)
        .env_remove("THREADBOX_API_KEY")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    command
}

/// Run `threadbox threads <args>` against `dev`, as an operator would (no key, no colour).
pub async fn threads(dev: &DevServer, args: &[&str]) -> std::process::Output {
    cli_command(&dev.url, &[&["threads"], args].concat())
        .output()
        .await
        .unwrap()
}

/// A process's output as text (the tests' commands print UTF-8).
pub fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap()
}

/// `threads exec` on `thread` passes a command's output and exit status through raw, stdout and
/// stderr apart.
pub async fn assert_exec_passes_through(dev: &DevServer, thread: &str) {
    let run = threads(
        dev,
        &["exec", thread, "-c", "echo out; echo err >&2; exit 7"],
    )
    .await;
    assert_eq!(run.status.code(), Some(7), "{}", text(&run.stderr));
    assert_eq!(text(&run.stdout), "out\n");
    assert_eq!(text(&run.stderr), "err\n");
}

/// `threads resume <thread>`, which must succeed and say it resumed: what it printed.
pub async fn resume_with_cli(dev: &DevServer, thread: &str) -> String {
    let resumed = threads(dev, &["resume", thread]).await;
    assert!(resumed.status.success(), "{}", text(&resumed.stderr));
    let printed = text(&resumed.stdout).to_owned();
    assert!(printed.ends_with(", resumed\n"), "{printed}");
    printed
}

/// `threads events <thread> --follow --json` against the API at `url`, polling every
/// `interval`: its JSON lines on stdout; killed when dropped.
pub fn follow_events(url: &str, thread: &str, interval: &str) -> tokio::process::Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_threadbox"))
        .args(["threads", "events", thread, "--follow", "--json"])
        .args(["--interval", interval, "--url", url])
        .env_remove("THREADBOX_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Follow `thread`'s events with `threads events --follow` until it is paused (within 30 s),
/// and return that event.
pub async fn follow_until_paused(dev: &DevServer, thread: &str) -> Value {
    use tokio::io::{AsyncBufReadExt, BufReader as AsyncBufReader};
    let mut follow = follow_events(&dev.url, thread, "200ms");
    let mut lines = AsyncBufReader::new(follow.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    loop {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("no pause within 30s; saw {seen:?}"))
            .unwrap()
            .expect("still following");
        let event: Value = serde_json::from_str(&line).unwrap();
        seen.push(format!("{} ({})", event["to"], event["cause"]));
        if event["to"] == "paused" {
            let _ = follow.kill().await;
            return event;
        }
    }
}

/// SIGTERM, then SIGKILL if it has not exited within ten seconds.
pub fn stop(child: &mut Child) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// A Python that can import `module`: the one `variable` names, or else the test script's
/// virtualenv `target/<venv>` (scripts/lib.sh installs the pinned packages there).
pub fn venv_python(variable: &str, venv: &str, module: &str) -> Option<PathBuf> {
    let from_env = std::env::var_os(variable).map(PathBuf::from);
    let venv = target_dir().join(venv).join("bin/python");
    from_env
        .or_else(|| venv.exists().then_some(venv))
        .filter(|python| {
            std::process::Command::new(python)
                .args(["-c", &format!("import {module}")])
                .status()
                .is_ok_and(|s| s.success())
        })
}

/// Where the workspace's build output goes (`target/`), for artefacts a person looks at.
pub fn target_dir() -> &'static Path {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR is <target>/tmp")
}
