//! DynamoDB store benchmark: prints figures, asserts nothing about speed.
//!
//! - resolve of an active thread: DynamoDB requests per call (target: at most two, one read and
//!   one conditional write) and latency;
//! - a janitor sweep over a table where 1% of sessions are due: requests and items read (target:
//!   proportional to the due work, since `due` queries a sparse index and never scans).
//!
//! It runs against whatever `AWS_ENDPOINT_URL` names; against moto's server the latencies say
//! more about moto than about DynamoDB, while the request counts are what DynamoDB would see.
//!
//! Run (with moto's server up, as `scripts/test.sh` starts it):
//! `AWS_ENDPOINT_URL=http://127.0.0.1:PORT AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test \
//!  AWS_SECRET_ACCESS_KEY=test cargo bench -p threadbox-aws --bench dynamo_resolve --features dynamo,sqs`
//! (`THREADBOX_BENCH_DYNAMO_SESSIONS` changes the sweep's table size; default 1,000.)

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
mod support;
use support::{percentile, resolve_runs, sweep_record};

use threadbox_aws::dynamo::{create_tables, DynamoConfig, DynamoSessionStore};
use threadbox_aws::sdk::{load_config, ClientSettings, SdkConfig};
use threadbox_aws::sqs::{create_fifo_queue, SqsQueue};
use threadbox_core::domain::{ThreadId, Timers};
use threadbox_core::ports::{Clock, SessionStore};
use threadbox_core::usecases::{SweepOptions, Threadbox};
use threadbox_testing::lifecycle_conformance::test_config;
use threadbox_testing::{InMemoryProvider, ManualClock};

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::var_os("AWS_ENDPOINT_URL").is_none() {
        println!("dynamo_resolve: skipped, AWS_ENDPOINT_URL is unset (start moto's server first)");
        return;
    }
    let sdk = load_config(&ClientSettings::default()).await;
    resolve_active(&sdk).await;
    let sessions = std::env::var("THREADBOX_BENCH_DYNAMO_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000);
    sweep_due(&sdk, sessions).await;
}

/// A threadbox on fresh tables and a fresh lifecycle queue.
async fn threadbox(
    sdk: &SdkConfig,
    name: &str,
) -> (
    Threadbox,
    Arc<DynamoSessionStore>,
    Arc<InMemoryProvider>,
    Arc<ManualClock>,
) {
    let unique = format!(
        "tb-bench-{name}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let config = DynamoConfig::new(format!("{unique}-sessions"), format!("{unique}-events"));
    let store = Arc::new(DynamoSessionStore::from_sdk_config(sdk, config));
    create_tables(store.client(), store.config()).await.unwrap();
    let urls = create_fifo_queue(&aws_sdk_sqs::Client::new(sdk), &unique, 5)
        .await
        .unwrap();
    let queue = Arc::new(SqsQueue::from_sdk_config(sdk, urls));
    let provider = InMemoryProvider::new();
    let clock = Arc::new(ManualClock::default());
    let tb = Threadbox::new(
        store.clone(),
        provider.clone(),
        queue,
        clock.clone(),
        test_config(),
    );
    (tb, store, provider, clock)
}

async fn resolve_active(sdk: &SdkConfig) {
    let (tb, store, _, clock) = threadbox(sdk, "resolve").await;
    let runs = 300;
    let (samples, cost) = resolve_runs(&tb, &clock, store.as_ref(), 20, runs).await;
    let per_call = |n: u64| n as f64 / runs as f64;
    println!("resolve of an active thread (DynamoDB store, {runs} runs)");
    println!(
        "  requests per call {:.2} (target: at most 2)",
        per_call(cost.reads + cost.writes)
    );
    println!("  reads per call    {:.2}", per_call(cost.reads));
    println!("  writes per call   {:.2}", per_call(cost.writes));
    println!("  median            {}", ms(percentile(&samples, 0.5)));
    println!("  p99               {}", ms(percentile(&samples, 0.99)));
}

async fn sweep_due(sdk: &SdkConfig, sessions: usize) {
    let (tb, store, provider, clock) = threadbox(sdk, "sweep").await;
    let timers = Timers::default();
    let now = clock.now();
    let due = sessions.div_ceil(100);

    // 1% active and idle past the pause window (due now), the rest paused and far from
    // retention (in the index, but not due).
    let build = Instant::now();
    let mut records = Vec::with_capacity(sessions);
    for i in 0..sessions {
        let thread = ThreadId::parse(&format!("bench-{i:07}")).unwrap();
        let s = sweep_record(&provider, thread, i, i % 100 == 0, now, &timers).await;
        records.push(s);
    }
    let inserts: Vec<_> = records.iter().map(|s| store.insert_new(s, &[])).collect();
    let results: Vec<_> = futures::stream::iter(inserts)
        .buffer_unordered(8)
        .collect()
        .await;
    results.into_iter().collect::<Result<(), _>>().unwrap();
    let built = build.elapsed();

    let before = store.stats();
    let started = Instant::now();
    let options = SweepOptions {
        reconcile: false,
        ..SweepOptions::for_duration(Duration::from_secs(600))
    };
    let report = tb.sweep(options).await;
    let wall = started.elapsed();
    let after = store.stats();
    println!();
    println!(
        "janitor sweep over {sessions} sessions, {due} due (DynamoDB store, {} shards, table built in {:.1} s)",
        store.shard_count(),
        built.as_secs_f64()
    );
    println!("  completed         {}", report.completed);
    println!("  paused            {}", report.paused);
    println!("  wall time         {}", ms(wall));
    println!(
        "  items read        {} ({:.2} per due session)",
        after.rows_read - before.rows_read,
        (after.rows_read - before.rows_read) as f64 / due as f64
    );
    println!("  read requests     {}", after.reads - before.reads);
    println!("  write requests    {}", after.writes - before.writes);
}
