//! Load benchmark: 1,000 threads (`THREADBOX_LOAD_THREADS`) resolved through the real
//! `threadbox dev` on loopback, 8 requests at a time (`THREADBOX_LOAD_CONCURRENCY`), each running
//! one command in its own runc sandbox; then the janitor (idle pause 2 s, retention 4 s) reaps
//! them all. Prints throughput, latency, the server's peak memory and the machine's, and checks
//! that nothing leaked (containers, bundles, child processes, descriptors).
//!
//! Run as root with runc: `cargo bench -p threadbox --bench load` (part of `scripts/bench.sh`).
//! `cli/tests/load.rs` runs a 50-thread version in CI.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Duration;

use support::load::{self, LoadPlan, LOAD_FLAGS};
use support::{dev_missing, DevServer};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let missing = dev_missing();
    if !missing.is_empty() {
        eprintln!("load bench skipped: needs {}", missing.join(", "));
        return;
    }
    let threads = env_or("THREADBOX_LOAD_THREADS", 1000).max(1);
    let dev = DevServer::start(LOAD_FLAGS).await;
    let report = load::run(
        &dev,
        &LoadPlan {
            threads,
            concurrency: env_or("THREADBOX_LOAD_CONCURRENCY", 8),
            reap_deadline: Duration::from_secs(120) + threads as u32 * Duration::from_millis(300),
        },
    )
    .await;
    report.print();
}
