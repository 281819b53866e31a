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
