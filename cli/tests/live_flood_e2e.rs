//! Floods of terminal frames over the live WebSocket, end to end (issue 28, finding 3): the real
//! `threadbox dev` (runc sandboxes) and one client that sends 5,000 and then 20,000
//! `pty_input` frames as fast as its socket takes them, at a terminal it opened.
//!
//! Before the fix each frame started a task that ran a command in the sandbox: 5,000 frames
//! added 213 MiB to the server and made another thread's requests take 3 s. Now the flooding
//! client gets its burst, then `too_many_frames` error frames, then a close; the server's
//! memory stays within a generous ceiling, and another thread's file reads keep answering
//! meanwhile. The test prints what it measured (RSS growth, the other thread's latency) for
//! the record. Needs root and runc, like `dev_e2e`.

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use support::live::{connect, next, send};
use support::{dev_missing, prerequisites_met, DevServer};
use tokio_tungstenite::tungstenite::Message;

/// How much the server may grow during one flood. Generous: a flood that is bounded costs a
/// few MiB; the unbounded one cost 213 MiB at 5,000 frames and 640 MiB at 20,000.
const RSS_CEILING_MIB: f64 = 96.0;
/// Long enough for anything that answers at all on a loaded two-core machine.
const ANSWERED_WITHIN: Duration = Duration::from_secs(30);

/// The server's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .expect("VmRSS in /proc/<pid>/status")
}

async fn token(dev: &DevServer, thread: &str) -> String {
    let minted = dev
        .post(
            "/v1/tokens",
            Some(json!({"threads": [thread], "exec": true})),
        )
        .await;
    minted["token"].as_str().unwrap().to_owned()
}

/// What one flood did and cost.
struct Flood {
    sent: usize,
    refused: usize,
    closed: Option<String>,
    rss_growth_mib: f64,
    other_latencies_ms: Vec<f64>,
}

/// Open a terminal on `thread` and send `frames` `pty_input` frames at it as fast as the
/// socket takes them, reading what comes back, while another thread's file is read over HTTP
/// every 100 ms and the server's RSS is sampled.
async fn flood(dev: &DevServer, thread: &str, frames: usize) -> Flood {
    let mut ws = connect(dev, &token(dev, thread).await).await;
    send(
        &mut ws,
        json!({"action": "pty", "request_id": "term", "thread_id": thread,
               "argv": ["cat"], "cols": 80, "rows": 24}),
    )
    .await;
    let attached = next(&mut ws, dev).await;
    assert_eq!(attached["type"], "pty_attached", "{attached}");
    let session = attached["session"].as_str().unwrap().to_owned();

    let pid = dev.pid();
    let baseline = rss_kib(pid);
    let peak = Arc::new(AtomicU64::new(baseline));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, done) = (peak.clone(), done.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(rss_kib(pid), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let other = {
        let (done, http, url) = (done.clone(), dev.http.clone(), dev.url.clone());
        tokio::spawn(async move {
            let mut latencies = Vec::new();
            while !done.load(Ordering::Relaxed) {
                let started = Instant::now();
                let answer = tokio::time::timeout(
                    ANSWERED_WITHIN,
                    http.get(format!(
                        "{url}/v1/threads/bystander/files/home/user/note.txt"
                    ))
                    .send(),
                )
                .await
                .expect("another thread's GET answered during the flood")
                .expect("another thread's GET reached the server");
                assert_eq!(answer.status(), 200);
                assert_eq!(answer.text().await.unwrap(), "still here\n");
                latencies.push(started.elapsed().as_secs_f64() * 1000.0);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            latencies
        })
    };

    let (mut sink, mut stream) = ws.split();
    let sender = tokio::spawn(async move {
        let mut sent = 0;
        for i in 0..frames {
            let frame = json!({"action": "pty_input", "request_id": format!("in{i}"),
                               "thread_id": "flooded", "session": session, "text": "x"});
            if sink
                .send(Message::Text(frame.to_string().into()))
                .await
                .is_err()
            {
                break;
            }
            sent += 1;
            // Let the reader in now and then: the server's refusals are read as they come,
            // not lost when the socket is reset under unread flood.
            if sent % 64 == 0 {
                tokio::task::yield_now().await;
            }
        }
        sent
    });
    let (mut refused, mut closed) = (0, None);
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        let Ok(message) = tokio::time::timeout(Duration::from_secs(10), stream.next()).await else {
            break;
        };
        match message {
            Some(Ok(Message::Text(text))) => {
                let frame: Value = serde_json::from_str(text.as_str()).unwrap();
                if frame["code"] == "too_many_frames" {
                    refused += 1;
                }
            }
            Some(Ok(Message::Close(frame))) => {
                closed = Some(frame.map_or_else(
                    || "no close frame".into(),
                    |f| format!("{} {}", u16::from(f.code), f.reason),
                ));
                break;
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                closed = Some(format!("socket ended: {e}"));
                break;
            }
            None => {
                closed = Some("socket ended".into());
                break;
            }
        }
    }
    let sent = sender.await.unwrap();
    // What the flood left queued finishes too; the other thread is watched through it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    done.store(true, Ordering::Relaxed);
    sampler.await.unwrap();
    let other_latencies_ms = other.await.unwrap();
    let growth = peak.load(Ordering::Relaxed).saturating_sub(baseline);
    Flood {
        sent,
        refused,
        closed,
        rss_growth_mib: growth as f64 / 1024.0,
        other_latencies_ms,
    }
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_frame_flood_is_refused_closed_and_leaves_other_threads_alone() {
    if !prerequisites_met(
        "a_terminal_frame_flood_is_refused_closed_and_leaves_other_threads_alone",
        &dev_missing(),
    ) {
        return;
    }
    let dev = DevServer::start(&[]).await;
    // The other thread: a sandbox with a file, read over HTTP throughout.
    let written = dev
        .http
        .put(format!(
            "{}/v1/threads/bystander/files/home/user/note.txt",
            dev.url
        ))
        .body("still here\n")
        .send()
        .await
        .unwrap();
    assert!(written.status().is_success(), "{}", written.status());

    for (floods_done, frames) in [5_000, 20_000].into_iter().enumerate() {
        let flood = flood(&dev, "flooded", frames).await;
        let latencies = &flood.other_latencies_ms;
        println!(
            "flood of {frames} pty_input frames: {} sent before the close, {} refused \
             (too_many_frames), closed: {:?}; server RSS grew {:.1} MiB; another thread's \
             GET: median {:.1} ms, max {:.1} ms over {} requests",
            flood.sent,
            flood.refused,
            flood.closed,
            flood.rss_growth_mib,
            median(latencies),
            latencies.iter().copied().fold(0.0, f64::max),
            latencies.len(),
        );
        // The client's socket was ended by the server: a close frame, or a reset when the
        // server let go with the flood still unread (which can also swallow the error frames
        // in flight to the client, so their count is printed, and the server's log is what
        // says for sure why it closed).
        let closed = flood.closed.expect("the flooding client was closed");
        assert!(
            closed.starts_with("1008") || closed.starts_with("socket ended"),
            "{closed}"
        );
        assert!(
            flood.refused > 0 || closed.starts_with("1008"),
            "{frames}: neither a too_many_frames error frame nor a close frame reached the \
             client ({closed})"
        );
        let closes = dev
            .stderr()
            .matches("kept sending past its limits; closing it")
            .count();
        assert!(
            closes > floods_done,
            "{frames}: the server did not say it closed the flood"
        );
        assert!(
            flood.rss_growth_mib < RSS_CEILING_MIB,
            "{frames}: the server grew {:.1} MiB (ceiling {RSS_CEILING_MIB})",
            flood.rss_growth_mib
        );
        assert!(!latencies.is_empty(), "the other thread was read");
    }
    // The flooded terminal still works for a connection that behaves.
    let mut ws = connect(&dev, &token(&dev, "flooded").await).await;
    let listed = dev.get("/v1/threads/flooded/processes").await;
    let session = listed["processes"][0]["id"].as_str().unwrap().to_owned();
    send(
        &mut ws,
        json!({"action": "pty", "request_id": "again", "thread_id": "flooded",
               "session": session, "after": 0}),
    )
    .await;
    assert_eq!(next(&mut ws, &dev).await["type"], "pty_attached");
}
