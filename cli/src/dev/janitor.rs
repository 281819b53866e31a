//! The janitor on a timer: what EventBridge does every minute in production.
//!
//! Each sweep gets a deadline of three quarters of the interval, so one sweep never runs into the
//! next and a shutdown waits at most that long. The first sweep runs at start, which reconciles
//! with sandboxes left from a previous run straight away. After the sweep (which deletes retired
//! threads with their events), the rows of the file that age out on their own (the local Slack
//! sink's messages, dead letters) are deleted once older than the record retention.
//!
//! As in production, the sweep only claims pauses and destroys and hands each claim to the
//! transition queue (a queue in the same SQLite file); the queue loop with the
//! [`Transitions`](super::queues::Transitions) handler carries them out, a bounded number at
//! once, through the same use case as the `pause` function's queue handler.

use std::time::{Duration, Instant};

use threadbox_core::domain::Millis;
use threadbox_core::usecases::{SweepOptions, SweepReport, Threadbox};
use threadbox_sqlite::{delete_aged, Aged, Database};
use tokio::sync::watch;
use tokio::time::MissedTickBehavior;

/// Rows deleted per transaction by the aged-rows pass.
const AGED_BATCH: usize = 500;

/// Sweep every `interval` until `shutdown` turns true; a sweep in progress finishes first.
pub async fn run(
    tb: Threadbox,
    database: Database,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = shutdown.changed() => {}
        }
        if *shutdown.borrow() {
            break;
        }
        let started = Instant::now();
        let report = tb.sweep(SweepOptions::for_duration(budget(interval))).await;
        let deadline = started + budget(interval);
        let aged = delete_aged_rows(&tb, &database, deadline).await;
        if did_something(&report) || aged.total() > 0 {
            tracing::info!(
                ?report,
                sink_messages_deleted = aged.sink_messages,
                dead_letters_deleted = aged.dead_letters,
                "janitor sweep"
            );
        } else {
            tracing::debug!("janitor sweep: nothing to do");
        }
    }
    tracing::debug!("janitor stopped");
}

/// Refill the warm pool each time a new thread takes a member (`taken`, see
/// `Threadbox::with_pool_refills`) until `shutdown` turns true; a refill under way finishes
/// first. Without it the pool would refill only at the next sweep, and a burst of new threads
/// past the pool's size would wait for creates.
pub async fn refill_pool(
    tb: Threadbox,
    taken: std::sync::Arc<tokio::sync::Notify>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = taken.notified() => {}
            _ = shutdown.changed() => {}
        }
        if *shutdown.borrow() {
            break;
        }
        let report = tb.refill_pool().await;
        tracing::debug!(?report, "warm pool refilled after a take");
    }
    tracing::debug!("warm pool refill stopped");
}

/// Delete sink messages and dead letters older than the record retention, a batch per
/// transaction, until a batch comes back short or `deadline` passes.
async fn delete_aged_rows(tb: &Threadbox, database: &Database, deadline: Instant) -> Aged {
    let retention = i64::try_from(tb.config.record_retention.as_millis()).unwrap_or(i64::MAX);
    let before = Millis(tb.clock.now().0.saturating_sub(retention));
    let mut total = Aged::default();
    loop {
        match delete_aged(database, before, AGED_BATCH).await {
            Ok(aged) => {
                total.sink_messages += aged.sink_messages;
                total.dead_letters += aged.dead_letters;
                let short =
                    aged.sink_messages < AGED_BATCH as u64 && aged.dead_letters < AGED_BATCH as u64;
                if short || Instant::now() >= deadline {
                    return total;
                }
            }
            Err(error) => {
                tracing::warn!(%error, "deleting aged sink messages and dead letters failed");
                return total;
            }
        }
    }
}

/// Bytes the store takes on disk: the database file with its `-wal` and `-shm`, so a growing
/// store shows at start-up.
pub fn store_size(data_dir: &std::path::Path) -> u64 {
    ["threadbox.db", "threadbox.db-wal", "threadbox.db-shm"]
        .iter()
        .filter_map(|name| std::fs::metadata(data_dir.join(name)).ok())
        .map(|m| m.len())
        .sum()
}

pub fn format_bytes(bytes: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = KIB * 1024;
    match bytes {
        b if b >= MIB => format!("{:.1} MiB", b as f64 / MIB as f64),
        b if b >= KIB => format!("{:.1} KiB", b as f64 / KIB as f64),
        b => format!("{b} B"),
    }
}

/// The time one sweep may take.
fn budget(interval: Duration) -> Duration {
    interval * 3 / 4
}

/// Worth a log line: anything acted on, failed, or left unfinished.
fn did_something(report: &SweepReport) -> bool {
    let SweepReport {
        events_redriven,
        orphans_killed,
        corrected,
        due_examined: _,
        paused,
        destroyed,
        recovered,
        queued,
        skipped: _,
        failures,
        threads_purged,
        events_purged: _,
        pool,
        completed,
    } = report;
    events_redriven
        + orphans_killed
        + corrected
        + paused
        + destroyed
        + recovered
        + queued
        + failures
        + pool.created
        + pool.retired
        + pool.abandoned
        + pool.failures
        > 0
        || *threads_purged > 0
        || !completed
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use threadbox_core::domain::{Status, ThreadId};
    use threadbox_core::ports::DurableQueue;
    use threadbox_core::usecases::Config;
    use threadbox_sqlite::{QueueConfig, SqliteQueue, SqliteSessionStore};
    use threadbox_testing::{InMemoryProvider, ManualClock};

    use super::super::queues::{LoopConfig, QueueLoop, Transitions};
    use super::*;

    #[test]
    fn a_sweep_ends_well_before_the_next_one() {
        assert_eq!(budget(Duration::from_secs(60)), Duration::from_secs(45));
        assert!(budget(Duration::from_secs(1)) < Duration::from_secs(1));
    }

    #[test]
    fn only_sweeps_that_acted_are_worth_logging() {
        let quiet = SweepReport {
            completed: true,
            due_examined: 3,
            skipped: 3,
            ..SweepReport::default()
        };
        assert!(!did_something(&quiet));
        assert!(did_something(&SweepReport {
            paused: 1,
            ..quiet.clone()
        }));
        assert!(did_something(&SweepReport {
            failures: 1,
            ..quiet.clone()
        }));
        assert!(did_something(&SweepReport {
            completed: false,
            ..quiet
        }));
    }

    #[tokio::test]
    async fn sweeps_on_the_timer_and_stops_when_told() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("threadbox.db");
        let clock = Arc::new(ManualClock::default());
        let store = SqliteSessionStore::open(&path).unwrap();
        let database = store.database().clone();
        let tb = Threadbox::new(
            Arc::new(store),
            InMemoryProvider::new(),
            Arc::new(SqliteQueue::open(&path, "lifecycle", QueueConfig::default()).unwrap()),
            clock.clone(),
            Config::default(),
        );
        let thread = ThreadId::parse("idle-1").unwrap();
        tb.resolve(&thread).await.unwrap();
        clock.advance(tb.config.timers.idle_pause + Duration::from_secs(1));

        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(run(
            tb.clone(),
            database,
            Duration::from_millis(20),
            stopped,
        ));
        let mut status = Status::Active;
        for _ in 0..250 {
            status = tb.session(&thread).await.unwrap().unwrap().status;
            if status == Status::Paused {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            status,
            Status::Paused,
            "the timer's sweep paused the idle thread"
        );
        stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the janitor stops promptly")
            .unwrap();
    }

    /// What `threadbox dev` runs: the timer's sweep claims and hands off, the transition loop
    /// pauses, a bounded number at once, each thread once.
    #[tokio::test]
    async fn claims_go_through_the_transition_queue() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("threadbox.db");
        let clock = Arc::new(ManualClock::default());
        let store = SqliteSessionStore::open(&path).unwrap();
        let database = store.database().clone();
        let provider = InMemoryProvider::new();
        let tb = Threadbox::new(
            Arc::new(store),
            provider.clone(),
            Arc::new(SqliteQueue::open(&path, "lifecycle", QueueConfig::default()).unwrap()),
            clock.clone(),
            Config::default(),
        );
        let transitions: Arc<dyn DurableQueue> =
            Arc::new(SqliteQueue::open(&path, "transitions", QueueConfig::default()).unwrap());
        let threads: Vec<ThreadId> = (0..6)
            .map(|i| ThreadId::parse(&format!("idle-{i}")).unwrap())
            .collect();
        for thread in &threads {
            tb.resolve(thread).await.unwrap();
        }
        clock.advance(tb.config.timers.idle_pause + Duration::from_secs(1));

        let (stop, stopped) = watch::channel(false);
        let janitor = tokio::spawn(run(
            tb.clone().with_transition_queue(transitions.clone()),
            database,
            Duration::from_millis(20),
            stopped.clone(),
        ));
        let handlers = tokio::spawn(
            QueueLoop::new(
                transitions,
                Transitions(tb.clone()),
                LoopConfig {
                    concurrency: 2,
                    idle_wait: Duration::from_millis(10),
                    ..LoopConfig::transitions(Duration::from_secs(60))
                },
            )
            .run(stopped),
        );
        let mut paused = 0;
        for _ in 0..500 {
            paused = 0;
            for thread in &threads {
                if tb.session(thread).await.unwrap().unwrap().status == Status::Paused {
                    paused += 1;
                }
            }
            if paused == threads.len() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(paused, threads.len(), "every idle thread paused");
        // More sweeps ran meanwhile; none paused anything twice.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(provider.pauses() as usize, threads.len());
        stop.send(true).unwrap();
        for task in [janitor, handlers] {
            tokio::time::timeout(Duration::from_secs(5), task)
                .await
                .expect("both loops stop promptly")
                .unwrap();
        }
    }
}
