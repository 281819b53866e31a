//! `threadbox mcp` through the official MCP Python SDK, as an agent host runs it: the SDK spawns
//! `threadbox mcp --thread agent` over stdio against the real `threadbox dev` on runc, lists the
//! tools and calls them (`cli/tests/mcp/client.py`). Checks the tools and their input schemas,
//! a command's result and its output as progress notifications, files written and read back,
//! background processes (started, listed, read, written to, stopped), and that failures are tool
//! errors carrying the API's codes.
//!
//! Needs root and runc, and the SDK: `scripts/test.sh` installs it (`THREADBOX_MCP_PYTHON`).

mod support;

use serde_json::Value;
use support::mcp::{self, check_list, check_missing, check_run, mcp_prerequisites, run_client};
use support::DevServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_host_runs_commands_and_files_through_threadbox_mcp() {
    let Some(python) =
        mcp_prerequisites("an_mcp_host_runs_commands_and_files_through_threadbox_mcp")
    else {
        return;
    };
    let dev = DevServer::start(&[]).await;
    let threadbox = env!("CARGO_BIN_EXE_threadbox");
    let args = [
        "--", threadbox, "mcp", "--thread", "agent", "--url", &dev.url,
    ];
    let seen = run_client(python, "client.py", &args).await;

    let tools = mcp::tools(&seen);
    for tool in mcp::TOOLS {
        assert!(tools.contains_key(tool), "{tool} missing: {tools:?}");
    }

    let run = &seen["run"];
    check_run(run);
    let progress: Vec<&str> = run["progress"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(progress, ["stdout: one\n", "stderr: two\n"], "{run}");

    assert_eq!(seen["write"]["error"], false, "{}", seen["write"]);
    assert_eq!(seen["write"]["result"]["size"], 15);
    assert_eq!(seen["read"]["result"]["text"], "hello from mcp\n");
    check_list(&seen["list"]);

    assert_eq!(seen["make_dir"]["error"], false, "{}", seen["make_dir"]);
    assert_eq!(
        seen["glob"]["result"]["paths"],
        serde_json::json!(["/home/user/src/deep/main.rs"]),
        "{}",
        seen["glob"]
    );
    let grep = &seen["grep"]["result"]["matches"][0];
    assert_eq!(
        grep["path"], "/home/user/src/deep/main.rs",
        "{}",
        seen["grep"]
    );
    assert_eq!(grep["line_number"], 1);
    assert_eq!(grep["line"], "fn main() {}");

    // A file over read_file's 1 MiB is refused, pointing at run_command, not returned.
    let big = &seen["big"];
    assert_eq!(big["error"], true, "{big}");
    assert!(
        big["result"]["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("run_command")),
        "{big}"
    );

    check_missing(&seen["missing"]);
    assert_eq!(seen["both"]["error"], true);
    assert_eq!(seen["both"]["result"]["error"]["code"], "invalid_request");
    assert_eq!(seen["status"]["result"]["session"]["status"], "active");

    check_processes(&seen["processes"]);
    mcp::check_checkpoints(&seen["checkpoints"], "agent-fork");
}

/// A background process started, listed, read until ready, stopped with TERM (and seen ended),
/// running while it ran; another one written to; an unknown one a tool error with the API's
/// code.
fn check_processes(seen: &Value) {
    // stop_process waits for the end: TERM ends it with 128 + 15.
    let id = mcp::check_processes(seen, "TERM", 143);
    assert_eq!(
        seen["start"]["result"]["state"], "running",
        "{}",
        seen["start"]
    );
    let listed = seen["list"]["result"]["processes"].as_array().unwrap();
    assert!(
        listed
            .iter()
            .any(|p| p["id"] == id && p["state"] == "running"),
        "{}",
        seen["list"]
    );
    let read = &seen["read"];
    assert_eq!(read["last"]["result"]["more"], false, "{read}");

    assert_eq!(seen["input"]["error"], false, "{}", seen["input"]);
    assert_eq!(seen["input"]["result"]["written"], 6, "{}", seen["input"]);
    let echo = &seen["echo"];
    assert_eq!(echo["text"], "got hello\n", "{echo}");
}
