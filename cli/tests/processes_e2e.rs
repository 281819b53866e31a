//! Background processes end to end: the real `threadbox dev` on runc, driven over HTTP.
//!
//! A server started as a background process is reached from a second command, its output read
//! and followed (SSE); its hold keeps the idle pause away; the thread is paused and resumed with
//! the server still answering; it is stopped, and its start and end are events. A PTY session
//! types into `python3 -i`, is resized, and is read again from an earlier offset (re-attaching).
//!
//! Needs root and runc; skipped without them, or failed when `THREADBOX_REQUIRE_SANDBOXES` is set.

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{dev_missing, prerequisites_met, DevServer};

async fn send(
    dev: &DevServer,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = dev.http.request(method, format!("{}{path}", dev.url));
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Read a process's output from `after` until `wanted` shows up (or 30 s pass); all of it.
async fn output_until(dev: &DevServer, base: &str, after: u64, wanted: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let read = dev.get(&format!("{base}/output?after={after}")).await;
        let text = read["text"].as_str().unwrap_or_default().to_owned();
        if text.contains(wanted) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "never saw {wanted:?}; output so far: {text:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn status_of(dev: &DevServer, thread: &str) -> String {
    dev.get(&format!("/v1/threads/{thread}")).await["session"]["status"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_server_outlives_requests_pauses_and_resumes() {
    if !prerequisites_met(
        "a_background_server_outlives_requests_pauses_and_resumes",
        &dev_missing(),
    ) {
        return;
    }
    let dev = DevServer::start(&["--idle-pause", "3s"]).await;
    let thread = "procs";

    // A small HTTP server in the sandbox (loopback only: the sandbox has no network).
    let server = dev
        .post(
            &format!("/v1/threads/{thread}/processes"),
            Some(json!({
                "cmd": "echo starting; exec python3 -u -m http.server 8765 --bind 127.0.0.1",
                "idle_timeout_ms": 600_000,
            })),
        )
        .await;
    assert_eq!(server["state"], "running", "{server}");
    let id = server["id"].as_str().unwrap().to_owned();
    let base = format!("/v1/threads/{thread}/processes/{id}");
    output_until(&dev, &base, 0, "Serving HTTP").await;

    // Reached from a second command.
    let fetch = json!({
        "cmd": "python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:8765/').status)\""
    });
    let reached = dev
        .post(&format!("/v1/threads/{thread}/exec"), Some(fetch.clone()))
        .await;
    assert_eq!(reached["stdout"], "200\n", "{reached}");
    // Its log of that request is in its output.
    output_until(&dev, &base, 0, "\"GET / HTTP/1.1\" 200").await;

    // Followed as it happens: a request made while following shows up in the stream.
    let follow = dev
        .http
        .get(format!("{}{base}/output?after=0&timeout_ms=20000", dev.url))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(follow.status(), 200);
    let mut stream = follow;
    let again = dev
        .post(&format!("/v1/threads/{thread}/exec"), Some(fetch.clone()))
        .await;
    assert_eq!(again["stdout"], "200\n");
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen.matches("GET / HTTP/1.1").count() < 2 {
        assert!(
            Instant::now() < deadline,
            "the follow never showed the second request: {seen}"
        );
        let chunk = tokio::time::timeout(Duration::from_secs(20), stream.chunk())
            .await
            .expect("no event in time")
            .unwrap()
            .expect("the stream ended early");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(seen.contains("event: output"), "{seen}");
    drop(stream);

    // Its hold keeps the janitor's idle pause (3 s here) away.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(status_of(&dev, thread).await, "active");
    let listed = dev.get(&format!("/v1/threads/{thread}/processes")).await;
    assert_eq!(listed["processes"][0]["id"], id.as_str(), "{listed}");
    assert_eq!(listed["processes"][0]["state"], "running");

    // A pause asked for goes ahead and freezes it; resuming continues it, still answering.
    let paused = dev.post(&format!("/v1/threads/{thread}/pause"), None).await;
    assert_eq!(paused["status"], "paused", "{paused}");
    dev.post(&format!("/v1/threads/{thread}/resume"), None)
        .await;
    let reached = dev
        .post(&format!("/v1/threads/{thread}/exec"), Some(fetch))
        .await;
    assert_eq!(
        reached["stdout"], "200\n",
        "the server did not survive pause and resume: {reached}"
    );

    // Input to a process that reads it, and an unknown process is a 404.
    let (status, body) = send(
        &dev,
        reqwest::Method::POST,
        &format!("/v1/threads/{thread}/processes/nosuch1/input"),
        Some(json!({"text": "x"})),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("unknown_process")),
        "{body}"
    );
    let (status, body) = send(
        &dev,
        reqwest::Method::POST,
        &format!("/v1/threads/{thread}/processes"),
        Some(json!({"cmd": "true", "output_chunks": 0})),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let (status, _) = send(
        &dev,
        reqwest::Method::GET,
        &format!("/v1/threads/{thread}/processes/..%2f/output"),
        None,
    )
    .await;
    assert_eq!(status, 400);

    // Stopped: SIGTERM to its group; the end is recorded with its status, once.
    let (status, _) = send(&dev, reqwest::Method::DELETE, &base, None).await;
    assert_eq!(status, 202);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let listed = dev.get(&format!("/v1/threads/{thread}/processes")).await;
        if listed["processes"][0]["state"] == "exited" {
            assert_eq!(listed["processes"][0]["exit_code"], 143, "{listed}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still running after SIGTERM: {listed}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let events = dev
        .get(&format!("/v1/threads/{thread}/events?after_seq=0"))
        .await;
    let details: Vec<String> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cause"] == "process")
        .map(|e| e["detail"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(details.len(), 2, "{details:?}");
    assert!(
        details[0].contains(&format!("process {id} started")),
        "{details:?}"
    );
    assert!(details[1].contains("ended by signal 15"), "{details:?}");
    // With the process gone, its hold is too: the janitor pauses the quiet thread.
    let deadline = Instant::now() + Duration::from_secs(30);
    while status_of(&dev, thread).await != "paused" {
        assert!(
            Instant::now() < deadline,
            "the thread was never paused once idle"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pty_session_runs_python_interactively_and_can_be_reattached() {
    if !prerequisites_met(
        "a_pty_session_runs_python_interactively_and_can_be_reattached",
        &dev_missing(),
    ) {
        return;
    }
    let dev = DevServer::start(&[]).await;
    let thread = "pty";
    let session = dev
        .post(
            &format!("/v1/threads/{thread}/processes"),
            Some(json!({"argv": ["python3", "-i", "-q"], "pty": {"cols": 100, "rows": 30}})),
        )
        .await;
    assert_eq!(session["pty"], true, "{session}");
    let base = format!(
        "/v1/threads/{thread}/processes/{}",
        session["id"].as_str().unwrap()
    );
    output_until(&dev, &base, 0, ">>> ").await;
    let typed = json!({"text": "import os; print(6 * 7, os.get_terminal_size().columns)\n"});
    let (status, _) = send(
        &dev,
        reqwest::Method::POST,
        &format!("{base}/input"),
        Some(typed),
    )
    .await;
    assert_eq!(status, 204);
    let seen = output_until(&dev, &base, 0, "42 100").await;
    // A terminal echoes what is typed and ends lines with CR LF.
    assert!(seen.contains("print(6 * 7"), "{seen:?}");
    assert!(seen.contains("42 100\r\n"), "{seen:?}");

    let (status, _) = send(
        &dev,
        reqwest::Method::POST,
        &format!("{base}/resize"),
        Some(json!({"cols": 132, "rows": 40})),
    )
    .await;
    assert_eq!(status, 204);
    let mark = dev.get(&format!("{base}/output")).await["next"]
        .as_u64()
        .unwrap();
    send(
        &dev,
        reqwest::Method::POST,
        &format!("{base}/input"),
        Some(json!({"text": "print(os.get_terminal_size())\n"})),
    )
    .await;
    let after_resize = output_until(&dev, &base, mark, "columns=132, lines=40").await;
    assert!(
        !after_resize.contains("42 100"),
        "a read from an offset starts there"
    );

    // Re-attaching: a new reader asks from 0 and sees the whole session so far.
    let whole = dev.get(&format!("{base}/output?after=0")).await;
    let text = whole["text"].as_str().unwrap();
    assert!(
        text.contains("42 100") && text.contains("columns=132"),
        "{text:?}"
    );

    send(
        &dev,
        reqwest::Method::POST,
        &format!("{base}/input"),
        Some(json!({"text": "exit(3)\n"})),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let listed = dev.get(&format!("/v1/threads/{thread}/processes")).await;
        if listed["processes"][0]["state"] == "exited" {
            assert_eq!(listed["processes"][0]["exit_code"], 3, "{listed}");
            break;
        }
        assert!(Instant::now() < deadline, "python never exited: {listed}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Starting a process is using the thread, as a command is: it creates the sandbox of a thread
/// that has none. Every other process route only looks, so an unknown thread is a 404 there and
/// nothing is created (a mistyped id must not start a sandbox).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_starting_a_process_creates_a_sandbox() {
    if !prerequisites_met("only_starting_a_process_creates_a_sandbox", &dev_missing()) {
        return;
    }
    let dev = DevServer::start(&[]).await;
    for (method, path, body) in [
        (reqwest::Method::GET, "/v1/threads/never-a/processes", None),
        (
            reqwest::Method::GET,
            "/v1/threads/never-b/processes/abc123/output",
            None,
        ),
        (
            reqwest::Method::DELETE,
            "/v1/threads/never-c/processes/abc123",
            None,
        ),
        (
            reqwest::Method::POST,
            "/v1/threads/never-d/processes/abc123/input",
            Some(json!({"text": "x"})),
        ),
    ] {
        let (status, body) = send(&dev, method.clone(), path, body).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (404, Some("unknown_thread")),
            "{method} {path}: {body}"
        );
    }
    assert!(dev.containers().is_empty(), "{:?}", dev.containers());
    let (status, started) = send(
        &dev,
        reqwest::Method::POST,
        "/v1/threads/first-use/processes",
        Some(json!({"cmd": "sleep 30"})),
    )
    .await;
    assert_eq!(status, 201, "{started}");
    assert_eq!(status_of(&dev, "first-use").await, "active");
    assert_eq!(dev.containers().len(), 1);
}

/// One sandbox's tampered records stall no other thread. Thread `a-fifo` plants a FIFO as its
/// process record's `chunk` (which blocked every watcher pass for the list script's 30 s);
/// thread `b-busy` runs a process that prints every 0.5 s with a 10 s idle limit, while the
/// janitor pauses idle threads after 3 s. The busy thread stays active with its hold renewed,
/// its process's end is recorded by the watcher (nobody else looks), and the FIFO thread's own
/// listing answers at once, leaving out the damaged record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_fifo_stalls_no_other_threads_processes() {
    if !prerequisites_met(
        "a_planted_fifo_stalls_no_other_threads_processes",
        &dev_missing(),
    ) {
        return;
    }
    let dev = DevServer::start(&["--idle-pause", "3s"]).await;
    let fifo = dev
        .post(
            "/v1/threads/a-fifo/processes",
            Some(json!({"cmd": "exec sleep 600", "idle_timeout_ms": 600_000})),
        )
        .await;
    let fifo_id = fifo["id"].as_str().unwrap().to_owned();
    let planted = dev
        .post(
            "/v1/threads/a-fifo/exec",
            Some(json!({"cmd": format!(
                "cd ~/.threadbox/processes/{fifo_id} && rm chunk && mkfifo chunk && echo planted"
            )})),
        )
        .await;
    assert_eq!(planted["stdout"], "planted\n", "{planted}");

    let busy = dev
        .post(
            "/v1/threads/b-busy/processes",
            Some(json!({
                "cmd": "for i in $(seq 40); do echo $i; sleep 0.5; done",
                "idle_timeout_ms": 10_000,
            })),
        )
        .await;
    let busy_id = busy["id"].as_str().unwrap().to_owned();
    // For its 20 s, the busy thread is never paused: its hold is renewed as it prints.
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(18) {
        let thread = dev.get("/v1/threads/b-busy").await;
        assert_eq!(
            thread["session"]["status"], "active",
            "the busy thread was paused while its process printed: {thread}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // Its end is recorded by the watcher, within a bounded time.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let events = dev.get("/v1/threads/b-busy/events?after_seq=0").await;
        let ended = events["events"].as_array().unwrap().iter().any(|e| {
            e["cause"] == "process"
                && e["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains(&format!("process {busy_id} exited with status 0")))
        });
        if ended {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the end was never recorded: {events}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The FIFO thread's own listing answers promptly, without the damaged record.
    let listing = tokio::time::timeout(
        Duration::from_secs(15),
        send(
            &dev,
            reqwest::Method::GET,
            "/v1/threads/a-fifo/processes",
            None,
        ),
    )
    .await
    .expect("the listing answers without waiting on the FIFO");
    assert_eq!(listing.0, 200, "{}", listing.1);
    assert_eq!(listing.1["processes"], json!([]), "{}", listing.1);
}

/// A sandbox at its process limit stays under control through the API: its processes are
/// listed, read and killed (nothing new has to start in it for that), and a command, which
/// does need a new process, is refused as the thread's own limit (429, naming it), not 502.
/// Offsets past what a signed 64-bit number holds are refused on the host (400).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_pid_limit_processes_are_still_listed_read_and_killed() {
    if !prerequisites_met(
        "at_the_pid_limit_processes_are_still_listed_read_and_killed",
        &dev_missing(),
    ) {
        return;
    }
    let dev = DevServer::start(&[]).await;
    let thread = "full";
    let filler = threadbox_testing::FORK_FILLER;
    let started = dev
        .post(
            &format!("/v1/threads/{thread}/processes"),
            Some(json!({"argv": ["python3", "-c", filler]})),
        )
        .await;
    let id = started["id"].as_str().unwrap().to_owned();
    let base = format!("/v1/threads/{thread}/processes/{id}");
    output_until(&dev, &base, 0, "full after").await;

    let (status, listed) = send(
        &dev,
        reqwest::Method::GET,
        &format!("/v1/threads/{thread}/processes"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["processes"][0]["state"], "running", "{listed}");
    let (status, body) = send(
        &dev,
        reqwest::Method::POST,
        &format!("/v1/threads/{thread}/exec"),
        Some(json!({"cmd": "true"})),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (429, Some("too_many_processes_in_thread")),
        "{body}"
    );
    for after in ["9223372036854775808", "18446744073709551615"] {
        let (status, body) = send(
            &dev,
            reqwest::Method::GET,
            &format!("{base}/output?after={after}"),
            None,
        )
        .await;
        assert_eq!(status, 400, "after={after}: {body}");
    }
    let (status, body) = send(
        &dev,
        reqwest::Method::DELETE,
        &format!("{base}?signal=KILL"),
        None,
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let listed = dev.get(&format!("/v1/threads/{thread}/processes")).await;
        if listed["processes"][0]["state"] == "exited" {
            assert_eq!(listed["processes"][0]["exit_code"], 137, "{listed}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still running after KILL: {listed}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let again = dev
        .post(
            &format!("/v1/threads/{thread}/exec"),
            Some(json!({"cmd": "echo again"})),
        )
        .await;
    assert_eq!(again["stdout"], "again\n", "{again}");
}

/// A process's stderr is its own stream in threadbox's API too: the output page says which
/// bytes came from stderr and each followed `output` event names its stream, the text still
/// both streams in the order written. A body may ask for the sandbox's root (`"user": "root"`);
/// any other name is a 400 that runs nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stderr_is_tagged_and_a_body_may_run_as_root() {
    if !prerequisites_met(
        "stderr_is_tagged_and_a_body_may_run_as_root",
        &dev_missing(),
    ) {
        return;
    }
    let dev = DevServer::start(&[]).await;
    let thread = "streams";
    let started = dev
        .post(
            &format!("/v1/threads/{thread}/processes"),
            Some(json!({
                "cmd": "echo out; sleep 0.2; echo err >&2; sleep 0.2; id -u",
                "user": "root",
            })),
        )
        .await;
    let base = format!(
        "/v1/threads/{thread}/processes/{}",
        started["id"].as_str().unwrap()
    );
    output_until(&dev, &base, 0, "0\n").await;
    let page = dev.get(&format!("{base}/output?after=0")).await;
    assert_eq!(page["text"], "out\nerr\n0\n", "{page}");
    assert_eq!(page["stderr"], json!([[4, 8]]), "{page}");
    // A page of stdout only has no `stderr`, as before.
    let page = dev.get(&format!("{base}/output?after=8")).await;
    assert!(page.get("stderr").is_none(), "{page}");

    let follow = dev
        .http
        .get(format!("{}{base}/output?after=0&timeout_ms=10000", dev.url))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let outputs: Vec<Value> = follow
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter(|v| v.get("stream").is_some())
        .collect();
    let tagged: Vec<(String, String)> = outputs
        .iter()
        .map(|v| {
            (
                v["stream"].as_str().unwrap().into(),
                v["text"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        tagged,
        [
            ("stdout".to_owned(), "out\n".to_owned()),
            ("stderr".to_owned(), "err\n".to_owned()),
            ("stdout".to_owned(), "0\n".to_owned()),
        ],
        "{follow}"
    );

    // Exec takes the same field; the default is the user; another name is refused.
    let as_root = dev
        .post(
            &format!("/v1/threads/{thread}/exec"),
            Some(json!({"cmd": "id -u", "user": "root"})),
        )
        .await;
    assert_eq!(as_root["stdout"], "0\n", "{as_root}");
    let as_user = dev
        .post(
            &format!("/v1/threads/{thread}/exec"),
            Some(json!({"cmd": "id -u"})),
        )
        .await;
    assert_eq!(as_user["stdout"], "1000\n", "{as_user}");
    for path in ["exec", "processes"] {
        let (status, body) = send(
            &dev,
            reqwest::Method::POST,
            &format!("/v1/threads/{thread}/{path}"),
            Some(json!({"cmd": "touch ~/never", "user": "admin"})),
        )
        .await;
        assert_eq!(status, 400, "{path}: {body}");
        assert!(
            body["error"]["message"].as_str().unwrap().contains("admin"),
            "{body}"
        );
    }
    let never = dev
        .post(
            &format!("/v1/threads/{thread}/exec"),
            Some(json!({"cmd": "ls ~/never 2>&1 || echo absent"})),
        )
        .await;
    assert!(
        never["stdout"].as_str().unwrap().contains("absent"),
        "{never}"
    );
}
