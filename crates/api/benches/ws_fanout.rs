//! WebSocket fan-out benchmark: prints figures; asserts only that every frame arrived, once.
//!
//! - live: S subscribers (100) on one thread, E events (1,000) through the `Subscribers` target
//!   with the in-process sender and the SQLite subscription store: events/s and frames/s, timed
//!   from the first delivery to the last frame read by the subscribers' reader tasks;
//! - the same through `Fanout` (the durable per-target dedupe on SQLite): the path
//!   `threadbox dev` runs;
//! - replay: S subscribers each subscribing with `after_seq: 0` to a thread with ~E events in its
//!   log (one compare-and-set per event per subscriber).
//!
//! Run: `cargo bench -p threadbox-api --bench ws_fanout`
//! (`THREADBOX_BENCH_SUBSCRIBERS` and `THREADBOX_BENCH_EVENTS` change the sizes.)

use std::sync::Arc;
use std::time::{Duration, Instant};

use threadbox_api::live::{InProcessSender, LiveGateway, Subscribers, TokenKey, TokenSecret};
use threadbox_core::domain::{Cause, LifecycleEvent, Millis, Status, ThreadId, ThreadScope};
use threadbox_core::fanout::Fanout;
use threadbox_core::ports::{Clock, Frame, RecordOutcome};
use threadbox_core::usecases::Threadbox;
use threadbox_sqlite::{
    QueueConfig, SqliteDedupe, SqliteQueue, SqliteSessionStore, SqliteSubscriptionStore,
};
use threadbox_testing::lifecycle_conformance::test_config;
use threadbox_testing::{InMemoryProvider, ManualClock};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Setup {
    store: Arc<SqliteSessionStore>,
    subscribers: Arc<Subscribers>,
    gateway: LiveGateway,
    sender: Arc<InProcessSender>,
    clock: Arc<ManualClock>,
    key: TokenKey,
    path: std::path::PathBuf,
}

fn setup(dir: &std::path::Path, name: &str, buffer: usize) -> Setup {
    let path = dir.join(format!("{name}.db"));
    let store = Arc::new(SqliteSessionStore::open(&path).unwrap());
    let subscriptions = Arc::new(SqliteSubscriptionStore::open(&path).unwrap());
    let sender = Arc::new(InProcessSender::with_buffer(buffer));
    let clock = Arc::new(ManualClock::default());
    let subscribers = Arc::new(Subscribers::new(
        subscriptions,
        sender.clone(),
        store.clone(),
        clock.clone(),
    ));
    let key = TokenKey::new(TokenSecret::new("ws-fanout-bench-secret-0123456789abcdef").unwrap());
    Setup {
        gateway: LiveGateway::new(subscribers.clone(), key.clone()),
        store,
        subscribers,
        sender,
        clock,
        key,
        path,
    }
}

/// Connect `count` subscribers; returns their reader tasks, each
/// counting event frames until it has `expect` and reporting when the last one arrived.
async fn subscribe_all(
    s: &Setup,
    count: usize,
    expect: usize,
) -> Vec<JoinHandle<(usize, Instant)>> {
    let token = s
        .key
        .mint(ThreadScope::Any, Duration::from_secs(3600), s.clock.now())
        .unwrap()
        .token;
    let mut readers = Vec::with_capacity(count);
    for i in 0..count {
        let id = format!("conn-{i:04}");
        let frames = s.sender.register(&id);
        s.gateway.connect(&id, Some(&token)).await.unwrap();
        readers.push(tokio::spawn(read_events(frames, expect)));
    }
    readers
}

/// Subscribe every connection (from `after_seq` 0); returns when all replays are done.
async fn send_subscribes(s: &Setup, thread: &str, count: usize) {
    let message = format!(r#"{{"action":"subscribe","thread_id":"{thread}","after_seq":0}}"#);
    let tasks: Vec<_> = (0..count)
        .map(|i| {
            let gateway = s.gateway.clone();
            let message = message.clone();
            tokio::spawn(async move {
                gateway
                    .message(&format!("conn-{i:04}"), &message)
                    .await
                    .unwrap()
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

async fn read_events(mut frames: mpsc::Receiver<Frame>, expect: usize) -> (usize, Instant) {
    let mut events = 0;
    let mut last_seq = 0;
    let mut at = Instant::now();
    while events < expect {
        let Some(frame) = frames.recv().await else {
            break;
        };
        // Cheap check that avoids parsing every frame: events carry `"seq":N`.
        if frame.starts_with(r#"{"type":"event""#) {
            let seq: u64 = frame
                .split(r#""seq":"#)
                .nth(1)
                .and_then(|rest| rest.split(',').next())
                .and_then(|n| n.parse().ok())
                .unwrap();
            assert!(
                seq > last_seq,
                "seq {seq} after {last_seq}: out of order or repeated"
            );
            last_seq = seq;
            events += 1;
            at = Instant::now();
        }
    }
    (events, at)
}

fn synthetic_events(thread: &str, count: usize) -> Vec<LifecycleEvent> {
    let thread = ThreadId::parse(thread).unwrap();
    (1..=count as u64)
        .map(|seq| LifecycleEvent {
            event_id: format!("ev-{seq}"),
            thread_id: thread.clone(),
            seq,
            generation: 1,
            from: Some(if seq % 2 == 0 {
                Status::Pausing
            } else {
                Status::Active
            }),
            to: if seq % 2 == 0 {
                Status::Paused
            } else {
                Status::Pausing
            },
            cause: Cause::User,
            at: Millis(seq as i64),
            sandbox_id: Some("sb-bench".into()),
            detail: None,
        })
        .collect()
}

async fn finish(
    label: &str,
    started: Instant,
    readers: Vec<JoinHandle<(usize, Instant)>>,
    events: usize,
) {
    let subscribers = readers.len();
    let mut last = started;
    for r in readers {
        let (got, at) = r.await.unwrap();
        assert_eq!(got, events, "a subscriber missed events");
        last = last.max(at);
    }
    let elapsed = last.duration_since(started).as_secs_f64();
    let frames = (subscribers * events) as f64;
    println!(
        "{label:<34} {subscribers:>4} subscribers x {events:>5} events: {:>8.1} ms, {:>9.0} events/s, {:>10.0} frames/s",
        elapsed * 1000.0,
        events as f64 / elapsed,
        frames / elapsed,
    );
}

async fn live(dir: &std::path::Path, subscribers: usize, events: usize, through_fanout: bool) {
    let name = if through_fanout { "fanout" } else { "live" };
    let s = setup(dir, name, events + 16);
    let readers = subscribe_all(&s, subscribers, events).await;
    send_subscribes(&s, "bench-live", subscribers).await;
    let events_list = synthetic_events("bench-live", events);
    let fanout = through_fanout.then(|| {
        let dedupe = Arc::new(SqliteDedupe::open(&s.path).unwrap());
        Fanout::new(dedupe, vec![s.subscribers.clone()])
    });
    let started = Instant::now();
    for event in &events_list {
        match &fanout {
            Some(f) => assert_eq!(f.deliver(event).await, RecordOutcome::Delivered),
            None => s.subscribers.deliver_event(event).await.unwrap(),
        }
    }
    let label = if through_fanout {
        "live, through Fanout (+ dedupe)"
    } else {
        "live, Subscribers target"
    };
    finish(label, started, readers, events).await;
}

async fn replay(dir: &std::path::Path, subscribers: usize, events: usize) {
    let s = setup(dir, "replay", events + 16);
    // Real events in the log: resolve, then pause/resume cycles (two events per step).
    let queue = SqliteQueue::open(&s.path, "lifecycle", QueueConfig::default()).unwrap();
    let tb = Threadbox::new(
        s.store.clone(),
        InMemoryProvider::new(),
        Arc::new(queue),
        s.clock.clone(),
        test_config(),
    );
    let thread = ThreadId::parse("bench-replay").unwrap();
    tb.resolve(&thread).await.unwrap();
    for _ in 0..(events.saturating_sub(2) / 4) {
        tb.pause(&thread).await.unwrap();
        tb.resume(&thread).await.unwrap();
    }
    let in_log = tb.session(&thread).await.unwrap().unwrap().last_seq as usize;
    let readers = subscribe_all(&s, subscribers, in_log).await;
    let started = Instant::now();
    send_subscribes(&s, "bench-replay", subscribers).await;
    finish(
        "replay from the log (after_seq 0)",
        started,
        readers,
        in_log,
    )
    .await;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let subscribers = env_or("THREADBOX_BENCH_SUBSCRIBERS", 100);
    let events = env_or("THREADBOX_BENCH_EVENTS", 1000);
    let dir = tempfile::tempdir().unwrap();
    println!("WebSocket fan-out (SQLite subscription store, in-process sender, 2 worker threads)");
    live(dir.path(), subscribers, events, false).await;
    live(dir.path(), subscribers, events, true).await;
    live(dir.path(), 1, events, false).await;
    replay(dir.path(), subscribers, events).await;
}
