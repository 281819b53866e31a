//! Slack fan-out benchmark: lifecycle events through the shared `Fanout` core to the Slack status
//! target, over the reqwest Web API client, into the Slack fake on 127.0.0.1. Prints figures;
//! asserts only that Slack ends with one status message per thread showing its last event.
//!
//! T threads (100) × E events (10: creating, active, then pause/resume rounds), so every thread
//! gets one `chat.postMessage` and E−1 `chat.update`s. Two runs:
//! - one event at a time, in order (one consumer, one FIFO group after another);
//! - eight threads at once, each thread's events in order (what the FIFO lifecycle queue allows:
//!   order within a thread, parallelism across threads).
//!
//! The dedupe records and status messages live in SQLite, as in `threadbox dev`; the fake answers
//! at once, so this measures threadbox's own cost per event plus one loopback HTTP call.
//!
//! Run: `cargo bench -p threadbox-slack --bench slack_fanout`
//! (`THREADBOX_BENCH_SLACK_THREADS` and `THREADBOX_BENCH_SLACK_EVENTS` change the sizes.)

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use threadbox_core::domain::{Cause, LifecycleEvent, Millis, Status, ThreadId};
use threadbox_core::fanout::Fanout;
use threadbox_core::ports::RecordOutcome;
use threadbox_slack::SlackStatusTarget;
use threadbox_slack_web::{BotToken, SlackClientConfig, SlackWebClient};
use threadbox_sqlite::{SqliteDedupe, SqliteSlackStatusStore};
use threadbox_testing::slack_fake::SlackFake;

const TOKEN: &str = "xoxb-bench-token";

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The states a thread goes through, in order: created, then pause and resume rounds.
fn state(n: usize) -> Status {
    match n {
        0 => Status::Creating,
        1 => Status::Active,
        n => [
            Status::Pausing,
            Status::Paused,
            Status::Resuming,
            Status::Active,
        ][(n - 2) % 4],
    }
}

fn events_of(run: &str, thread: usize, count: usize) -> Vec<LifecycleEvent> {
    let thread_id =
        ThreadId::parse(&format!("slack:T1:C{run}:1767225600.{thread:06}")).expect("thread id");
    (0..count)
        .map(|n| LifecycleEvent {
            event_id: format!("{run}-{thread}-{n}"),
            thread_id: thread_id.clone(),
            seq: n as u64 + 1,
            generation: 1,
            from: n.checked_sub(1).map(state),
            to: state(n),
            cause: Cause::User,
            at: Millis(1_767_225_600_000 + n as i64),
            sandbox_id: Some("rc-bench".into()),
            detail: None,
        })
        .collect()
}

struct Run {
    fake: SlackFake,
    fanout: Fanout,
    _dir: tempfile::TempDir,
}

async fn setup() -> Run {
    let fake = SlackFake::start(TOKEN).await;
    let config = SlackClientConfig::new(BotToken::new(TOKEN).unwrap())
        .with_api_url(&fake.api_url())
        .unwrap();
    let client = Arc::new(SlackWebClient::new(config).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fanout.db");
    let store = Arc::new(SqliteSlackStatusStore::open(&db).unwrap());
    let target = Arc::new(SlackStatusTarget::new(client, store));
    let fanout = Fanout::new(Arc::new(SqliteDedupe::open(&db).unwrap()), vec![target]);
    Run {
        fake,
        fanout,
        _dir: dir,
    }
}

/// Deliver every thread's events in order, `parallel` threads at a time; per-event latencies.
async fn deliver(run: &Run, threads: &[Vec<LifecycleEvent>], parallel: usize) -> Vec<Duration> {
    let per_thread: Vec<Vec<Duration>> = futures::stream::iter(threads)
        .map(|events| async move {
            let mut samples = Vec::with_capacity(events.len());
            for e in events {
                let started = Instant::now();
                let outcome = run.fanout.deliver(e).await;
                samples.push(started.elapsed());
                assert_eq!(outcome, RecordOutcome::Delivered, "{e:?}");
            }
            samples
        })
        .buffer_unordered(parallel)
        .collect()
        .await;
    per_thread.into_iter().flatten().collect()
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx].as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let thread_count = env_or("THREADBOX_BENCH_SLACK_THREADS", 100);
    let per_thread = env_or("THREADBOX_BENCH_SLACK_EVENTS", 10).max(2);
    println!();
    println!(
        "Slack fan-out: {thread_count} threads × {per_thread} events through Fanout → SlackStatusTarget → reqwest → Slack fake (loopback)"
    );
    println!(
        "{:<26} {:>10} {:>12} {:>12} {:>12}",
        "run", "events/s", "calls/s", "median ms", "p99 ms"
    );
    for (name, parallel) in [("in order, one at a time", 1), ("8 threads at once", 8)] {
        let run = setup().await;
        let tag = format!("P{parallel}");
        let threads: Vec<_> = (0..thread_count)
            .map(|t| events_of(&tag, t, per_thread))
            .collect();
        let started = Instant::now();
        let mut samples = deliver(&run, &threads, parallel).await;
        let wall = started.elapsed();
        samples.sort();

        let calls = run.fake.calls();
        let messages = run.fake.messages();
        assert_eq!(
            messages.len(),
            thread_count,
            "one status message per thread"
        );
        assert!(run.fake.rejections().is_empty());
        let last = state(per_thread - 1);
        let last_word = serde_json::to_value(last).unwrap();
        let last_word = last_word.as_str().unwrap();
        assert!(
            messages
                .iter()
                .all(|m| m.text.contains(&format!("*{last_word}"))),
            "every status message shows the thread's last state"
        );
        let events = samples.len() as f64;
        println!(
            "{:<26} {:>10.0} {:>12.0} {:>12.3} {:>12.3}",
            name,
            events / wall.as_secs_f64(),
            calls.len() as f64 / wall.as_secs_f64(),
            percentile(&samples, 0.5),
            percentile(&samples, 0.99)
        );
    }
}
