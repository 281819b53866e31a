//! End to end through the real binary: `threadbox dev` on a free loopback port and a temporary
//! data directory, driven over HTTP, with real runc sandboxes. Needs root and runc (CI has both;
//! `scripts/test.sh` installs runc). Without root the test says so and does nothing.

mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};

/// A running `threadbox dev`; killed on drop if the test did not stop it.
struct Dev {
    child: Child,
    addr: String,
    stderr_path: PathBuf,
}

impl Dev {
    fn start(data_dir: &Path, stderr_path: &Path) -> Dev {
        let stderr = std::fs::File::create(stderr_path).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_threadbox"))
            .args([
                "dev",
                "--port",
                "0",
                "--janitor-interval",
                "1s",
                "--data-dir",
            ])
            .arg(data_dir)
            .env_remove("THREADBOX_API_KEYS")
            .env_remove("THREADBOX_PORT")
            .env_remove("THREADBOX_DATA_DIR")
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start threadbox dev");
        // The banner names the address (port 0 lets the OS pick a free one); keep draining
        // stdout afterwards so the child never blocks on a full pipe.
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(at) = line.find("http://127.0.0.1:") {
                    let addr = line[at + "http://".len()..]
                        .split_whitespace()
                        .next()
                        .unwrap()
                        .to_owned();
                    let _ = tx.send(addr);
                }
            }
        });
        let mut dev = Dev {
            child,
            addr: String::new(),
            stderr_path: stderr_path.to_owned(),
        };
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(addr) => dev.addr = addr,
            Err(_) => panic!("no address printed; stderr:\n{}", dev.stderr()),
        }
        dev
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    async fn wait_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok((200, _)) = self.try_call("GET", "/healthz", Vec::new(), false).await {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "/healthz never answered; stderr:\n{}",
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn wait_for_log(&self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.stderr().contains(needle) {
            assert!(
                Instant::now() < deadline,
                "no log line with {needle:?}; stderr:\n{}",
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn try_call(
        &self,
        method: &str,
        path: &str,
        body: Vec<u8>,
        json: bool,
    ) -> Result<(u16, Bytes), Box<dyn std::error::Error + Send + Sync>> {
        let stream = tokio::net::TcpStream::connect(&self.addr).await?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        let mut request = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", &self.addr);
        if json {
            request = request.header("content-type", "application/json");
        }
        let response = sender
            .send_request(request.body(Full::new(Bytes::from(body)))?)
            .await?;
        let status = response.status().as_u16();
        Ok((status, response.into_body().collect().await?.to_bytes()))
    }

    async fn call(&self, method: &str, path: &str, body: Vec<u8>, json: bool) -> (u16, Bytes) {
        self.try_call(method, path, body, json)
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}; stderr:\n{}", self.stderr()))
    }

    /// A JSON call expected to succeed with `status`.
    async fn json(&self, method: &str, path: &str, body: Option<Value>, status: u16) -> Value {
        let sent = body.map(|b| b.to_string().into_bytes());
        let is_json = sent.is_some();
        let (got, bytes) = self
            .call(method, path, sent.unwrap_or_default(), is_json)
            .await;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        assert_eq!(got, status, "{method} {path}: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method} {path}: {e}: {text}"))
    }

    fn terminate(&mut self) -> ExitStatus {
        let killed = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "threadbox dev did not exit within 10s of SIGTERM; stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
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

    fn ids(&self) -> Vec<String> {
        let out = Command::new("runc")
            .arg("--root")
            .arg(&self.root)
            .args(["list", "-q"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// Removes every container the test made, pass or fail.
impl Drop for Runc {
    fn drop(&mut self) {
        for id in self.ids() {
            let _ = Command::new("runc")
                .arg("--root")
                .arg(&self.root)
                .args(["delete", "-f", &id])
                .status();
        }
        // Each sandbox has mounts next to runc's state (its user namespace pin, its root tmpfs
        // and its home volume), which went with the containers behind the provider's back.
        if let Some(state) = self.root.parent() {
            support::unmount_all_under(state);
        }
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_serves_the_api_on_runc_and_stops_cleanly() {
    if !is_root() {
        assert!(
            std::env::var_os("THREADBOX_REQUIRE_SANDBOXES").is_none(),
            "THREADBOX_REQUIRE_SANDBOXES is set but this test is not running as root"
        );
        eprintln!("dev_serves_the_api_on_runc_and_stops_cleanly needs root for runc; not run");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let data_dir = tmp.path().join("data");
    let stderr_path = tmp.path().join("dev.stderr");
    let runc = Runc {
        root: data_dir.join("sandboxes").join("runc"),
    };

    let mut dev = Dev::start(&data_dir, &stderr_path);
    dev.wait_healthy().await;
    assert_eq!(
        dev.json("GET", "/healthz", None, 200).await,
        json!({ "ok": true })
    );

    let handle = dev
        .json("POST", "/v1/threads/e2e-1/resolve", None, 201)
        .await;
    assert_eq!(handle["status"], "active");
    assert_eq!(handle["provider"], "runc");
    let sandbox_id = handle["sandbox_id"].as_str().unwrap().to_owned();
    assert_eq!(runc.status(&sandbox_id).as_deref(), Some("running"));

    let result = dev
        .json(
            "POST",
            "/v1/threads/e2e-1/exec",
            Some(json!({ "cmd": "echo hello" })),
            200,
        )
        .await;
    assert_eq!(result["stdout"], "hello\n");
    assert_eq!(result["exit_code"], 0);
    assert_eq!(result["timed_out"], false);

    let written = dev
        .call(
            "PUT",
            "/v1/threads/e2e-1/files/home/user/notes.txt",
            b"kept across restarts\n".to_vec(),
            false,
        )
        .await;
    assert_eq!(written.0, 200, "{}", String::from_utf8_lossy(&written.1));
    let read = dev
        .call(
            "GET",
            "/v1/threads/e2e-1/files/home/user/notes.txt",
            Vec::new(),
            false,
        )
        .await;
    assert_eq!(read, (200, Bytes::from_static(b"kept across restarts\n")));

    let paused = dev.json("POST", "/v1/threads/e2e-1/pause", None, 200).await;
    assert_eq!(paused["status"], "paused");
    assert_eq!(runc.status(&sandbox_id).as_deref(), Some("paused"));
    let resumed = dev
        .json("POST", "/v1/threads/e2e-1/resume", None, 200)
        .await;
    assert_eq!(resumed["status"], "active");
    assert_eq!(resumed["resumed"], true);
    assert_eq!(runc.status(&sandbox_id).as_deref(), Some("running"));

    // The consumer logs every lifecycle event, in order per thread.
    dev.wait_for_log("lifecycle resuming -> active (user) thread_id=e2e-1 seq=6")
        .await;

    let status = dev.terminate();
    assert!(
        status.success(),
        "exit {status:?}; stderr:\n{}",
        dev.stderr()
    );
    // The thread is live, so its sandbox outlives the process, state and all.
    assert_eq!(runc.status(&sandbox_id).as_deref(), Some("running"));
    assert!(data_dir
        .join("sandboxes/sandboxes")
        .join(&sandbox_id)
        .is_dir());

    // A new start over the same data directory finds the sandbox and its files.
    let mut dev = Dev::start(&data_dir, &tmp.path().join("dev2.stderr"));
    dev.wait_healthy().await;
    let read = dev
        .call(
            "GET",
            "/v1/threads/e2e-1/files/home/user/notes.txt",
            Vec::new(),
            false,
        )
        .await;
    assert_eq!(read, (200, Bytes::from_static(b"kept across restarts\n")));
    let shown = dev.json("GET", "/v1/threads/e2e-1", None, 200).await;
    assert_eq!(shown["session"]["sandbox_id"], sandbox_id.as_str());
    assert_eq!(shown["session"]["generation"], 1);
    assert!(dev.terminate().success());
    // `runc` drops the container when this test ends.
}
