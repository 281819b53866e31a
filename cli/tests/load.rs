//! A small load run in CI: 50 threads through the real `threadbox dev`, 8 requests at a time,
//! each running a command in its own runc sandbox; the janitor then reaps every sandbox, and the
//! server is left with no containers, bundles, child processes or extra descriptors.
//! `cli/benches/load.rs` runs the same with 1,000 threads (`scripts/bench.sh`).
//! Needs root and runc, like the other end-to-end tests.

mod support;

use std::time::Duration;

use support::load::{self, LoadPlan, LOAD_FLAGS};
use support::{dev_missing, prerequisites_met, DevServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_threads_run_and_are_all_reaped_without_leaks() {
    if !prerequisites_met("load", &dev_missing()) {
        return;
    }
    let dev = DevServer::start(LOAD_FLAGS).await;
    let report = load::run(
        &dev,
        &LoadPlan {
            threads: 50,
            concurrency: 8,
            reap_deadline: Duration::from_secs(90),
        },
    )
    .await;
    report.print();
    assert!(report.peak_sandboxes > 0);
}
