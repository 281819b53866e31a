//! E2B's official SDKs against threadbox's E2B API (`/e2b`), on the real `threadbox dev` with
//! runc sandboxes and API keys: each SDK's client (`cli/tests/e2b/`) sets only `E2B_API_URL`,
//! `E2B_SANDBOX_URL` and `E2B_API_KEY`, does what code written for E2B does, and prints what it
//! saw; the checks here read it, and threadbox's own API, which sees the threads made that way
//! as threads like any other.
//!
//! Needs root and runc, and the SDKs pinned in `scripts/lib.sh` (`ensure_e2b_sdks`, which
//! `scripts/test.sh` runs): the Python SDK's virtualenv (`THREADBOX_E2B_PYTHON`), the JS SDK's
//! node_modules (`THREADBOX_E2B_JS_DIR`).

mod support;

use std::path::{Path, PathBuf};

use serde_json::Value;
use support::{dev_missing, prerequisites_met, target_dir, venv_python, DevServer};

const KEY: &str = "e2b-sdk-test-key-0123456789abcdef0123456";

/// The folder whose node_modules holds the JS SDK: `THREADBOX_E2B_JS_DIR`, or the test
/// script's.
fn e2b_js_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("THREADBOX_E2B_JS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("e2b-js"));
    let node = support::find_program("node");
    (node.is_some() && dir.join("node_modules/e2b/package.json").exists()).then_some(dir)
}

/// Run `program script args...` and read the JSON it prints after a clean exit.
async fn run_client(program: &Path, script: &str, args: &[&str], env: &[(&str, &Path)]) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/e2b")
        .join(script);
    let mut command = tokio::process::Command::new(program);
    command
        .arg(path)
        .args(args)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        // Only what the clients set themselves: nothing of the developer's E2B settings.
        .env_remove("E2B_API_KEY")
        .env_remove("E2B_DOMAIN")
        .env_remove("E2B_ACCESS_TOKEN");
    for (name, value) in env {
        command.env(name, value);
    }
    let out = command.output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the SDK client failed ({}):\n{stderr}\nstdout:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
    let seen: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{stderr}", String::from_utf8_lossy(&out.stdout)));
    // What the client saw, for a failing check's reader (`--nocapture`).
    eprintln!("{script:?} saw: {seen:#}");
    seen
}

/// What the clients of both SDKs saw, checked the same way.
fn check_common(seen: &Value) {
    let meta = &seen["by_metadata"];
    assert_eq!(meta["id"], meta["again"], "one thread, one sandbox: {meta}");
    let burst = &seen["burst"];
    assert_eq!(burst["errors"], serde_json::json!([]), "{burst}");
    assert_eq!(burst["count"], 8, "{burst}");
    assert_eq!(burst["ids"].as_array().unwrap().len(), 1, "{burst}");

    let run = &seen["run"];
    assert_eq!(run["stdout"], "first\nsecond\n", "{run}");
    assert_eq!(run["exit_code"], 0, "{run}");
    let lines = run["lines"].as_array().unwrap();
    assert_eq!(lines.len(), 2, "{run}");
    let (first_at, second_at) = (lines[0][1].as_f64().unwrap(), lines[1][1].as_f64().unwrap());
    assert!(
        second_at - first_at > 1.0,
        "the first line arrived while the command ran, before the second: {run}"
    );
    let failing = &seen["failing"];
    assert_eq!(failing["raised"], true, "{failing}");
    assert_eq!(failing["exit_code"], 3, "{failing}");

    // stderr is its own stream, end to end: the result, the callbacks, a failure's error.
    let streams = &seen["streams"];
    assert_eq!(streams["stdout"], "out1\nout2\n", "{streams}");
    assert_eq!(streams["stderr"], "err1\nerr2\n", "{streams}");
    assert_eq!(streams["on_stdout"], "out1\nout2\n", "{streams}");
    assert_eq!(streams["on_stderr"], "err1\nerr2\n", "{streams}");
    assert_eq!(streams["failing"]["stdout"], "fine\n", "{streams}");
    assert_eq!(streams["failing"]["stderr"], "bad\n", "{streams}");
    // `user="root"` is the sandbox's root (it may chown); the default is its user.
    let users = &seen["users"];
    assert_eq!(users["default"], "1000", "{users}");
    assert_eq!(users["user"], "1000", "{users}");
    assert_eq!(users["root"], serde_json::json!(["0", "0"]), "{users}");
    assert_eq!(users["root_background"], "0", "{users}");

    let background = &seen["background"];
    let pid = &background["pid"];
    assert!(
        background["listed"].as_array().unwrap().contains(pid),
        "{background}"
    );
    assert_eq!(background["killed"], true, "{background}");
    assert!(
        !background["after"].as_array().unwrap().contains(pid),
        "{background}"
    );

    let files = &seen["files"];
    assert_eq!(files["exists"], true, "{files}");
    assert_eq!(files["exists_after_remove"], false, "{files}");
    let pause = &seen["pause"];
    assert_eq!(pause["paused"], true, "{pause}");
    assert_eq!(pause["state"], "paused", "{pause}");
    assert_eq!(pause["running"], true, "{pause}");

    let kill = &seen["kill"];
    assert_eq!(kill["first"], true, "{kill}");
    assert_eq!(kill["second"], false, "{kill}");
    assert_eq!(kill["info"], "not found", "{kill}");
    assert_eq!(kill["running"], false, "{kill}");
}

/// threadbox's own API lists the thread the SDK made, as any other.
async fn check_thread(dev: &DevServer, thread: &str) {
    let reply = dev
        .http
        .get(format!("{}/v1/threads/{thread}", dev.url))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200, "{thread}");
    let body: Value = reply.json().await.unwrap();
    assert_eq!(body["session"]["status"], "active", "{body}");
}

/// `client` (the SDK's Python, or the JS SDK's folder) when the machine has what `test` needs:
/// root, runc and the SDK, named `sdk`.
fn prerequisites(test: &str, client: Option<PathBuf>, sdk: &str) -> Option<PathBuf> {
    let mut missing = dev_missing();
    if client.is_none() {
        missing.push(format!("{sdk} (scripts/test.sh installs it)"));
    }
    prerequisites_met(test, &missing).then(|| client.unwrap())
}

/// `threadbox dev` with the test's API key.
async fn dev_with_key() -> DevServer {
    DevServer::start_with_env(&[], &[("THREADBOX_API_KEYS", Some(KEY))]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_gets_a_threads_sandbox_from_threadbox() {
    let Some(python) = prerequisites(
        "the_python_sdk_gets_a_threads_sandbox_from_threadbox",
        venv_python("THREADBOX_E2B_PYTHON", "e2b-venv", "e2b"),
        "the E2B Python SDK",
    ) else {
        return;
    };
    let dev = dev_with_key().await;
    let seen = run_client(&python, "sdk_python.py", &[&dev.url, KEY, "py"], &[]).await;
    check_common(&seen);

    // The polled watcher: each ask answers what changed since the last.
    let watch = &seen["watch"];
    assert_eq!(
        watch["first"],
        serde_json::json!([["a.txt", "create"], ["sub/b.txt", "create"]]),
        "{watch}"
    );
    assert_eq!(
        watch["second"],
        serde_json::json!([["a.txt", "write"], ["sub/b.txt", "remove"]]),
        "{watch}"
    );
    assert_eq!(watch["quiet"], 0, "{watch}");

    let by_key = &seen["by_key"];
    assert_eq!(by_key["id"], by_key["again"], "{by_key}");
    let files = &seen["files"];
    assert_eq!(files["read"], "hello from python\n", "{files}");
    assert_eq!(
        files["list"],
        serde_json::json!(["hello.txt", "sub", "three.txt"]),
        "{files}"
    );
    assert_eq!(files["made"], true, "{files}");
    assert_eq!(files["made_again"], false, "{files}");
    let pause = &seen["pause"];
    assert_eq!(
        pause["connected_id"], by_key["id"],
        "the same id after resume: {pause}"
    );
    assert_eq!(pause["read_after"], "hello from python\n", "{pause}");
    // Listed by its metadata: the key's thread (the metadata thread was killed after).
    let listed = seen["list"].as_array().unwrap();
    assert!(listed.contains(&by_key["id"]), "{listed:?}");
    assert_eq!(seen["wrong_key"], "AuthenticationException");
    assert_eq!(seen["big_stdin"], "200000", "stdin past 64 KiB in one send");
    assert_eq!(
        seen["stream_input"],
        serde_json::json!({"status": 200, "stdout": "HELLO WORLD"}),
        "StreamInput's messages reach the process in order"
    );
    let gzip = seen["gzip_upload"].as_str().unwrap();
    assert!(gzip.contains("gzip=False"), "{gzip}");
    let cap = &seen["process_cap"];
    assert_eq!(cap["started"], 32, "{cap}");
    let refusal = cap["refusal"].as_str().unwrap();
    assert!(
        refusal.contains("too_many_processes_in_thread") || refusal.contains("32"),
        "{cap}"
    );
    assert_eq!(
        seen["follows_after_disconnect"],
        serde_json::json!([]),
        "a disconnected stream's follow ends with it"
    );
    assert_eq!(
        seen["big_download"], 110_000_000,
        "a file past 100 MiB downloads"
    );
    // Links out of /home/user and /tmp, `..` and paths elsewhere: refused, never read.
    for (link, refusal) in seen["escapes"].as_object().unwrap() {
        let refusal = refusal.as_str().unwrap();
        assert!(
            refusal.ends_with("Exception") && !refusal.starts_with("read"),
            "{link}: {refusal}"
        );
    }

    assert_eq!(seen["envs"], "hi there\n");
    // threadbox's own API shows the default environment's names, not its values.
    let reply = dev
        .http
        .get(format!("{}/v1/threads/py-envs", dev.url))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    let body: Value = reply.json().await.unwrap();
    assert_eq!(body["session"]["env"]["GREETING"], "<redacted>", "{body}");
    check_thread(&dev, "py-agent").await;
    check_thread(&dev, "py-burst").await;
    let intruder = dev
        .http
        .get(format!("{}/v1/threads/py-intruder", dev.url))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(intruder.status(), 404, "a refused key made nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_js_sdk_gets_a_threads_sandbox_from_threadbox() {
    let Some(dir) = prerequisites(
        "the_js_sdk_gets_a_threads_sandbox_from_threadbox",
        e2b_js_dir(),
        "node and the E2B JS SDK",
    ) else {
        return;
    };
    let node = support::find_program("node").unwrap();
    let dev = dev_with_key().await;
    let modules = dir.join("node_modules");
    let seen = run_client(
        &node,
        "sdk_js.cjs",
        &[&dev.url, KEY, "js"],
        &[("NODE_PATH", &modules)],
    )
    .await;
    check_common(&seen);
    // The streamed watch: each change as it happened.
    assert_eq!(
        seen["watch"],
        serde_json::json!([["a.txt", "create"], ["a.txt", "write"], ["a.txt", "remove"]]),
        "{}",
        seen["watch"]
    );
    let files = &seen["files"];
    assert_eq!(files["read"], "hello from js\n", "{files}");
    assert_eq!(
        files["list"],
        serde_json::json!(["hello.txt", "sub", "three.txt"]),
        "{files}"
    );
    let pause = &seen["pause"];
    assert_eq!(pause["connected_id"], seen["by_metadata"]["id"], "{pause}");
    assert_eq!(pause["read_after"], "hello from js\n", "{pause}");
    let listed = seen["list"].as_array().unwrap();
    assert!(listed.contains(&seen["by_metadata"]["id"]), "{listed:?}");
    assert_eq!(seen["wrong_key"], "AuthenticationError");
    check_thread(&dev, "js-agent").await;
    check_thread(&dev, "js-burst").await;
}

/// The calls the OpenAI Agents SDK's E2B sandbox client makes (`cli/tests/e2b/sdk_agents.py`
/// names the source it follows), on the async Python SDK.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_agents_sdks_e2b_calls_work_on_threadbox() {
    let Some(python) = prerequisites(
        "the_openai_agents_sdks_e2b_calls_work_on_threadbox",
        venv_python("THREADBOX_E2B_PYTHON", "e2b-venv", "e2b"),
        "the E2B Python SDK",
    ) else {
        return;
    };
    let dev = dev_with_key().await;
    let seen = run_client(&python, "sdk_agents.py", &[&dev.url, KEY, "agents"], &[]).await;
    let exec = &seen["exec"];
    assert_eq!(
        exec["stdout"], "write a haiku\n1\n",
        "cwd and envs apply: {exec}"
    );
    assert_eq!(exec["exit_code"], 0, "{exec}");
    assert_eq!(seen["read"], "write a haiku\n");
    let pty = &seen["pty"];
    assert!(
        pty["output"].as_str().unwrap().contains("from-the-pty-2"),
        "the terminal ran the input with its envs: {pty}"
    );
    assert_eq!(pty["exit_code"], 0, "{pty}");
    assert_eq!(
        seen["tar"]["restored"], "write a haiku\n",
        "{}",
        seen["tar"]
    );
    let resume = &seen["resume"];
    assert_eq!(resume["id"], seen["created"], "{resume}");
    assert_eq!(resume["running"], true, "{resume}");
    assert_eq!(resume["read"], "write a haiku\n", "{resume}");
    assert_eq!(seen["killed"], true);
    assert_eq!(seen["running_after_kill"], false);
}
