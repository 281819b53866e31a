//! Janitor sweep at scale: prints figures, asserts only that the work was done.
//!
//! 1,000,000 sessions on the embedded SQLite store, 10,000 of them due (active and idle past the
//! pause window; the rest paused and far from retention), one sweep that walks the due index's
//! shards concurrently and hands every claim to the transition queue, then the queue drained by
//! the transition handler a bounded number at once, as the `pause` function's queue handler
//! (or `threadbox dev`'s transition loop) does. Prints:
//!
//! - the load: time to build the table;
//! - the sweep: wall time, rows read, index queries, store writes, claims and claims per second;
//! - the hand-off: messages sent, queue send calls, the work item's size;
//! - the handler: wall time to drain, each item's duration (median, p99) and its store
//!   requests, here with the in-memory provider (a provider pause costs nothing here; E2B's
//!   takes seconds, which is what `scripts/janitor-model.py` adds);
//! - the sizes the model needs: a session record and a lifecycle event as stored, and with the
//!   `dynamo` feature the DynamoDB item size of a due session.
//!
//! The last line is `model inputs: {json}`, the measured figures `scripts/janitor-model.py`
//! takes (`--inputs`).
//!
//! Run: `cargo bench -p threadbox-aws --bench janitor_sweep --features dynamo`
//! (`THREADBOX_BENCH_SESSIONS` and `THREADBOX_BENCH_DUE` change the sizes, e.g. 100000 and 1000
//! for a quick run; `THREADBOX_BENCH_SHARDS` the shard count, 8 by default;
//! `THREADBOX_BENCH_SHARDS_AT_ONCE` the shards walked at once, all by default;
//! `THREADBOX_BENCH_HANDLERS` the handlers at once, 32 by default.)

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};
mod support;
use support::{percentile, sweep_record};

use threadbox_core::domain::{ThreadId, Timers};
use threadbox_core::ports::{Clock, DurableQueue, SessionStore};
use threadbox_core::usecases::{SweepOptions, Threadbox, TransitionOutcome};
use threadbox_sqlite::{QueueConfig, SqliteQueue, SqliteSessionStore};
use threadbox_testing::lifecycle_conformance::test_config;
use threadbox_testing::{InMemoryProvider, ManualClock};

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let sessions = env_number("THREADBOX_BENCH_SESSIONS", 1_000_000);
    let due = env_number("THREADBOX_BENCH_DUE", 10_000).clamp(1, sessions);
    let shards = env_number("THREADBOX_BENCH_SHARDS", 8) as u32;
    let handlers = env_number("THREADBOX_BENCH_HANDLERS", 32);
    let shards_at_once = env_number("THREADBOX_BENCH_SHARDS_AT_ONCE", shards as usize);
    let every = sessions / due;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sweep.db");
    let store = Arc::new(SqliteSessionStore::open_with_shards(&path, shards).unwrap());
    let events = SqliteQueue::open(&path, "lifecycle", QueueConfig::default()).unwrap();
    let transitions: Arc<dyn DurableQueue> =
        Arc::new(SqliteQueue::open(&path, "transitions", QueueConfig::default()).unwrap());
    let provider = InMemoryProvider::new();
    let clock = Arc::new(ManualClock::default());
    let tb = Threadbox::new(
        store.clone(),
        provider.clone(),
        Arc::new(events),
        clock.clone(),
        test_config(),
    );
    let janitor = tb.clone().with_transition_queue(transitions.clone());
    let timers = Timers::default();
    let now = clock.now();

    // The table, built directly: every `every`-th session active and idle past the pause
    // window (due now, with a live sandbox), the rest paused and far from retention.
    let load = Instant::now();
    let mut batch = Vec::with_capacity(20_000);
    let mut record_bytes = 0usize;
    let mut due_built = 0usize;
    for i in 0..sessions {
        let is_due = i % every == 0 && due_built < due;
        let thread = ThreadId::parse(&format!("slack:T0BENCH01:C0BENCH01:{i:010}.000100")).unwrap();
        if is_due {
            due_built += 1;
        }
        let mut s = sweep_record(&provider, thread, i, is_due, now, &timers).await;
        s.version = 1;
        if i == 0 {
            record_bytes = serde_json::to_string(&s).unwrap().len();
        }
        batch.push(s);
        if batch.len() == 20_000 {
            store.bulk_insert(std::mem::take(&mut batch)).await.unwrap();
        }
    }
    store.bulk_insert(batch).await.unwrap();
    let loaded = load.elapsed();
    #[cfg(feature = "dynamo")]
    let dynamo_item_bytes = {
        let first = ThreadId::parse("slack:T0BENCH01:C0BENCH01:0000000000.000100").unwrap();
        let s = store.load(&first).await.unwrap().unwrap();
        threadbox_aws::dynamo::session_item_bytes(&s, shards)
    };
    #[cfg(not(feature = "dynamo"))]
    let dynamo_item_bytes = 0usize;

    // The sweep: claims only, every shard at once.
    let options = SweepOptions {
        reconcile: false,
        shard_concurrency: shards_at_once,
        ..SweepOptions::for_duration(Duration::from_secs(3600))
    };
    let before = store.stats();
    let started = Instant::now();
    let report = janitor.sweep(options.clone()).await;
    let sweep_wall = started.elapsed();
    let after = store.stats();
    assert!(report.completed, "{report:?}");
    assert_eq!(report.queued, due_built, "{report:?}");
    let rows_read = after.rows_read - before.rows_read;
    let sweep_reads = after.reads - before.reads;
    let sweep_writes = after.writes - before.writes;
    let claims_per_sec = report.queued as f64 / sweep_wall.as_secs_f64();

    println!(
        "janitor sweep over {sessions} sessions, {due_built} due (SQLite, {shards} shards, {shards_at_once} walked at once, {} claims at once per shard, pages of {})",
        options.concurrency, options.page_size
    );
    println!("  load            {:.1} s", loaded.as_secs_f64());
    println!("  sweep wall time {:.1} ms", ms(sweep_wall));
    println!(
        "  rows read       {rows_read} ({:.2} per due session)",
        rows_read as f64 / due_built as f64
    );
    println!("  store reads     {sweep_reads} (index pages)");
    println!(
        "  store writes    {sweep_writes} ({:.2} per claim: the claim with its event, the event marked sent)",
        sweep_writes as f64 / due_built as f64
    );
    println!(
        "  claims          {} handed to the transition queue, {:.0} claims/s",
        report.queued, claims_per_sec
    );

    // The handlers: drain the transition queue, `handlers` at once.
    let mut received = Vec::with_capacity(due_built);
    loop {
        let batch = transitions
            .receive(1_000, Duration::from_secs(600))
            .await
            .unwrap();
        if batch.is_empty() {
            break;
        }
        received.extend(batch);
    }
    let work_item_bytes = received.first().map_or(0, |m| m.body.len());
    let before = store.stats();
    let started = Instant::now();
    let mut durations: Vec<Duration> = stream::iter(received)
        .map(|message| {
            let (tb, transitions) = (tb.clone(), transitions.clone());
            async move {
                let t = Instant::now();
                let outcome = tb.run_transition(&message.body).await;
                assert!(matches!(outcome, TransitionOutcome::Done(_)), "{outcome:?}");
                transitions.ack(&message.receipt).await.unwrap();
                t.elapsed()
            }
        })
        .buffer_unordered(handlers.max(1))
        .collect()
        .await;
    let handler_wall = started.elapsed();
    let after = store.stats();
    durations.sort();
    let handled = durations.len();
    assert_eq!(provider.pauses() as usize, due_built);
    let handler_reads = (after.reads - before.reads) as f64 / handled as f64;
    let handler_writes = (after.writes - before.writes) as f64 / handled as f64;
    let handler_ms_per_item = ms(handler_wall) / handled as f64;
    println!(
        "  handlers        {handled} pauses in {:.1} ms, {handlers} at once ({:.0}/s, {handler_ms_per_item:.3} ms of wall time per item); per item median {:.3} ms, p99 {:.3} ms (waiting on SQLite's one writer included)",
        ms(handler_wall),
        handled as f64 / handler_wall.as_secs_f64(),
        ms(percentile(&durations, 0.5)),
        ms(percentile(&durations, 0.99))
    );
    println!(
        "                  store requests per item: {handler_reads:.2} reads, {handler_writes:.2} writes (in-memory provider: the pause itself costs nothing here)"
    );
    let event = tb
        .store
        .events_after(
            &ThreadId::parse("slack:T0BENCH01:C0BENCH01:0000000000.000100").unwrap(),
            0,
            10,
        )
        .await
        .unwrap();
    let event_bytes = event
        .last()
        .map_or(0, |e| serde_json::to_string(e).unwrap().len());
    println!(
        "  sizes           session record {record_bytes} B (JSON), DynamoDB item {} B, lifecycle event {event_bytes} B (JSON), work item {work_item_bytes} B",
        if dynamo_item_bytes == 0 {
            "n/a (build with --features dynamo)".to_owned()
        } else {
            dynamo_item_bytes.to_string()
        }
    );
    let inputs = serde_json::json!({
        "sessions": sessions,
        "due": due_built,
        "shards": shards,
        "page_size": options.page_size,
        "load_s": loaded.as_secs_f64(),
        "sweep_wall_ms": ms(sweep_wall),
        "claims_per_s_sqlite": claims_per_sec,
        "rows_read_per_due": rows_read as f64 / due_built as f64,
        "index_queries": sweep_reads,
        "sweep_writes_per_claim": sweep_writes as f64 / due_built as f64,
        "handler_reads_per_item": handler_reads,
        "handler_writes_per_item": handler_writes,
        "handler_ms_per_item": handler_ms_per_item,
        "handler_median_ms": ms(percentile(&durations, 0.5)),
        "handler_p99_ms": ms(percentile(&durations, 0.99)),
        "session_item_bytes": dynamo_item_bytes,
        "session_record_bytes": record_bytes,
        "event_bytes": event_bytes,
        "work_item_bytes": work_item_bytes,
    });
    println!("model inputs: {inputs}");
}
