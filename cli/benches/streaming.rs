//! What an agent waits for: how soon output reaches it, and how many background processes a
//! sandbox holds. Through the real `threadbox dev` on runc sandboxes.
//!
//! 1. **First byte to client.** A command prints the wall-clock time (ns) once every 50 ms, 200
//!    times; the client takes `now - printed` as each line arrives. Same machine, same clock.
//!    Measured over `POST …/exec` with `Accept: text/event-stream` (SSE), over the WebSocket's
//!    `exec` frames, and over a background process's followed output (SSE), which is read from
//!    its log in the sandbox (polled every 50 ms). Medians and p99s, in one run.
//! 2. **Background processes per sandbox.** Processes (`sleep`) started one after another in one
//!    sandbox up to the per-sandbox cap, timing each start and a listing as the count grows:
//!    where it degrades and where the cap stops it.
//!
//! Run as root with runc: `cargo bench -p threadbox --bench streaming` (part of
//! `scripts/bench.sh`). `THREADBOX_STREAM_LINES` changes the lines per transport.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use support::{dev_missing, DevServer};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i128
}

fn lines_wanted() -> usize {
    std::env::var("THREADBOX_STREAM_LINES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
}

/// Prints `date +%s%N` every 50 ms, `n` times.
fn ticker(n: usize) -> String {
    format!("for i in $(seq {n}); do date +%s%N; sleep 0.05; done")
}

/// Latencies (ms) from each complete `<ns>\n` line found in `text`, as it arrives.
struct Lines {
    partial: String,
    latencies: Vec<f64>,
}

impl Lines {
    fn new() -> Self {
        Self {
            partial: String::new(),
            latencies: Vec::new(),
        }
    }

    fn push(&mut self, text: &str) {
        let arrived = now_ns();
        self.partial.push_str(text);
        while let Some(end) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=end).collect();
            if let Ok(printed) = line.trim().parse::<i128>() {
                self.latencies
                    .push((arrived - printed) as f64 / 1_000_000.0);
            }
        }
    }
}

fn report(name: &str, mut latencies: Vec<f64>) {
    latencies.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
    println!(
        "{name:<34} n={:<4} median {:>7.2} ms   p99 {:>7.2} ms   max {:>7.2} ms",
        latencies.len(),
        at(0.5),
        at(0.99),
        at(1.0)
    );
}

/// The `data:` payloads of SSE events named `event` in `buffer`, removing what was read.
fn sse_events(buffer: &mut String, event: &str) -> Vec<Value> {
    let mut found = Vec::new();
    while let Some(end) = buffer.find("\n\n") {
        let block: String = buffer.drain(..end + 2).collect();
        let mut name = "";
        let mut data = String::new();
        for line in block.lines() {
            if let Some(n) = line.strip_prefix("event:") {
                name = n.trim();
            } else if let Some(d) = line.strip_prefix("data:") {
                data.push_str(d.trim_start());
            }
        }
        if name == event {
            if let Ok(value) = serde_json::from_str(&data) {
                found.push(value);
            }
        }
    }
    found
}

async fn sse(dev: &DevServer, url: String, body: Option<Value>, event: &str) -> Vec<f64> {
    let request = match body {
        Some(body) => dev.http.post(url).json(&body),
        None => dev.http.get(url),
    };
    let mut response = request
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let (mut buffer, mut lines) = (String::new(), Lines::new());
    while let Some(chunk) = response.chunk().await.unwrap() {
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        for data in sse_events(&mut buffer, event) {
            if let Some(text) = data["text"].as_str() {
                lines.push(text);
            }
        }
    }
    lines.latencies
}

async fn websocket(dev: &DevServer, thread: &str, n: usize) -> Vec<f64> {
    let minted = dev
        .post(
            "/v1/tokens",
            Some(json!({"threads": [thread], "exec": true})),
        )
        .await;
    let addr = dev.url.trim_start_matches("http://");
    let stream = TcpStream::connect(addr).await.unwrap();
    let url = format!(
        "ws://{addr}/v1/ws?token={}",
        minted["token"].as_str().unwrap()
    );
    let (mut ws, _) = tokio_tungstenite::client_async(url, stream).await.unwrap();
    let frame =
        json!({"action": "exec", "request_id": "b1", "thread_id": thread, "cmd": ticker(n)});
    ws.send(Message::Text(frame.to_string().into()))
        .await
        .unwrap();
    let mut lines = Lines::new();
    while let Some(message) = ws.next().await {
        let Message::Text(text) = message.unwrap() else {
            continue;
        };
        let frame: Value = serde_json::from_str(text.as_str()).unwrap();
        match frame["type"].as_str() {
            Some("exec_output") => lines.push(frame["text"].as_str().unwrap_or_default()),
            Some("exec_exit") => break,
            Some("error") => panic!("{frame}"),
            _ => {}
        }
    }
    lines.latencies
}

async fn processes_per_sandbox(dev: &DevServer) {
    let thread = "bench-procs";
    dev.post(&format!("/v1/threads/{thread}/resolve"), None)
        .await;
    println!("background processes in one sandbox (each `sleep 600`):");
    let mut started = 0;
    for round in 0..5 {
        let mut starts = Vec::new();
        for _ in 0..8 {
            let begun = Instant::now();
            let response = dev
                .http
                .post(format!("{}/v1/threads/{thread}/processes", dev.url))
                .json(&json!({"cmd": "sleep 600"}))
                .send()
                .await
                .unwrap();
            if response.status() != 201 {
                let body: Value = response.json().await.unwrap();
                println!(
                    "  start #{} refused: {} ({})",
                    started + 1,
                    body["error"]["code"],
                    body["error"]["message"]
                );
                return stop_all(dev, thread).await;
            }
            starts.push(begun.elapsed().as_secs_f64() * 1000.0);
            started += 1;
        }
        let begun = Instant::now();
        let listed = dev.get(&format!("/v1/threads/{thread}/processes")).await;
        let list_ms = begun.elapsed().as_secs_f64() * 1000.0;
        starts.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!(
            "  {:>3} running: start median {:>6.1} ms (round {}), list {:>6.1} ms ({} listed)",
            started,
            starts[starts.len() / 2],
            round + 1,
            list_ms,
            listed["processes"].as_array().map_or(0, Vec::len)
        );
    }
    stop_all(dev, thread).await;
}

async fn stop_all(dev: &DevServer, thread: &str) {
    let listed = dev.get(&format!("/v1/threads/{thread}/processes")).await;
    for process in listed["processes"].as_array().into_iter().flatten() {
        let id = process["id"].as_str().unwrap();
        let _ = dev
            .http
            .delete(format!(
                "{}/v1/threads/{thread}/processes/{id}?signal=KILL",
                dev.url
            ))
            .send()
            .await;
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let missing = dev_missing();
    if !missing.is_empty() {
        eprintln!("streaming bench skipped: needs {}", missing.join(", "));
        return;
    }
    let n = lines_wanted();
    let dev = DevServer::start(&[]).await;
    let thread = "bench-stream";
    // Warm: the sandbox exists before anything is timed.
    dev.post(
        &format!("/v1/threads/{thread}/exec"),
        Some(json!({"cmd": "true"})),
    )
    .await;
    println!("first byte to client: a line printed every 50 ms, {n} lines per transport");
    let exec_url = format!("{}/v1/threads/{thread}/exec", dev.url);
    let over_sse = sse(&dev, exec_url, Some(json!({"cmd": ticker(n)})), "stdout").await;
    report("exec, SSE", over_sse);
    report("exec, WebSocket frames", websocket(&dev, thread, n).await);
    let process = dev
        .post(
            &format!("/v1/threads/{thread}/processes"),
            Some(json!({"cmd": format!("sleep 1; {}", ticker(n))})),
        )
        .await;
    let follow = format!(
        "{}/v1/threads/{thread}/processes/{}/output?after=0",
        dev.url,
        process["id"].as_str().unwrap()
    );
    // The first second's wait means every line is followed live, none read from the backlog.
    report(
        "background process, followed (SSE)",
        sse(&dev, follow, None, "output").await,
    );
    processes_per_sandbox(&dev).await;
}
