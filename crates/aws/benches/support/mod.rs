//! What the store benchmarks share: their percentiles and the records of a sweep's table.

// Each benchmark includes this module and uses a part of it.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use threadbox_core::domain::{Cause, Change, Command, Millis, Session, ThreadId, Timers};
use threadbox_core::ports::{
    CreateSandbox, NetworkProfile, SandboxOwner, SandboxProvider, SessionStore, StoreStats,
};
use threadbox_core::usecases::Threadbox;
use threadbox_testing::{InMemoryProvider, ManualClock};

/// The `p` quantile of `sorted` (zero for no samples).
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Session `i` of a sweep's table, at `now`: when `due`, active and idle past the pause window
/// on a live sandbox of `provider`; otherwise paused and far from retention (in the due index,
/// but not due).
pub async fn sweep_record(
    provider: &InMemoryProvider,
    thread: ThreadId,
    i: usize,
    due: bool,
    now: Millis,
    timers: &Timers,
) -> Session {
    let at = if due {
        now.minus(timers.idle_pause * 2)
    } else {
        now
    };
    let change = |n: u64| Change {
        event_id: format!("bench-{i}-{n}"),
        now: at,
        detail: None,
    };
    let (mut s, _) = Session::new_creating(thread.clone(), "memory", change(1), timers);
    let sandbox_id = if due {
        let request = CreateSandbox {
            image: threadbox_core::domain::ImageName::host(),
            owner: SandboxOwner {
                thread_id: thread,
                generation: s.generation,
            },
            network: NetworkProfile::Restricted,
            timeout: Duration::from_secs(900),
            env: Default::default(),
        };
        provider.create(request).await.unwrap().sandbox_id
    } else {
        format!("paused-{i}")
    };
    s.bind_sandbox(sandbox_id, None);
    s.apply(Command::CreateSucceeded, Cause::User, change(2), timers)
        .unwrap();
    if !due {
        s.apply(Command::Pause, Cause::Idle, change(3), timers)
            .unwrap();
        s.apply(Command::PauseSucceeded, Cause::Idle, change(4), timers)
            .unwrap();
    }
    s
}

/// Resolve the active thread `bench-active` `runs` times (after `warmup` resolves that create it
/// and settle it), a millisecond apart on `clock`: the latencies, sorted, and the store work
/// the measured runs cost.
pub async fn resolve_runs(
    tb: &Threadbox,
    clock: &ManualClock,
    store: &dyn SessionStore,
    warmup: usize,
    runs: usize,
) -> (Vec<Duration>, StoreStats) {
    let thread = ThreadId::parse("bench-active").unwrap();
    for _ in 0..=warmup {
        tb.resolve(&thread).await.unwrap();
    }
    let before = store.stats();
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        clock.advance(Duration::from_millis(1));
        let started = Instant::now();
        tb.resolve(&thread).await.unwrap();
        samples.push(started.elapsed());
    }
    let after = store.stats();
    samples.sort();
    let cost = StoreStats {
        reads: after.reads - before.reads,
        writes: after.writes - before.writes,
        rows_read: after.rows_read - before.rows_read,
    };
    (samples, cost)
}
