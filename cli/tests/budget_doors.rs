//! One exhausted budget, every way in: the real `threadbox dev` (runc sandboxes) with an API key
//! whose hourly create cap (or daily compute budget) is used up, then the same key tries to start
//! work in new threads through each entry point: HTTP exec, SSE exec, MCP over HTTP
//! (`run_command`, `write_file`, `start_process`), MCP on stdio (`threadbox mcp`), WebSocket
//! `exec` and `pty` frames (on a token the key minted), HTTP exec on a Slack thread's id, and a
//! Slack workspace over its own budget. Each must be refused with the same code, and no sandbox may be made.
//! Needs root and runc, like `dev_e2e`.

mod support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::live::{connect, next, send};
use support::{dev_missing, prerequisites_met, slack, DevServer};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const KEY: &str = "budget-doors-api-key-0123456789abcdef0123456789";
const SECRET: &str = "budget-doors-signing-secret";

async fn start(limit_flag: &str) -> DevServer {
    DevServer::start_with_env(&[limit_flag, "1"], &slack::sink_env(KEY, SECRET)).await
}

/// POST with the key; the status and the JSON answer (`Null` when it is not JSON).
async fn post(dev: &DevServer, path: &str, body: Value) -> (u16, Value) {
    let response = dev
        .http
        .post(format!("{}{path}", dev.url))
        .bearer_auth(KEY)
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {path}: {e}; stderr:\n{}", dev.stderr()));
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// What a door answered: the error code it refused with, or what it did instead.
fn code_of_api_error(status: u16, body: &Value) -> String {
    match body["error"]["code"].as_str() {
        Some(code) => code.to_owned(),
        None => format!("ran ({status}: {body})"),
    }
}

async fn http_exec(dev: &DevServer, thread: &str) -> String {
    let (status, body) = post(
        dev,
        &format!("/v1/threads/{thread}/exec"),
        json!({"cmd": "true"}),
    )
    .await;
    code_of_api_error(status, &body)
}

async fn sse_exec(dev: &DevServer, thread: &str) -> String {
    let response = dev
        .http
        .post(format!("{}/v1/threads/{thread}/exec", dev.url))
        .bearer_auth(KEY)
        .header("accept", "text/event-stream")
        .json(&json!({"cmd": "true"}))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    if let Ok(body) = serde_json::from_str::<Value>(&text) {
        return code_of_api_error(status, &body);
    }
    // The last event: `error` with the API's body, or `exit` when the command ran.
    let mut event = "";
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("event:") {
            event = name.trim();
        } else if let Some(data) = line.strip_prefix("data:") {
            if event == "error" {
                let body: Value = serde_json::from_str(data.trim()).unwrap();
                return body["code"]
                    .as_str()
                    .unwrap_or("error without code")
                    .to_owned();
            }
        }
    }
    format!("ran ({status}: {text})")
}

/// A tool call's answer, whichever way it came: the code in its error, or what it did.
fn code_of_tool_result(result: &Value) -> String {
    if result["isError"] == true {
        let text = result["content"][0]["text"].as_str().unwrap_or_default();
        let body: Value = serde_json::from_str(text).unwrap_or(Value::Null);
        return body["error"]["code"]
            .as_str()
            .map_or_else(|| format!("tool error {text}"), str::to_owned);
    }
    format!("ran ({result})")
}

/// The three MCP tools that can create a sandbox, with arguments that would.
fn mcp_calls() -> [(&'static str, Value); 3] {
    [
        ("run_command", json!({"command": "true"})),
        (
            "write_file",
            json!({"path": "/home/user/a.txt", "content": "x"}),
        ),
        ("start_process", json!({"command": "sleep 30"})),
    ]
}

async fn mcp_http(dev: &DevServer, thread: &str, tool: &str, arguments: &Value) -> String {
    let response = dev
        .http
        .post(format!("{}/v1/threads/{thread}/mcp", dev.url))
        .bearer_auth(KEY)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments},
        }))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    match serde_json::from_str::<Value>(&text) {
        Ok(answer) if answer["result"].is_object() => code_of_tool_result(&answer["result"]),
        _ => format!("no tool result ({status}: {text})"),
    }
}

/// `threadbox mcp` on stdio, driven as a host would: initialize, then one tool call per tool.
async fn mcp_stdio(dev: &DevServer, thread: &str) -> Vec<(String, String)> {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_threadbox"))
        .args(["mcp", "--thread", thread, "--url", &dev.url])
        .env("THREADBOX_API_KEY", KEY)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start threadbox mcp");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut write = async |message: Value| {
        stdin
            .write_all(format!("{message}\n").as_bytes())
            .await
            .unwrap();
    };
    write(json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "budget-doors", "version": "0"}},
    }))
    .await;
    let mut calls = Vec::new();
    for (i, (tool, arguments)) in mcp_calls().into_iter().enumerate() {
        calls.push((i as u64 + 1, tool));
        if i == 0 {
            write(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        }
        write(json!({
            "jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments},
        }))
        .await;
    }
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen.len() < calls.len() {
        let line = tokio::time::timeout_at(deadline.into(), lines.next_line())
            .await
            .expect("threadbox mcp answered every call in time")
            .unwrap()
            .expect("threadbox mcp kept its stdout open");
        let answer: Value = serde_json::from_str(&line).unwrap();
        if let Some(&(_, tool)) = calls.iter().find(|(id, _)| answer["id"] == *id) {
            let code = if answer["result"].is_object() {
                code_of_tool_result(&answer["result"])
            } else {
                format!("no tool result ({answer})")
            };
            seen.push((format!("MCP stdio {tool}"), code));
        }
    }
    seen
}

async fn ws_token(dev: &DevServer) -> String {
    let (status, minted) = post(dev, "/v1/tokens", json!({"threads": "*", "exec": true})).await;
    assert_eq!(status, 201, "{minted}");
    minted["token"].as_str().unwrap().to_owned()
}

/// An `exec` or `pty` frame's first answer: an error frame's code, or what came instead.
async fn ws_frame(dev: &DevServer, frame: Value) -> String {
    let mut socket = connect(dev, &ws_token(dev).await).await;
    send(&mut socket, frame).await;
    let answer = next(&mut socket, dev).await;
    match answer["type"].as_str() {
        Some("error") => answer["code"].as_str().unwrap_or_default().to_owned(),
        _ => format!("ran ({answer})"),
    }
}

/// Every door the key can knock on, each with a thread of its own that has no sandbox yet.
async fn every_door(dev: &DevServer) -> Vec<(String, String)> {
    let mut seen = vec![
        ("HTTP exec".to_owned(), http_exec(dev, "door-http").await),
        ("SSE exec".to_owned(), sse_exec(dev, "door-sse").await),
        // A key naming a Slack thread id is still that key's caller: it cannot step around
        // its own cap by charging a workspace that never asked.
        (
            "HTTP exec on a slack: id".to_owned(),
            http_exec(dev, "slack:TOTHER:C1:1.0").await,
        ),
    ];
    for (tool, arguments) in mcp_calls() {
        let thread = format!("door-mcp-{}", tool.replace('_', "-"));
        let code = mcp_http(dev, &thread, tool, &arguments).await;
        seen.push((format!("MCP HTTP {tool}"), code));
    }
    seen.extend(mcp_stdio(dev, "door-mcp-stdio").await);
    let exec = json!({"action": "exec", "request_id": "e1", "thread_id": "door-ws-exec",
                      "cmd": "true"});
    seen.push(("WS exec frame".to_owned(), ws_frame(dev, exec).await));
    let pty = json!({"action": "pty", "request_id": "p1", "thread_id": "door-ws-pty",
                     "cols": 80, "rows": 24});
    seen.push(("WS pty frame".to_owned(), ws_frame(dev, pty).await));
    seen
}

/// `threadbox slack send`: post a signed mention; returns the thread it landed in.
fn slack_send(dev: &DevServer, thread: &str, text: &str) -> String {
    slack::send(dev, SECRET, thread, text).1
}

/// Wait for a reply in a Slack thread's sink containing `want`; return its text.
async fn slack_reply(dev: &DevServer, thread: &str, want: &str) -> String {
    let query = [("thread_id", thread)];
    let what = format!("reply containing {want:?}");
    slack::wait_for_sink(
        dev,
        KEY,
        &query,
        Duration::from_secs(90),
        &what,
        |messages| {
            messages
                .iter()
                .filter_map(|m| m["text"].as_str())
                .find(|t| t.contains(want))
                .map(str::to_owned)
        },
    )
    .await
}

/// Every door refused with `code`, and no sandbox was made meanwhile.
fn assert_all_refused(dev: &DevServer, seen: &[(String, String)], code: &str, before: usize) {
    let wrong: Vec<_> = seen.iter().filter(|(_, got)| got != code).collect();
    assert!(
        wrong.is_empty(),
        "every door must refuse with {code}; these did not: {wrong:#?}\nall: {seen:#?}"
    );
    assert_eq!(
        dev.containers().len(),
        before,
        "no door may make a sandbox past the budget"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_create_cap_refuses_every_way_in_alike() {
    if !prerequisites_met(
        "an_exhausted_create_cap_refuses_every_way_in_alike",
        &dev_missing(),
    ) {
        return;
    }
    let dev = start("--scope-creates-per-hour").await;

    // The key's one create this hour, and the workspace's.
    let first = http_exec(&dev, "spent").await;
    assert!(first.starts_with("ran (200"), "{first}");
    let slack = slack_send(&dev, "slack:TCAP:C1", "```true```");
    slack_reply(&dev, &slack, "exited 0").await;
    let before = dev.containers().len();
    assert_eq!(before, 2);

    let mut seen = every_door(&dev).await;
    let refused = slack_send(&dev, "slack:TCAP:C2", "```true```");
    let reply = slack_reply(&dev, &refused, "Not run:").await;
    seen.push((
        "Slack message".to_owned(),
        if reply.contains("new sandboxes for this hour") {
            "create_budget_exceeded".to_owned()
        } else {
            reply
        },
    ));
    assert_all_refused(&dev, &seen, "create_budget_exceeded", before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_compute_budget_refuses_every_way_in_alike() {
    if !prerequisites_met(
        "an_exhausted_compute_budget_refuses_every_way_in_alike",
        &dev_missing(),
    ) {
        return;
    }
    // One vCPU-second a day for the key, and for the workspace.
    let dev = start("--scope-compute-budget").await;

    // A thread of the key's runs past it; its next call charges the key and is refused.
    http_exec(&dev, "spent").await;
    let slack = slack_send(&dev, "slack:TCMP:C1", "```true```");
    slack_reply(&dev, &slack, "exited 0").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(http_exec(&dev, "spent").await, "compute_budget_exceeded");
    slack_send(&dev, &slack, "```true```");
    slack_reply(&dev, &slack, "compute budget for today is used").await;
    let before = dev.containers().len();

    let mut seen = every_door(&dev).await;
    let refused = slack_send(&dev, "slack:TCMP:C2", "```true```");
    let reply = slack_reply(&dev, &refused, "Not run:").await;
    seen.push((
        "Slack message".to_owned(),
        if reply.contains("compute budget for today is used") {
            "compute_budget_exceeded".to_owned()
        } else {
            reply
        },
    ));
    assert_all_refused(&dev, &seen, "compute_budget_exceeded", before);
}
