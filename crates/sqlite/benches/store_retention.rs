//! Store retention benchmark: prints figures, asserts nothing about speed.
//!
//! 10,000 threads are created and destroyed on the embedded SQLite store, 1,000 a round, with
//! the lifecycle queue drained as the fan-out would and a janitor sweep after each round. With
//! the record retention at zero the sweep deletes every destroyed thread, and the file stays the
//! size the first round made it (freed pages are reused); with retention off (30 days, never
//! reached here) the same work grows the file round after round. Prints the file's size (with its
//! WAL) after each round for both, the ratio of the last round's size to the first's, and the
//! median time of a round's sweep. The queue's deduplication window is cut to a second (see
//! `run`), as if each round were more than SQS's five minutes apart.
//!
//! Run: `cargo bench -p threadbox-sqlite --bench store_retention`
//! (`THREADBOX_BENCH_THREADS` changes the number of threads.)

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use threadbox_core::domain::{Cause, ThreadId};
use threadbox_core::ports::DurableQueue;
use threadbox_core::usecases::{Config, SweepOptions, Threadbox};
use threadbox_sqlite::{QueueConfig, SqliteQueue, SqliteSessionStore};
use threadbox_testing::lifecycle_conformance::test_config;
use threadbox_testing::{InMemoryProvider, ManualClock};

const ROUNDS: usize = 10;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let threads: usize = std::env::var("THREADBOX_BENCH_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let dir = tempfile::tempdir().unwrap();
    println!("store retention (SQLite): {threads} threads created and destroyed, {ROUNDS} rounds");
    let kept = run(&dir.path().join("kept.db"), threads, None).await;
    let purged = run(&dir.path().join("purged.db"), threads, Some(Duration::ZERO)).await;
    println!(
        "  retention zero: file {} after round 1, {} after round {ROUNDS}: ratio {:.2}",
        mib(purged[0]),
        mib(purged[ROUNDS - 1]),
        purged[ROUNDS - 1] as f64 / purged[0] as f64
    );
    println!(
        "  retention 30 days: file {} after round 1, {} after round {ROUNDS}: ratio {:.2}",
        mib(kept[0]),
        mib(kept[ROUNDS - 1]),
        kept[ROUNDS - 1] as f64 / kept[0] as f64
    );
}

/// Sizes of the file after each round.
async fn run(path: &Path, threads: usize, retention: Option<Duration>) -> Vec<u64> {
    let store = Arc::new(SqliteSessionStore::open(path).unwrap());
    // SQS remembers a deduplication id for five minutes, and so does the embedded queue; this
    // run is shorter than that, so the window is cut to a second here, or the ids (kept by
    // design, not by retention) would be the growth this benchmark shows.
    let queue_config = QueueConfig {
        dedup_window: Duration::from_secs(1),
        ..QueueConfig::default()
    };
    let queue = Arc::new(SqliteQueue::open(path, "lifecycle", queue_config).unwrap());
    let clock = Arc::new(ManualClock::default());
    let config = Config {
        record_retention: retention.unwrap_or(Duration::from_secs(30 * 24 * 3600)),
        ..test_config()
    };
    let tb = Threadbox::new(
        store,
        InMemoryProvider::new(),
        queue.clone(),
        clock.clone(),
        config,
    );
    let label = match retention {
        Some(_) => "retention zero",
        None => "retention 30 days",
    };
    let per_round = threads / ROUNDS;
    let mut sizes = Vec::with_capacity(ROUNDS);
    let mut sweeps = Vec::with_capacity(ROUNDS);
    let mut purged = 0;
    for round in 0..ROUNDS {
        for i in 0..per_round {
            let thread = ThreadId::parse(&format!("bench-{round}-{i}")).unwrap();
            tb.resolve(&thread).await.unwrap();
            tb.destroy(&thread, Cause::User).await.unwrap();
        }
        drain(queue.as_ref()).await;
        clock.advance(Duration::from_secs(1));
        let started = Instant::now();
        let report = tb
            .sweep(SweepOptions::for_duration(Duration::from_secs(600)))
            .await;
        sweeps.push(started.elapsed());
        assert_eq!(report.failures, 0, "{report:?}");
        purged += report.threads_purged;
        sizes.push(file_size(path));
    }
    sweeps.sort();
    println!(
        "  {label}: file after each round (MiB): {}; threads deleted {purged}; median sweep {:.1} ms",
        sizes
            .iter()
            .map(|s| format!("{:.2}", *s as f64 / 1048576.0))
            .collect::<Vec<_>>()
            .join(" "),
        sweeps[ROUNDS / 2].as_secs_f64() * 1000.0
    );
    sizes
}

/// Take and acknowledge every queued lifecycle event, as the fan-out consumer does.
async fn drain(queue: &dyn DurableQueue) {
    loop {
        let batch = queue.receive(10, Duration::from_secs(30)).await.unwrap();
        if batch.is_empty() {
            return;
        }
        for message in batch {
            queue.ack(&message.receipt).await.unwrap();
        }
    }
}

/// The database with its WAL and shared-memory files.
fn file_size(path: &Path) -> u64 {
    ["", "-wal", "-shm"]
        .iter()
        .filter_map(|suffix| std::fs::metadata(format!("{}{suffix}", path.display())).ok())
        .map(|m| m.len())
        .sum()
}

fn mib(bytes: u64) -> String {
    format!("{:.2} MiB", bytes as f64 / 1048576.0)
}
