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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_host_runs_commands_and_files_through_threadbox_mcp() {
    let mut missing = dev_missing();
    let python = mcp_python();
    if python.is_none() {
        missing.push("the MCP Python SDK (scripts/test.sh installs it)".to_owned());
    }
    if !prerequisites_met(
        "an_mcp_host_runs_commands_and_files_through_threadbox_mcp",
        &missing,
    ) {
        return;
    }
    let dev = DevServer::start(&[]).await;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.py");
    let out = tokio::process::Command::new(python.unwrap())
        .arg(script)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_threadbox"))
        .args(["mcp", "--thread", "agent", "--url", &dev.url])
        .env_remove("THREADBOX_API_KEY")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the MCP client failed:\n{stderr}");
    let seen: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{stderr}", String::from_utf8_lossy(&out.stdout)));

    assert_eq!(seen["server"], "threadbox");
    let tools = seen["tools"].as_object().unwrap();
    for tool in [
        "run_command",
        "read_file",
        "write_file",
        "list_dir",
        "stat",
        "make_dir",
        "glob",
        "grep",
        "remove",
        "pause",
        "resume",
        "status",
        "start_process",
        "list_processes",
        "read_process_output",
        "write_process_input",
        "stop_process",
    ] {
        assert!(tools.contains_key(tool), "{tool} missing: {tools:?}");
    }
    let run_params = tools["run_command"].as_array().unwrap();
    for param in ["argv", "command", "cwd", "env", "stdin", "timeout_seconds"] {
        assert!(run_params.contains(&Value::from(param)), "{run_params:?}");
    }

    let run = &seen["run"];
    assert_eq!(run["error"], false, "{run}");
    assert_eq!(run["result"]["exit_code"], 3, "{run}");
    assert_eq!(run["result"]["stdout"], "one\n");
    assert_eq!(run["result"]["stderr"], "two\n");
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
    let names: Vec<&str> = seen["list"]["result"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert_eq!(names, ["a.txt"]);

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

    let missing = &seen["missing"];
    assert_eq!(missing["error"], true);
    // What the API answers a GET of a path that is not there: 404, naming the path.
    assert_eq!(
        missing["result"]["error"]["code"], "file_not_found",
        "{missing}"
    );
    assert_eq!(missing["result"]["error"]["status"], 404, "{missing}");
    assert!(
        missing["result"]["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("/home/user/nope")),
        "{missing}"
    );
    assert_eq!(seen["both"]["error"], true);
    assert_eq!(seen["both"]["result"]["error"]["code"], "invalid_request");
    assert_eq!(seen["status"]["result"]["session"]["status"], "active");

    check_processes(&seen["processes"]);
}

/// A background process started, listed, read until ready, stopped with TERM (and seen ended);
/// another one written to; an unknown one a tool error with the API's code.
fn check_processes(seen: &Value) {
    let start = &seen["start"];
    assert_eq!(start["error"], false, "{start}");
    assert_eq!(start["result"]["state"], "running", "{start}");
    let id = start["result"]["id"].as_str().unwrap();
    let listed = seen["list"]["result"]["processes"].as_array().unwrap();
    assert!(
        listed
            .iter()
            .any(|p| p["id"] == id && p["state"] == "running"),
        "{}",
        seen["list"]
    );
    let read = &seen["read"];
    assert_eq!(read["text"], "ready\n", "{read}");
    assert_eq!(read["last"]["result"]["state"], "running", "{read}");
    assert_eq!(read["last"]["result"]["more"], false, "{read}");

    // stop_process waits for the end: TERM ends it with 128 + 15.
    let stop = &seen["stop"];
    assert_eq!(stop["error"], false, "{stop}");
    assert_eq!(stop["result"]["signal"], "TERM", "{stop}");
    assert_eq!(stop["result"]["state"], "exited", "{stop}");
    assert_eq!(stop["result"]["exit_code"], 143, "{stop}");
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

    assert_eq!(seen["input"]["error"], false, "{}", seen["input"]);
    assert_eq!(seen["input"]["result"]["written"], 6, "{}", seen["input"]);
    let echo = &seen["echo"];
    assert_eq!(echo["text"], "got hello\n", "{echo}");

    let unknown = &seen["unknown"];
    assert_eq!(unknown["error"], true, "{unknown}");
    assert_eq!(unknown["result"]["error"]["code"], "unknown_process");
    assert_eq!(unknown["result"]["error"]["status"], 404);
}
