//! Session core benchmark: prints figures, asserts nothing about speed.
//!
//! - resolve of an active thread on the embedded SQLite store: median and p99 latency, and store
//!   round trips per call (target: one read and at most one conditional write);
//! - a janitor sweep over 100,000 sessions of which 1% are due: wall time and rows read
//!   (target: rows read proportional to the due work, not to all sessions); with the `dynamo`
//!   feature, also the DynamoDB read units the same sweep would cost (see `dynamo_read_units`).
//!
//! Run: `cargo bench -p threadbox-aws --bench session_core --features dynamo`
//! (`THREADBOX_BENCH_SESSIONS` changes the table size.)

use std::sync::Arc;
use std::time::{Duration, Instant};

mod support;
use support::{percentile, resolve_runs, sweep_record};

use threadbox_core::domain::{ThreadId, Timers};
use threadbox_core::ports::{Clock, SessionStore};
use threadbox_core::usecases::{SweepOptions, Threadbox};
use threadbox_sqlite::{QueueConfig, SqliteQueue, SqliteSessionStore};
use threadbox_testing::lifecycle_conformance::test_config;
use threadbox_testing::{InMemoryProvider, ManualClock};

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    resolve_active(&dir.path().join("resolve.db")).await;
    let sessions: usize = std::env::var("THREADBOX_BENCH_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    sweep_due(&dir.path().join("sweep.db"), sessions).await;
}

fn threadbox(
    store: Arc<SqliteSessionStore>,
    queue: SqliteQueue,
) -> (Threadbox, Arc<InMemoryProvider>, Arc<ManualClock>) {
    let provider = InMemoryProvider::new();
    let clock = Arc::new(ManualClock::default());
    let tb = Threadbox::new(
        store,
        provider.clone(),
        Arc::new(queue),
        clock.clone(),
        test_config(),
    );
    (tb, provider, clock)
}

async fn resolve_active(path: &std::path::Path) {
    let store = Arc::new(SqliteSessionStore::open(path).unwrap());
    let queue = SqliteQueue::open(path, "lifecycle", QueueConfig::default()).unwrap();
    let (tb, _, clock) = threadbox(store.clone(), queue);
    let runs = 2_000;
    let (samples, cost) = resolve_runs(&tb, &clock, store.as_ref(), 100, runs).await;
    println!("resolve of an active thread (SQLite, {runs} runs)");
    println!("  median          {}", ms(percentile(&samples, 0.5)));
    println!("  p99             {}", ms(percentile(&samples, 0.99)));
    println!("  reads per call  {:.2}", cost.reads as f64 / runs as f64);
    println!("  writes per call {:.2}", cost.writes as f64 / runs as f64);
}

async fn sweep_due(path: &std::path::Path, sessions: usize) {
    let store = Arc::new(SqliteSessionStore::open(path).unwrap());
    let queue = SqliteQueue::open(path, "lifecycle", QueueConfig::default()).unwrap();
    let (tb, provider, clock) = threadbox(store.clone(), queue);
    let timers = Timers::default();
    let now = clock.now();
    let due = sessions / 100;

    // Build the table directly: 1% active and idle past the pause window (due now), the rest
    // paused and far from retention (not due). Only the due ones need a live provider sandbox.
    let build = Instant::now();
    let mut batch = Vec::with_capacity(10_000);
    for i in 0..sessions {
        let thread = ThreadId::parse(&format!("bench-{i:07}")).unwrap();
        let mut s = sweep_record(&provider, thread, i, i % 100 == 0, now, &timers).await;
        s.version = 1;
        batch.push(s);
        if batch.len() == 10_000 {
            store.bulk_insert(std::mem::take(&mut batch)).await.unwrap();
        }
    }
    store.bulk_insert(batch).await.unwrap();
    let built = build.elapsed();
    #[cfg(feature = "dynamo")]
    let read_units = dynamo_read_units(
        &store,
        now,
        SweepOptions::for_duration(Duration::ZERO).page_size,
    )
    .await;

    let before = store.stats();
    let started = Instant::now();
    let options = SweepOptions {
        reconcile: false,
        ..SweepOptions::for_duration(Duration::from_secs(600))
    };
    let report = tb.sweep(options).await;
    let wall = started.elapsed();
    let after = store.stats();
    assert!(report.completed, "{report:?}");
    println!();
    println!(
        "janitor sweep over {sessions} sessions, {due} due (SQLite, table built in {:.1} s)",
        built.as_secs_f64()
    );
    println!("  wall time       {}", ms(wall));
    println!(
        "  rows read       {} ({:.2} per due session)",
        after.rows_read - before.rows_read,
        (after.rows_read - before.rows_read) as f64 / due as f64
    );
    println!("  index queries   {}", after.reads - before.reads);
    println!("  writes          {}", after.writes - before.writes);
    println!("  paused          {}", report.paused);
    #[cfg(feature = "dynamo")]
    read_units.print();
    #[cfg(not(feature = "dynamo"))]
    println!("  DynamoDB read units: build with --features dynamo for the estimate");
}

/// What the same sweep would read from DynamoDB, in read units.
#[cfg(feature = "dynamo")]
struct ReadUnits {
    shards: u32,
    due_queries: usize,
    due_items: usize,
    mean_item_bytes: f64,
    due_units: f64,
    unsent_units: f64,
}

#[cfg(feature = "dynamo")]
impl ReadUnits {
    fn print(&self) {
        println!(
            "  DynamoDB read units for the same sweep (estimate; GSI queries are eventually consistent: 0.5 unit per 4 KB)"
        );
        println!(
            "    due index      {:.1} units: {} queries over {} shards, {} items of {:.0} bytes on average",
            self.due_units, self.due_queries, self.shards, self.due_items, self.mean_item_bytes
        );
        println!(
            "    unsent index   {:.1} units: {} empty queries (one per shard, the outbox re-drive)",
            self.unsent_units, self.shards
        );
        println!(
            "    total          {:.1} read units ({:.3} per due session)",
            self.due_units + self.unsent_units,
            (self.due_units + self.unsent_units) / self.due_items.max(1) as f64
        );
    }
}

/// The DynamoDB store's sweep makes one `due` query per page per shard of the `due` index (an
/// `ALL` projection, so each entry is the whole item) and one `unsent` query per shard. This
/// reads the due records the SQLite sweep is about to see, places each in the shard the DynamoDB
/// store would ([`ThreadId::shard`] over its default shard count), pages them as the sweep
/// does, and prices every page by DynamoDB's rules (`adapters::dynamo::capacity`).
#[cfg(feature = "dynamo")]
async fn dynamo_read_units(
    store: &SqliteSessionStore,
    now: threadbox_core::domain::Millis,
    page_size: usize,
) -> ReadUnits {
    use threadbox_aws::dynamo::{
        query_read_units, session_item_bytes, Consistency, DEFAULT_SHARDS,
    };
    let shards = DEFAULT_SHARDS;
    let mut by_shard: Vec<Vec<usize>> = vec![Vec::new(); shards as usize];
    for shard in 0..store.shard_count() {
        let mut cursor = None;
        loop {
            let page = store.due(shard, now, 1000, cursor.take()).await.unwrap();
            for s in &page.items {
                by_shard[s.thread_id.shard(shards) as usize].push(session_item_bytes(s, shards));
            }
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
    }
    let (mut due_queries, mut due_units, mut due_items, mut bytes) = (0, 0.0, 0, 0);
    for items in &by_shard {
        // An empty shard still costs one query; a full page asks for the next one.
        let pages: Vec<&[usize]> = if items.is_empty() {
            vec![&[]]
        } else {
            items.chunks(page_size).collect()
        };
        for page in pages {
            due_queries += 1;
            due_units += query_read_units(page.iter().copied(), Consistency::Eventual);
            due_items += page.len();
            bytes += page.iter().sum::<usize>();
        }
    }
    let unsent_units = shards as f64 * query_read_units([], Consistency::Eventual);
    ReadUnits {
        shards,
        due_queries,
        due_items,
        mean_item_bytes: bytes as f64 / due_items.max(1) as f64,
        due_units,
        unsent_units,
    }
}
