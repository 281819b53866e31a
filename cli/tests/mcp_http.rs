//! The API's own MCP endpoint, `POST /v1/threads/{id}/mcp` (streamable HTTP, stateless), through
//! the official MCP Python SDK's streamable HTTP client against the real `threadbox dev` on runc
//! with API keys configured (`cli/tests/mcp/http_client.py`). Checks the tools and their input
//! schemas (the same as `threadbox mcp` on stdio), a command's result (no progress over stateless
//! HTTP: the output comes with the result), files written and read back, that bad arguments and
//! API failures are tool errors carrying the API's codes, that answers are plain JSON with no
//! session, and that a missing or wrong API key is refused with 401.
//!
//! Needs root and runc, and the SDK: `scripts/test.sh` installs it (`THREADBOX_MCP_PYTHON`).

mod support;

use serde_json::Value;
use support::{dev_missing, prerequisites_met, DevServer};

/// The Python with the MCP SDK: `THREADBOX_MCP_PYTHON`, or the test script's virtualenv.
fn mcp_python() -> Option<std::path::PathBuf> {
    let from_env = std::env::var_os("THREADBOX_MCP_PYTHON").map(std::path::PathBuf::from);
    let venv = support::target_dir().join("mcp-venv/bin/python");
    from_env
        .or_else(|| venv.exists().then_some(venv))
        .filter(|python| {
            std::process::Command::new(python)
                .args(["-c", "import mcp"])
                .status()
                .is_ok_and(|s| s.success())
        })
}

const KEY: &str = "mcp-http-test-key-0123456789abcdef0123";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_host_runs_commands_and_files_through_the_apis_mcp_endpoint() {
    let mut missing = dev_missing();
    let python = mcp_python();
    if python.is_none() {
        missing.push("the MCP Python SDK (scripts/test.sh installs it)".to_owned());
    }
    if !prerequisites_met(
        "an_mcp_host_runs_commands_and_files_through_the_apis_mcp_endpoint",
        &missing,
    ) {
        return;
    }
    let dev = DevServer::start_with_env(&[], &[("THREADBOX_API_KEYS", Some(KEY))]).await;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/http_client.py");
    let url = format!("{}/v1/threads/agent-http/mcp", dev.url);
    let out = tokio::process::Command::new(python.unwrap())
        .arg(script)
        .args([&url, KEY])
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the MCP client failed:\n{stderr}");
    let seen: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{stderr}", String::from_utf8_lossy(&out.stdout)));

    assert_eq!(seen["server"], "threadbox");
    let tools = seen["tools"].as_object().unwrap();
    let mut names: Vec<&str> = tools.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "glob",
            "grep",
            "list_dir",
            "list_processes",
            "make_dir",
            "pause",
            "read_file",
            "read_process_output",
            "remove",
            "resume",
            "run_command",
            "start_process",
            "stat",
            "status",
            "stop_process",
            "write_file",
            "write_process_input",
        ]
    );
    let run_params = tools["run_command"].as_array().unwrap();
    for param in ["argv", "command", "cwd", "env", "stdin", "timeout_seconds"] {
        assert!(run_params.contains(&Value::from(param)), "{run_params:?}");
    }

    let run = &seen["run"];
    assert_eq!(run["error"], false, "{run}");
    assert_eq!(run["result"]["exit_code"], 3, "{run}");
    assert_eq!(run["result"]["stdout"], "one\n");
    assert_eq!(run["result"]["stderr"], "two\n");
    // Stateless HTTP answers in one piece: no progress notifications.
    assert_eq!(run["progress"], serde_json::json!([]), "{run}");

    assert_eq!(seen["write"]["error"], false, "{}", seen["write"]);
    assert_eq!(seen["write"]["result"]["size"], 16);
    assert_eq!(seen["read"]["result"]["text"], "hello over http\n");
    let listed: Vec<&str> = seen["list"]["result"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert_eq!(listed, ["a.txt"]);

    // Arguments that do not fit the schema are tool errors the model can read.
    for case in ["bad_type", "unknown_field", "both"] {
        let seen = &seen[case];
        assert_eq!(seen["error"], true, "{case}: {seen}");
        assert_eq!(
            seen["result"]["error"]["code"], "invalid_request",
            "{case}: {seen}"
        );
    }
    // The API's own checks and codes, as its routes answer them.
    let relative = &seen["relative"];
    assert_eq!(relative["error"], true, "{relative}");
    assert_eq!(relative["result"]["error"]["code"], "invalid_path");
    assert_eq!(relative["result"]["error"]["status"], 400);
    let missing = &seen["missing"];
    assert_eq!(missing["error"], true, "{missing}");
    assert_eq!(missing["result"]["error"]["status"], 404, "{missing}");
    assert_eq!(
        missing["result"]["error"]["code"], "file_not_found",
        "{missing}"
    );
    assert!(
        missing["result"]["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("/home/user/nope")),
        "{missing}"
    );
    assert_eq!(seen["status"]["result"]["session"]["status"], "active");

    // Stateless and JSON: no session id, no event stream.
    let raw = &seen["raw_with_key"];
    assert_eq!(raw["status"], 200, "{raw}");
    assert!(
        raw["content_type"]
            .as_str()
            .unwrap()
            .starts_with("application/json"),
        "{raw}"
    );
    assert_eq!(raw["session_id"], Value::Null, "{raw}");
    // The same API keys as the rest of /v1.
    for case in ["raw_without_key", "raw_wrong_key"] {
        let raw = &seen[case];
        assert_eq!(raw["status"], 401, "{case}: {raw}");
        assert!(
            raw["body"].as_str().unwrap().contains("unauthorized"),
            "{case}: {raw}"
        );
    }

    check_processes(&seen["processes"]);
}

/// A background process started, listed, read until ready, killed (and seen ended); an unknown
/// one a tool error with the API's code.
fn check_processes(seen: &Value) {
    let start = &seen["start"];
    assert_eq!(start["error"], false, "{start}");
    let id = start["result"]["id"].as_str().unwrap();
    let listed = seen["list"]["result"]["processes"].as_array().unwrap();
    assert!(listed.iter().any(|p| p["id"] == id), "{}", seen["list"]);
    let read = &seen["read"];
    assert_eq!(read["text"], "ready\n", "{read}");
    assert_eq!(read["last"]["result"]["state"], "running", "{read}");
    let stop = &seen["stop"];
    assert_eq!(stop["error"], false, "{stop}");
    assert_eq!(stop["result"]["signal"], "KILL", "{stop}");
    assert_eq!(stop["result"]["state"], "exited", "{stop}");
    assert_eq!(stop["result"]["exit_code"], 137, "{stop}");
    let after = seen["list_after_stop"]["result"]["processes"]
        .as_array()
        .unwrap();
    assert!(
        after
            .iter()
            .any(|p| p["id"] == id && p["state"] == "exited"),
        "{}",
        seen["list_after_stop"]
    );
    let unknown = &seen["unknown"];
    assert_eq!(unknown["error"], true, "{unknown}");
    assert_eq!(unknown["result"]["error"]["code"], "unknown_process");
    assert_eq!(unknown["result"]["error"]["status"], 404);
}

/// POST `body` to the MCP endpoint with `Transfer-Encoding: chunked` (so the server cannot know
/// its size up front) over a plain socket, in 256 KiB chunks; the answer's status and body.
/// Sending stops early if the server answers and closes first.
async fn post_mcp_chunked(dev: &DevServer, thread: &str, body: &[u8]) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = dev.url.trim_start_matches("http://");
    let mut socket = tokio::net::TcpStream::connect(address).await.unwrap();
    let head = format!(
        "POST /v1/threads/{thread}/mcp HTTP/1.1\r\nHost: {address}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    for chunk in body.chunks(256 * 1024) {
        let frame = [format!("{:x}\r\n", chunk.len()).as_bytes(), chunk, b"\r\n"].concat();
        if socket.write_all(&frame).await.is_err() {
            break;
        }
    }
    let _ = socket.write_all(b"0\r\n\r\n").await;
    let mut answer = Vec::new();
    let _ = socket.read_to_end(&mut answer).await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {answer:?}"));
    (status, answer)
}

/// Eight 6 MiB MCP requests at once, their size not declared: each is refused with a JSON-RPC
/// error as soon as it passes the API's 1 MiB limit, and the server's memory stays near where it
/// was (it used to read and parse every one whole: about 410 MiB for one, 780–900 MiB for
/// eight). Then eight dense bodies under the limit (an array of half a million numbers, which
/// the SDK's parse would have made some 32 MiB of values each): refused by the check that walks
/// a body without keeping it, and the memory stays bounded again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_mcp_bodies_are_refused_without_the_server_holding_them() {
    if !prerequisites_met(
        "oversized_mcp_bodies_are_refused_without_the_server_holding_them",
        &dev_missing(),
    ) {
        return;
    }
    use support::transfer;

    let dev = DevServer::start(&[]).await;
    let pid = dev.pid();
    // The route is warm and the allocator has its arenas before the baseline is read.
    let (status, _) =
        post_mcp_chunked(&dev, "mem", br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).await;
    assert_eq!(status, 200);
    let baseline = transfer::rss(pid);

    let content = "a".repeat(6 * 1024 * 1024);
    let oversized = serde_json::json!({
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "write_file",
                   "arguments": {"path": "/home/user/big.txt", "content": content}},
    })
    .to_string();
    let threads: Vec<String> = (0..8).map(|i| format!("mem-{i}")).collect();
    let peak = transfer::PeakRss::start(pid);
    let answers = futures::future::join_all(
        threads
            .iter()
            .map(|thread| post_mcp_chunked(&dev, thread, oversized.as_bytes())),
    )
    .await;
    let oversized_peak = peak.stop();
    for (status, answer) in &answers {
        assert_eq!(*status, 413, "{answer}");
        assert!(answer.contains("\"code\":-32600"), "{answer}");
        assert!(answer.contains("1048576"), "{answer}");
    }
    let grew = oversized_peak.saturating_sub(baseline);
    println!(
        "eight 6 MiB MCP bodies at once: server RSS {} MiB → peak {} MiB (+{} MiB)",
        baseline >> 20,
        oversized_peak >> 20,
        grew >> 20
    );
    // Eight requests may each hold up to 1 MiB while they are read; 64 MiB is far above that
    // and far below the hundreds of MiB a whole read and parse took.
    assert!(grew < 64 << 20, "the server grew by {} MiB", grew >> 20);

    let dense = format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"stat","arguments":{{"path":"/home/user","x":[{}0]}}}}}}"#,
        "0,".repeat(520_000)
    );
    assert!(dense.len() < 1024 * 1024);
    let peak = transfer::PeakRss::start(pid);
    let answers = futures::future::join_all(
        threads
            .iter()
            .map(|thread| post_mcp_chunked(&dev, thread, dense.as_bytes())),
    )
    .await;
    let dense_peak = peak.stop();
    for (status, answer) in &answers {
        assert_eq!(*status, 400, "{answer}");
        assert!(answer.contains("\"code\":-32600"), "{answer}");
    }
    let grew = dense_peak.saturating_sub(baseline);
    println!(
        "eight dense 1 MiB MCP bodies at once: peak {} MiB (+{} MiB)",
        dense_peak >> 20,
        grew >> 20
    );
    assert!(grew < 64 << 20, "the server grew by {} MiB", grew >> 20);
}
