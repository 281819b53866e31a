//! The local Lambda loop (docs/aws.md#the-local-lambda-loop), end to end: `cargo lambda watch`
//! (on 127.0.0.1) runs the real function binaries with the workspace's
//! `[workspace.metadata.lambda.env]`, against moto's server and runc; `cargo lambda invoke` sends
//! the event fixtures.
//!
//! 1. Create the local tables and queues (the names the metadata gives) in this run's moto.
//! 2. Build resolve-session and janitor as `cargo lambda watch` will run them, so the timed
//!    part below is not a compile.
//! 3. Start the watcher, pointed at this moto (the SDK's service-specific endpoints, which win
//!    over the metadata's `AWS_ENDPOINT_URL`), a runc state directory of its own, and timers of
//!    one and two seconds.
//! 4. Invoke resolve-session with the HTTP API fixture: 201 and a sandbox, a real runc container.
//! 5. Wait out the retention and invoke the janitor with the scheduled-event fixture: the sweep
//!    destroys the sandbox (so the test leaves no container behind) and reconciles.
//! 6. The lifecycle events reached the SQS queue through the outbox.
//!
//! A second test runs sandbox-api in both of its modes, as the template deploys it: buffered
//! (behind API Gateway) and streaming (behind a function URL, which `cargo lambda watch` serves
//! under `/lambda-url/<function>/`), each in a watcher of its own:
//!
//! 1. The buffered function answers an exec that asks to stream (the API Gateway fixture with
//!    `Accept: text/event-stream`) with 406 `stream_elsewhere` naming the streaming function's
//!    URL for the same request; nothing runs.
//! 2. The client sends it there: the command prints, then waits for a file the test writes
//!    through the same function URL (a second instance: the watcher runs two). The first output
//!    event must arrive before that write, so it arrived while the command was still running.
//! 3. A process on a terminal is followed the same way: its prompt arrives while it waits for
//!    input, the input is written, and its answer and end follow.
//! 4. The janitor destroys the sandbox, so the other test's janitor never sees it.
//!
//! The two tests share moto's tables and queues (`cargo lambda` lets the metadata's table names
//! win), so they take turns: a file lock in the target directory.
//!
//! The watcher's whole process group is stopped at the end, and any container left by a failure
//! is deleted. Skips without moto (`AWS_ENDPOINT_URL`), cargo-lambda or runc, unless CI requires
//! them (`THREADBOX_REQUIRE_AWS`, `THREADBOX_REQUIRE_LAMBDA`, `THREADBOX_REQUIRE_SANDBOXES`).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use threadbox_runc::{find_runc, host_can_run_sandboxes};
use threadbox_tests::aws::{aws_configured, sdk_config};
use threadbox_tests::lambda::fixtures_dir;
use threadbox_tests::lambda::local::LocalResources;

/// The resource prefix `[workspace.metadata.lambda.env]` names.
const LOCAL_PREFIX: &str = "threadbox-local";
/// The functions the first test runs.
const FUNCTIONS: [&str; 2] = ["resolve-session", "janitor"];
/// The API key `[workspace.metadata.lambda.env]` gives the functions.
const LOCAL_API_KEY: &str = "local-dev-key-0123456789abcdef0123456789";
/// The longest any one step of a test waits for the functions (a cold start included).
const STEP_LIMIT: Duration = Duration::from_secs(120);

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is inside the workspace")
        .to_path_buf()
}

/// `cargo` run from this test, with the variables cargo set for the test itself removed: build
/// scripts (ring's, for one) rerun when such a variable differs from the last build, so
/// inheriting them would make the watcher's `cargo run` rebuild what `build_functions` built.
fn cargo() -> Command {
    let mut command = Command::new("cargo");
    command.current_dir(workspace_root());
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        let set_for_tests = name == "OUT_DIR"
            || name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_MANIFEST_")
            || name.starts_with("CARGO_BIN_")
            || matches!(
                name,
                "CARGO_CRATE_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_TARGET_TMPDIR"
                    | "CARGO_RUSTC_CURRENT_DIR"
            );
        if set_for_tests {
            command.env_remove(name);
        }
    }
    command
}

fn required(var: &str) -> bool {
    std::env::var(var).as_deref() == Ok("1")
}

/// Whether the test can run here; panics when CI requires what is missing.
fn prerequisites() -> bool {
    if !aws_configured("the_local_lambda_loop_serves_http_and_the_schedule") {
        return false;
    }
    let lambda = cargo()
        .args(["lambda", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !lambda {
        assert!(
            !required("THREADBOX_REQUIRE_LAMBDA"),
            "THREADBOX_REQUIRE_LAMBDA=1 but `cargo lambda` is not installed (scripts/test.sh \
             installs it into target/lambda-venv)"
        );
        eprintln!("skipped: `cargo lambda` is not installed (pip install cargo-lambda)");
        return false;
    }
    if let Err(why) = host_can_run_sandboxes() {
        assert!(
            !required("THREADBOX_REQUIRE_SANDBOXES"),
            "THREADBOX_REQUIRE_SANDBOXES=1 but {why}"
        );
        eprintln!("skipped: {why}");
        return false;
    }
    true
}

/// `cargo lambda watch` and everything it started, stopped on drop; and the runc containers of
/// its state directory, deleted on drop if a failure left any.
struct Watcher {
    child: Child,
    port: u16,
    log: PathBuf,
    runc_state: tempfile::TempDir,
}

/// The loop tests' turn: both drive the same moto tables, and one's janitor would act on the
/// other's threads. Held until dropped; a lock file, so it holds across processes (nextest).
fn one_loop_at_a_time() -> std::fs::File {
    let path = workspace_root().join("target/lambda-local-loop.lock");
    let file = std::fs::File::create(&path).expect("the loop tests' lock file");
    file.lock().expect("take the loop tests' lock");
    file
}

impl Watcher {
    fn start(env: &[(String, String)]) -> Self {
        Self::start_with(env, &[])
    }

    /// [`Watcher::start`] with more `cargo lambda watch` arguments.
    fn start_with(env: &[(String, String)], args: &[&str]) -> Self {
        let port = {
            let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
            listener.local_addr().unwrap().port()
        };
        let runc_state = tempfile::Builder::new()
            .prefix("threadbox-lambda-loop-")
            .tempdir()
            .expect("a runc state directory");
        let log = workspace_root().join(format!("target/lambda-local-loop-{port}.log"));
        let log_file = std::fs::File::create(&log).expect("the watcher's log");
        let mut command = cargo();
        command
            .args(["lambda", "watch", "--ignore-changes"])
            .args(["--invoke-address", "127.0.0.1", "--invoke-port"])
            .arg(port.to_string())
            .args(args)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            // Its own process group, so stopping it stops the functions it spawned too.
            .process_group(0);
        let runc_dir = runc_state.path().display().to_string();
        for (name, value) in env
            .iter()
            .cloned()
            .chain([("THREADBOX_RUNC_STATE_DIR".to_owned(), runc_dir)])
        {
            command.arg("--env-var").arg(format!("{name}={value}"));
        }
        let child = command.spawn().expect("start cargo lambda watch");
        let watcher = Self {
            child,
            port,
            log,
            runc_state,
        };
        watcher.wait_until_listening(Duration::from_secs(60));
        watcher
    }

    fn wait_until_listening(&self, limit: Duration) {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let deadline = Instant::now() + limit;
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            assert!(
                Instant::now() < deadline,
                "cargo lambda watch did not listen on {addr} within {limit:?}; its log:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The base URL of `function`'s function URL, as the watcher serves it.
    fn function_url(&self, function: &str) -> String {
        format!("http://127.0.0.1:{}/lambda-url/{function}", self.port)
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `cargo lambda invoke <function> --data-file <fixture>`: the function's answer as JSON.
    fn invoke(&self, function: &str, fixture: &Path) -> Value {
        let output = cargo()
            .args(["lambda", "invoke", function, "--output-format", "json"])
            .args(["--invoke-address", "127.0.0.1", "--invoke-port"])
            .arg(self.port.to_string())
            .arg("--data-file")
            .arg(fixture)
            .output()
            .expect("run cargo lambda invoke");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "invoking {function} failed: {}{}\nthe watcher's log:\n{}",
            stdout,
            String::from_utf8_lossy(&output.stderr),
            self.log_text()
        );
        serde_json::from_str(&stdout).unwrap_or_else(|e| {
            panic!(
                "{function} answered with something that is not JSON ({e}): {stdout}\n\
                 the watcher's log:\n{}",
                self.log_text()
            )
        })
    }

    fn signal_group(&self, signal: &str) {
        let _ = Command::new("kill")
            .args([signal, "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.signal_group("-TERM");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        self.signal_group("-KILL");
        let _ = self.child.wait();
        // Containers a failed run left: runc keeps its state under <state dir>/runc.
        let runc = find_runc().unwrap_or_else(|| PathBuf::from("runc"));
        let root = self.runc_state.path().join("runc");
        let listed = Command::new(&runc)
            .arg("--root")
            .arg(&root)
            .args(["list", "-q"])
            .output();
        if let Ok(listed) = listed {
            for id in String::from_utf8_lossy(&listed.stdout).split_whitespace() {
                let _ = Command::new(&runc)
                    .arg("--root")
                    .arg(&root)
                    .args(["delete", "--force", id])
                    .status();
            }
        }
    }
}

/// Build the functions exactly as `cargo lambda watch` runs them (`cargo run --bin <name>` from
/// the workspace root: the same features, so the watcher finds them fresh).
fn build_functions(functions: &[&str]) {
    let started = Instant::now();
    let mut command = cargo();
    command.arg("build");
    for function in functions {
        command.args(["--bin", function]);
    }
    let status = command.status().expect("run cargo build");
    assert!(status.success(), "building {functions:?} failed");
    eprintln!("built {functions:?} in {:.1?}", started.elapsed());
}

/// The variables both tests give their watchers: this run's moto, and timers of one and two
/// seconds (the janitor acts only when a test invokes it).
fn loop_env() -> Vec<(String, String)> {
    let moto = std::env::var("AWS_ENDPOINT_URL").unwrap();
    [
        ("AWS_ENDPOINT_URL_DYNAMODB", moto.as_str()),
        ("AWS_ENDPOINT_URL_SQS", moto.as_str()),
        ("THREADBOX_IDLE_PAUSE_SECS", "1"),
        ("THREADBOX_RETENTION_SECS", "2"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_lambda_loop_serves_http_and_the_schedule() {
    if !prerequisites() {
        return;
    }
    let _turn = one_loop_at_a_time();
    let sdk = sdk_config().await;
    let resources = LocalResources::create(&sdk, LOCAL_PREFIX)
        .await
        .expect("create the local tables and queues");
    build_functions(&FUNCTIONS);

    let watcher = Watcher::start(&loop_env());

    let started = Instant::now();
    let answer = watcher.invoke(
        "resolve-session",
        &fixtures_dir().join("apigw-http-resolve.json"),
    );
    eprintln!("resolve-session answered in {:.1?}", started.elapsed());
    assert_eq!(answer["statusCode"], 201, "{answer}");
    let handle: Value = serde_json::from_str(answer["body"].as_str().unwrap()).unwrap();
    assert_eq!(handle["thread_id"], "slack:T0001:C0001:1700000000.000100");
    assert_eq!(handle["provider"], "runc");
    assert_eq!(handle["status"], "active");
    let sandbox_id = handle["sandbox_id"].as_str().unwrap().to_owned();
    assert!(
        watcher
            .runc_state
            .path()
            .join("sandboxes")
            .join(&sandbox_id)
            .exists(),
        "the sandbox is a runc bundle in the watcher's state directory"
    );

    // Past the retention of two seconds: the janitor destroys the sandbox.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let started = Instant::now();
    let report = watcher.invoke(
        "janitor",
        &fixtures_dir().join("eventbridge-scheduled.json"),
    );
    eprintln!("janitor answered in {:.1?}: {report}", started.elapsed());
    assert_eq!(report["destroyed"], 1, "{report}");
    assert_eq!(report["failures"], 0, "{report}");
    assert_eq!(report["completed"], true, "{report}");
    assert_eq!(report["reconciled"], true, "22:15 is a reconciling minute");

    // The outbox sent every lifecycle event to the queue the fanout function consumes.
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let received = sqs
            .receive_message()
            .queue_url(&resources.lifecycle.queue_url)
            .max_number_of_messages(10)
            .send()
            .await
            .unwrap()
            .messages
            .unwrap_or_default();
        if received.is_empty() && !seen.is_empty() {
            break;
        }
        for message in received {
            let event: Value = serde_json::from_str(message.body().unwrap()).unwrap();
            // The other loop test's thread may have left its events too.
            if event["thread_id"] == handle["thread_id"] {
                seen.push(event["to"].as_str().unwrap_or_default().to_owned());
            }
            sqs.delete_message()
                .queue_url(&resources.lifecycle.queue_url)
                .receipt_handle(message.receipt_handle().unwrap())
                .send()
                .await
                .unwrap();
        }
    }
    assert_eq!(
        seen,
        ["creating", "active", "deleting", "destroyed"],
        "the thread's lifecycle, in order"
    );
}

/// A streamed answer read as it comes: everything received so far, as text.
struct Streamed {
    response: reqwest::Response,
    text: String,
}

impl Streamed {
    /// Read until the text so far contains `needle`; false if the answer ended first.
    async fn read_until(&mut self, needle: &str) -> bool {
        while !self.text.contains(needle) {
            let chunk = tokio::time::timeout(STEP_LIMIT, self.response.chunk())
                .await
                .unwrap_or_else(|_| {
                    panic!("nothing more within {STEP_LIMIT:?}; so far:\n{}", self.text)
                })
                .expect("read the streamed answer");
            match chunk {
                Some(bytes) => self.text.push_str(&String::from_utf8_lossy(&bytes)),
                None => return false,
            }
        }
        true
    }

    /// Read to the end of the answer.
    async fn read_to_end(&mut self) {
        while self.read_until("\u{0}never sent\u{0}").await {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_function_streams_output_as_it_happens_and_the_buffered_one_points_to_it() {
    if !prerequisites() {
        return;
    }
    let _turn = one_loop_at_a_time();
    let sdk = sdk_config().await;
    LocalResources::create(&sdk, LOCAL_PREFIX)
        .await
        .expect("create the local tables and queues");
    build_functions(&["sandbox-api", "janitor"]);

    // As the template deploys them: the streaming function, two instances so that a second
    // request can run beside an open stream; and the buffered one, pointing at it.
    let mut stream_env = loop_env();
    stream_env.push(("THREADBOX_INVOKE_MODE".into(), "RESPONSE_STREAM".into()));
    let streaming = Watcher::start_with(&stream_env, &["--concurrency", "2"]);
    let stream_url = streaming.function_url("sandbox-api");
    let mut buffered_env = loop_env();
    buffered_env.push(("THREADBOX_STREAM_URL".into(), stream_url.clone()));
    let buffered = Watcher::start(&buffered_env);

    // 1. Through API Gateway's event, a streaming exec is a prompt 406 naming where to stream.
    let fixture = fixtures_dir().join("apigw-http-exec-stream.json");
    let event: Value = serde_json::from_str(&std::fs::read_to_string(&fixture).unwrap()).unwrap();
    let answer = buffered.invoke("sandbox-api", &fixture);
    assert_eq!(answer["statusCode"], 406, "{answer}");
    let refusal: Value = serde_json::from_str(answer["body"].as_str().unwrap()).unwrap();
    assert_eq!(refusal["error"]["code"], "stream_elsewhere", "{refusal}");
    let exec_url = refusal["error"]["stream_url"].as_str().unwrap().to_owned();
    assert_eq!(
        exec_url,
        format!("{stream_url}/v1/threads/agent-stream/exec")
    );
    let sandboxes = std::fs::read_dir(buffered.runc_state.path().join("sandboxes"))
        .map_or(0, |entries| entries.count());
    assert_eq!(sandboxes, 0, "the buffered function ran nothing");

    // 2. The same request at the stream URL: output as it happens.
    let client = reqwest::Client::new();
    let thread_url = format!("{stream_url}/v1/threads/agent-stream");
    let response = client
        .post(&exec_url)
        .bearer_auth(LOCAL_API_KEY)
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(event["body"].as_str().unwrap().to_owned())
        .send()
        .await
        .expect("send the exec to the stream URL");
    assert_eq!(response.status(), 200, "{}", streaming.log_text());
    assert_eq!(
        response.headers()["content-type"],
        "text/event-stream",
        "{:?}",
        response.headers()
    );
    let mut exec = Streamed {
        response,
        text: String::new(),
    };
    assert!(
        exec.read_until(r#""text":"first"#).await,
        "the stream ended without the first line: {}\n{}",
        exec.text,
        streaming.log_text()
    );
    // The command cannot end before the file below exists: what arrived, arrived live.
    assert!(!exec.text.contains("event: exit"), "{}", exec.text);
    assert!(!exec.text.contains("second"), "{}", exec.text);
    let release = client
        .put(format!("{thread_url}/files/home/user/release"))
        .bearer_auth(LOCAL_API_KEY)
        .header("content-type", "application/octet-stream")
        .body("go")
        .send()
        .await
        .expect("write the release file");
    assert_eq!(release.status(), 200, "{}", release.text().await.unwrap());
    exec.read_to_end().await;
    assert!(exec.text.contains(r#""text":"second"#), "{}", exec.text);
    assert!(
        exec.text.contains("event: exit") && exec.text.contains(r#""exit_code":0"#),
        "{}",
        exec.text
    );

    // 3. A terminal session followed the same way: the prompt while it waits, then the rest.
    let started = client
        .post(format!("{thread_url}/processes"))
        .bearer_auth(LOCAL_API_KEY)
        .json(&serde_json::json!({
            "cmd": "echo ready; read line; echo got $line",
            "pty": {"cols": 80, "rows": 24},
        }))
        .send()
        .await
        .expect("start the terminal process");
    assert_eq!(started.status(), 201);
    let process: Value = started.json().await.unwrap();
    let pid = process["id"].as_str().unwrap().to_owned();
    let response = client
        .get(format!("{thread_url}/processes/{pid}/output"))
        .bearer_auth(LOCAL_API_KEY)
        .header("accept", "text/event-stream")
        .send()
        .await
        .expect("follow the terminal's output");
    assert_eq!(response.status(), 200);
    let mut terminal = Streamed {
        response,
        text: String::new(),
    };
    assert!(terminal.read_until("ready").await, "{}", terminal.text);
    assert!(!terminal.text.contains("event: end"), "{}", terminal.text);
    let input = client
        .post(format!("{thread_url}/processes/{pid}/input"))
        .bearer_auth(LOCAL_API_KEY)
        .json(&serde_json::json!({"text": "hello\n"}))
        .send()
        .await
        .expect("type into the terminal");
    assert_eq!(input.status(), 204);
    terminal.read_to_end().await;
    assert!(terminal.text.contains("got hello"), "{}", terminal.text);
    assert!(terminal.text.contains("event: end"), "{}", terminal.text);

    // A request without the API key is refused here as through the API.
    let keyless = client
        .post(&exec_url)
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(r#"{"cmd": "echo nobody"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(keyless.status(), 401);

    // 4. Past the retention: the janitor destroys the sandbox.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let report = streaming.invoke(
        "janitor",
        &fixtures_dir().join("eventbridge-scheduled.json"),
    );
    assert_eq!(report["destroyed"], 1, "{report}");
    assert_eq!(report["failures"], 0, "{report}");
}
