//! The MCP tests' side: the official MCP Python SDK's clients (`cli/tests/mcp/*.py`), run against
//! the real `threadbox dev`, print what they saw as one JSON object; the checks that read it the
//! same way over stdio (`threadbox mcp`) and over the API's HTTP endpoint.

use std::path::PathBuf;

use serde_json::Value;

use super::{dev_missing, prerequisites_met, venv_python};

/// Every tool the server offers, by name, sorted.
pub const TOOLS: [&str; 21] = [
    "checkpoint",
    "fork",
    "glob",
    "grep",
    "list_checkpoints",
    "list_dir",
    "list_processes",
    "make_dir",
    "pause",
    "read_file",
    "read_process_output",
    "remove",
    "restore",
    "resume",
    "run_command",
    "start_process",
    "stat",
    "status",
    "stop_process",
    "write_file",
    "write_process_input",
];

/// The Python with the MCP SDK: `THREADBOX_MCP_PYTHON`, or the test script's virtualenv.
fn mcp_python() -> Option<PathBuf> {
    venv_python("THREADBOX_MCP_PYTHON", "mcp-venv", "mcp")
}

/// The Python to run a client with, when the machine has what `test` needs (root, runc and the
/// SDK; see `prerequisites_met`).
pub fn mcp_prerequisites(test: &str) -> Option<PathBuf> {
    let mut missing = dev_missing();
    let python = mcp_python();
    if python.is_none() {
        missing.push("the MCP Python SDK (scripts/test.sh installs it)".to_owned());
    }
    prerequisites_met(test, &missing).then(|| python.unwrap())
}

/// Run `cli/tests/mcp/<client>` with `args` on `python`: what it saw, which it must print as
/// JSON after a clean exit.
pub async fn run_client(python: PathBuf, client: &str, args: &[&str]) -> Value {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp")
        .join(client);
    let out = tokio::process::Command::new(python)
        .arg(script)
        .args(args)
        .env_remove("THREADBOX_API_KEY")
        // The clients import `host.py` beside them: no `__pycache__` in the source tree.
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the MCP client failed:\n{stderr}");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{stderr}", String::from_utf8_lossy(&out.stdout)))
}

/// The server names itself, and `run_command` takes every parameter it documents: the tools,
/// by name.
pub fn tools(seen: &Value) -> &serde_json::Map<String, Value> {
    assert_eq!(seen["server"], "threadbox");
    let tools = seen["tools"].as_object().unwrap();
    let run_params = tools["run_command"].as_array().unwrap();
    for param in ["argv", "command", "cwd", "env", "stdin", "timeout_seconds"] {
        assert!(run_params.contains(&Value::from(param)), "{run_params:?}");
    }
    tools
}

/// `run_command` ran `echo one; echo two >&2; exit 3` (or the like): its result, not an error.
pub fn check_run(run: &Value) {
    assert_eq!(run["error"], false, "{run}");
    assert_eq!(run["result"]["exit_code"], 3, "{run}");
    assert_eq!(run["result"]["stdout"], "one\n");
    assert_eq!(run["result"]["stderr"], "two\n");
}

/// `list_dir` of the directory the client wrote `a.txt` in.
pub fn check_list(list: &Value) {
    let names: Vec<&str> = list["result"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert_eq!(names, ["a.txt"]);
}

/// A read of a path that is not there: a tool error with what the API answers a GET of it
/// (404 `file_not_found`, naming the path).
pub fn check_missing(missing: &Value) {
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
}

/// A background process started, listed, read until ready, stopped with `signal` (ending with
/// `exit_code`) and seen ended; an unknown one a tool error with the API's code. Its id.
pub fn check_processes<'a>(seen: &'a Value, signal: &str, exit_code: i32) -> &'a str {
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
    assert_eq!(stop["result"]["signal"], signal, "{stop}");
    assert_eq!(stop["result"]["state"], "exited", "{stop}");
    assert_eq!(stop["result"]["exit_code"], exit_code, "{stop}");
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
    id
}

/// The checkpoint tools' run (`host.py`'s `checkpoints`): a checkpoint taken and listed, the file
/// put back by restore with the sleeper named as stopped, a fork made once (then `thread_exists`),
/// and the API's codes for bad and unknown checkpoints and a label too long.
pub fn check_checkpoints(seen: &Value, fork_thread: &str) {
    let take = &seen["take"];
    assert_eq!(take["error"], false, "{take}");
    assert_eq!(take["result"]["label"], "before the edit", "{take}");
    assert_eq!(take["result"]["cause"], "user", "{take}");
    let id = take["result"]["id"].as_str().expect("an id");
    let listed = &seen["list"]["result"]["checkpoints"];
    assert!(
        listed
            .as_array()
            .is_some_and(|l| l.iter().any(|c| c["id"] == id)),
        "{}",
        seen["list"]
    );
    let restore = &seen["restore"];
    assert_eq!(restore["error"], false, "{restore}");
    assert!(
        restore["result"]["stopped"].as_array().is_some_and(|s| s
            .iter()
            .any(|p| p["command"].as_str().unwrap_or("").contains("sleep 1234"))),
        "{restore}"
    );
    assert_eq!(
        seen["read"]["result"]["text"], "before\n",
        "{}",
        seen["read"]
    );
    let fork = &seen["fork"];
    assert_eq!(fork["error"], false, "{fork}");
    assert_eq!(fork["result"]["thread_id"], fork_thread, "{fork}");
    for (case, code, status) in [
        ("fork_again", "thread_exists", 409),
        ("bad_id", "invalid_checkpoint_id", 400),
        ("unknown", "unknown_checkpoint", 404),
        ("bad_label", "invalid_request", 400),
    ] {
        let seen = &seen[case];
        assert_eq!(seen["error"], true, "{case}: {seen}");
        assert_eq!(seen["result"]["error"]["code"], code, "{case}: {seen}");
        assert_eq!(seen["result"]["error"]["status"], status, "{case}: {seen}");
    }
}
