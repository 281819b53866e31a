//! The tools' backend over the use cases, and the API's MCP endpoint driven in-process, over a
//! SQLite store and queue on a temporary file and the in-memory provider (which echoes the command
//! line it runs, so background processes, kept by scripts in a real sandbox, are driven end to end
//! by `cli/tests/mcp_*.rs` on runc; here, their tools' schemas and argument checks).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use serde_json::{json, Value};
use tower::ServiceExt;

use super::{ExecBody, ProcessBody, SandboxBackend, ThreadboxBackend, ToolFailure};
use threadbox_api::http::{router, ApiAuth};
use threadbox_core::ports::{ProcessSignal, MAX_INPUT_BYTES};
use threadbox_core::usecases::{Config, Threadbox};
use threadbox_sqlite::{QueueConfig, SqliteQueue, SqliteSessionStore};
use threadbox_testing::{InMemoryProvider, ManualClock};

const KEY: &str = "an-mcp-unit-test-key-0123456789abcdef";

fn threadbox(dir: &tempfile::TempDir) -> Threadbox {
    let path = dir.path().join("threadbox.db");
    let store = Arc::new(SqliteSessionStore::open(&path).unwrap());
    let queue = Arc::new(SqliteQueue::open(&path, "lifecycle", QueueConfig::default()).unwrap());
    let config = Config {
        settle_poll: Duration::from_millis(5),
        settle_wait: Duration::from_secs(20),
        ..Config::default()
    };
    let clock = Arc::new(ManualClock::default());
    Threadbox::new(store, InMemoryProvider::new(), queue, clock, config)
}

#[tokio::test]
async fn the_backend_runs_commands_and_files_with_the_apis_checks_and_codes() {
    let dir = tempfile::tempdir().unwrap();
    let backend = ThreadboxBackend::new(threadbox(&dir));
    let input = ExecBody {
        cmd: Some("echo hi".into()),
        ..ExecBody::default()
    };
    let ran = backend.exec("t1", input, None).await.unwrap();
    assert_eq!(ran.exit_code, Some(0));
    assert_eq!(ran.stdout, "echo hi");

    // The exec body's own checks, with the API's code and status.
    let both = ExecBody {
        cmd: Some("true".into()),
        argv: Some(vec!["true".into()]),
        ..ExecBody::default()
    };
    let refused = backend.exec("t1", both, None).await.unwrap_err();
    assert_eq!(
        (refused.code.as_str(), refused.status),
        ("invalid_request", Some(400))
    );
    let slow = ExecBody {
        cmd: Some("sleep 1".into()),
        timeout_ms: Some(3_600_000),
        ..ExecBody::default()
    };
    let refused = backend.exec("t1", slow, None).await.unwrap_err();
    assert_eq!(refused.code, "invalid_request", "{refused:?}");

    let size = backend
        .write_file("t1", "/home/user/a.txt", b"hello".to_vec())
        .await
        .unwrap();
    assert_eq!(size, 5);
    let read = backend.read_file("t1", "/home/user/a.txt", 1024).await;
    assert_eq!(read.unwrap().as_deref(), Some(&b"hello"[..]));
    // Over the limit: nothing, not a part.
    let read = backend.read_file("t1", "/home/user/a.txt", 4).await;
    assert_eq!(read.unwrap(), None);
    let entries = backend.list_dir("t1", "/home/user").await.unwrap();
    assert!(entries.iter().any(|e| e.name == "a.txt"), "{entries:?}");
    // A file that is not there: what the API answers, 404 naming it.
    let missing = backend
        .read_file("t1", "/home/user/nope.txt", 1024)
        .await
        .unwrap_err();
    assert_eq!(
        (missing.code.as_str(), missing.status),
        ("file_not_found", Some(404))
    );
    assert!(
        missing.message.contains("/home/user/nope.txt"),
        "{missing:?}"
    );

    let relative = backend.read_file("t1", "a.txt", 1024).await.unwrap_err();
    assert_eq!(
        (relative.code.as_str(), relative.status),
        ("invalid_path", Some(400))
    );
    let escape = backend
        .stat("t1", "/home/user/../../etc")
        .await
        .unwrap_err();
    assert_eq!(escape.code, "invalid_path");
    let glob = backend
        .glob("t1", "/home/user", "/etc/*")
        .await
        .unwrap_err();
    assert_eq!(glob.code, "invalid_query");
    let bad_thread = backend.status("not a thread id!").await.unwrap_err();
    assert_eq!(bad_thread.status, Some(400), "{bad_thread:?}");
    let unknown = backend.status("never-used").await.unwrap_err();
    assert_eq!(
        (unknown.code.as_str(), unknown.status),
        ("unknown_thread", Some(404))
    );

    let status = backend.status("t1").await.unwrap();
    assert_eq!(status["session"]["status"], "active", "{status}");
    assert!(status["session"]["idle_seconds"].is_u64(), "{status}");
    let paused = backend.pause("t1").await.unwrap();
    assert_eq!(paused["status"], "paused", "{paused}");
    backend.resume("t1").await.unwrap();
}

async fn post(router: &Router, key: Option<&str>, body: Value) -> (StatusCode, String, Value) {
    let request = mcp_request("t2", key)
        .body(Body::from(body.to_string()))
        .unwrap();
    let (status, kind, bytes) = answer(router, request).await;
    let json = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::from(String::from_utf8_lossy(&bytes).into_owned()));
    (status, kind, json)
}

/// A POST to `thread`'s endpoint with the headers an MCP client sends, and `key` if any.
fn mcp_request(thread: &str, key: Option<&str>) -> axum::http::request::Builder {
    let request = Request::post(format!("/v1/threads/{thread}/mcp"))
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18");
    match key {
        Some(key) => request.header(header::AUTHORIZATION, format!("Bearer {key}")),
        None => request,
    }
}

/// The router's answer to `request`: its status, content type and body.
async fn answer(router: &Router, request: Request<Body>) -> (StatusCode, String, Vec<u8>) {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let kind = response
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, kind, bytes.to_vec())
}

#[tokio::test]
async fn the_endpoint_answers_each_post_on_its_own_as_json_behind_the_api_keys() {
    let dir = tempfile::tempdir().unwrap();
    let tb = threadbox(&dir);
    let auth = ApiAuth::new([KEY]);
    let router = router(tb.clone(), auth.clone()).merge(super::routes(tb, auth));
    let init = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "unit", "version": "0"}},
    });
    let (status, _, _) = post(&router, None, init.clone()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, _) = post(
        &router,
        Some("a-wrong-key-of-enough-length-0123456789"),
        init.clone(),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let (status, kind, answer) = post(&router, Some(KEY), init).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert!(kind.starts_with("application/json"), "{kind}");
    assert_eq!(
        answer["result"]["serverInfo"]["name"], "threadbox",
        "{answer}"
    );

    // No session: a call stands on its own.
    let call = json!({
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "run_command", "arguments": {"command": "echo over http"}},
    });
    let (status, kind, answer) = post(&router, Some(KEY), call).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert!(kind.starts_with("application/json"), "{kind}");
    let result = &answer["result"];
    assert_eq!(result["isError"], false, "{answer}");
    assert_eq!(result["structuredContent"]["stdout"], "echo over http");

    let bad = json!({
        "jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "write_file", "arguments": {"path": "/home/user/x"}},
    });
    let (_, _, answer) = post(&router, Some(KEY), bad).await;
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    let text = answer["result"]["content"][0]["text"].as_str().unwrap();
    let error: Value = serde_json::from_str(text).unwrap();
    assert_eq!(error["error"]["code"], "invalid_request", "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("content"),
        "{error}"
    );
}

#[tokio::test]
async fn the_process_tools_check_their_arguments_as_the_apis_routes_do() {
    let dir = tempfile::tempdir().unwrap();
    let backend = ThreadboxBackend::new(threadbox(&dir));
    let code = |failure: ToolFailure| (failure.code, failure.status);
    let bad = |code: &str| (code.to_owned(), Some(400));

    let both = ProcessBody {
        cmd: Some("sleep 9".into()),
        argv: Some(vec!["sleep".into(), "9".into()]),
        ..ProcessBody::default()
    };
    let refused = backend.start_process("t3", both).await.unwrap_err();
    assert_eq!(code(refused), bad("invalid_request"));
    let too_short = ProcessBody {
        cmd: Some("sleep 9".into()),
        idle_timeout_ms: Some(10),
        ..ProcessBody::default()
    };
    let refused = backend.start_process("t3", too_short).await.unwrap_err();
    assert!(refused.message.contains("idle_timeout_ms"), "{refused:?}");
    assert_eq!(code(refused), bad("invalid_request"));
    let outside = ProcessBody {
        cmd: Some("ls".into()),
        cwd: Some("work/src".into()),
        ..ProcessBody::default()
    };
    let refused = backend.start_process("t3", outside).await.unwrap_err();
    assert_eq!(code(refused), bad("invalid_path"));

    let refused = backend
        .read_process_output("t3", "../x", 0, 10)
        .await
        .unwrap_err();
    assert_eq!(code(refused), bad("invalid_process_id"));
    let refused = backend
        .read_process_output("t3", "abc", 0, 0)
        .await
        .unwrap_err();
    assert_eq!(code(refused), bad("invalid_request"));
    let refused = backend
        .write_process_input("t3", "abc", vec![b'x'; MAX_INPUT_BYTES + 1])
        .await
        .unwrap_err();
    assert_eq!(code(refused), bad("invalid_request"));
    let refused = backend
        .signal_process("t3", "a b", ProcessSignal::Term)
        .await
        .unwrap_err();
    assert_eq!(code(refused), bad("invalid_process_id"));
    let refused = backend
        .list_processes("not a thread id!")
        .await
        .unwrap_err();
    assert_eq!(refused.status, Some(400), "{refused:?}");
}

#[tokio::test]
async fn the_endpoint_lists_the_process_tools_and_answers_bad_calls_as_tool_errors() {
    let dir = tempfile::tempdir().unwrap();
    let tb = threadbox(&dir);
    let auth = ApiAuth::new([KEY]);
    let router = router(tb.clone(), auth.clone()).merge(super::routes(tb, auth));
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    let (status, _, answer) = post(&router, Some(KEY), list).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let tools = answer["result"]["tools"].as_array().unwrap();
    let schema = |name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("no {name}: {answer}"))["inputSchema"]
            .clone()
    };
    let properties = |name: &str| {
        let mut keys: Vec<String> = schema(name)["properties"]
            .as_object()
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        keys.sort();
        keys
    };
    assert_eq!(
        properties("start_process"),
        [
            "argv",
            "as_root",
            "command",
            "cwd",
            "env",
            "idle_timeout_seconds"
        ]
    );
    assert_eq!(properties("list_processes"), Vec::<String>::new());
    assert_eq!(
        properties("read_process_output"),
        ["after", "max", "process_id"]
    );
    assert_eq!(properties("write_process_input"), ["process_id", "text"]);
    assert_eq!(properties("stop_process"), ["process_id", "signal"]);
    let signal = schema("stop_process").to_string();
    for name in ["TERM", "KILL", "INT", "HUP", "STOP", "CONT"] {
        assert!(signal.contains(&format!("\"{name}\"")), "{signal}");
    }

    let call = |id: u64, name: &str, arguments: Value| {
        json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        })
    };
    let error_of = |answer: &Value| -> Value {
        assert_eq!(answer["result"]["isError"], true, "{answer}");
        let text = answer["result"]["content"][0]["text"].as_str().unwrap();
        serde_json::from_str::<Value>(text).unwrap()["error"].clone()
    };
    let cases = [
        ("start_process", json!({}), "invalid_request"),
        (
            "start_process",
            json!({"command": "true", "argv": ["true"]}),
            "invalid_request",
        ),
        (
            "start_process",
            json!({"command": "true", "idle_timeout_seconds": 999_999}),
            "invalid_request",
        ),
        (
            "read_process_output",
            json!({"process_id": "abc", "max": 0}),
            "invalid_request",
        ),
        (
            "read_process_output",
            json!({"process_id": "../etc"}),
            "invalid_process_id",
        ),
        (
            "write_process_input",
            json!({"process_id": "abc"}),
            "invalid_request",
        ),
        (
            "stop_process",
            json!({"process_id": "abc", "signal": "USR1"}),
            "invalid_request",
        ),
        (
            "stop_process",
            json!({"process_id": "a/b"}),
            "invalid_process_id",
        ),
    ];
    for (id, (name, arguments, code)) in cases.into_iter().enumerate() {
        let shown = format!("{name} {arguments}");
        let (status, _, answer) =
            post(&router, Some(KEY), call(id as u64 + 2, name, arguments)).await;
        assert_eq!(status, StatusCode::OK, "{shown}: {answer}");
        let error = error_of(&answer);
        assert_eq!(error["code"], code, "{shown}: {error}");
    }
}

/// A raw body to the endpoint: status, content type and the JSON answer (`Null` if not JSON).
async fn post_raw(router: &Router, body: impl Into<Body>) -> (StatusCode, String, Value) {
    let request = mcp_request("t3", Some(KEY)).body(body.into()).unwrap();
    let (status, kind, bytes) = answer(router, request).await;
    (
        status,
        kind,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// The JSON-RPC error an answer carries: its code, and the id it names.
fn rpc_error_of(status: StatusCode, kind: &str, answer: &Value) -> (i64, Value) {
    assert!(kind.starts_with("application/json"), "{status} {kind}");
    assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
    assert!(answer["error"]["message"].is_string(), "{answer}");
    (
        answer["error"]["code"].as_i64().unwrap(),
        answer["id"].clone(),
    )
}

fn write_file_call(content: &str) -> String {
    json!({
        "jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "write_file",
                   "arguments": {"path": "/home/user/big.txt", "content": content}},
    })
    .to_string()
}

/// The endpoint takes the API's JSON limit, and answers what is not one JSON-RPC message with a
/// JSON-RPC error (−32700 parse error, −32600 invalid request), never the SDK's plain text.
#[tokio::test]
async fn bodies_past_the_apis_limit_or_not_one_message_get_json_rpc_errors() {
    use super::{INVALID_REQUEST, PARSE_ERROR};
    use threadbox_api::http::MAX_JSON_BODY;

    let dir = tempfile::tempdir().unwrap();
    let tb = threadbox(&dir);
    let auth = ApiAuth::new([KEY]);
    let router = router(tb.clone(), auth.clone()).merge(super::routes(tb, auth));

    // Just under the limit: the file is written.
    let fits = write_file_call(&"a".repeat(MAX_JSON_BODY - 200));
    assert!(fits.len() <= MAX_JSON_BODY);
    let (status, _, answer) = post_raw(&router, fits).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["result"]["isError"], false, "{answer}");

    // Past it: 413, whether the length is declared or the body just keeps coming.
    let over = write_file_call(&"a".repeat(MAX_JSON_BODY));
    let (status, kind, answer) = post_raw(&router, over.clone()).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{answer}");
    assert_eq!(
        rpc_error_of(status, &kind, &answer),
        (INVALID_REQUEST, Value::Null)
    );
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains(&MAX_JSON_BODY.to_string()), "{message}");
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = over
        .into_bytes()
        .chunks(64 * 1024)
        .map(|c| Ok(c.to_vec()))
        .collect();
    let streamed = Body::from_stream(futures::stream::iter(chunks));
    let (status, kind, answer) = post_raw(&router, streamed).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{answer}");
    assert_eq!(rpc_error_of(status, &kind, &answer).0, INVALID_REQUEST);

    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}{}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let dense = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"x":[{}0]}}}}"#,
        "0,".repeat(super::MAX_MESSAGE_VALUES)
    );
    for (what, body, code) in [
        (
            "malformed",
            r#"{"jsonrpc": "2.0", "id": 1,"#.to_owned(),
            PARSE_ERROR,
        ),
        ("not JSON", "hello".to_owned(), PARSE_ERROR),
        ("empty", String::new(), PARSE_ERROR),
        ("blank", " \n ".to_owned(), PARSE_ERROR),
        // Valid JSON, but deeper than any message goes, or denser.
        ("deeply nested", deep, INVALID_REQUEST),
        ("dense", dense, INVALID_REQUEST),
        (
            "a batch",
            json!([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]).to_string(),
            INVALID_REQUEST,
        ),
        ("a number", "42".to_owned(), INVALID_REQUEST),
        (
            "no jsonrpc",
            json!({"id": 1, "method": "ping"}).to_string(),
            INVALID_REQUEST,
        ),
    ] {
        let (status, kind, answer) = post_raw(&router, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{what}: {answer}");
        let (got, id) = rpc_error_of(status, &kind, &answer);
        assert_eq!(got, code, "{what}: {answer}");
        assert!(id.is_null() || id == 1, "{what}: {answer}");
    }

    // A message the SDK cannot read is an invalid request naming its id.
    let bad_params = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": "nope"});
    let (status, kind, answer) = post_raw(&router, bad_params.to_string()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(
        rpc_error_of(status, &kind, &answer),
        (INVALID_REQUEST, json!(7))
    );

    // And the endpoint still answers a good call after all that.
    let ping = json!({"jsonrpc": "2.0", "id": 8, "method": "ping"});
    let (status, _, answer) = post_raw(&router, ping.to_string()).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["id"], 8, "{answer}");
}
