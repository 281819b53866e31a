//! Slack ack path benchmark: prints figures, asserts nothing about speed.
//!
//! The ingress must answer within Slack's 3-second deadline; everything it does before the 200
//! is timed here, whole and in parts, on the embedded SQLite file `threadbox dev` uses:
//! - the whole ack (`SlackIngress::handle`: signature, parse, dedupe claim, enqueue);
//! - a retried event (signature, parse, dedupe claim that finds the event: no enqueue);
//! - the signature check alone, the dedupe claim alone, the enqueue alone.
//!
//! Run: `cargo bench -p threadbox-slack --bench slack_ack`
//! (`THREADBOX_BENCH_ACKS` changes the number of events, 2,000 by default).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue};
use serde_json::json;
use threadbox_core::domain::Millis;
use threadbox_core::ports::{DedupeStore, DurableQueue, OutgoingMessage};
use threadbox_slack::signature::{SIGNATURE_HEADER, TIMESTAMP_HEADER};
use threadbox_slack::{Ack, SigningSecret, SlackIngress};
use threadbox_sqlite::{QueueConfig, SqliteDedupe, SqliteQueue};
use threadbox_testing::ManualClock;

const NOW: i64 = 1_767_225_600;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

fn report(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let ms = |d: Duration| format!("{:.3} ms", d.as_secs_f64() * 1000.0);
    println!(
        "{name:<34} n={:<6} median {:>10}  p99 {:>10}  max {:>10}",
        samples.len(),
        ms(percentile(&samples, 0.5)),
        ms(percentile(&samples, 0.99)),
        ms(*samples.last().unwrap())
    );
}

fn body(i: usize) -> String {
    json!({
        "type": "event_callback", "team_id": "T1", "api_app_id": "A1",
        "event_id": format!("Ev{i:08}"), "event_time": NOW,
        "event": {
            "type": "app_mention", "user": "U1", "channel": "C1",
            "text": "<@UAPP> ```python\nprint(sum(range(10)))\n```",
            "ts": format!("{NOW}.{i:06}"), "event_ts": format!("{NOW}.{i:06}")
        }
    })
    .to_string()
}

fn headers(secret: &SigningSecret, body: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(TIMESTAMP_HEADER, HeaderValue::from(NOW));
    headers.insert(
        SIGNATURE_HEADER,
        HeaderValue::from_str(&secret.sign(NOW, body.as_bytes())).unwrap(),
    );
    headers
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: usize = std::env::var("THREADBOX_BENCH_ACKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ack.db");
    let queue = Arc::new(SqliteQueue::open(&db, "work", QueueConfig::default()).unwrap());
    let dedupe: Arc<dyn DedupeStore> = Arc::new(SqliteDedupe::open(&db).unwrap());
    let secret = SigningSecret::new("bench-signing-secret").unwrap();
    let ingress = SlackIngress::new(
        Some(secret.clone()),
        dedupe.clone(),
        queue.clone(),
        Arc::new(ManualClock::new(Millis::from_secs(NOW))),
    );
    let requests: Vec<(HeaderMap, String)> = (0..n)
        .map(|i| {
            let body = body(i);
            (headers(&secret, &body), body)
        })
        .collect();
    println!("Slack ack path on SQLite ({n} events, {})", db.display());

    let mut acks = Vec::with_capacity(n);
    for (headers, body) in &requests {
        let started = Instant::now();
        let ack = ingress.handle(headers, body.as_bytes()).await.unwrap();
        acks.push(started.elapsed());
        assert!(matches!(ack, Ack::Accepted { .. }), "{ack:?}");
    }
    report("ack (verify+dedupe+enqueue)", acks);

    let mut retries = Vec::with_capacity(n);
    for (headers, body) in &requests {
        let started = Instant::now();
        let ack = ingress.handle(headers, body.as_bytes()).await.unwrap();
        retries.push(started.elapsed());
        assert_eq!(ack, Ack::Duplicate);
    }
    report("retried event (dropped)", retries);

    let mut signatures = Vec::with_capacity(n);
    for (headers, body) in &requests {
        let started = Instant::now();
        secret
            .verify(
                headers.get(TIMESTAMP_HEADER).map(|v| v.as_bytes()),
                headers.get(SIGNATURE_HEADER).map(|v| v.as_bytes()),
                body.as_bytes(),
                NOW,
            )
            .unwrap();
        signatures.push(started.elapsed());
    }
    report("signature check", signatures);

    let mut claims = Vec::with_capacity(n);
    for i in 0..n {
        let started = Instant::now();
        assert!(dedupe
            .claim(&format!("bench:{i}"), Duration::from_secs(3600))
            .await
            .unwrap());
        claims.push(started.elapsed());
    }
    report("dedupe claim", claims);

    let mut sends = Vec::with_capacity(n);
    for (i, (_, body)) in requests.iter().enumerate() {
        let message = OutgoingMessage {
            group_id: format!("slack:T1:C1:{NOW}.{i:06}"),
            dedup_id: format!("bench-send-{i}"),
            body: body.clone(),
        };
        let started = Instant::now();
        queue.send(std::slice::from_ref(&message)).await.unwrap();
        sends.push(started.elapsed());
    }
    report("enqueue", sends);
}
