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
use support::mcp::{self, check_list, check_missing, check_run, mcp_prerequisites, run_client};
use support::{dev_missing, prerequisites_met, DevServer};

const KEY: &str = "mcp-http-test-key-0123456789abcdef0123";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_host_runs_commands_and_files_through_the_apis_mcp_endpoint() {
    let Some(python) =
        mcp_prerequisites("an_mcp_host_runs_commands_and_files_through_the_apis_mcp_endpoint")
    else {
        return;
    };
    let dev = DevServer::start_with_env(&[], &[("THREADBOX_API_KEYS", Some(KEY))]).await;
    let url = format!("{}/v1/threads/agent-http/mcp", dev.url);
    let seen = run_client(python, "http_client.py", &[&url, KEY]).await;

    let tools = mcp::tools(&seen);
    let mut names: Vec<&str> = tools.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(names, mcp::TOOLS);

    let run = &seen["run"];
    check_run(run);
    // Stateless HTTP answers in one piece: no progress notifications.
    assert_eq!(run["progress"], serde_json::json!([]), "{run}");

    assert_eq!(seen["write"]["error"], false, "{}", seen["write"]);
    assert_eq!(seen["write"]["result"]["size"], 16);
    assert_eq!(seen["read"]["result"]["text"], "hello over http\n");
    check_list(&seen["list"]);

    // Arguments that do not fit the schema are tool errors the model can read.
    for case in ["bad_type", "unknown_field", "both"] {
        let seen = &seen[case];
        assert_eq!(seen["error"], true, "{case}: {seen}");
        assert_eq!(
            seen["result"]["error"]["code"], "invalid_request",
            "{case}: {seen}"
        );
    }
    // `as_root` runs a command as the sandbox's root; without it, as its user.
    assert_eq!(
        seen["as_root"]["result"]["stdout"], "0\n",
        "{}",
        seen["as_root"]
    );
    assert_eq!(
        seen["as_user"]["result"]["stdout"], "1000\n",
        "{}",
        seen["as_user"]
    );
    // The API's own checks and codes, as its routes answer them.
    let relative = &seen["relative"];
    assert_eq!(relative["error"], true, "{relative}");
    assert_eq!(relative["result"]["error"]["code"], "invalid_path");
    assert_eq!(relative["result"]["error"]["status"], 400);
    check_missing(&seen["missing"]);
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

    // A background process killed: it ends with 128 + 9.
    mcp::check_processes(&seen["processes"], "KILL", 137);
    mcp::check_checkpoints(&seen["checkpoints"], "agent-http-fork");
}

/// POST `body` to the MCP endpoint with `Transfer-Encoding: chunked` (so the server cannot know
/// its size up front), in 256 KiB chunks; the answer's status and body.
async fn post_mcp_chunked(dev: &DevServer, thread: &str, body: &[u8]) -> (u16, String) {
    support::transfer::send_chunked(
        &dev.url,
        &format!("POST /v1/threads/{thread}/mcp"),
        "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n",
        body.chunks(256 * 1024),
    )
    .await
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
