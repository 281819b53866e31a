//! What the warm pool saves a new thread: the first command of a thread whose sandbox comes from
//! the pool, against one whose sandbox is created on the spot, against what runc alone costs to
//! start the same sandbox and run a command in it. Figures only; the issue's goal (the pooled
//! path under half of bare runc's create) is printed as met or not, never asserted, since it
//! depends on the machine. Run as root with runc installed:
//!
//! ```text
//! cargo bench -p threadbox-runc --bench warm_pool
//! THREADBOX_BENCH_RUNS=50 cargo bench -p threadbox-runc --bench warm_pool
//! ```
//!
//! Three rows, `THREADBOX_BENCH_RUNS` runs each (20 by default), interleaved in the same run
//! (the order rotates each round), each through the real runc provider, the SQLite store (one
//! store for the sessions and the pool) and a SQLite event queue, with the system clock:
//!
//! - **pooled**: `Threadbox::resolve` of a new thread on a threadbox with a warm pool of one,
//!   then `Threadbox::exec` of `true` in it. Before each run an untimed sweep (what the janitor
//!   does) refills the pool, and the run checks the handle came from it (`pooled`).
//! - **unpooled**: the same on the same store and provider without a pool: the resolve creates
//!   the sandbox (bundle, user namespace, `runc run --detach`), then the exec.
//! - **bare runc**: `runc --root R run --detach --bundle B <id>` and `runc --root R exec <id>
//!   true`, exactly the two runc calls the provider makes for these (without its pid file, pipes
//!   and exit-status wrapper around the exec), on a bundle the provider wrote: its `config.json`
//!   (user namespace, mounts, cgroup limits, seccomp) and root filesystem, under a second
//!   provider's state directory so no sweep reconciles it. The provider's own container on that
//!   bundle is stopped first; each bare container is killed and deleted after its run, untimed.
//!
//! Every row runs without the disk quota (the home a plain directory), so the three start the
//! same sandbox. Prints, per row, the median and 90th percentile (nearest rank) in ms, with the
//! two halves of each (resolve and exec, run and exec), then the ratios of the medians: pooled /
//! bare runc, pooled / unpooled and unpooled / bare runc, and whether pooled / bare runc < 0.5.
//! Below the rows, untimed in them: the refill sweep (the janitor's cost per claimed member), a
//! second exec in the pooled thread (the provider has the container's cgroup cached by then) and
//! one `runc state` call, which tell what a first exec spends beyond `runc exec` itself.
//! Every sandbox is gone at the end: threads destroyed, the pool drained by a sweep with size 0,
//! the bare containers deleted and the bundle's sandbox killed.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use threadbox_core::domain::{pool_key, Cause, MemberState, ThreadId};
use threadbox_core::ports::{
    DurableQueue, ExecCommand, ExecRequest, NetworkProfile, SandboxProvider, SystemClock,
    WarmPoolStore,
};
use threadbox_core::usecases::{Config, SweepOptions, Threadbox, WarmPool, DEFAULT_POOL_MAX_AGE};
use threadbox_sqlite::{QueueConfig, SqliteQueue, SqliteSessionStore};
use threadbox_testing::bench::{self, percentile};

#[path = "support/bare.rs"]
mod bare;
#[path = "../tests/support/sandboxes.rs"]
mod sandboxes;
use bare::BareRunc;
use sandboxes::{bench_runc, state_config};

const DEFAULT_RUNS: usize = 20;
/// The issue's goal: the pooled path under half of bare runc's.
const GOAL_RATIO: f64 = 0.5;

fn thread(name: &str) -> ThreadId {
    ThreadId::parse(name).expect("thread id")
}

/// `true`, run as its own argv (the provider wraps it in its status shell either way).
fn run_true() -> ExecRequest {
    ExecRequest {
        command: ExecCommand::Argv(vec!["true".into()]),
        ..ExecRequest::shell("true")
    }
}

/// One row's samples: the whole, and its two halves.
struct Row {
    name: &'static str,
    halves: [&'static str; 2],
    total: Vec<Duration>,
    first: Vec<Duration>,
    second: Vec<Duration>,
}

impl Row {
    fn new(name: &'static str, halves: [&'static str; 2]) -> Self {
        Self {
            name,
            halves,
            total: Vec::new(),
            first: Vec::new(),
            second: Vec::new(),
        }
    }

    fn push(&mut self, first: Duration, total: Duration) {
        self.first.push(first);
        self.second.push(total - first);
        self.total.push(total);
    }

    fn median(&self) -> f64 {
        percentile(&self.total, 0.5)
    }
}

async fn timed_first_exec(tb: &Threadbox, id: &ThreadId, pooled: bool) -> (Duration, Duration) {
    let started = Instant::now();
    let handle = tb.resolve(id).await.expect("resolve");
    let resolved = started.elapsed();
    let out = tb.exec(id, run_true()).await.expect("exec");
    let total = started.elapsed();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert!(handle.created, "{handle:?}");
    assert_eq!(handle.pooled, pooled, "{handle:?}");
    (resolved, total)
}

async fn sweep(tb: &Threadbox) -> threadbox_core::usecases::SweepReport {
    let report = tb
        .sweep(SweepOptions::for_duration(Duration::from_secs(120)))
        .await;
    assert_eq!(report.failures, 0, "{report:?}");
    report
}

async fn ready_members(store: &dyn WarmPoolStore) -> usize {
    store
        .unclaimed(&pool_key(&NetworkProfile::Restricted), 64)
        .await
        .expect("pool members")
        .iter()
        .filter(|m| m.state == MemberState::Ready)
        .count()
}

async fn quietly<T>(fut: impl Future<Output = T>) -> T {
    let out = fut.await;
    // Let the host settle (teardown, the reaper) before the next timed run.
    tokio::time::sleep(Duration::from_millis(50)).await;
    out
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let Some(runc) = bench_runc("warm_pool") else {
        return;
    };
    let runs = bench::runs(DEFAULT_RUNS);
    let dir = tempfile::tempdir().expect("temp dir");
    let config = state_config(dir.path(), runc.clone());
    let Some((provider, bundle_maker)) = bare::providers("warm_pool", config, dir.path()).await
    else {
        return;
    };

    let db = dir.path().join("threadbox.db");
    let store = Arc::new(SqliteSessionStore::open(&db).expect("open the store"));
    let events: Arc<dyn DurableQueue> =
        Arc::new(SqliteQueue::open(&db, "lifecycle", QueueConfig::default()).expect("queue"));
    let unpooled = Threadbox::new(
        store.clone(),
        provider.clone(),
        events,
        Arc::new(SystemClock),
        Config::default(),
    );
    let pool = WarmPool {
        store: store.clone(),
        size: 1,
        max_age: DEFAULT_POOL_MAX_AGE,
    };
    let pooled = unpooled.clone().with_warm_pool(pool.clone());
    let drain = unpooled
        .clone()
        .with_warm_pool(WarmPool { size: 0, ..pool });

    let (bare, source) = BareRunc::on_copy_of(&bundle_maker, runc, dir.path()).await;

    let mut pooled_row = Row::new("pooled (warm pool)", ["resolve", "exec"]);
    let mut unpooled_row = Row::new("unpooled (create)", ["resolve", "exec"]);
    let mut bare_row = Row::new("bare runc", ["run --detach", "exec true"]);
    let mut refill = Vec::with_capacity(runs);
    let mut second_exec = Vec::with_capacity(runs);
    let mut runc_state = Vec::with_capacity(runs);

    // One untimed round first: caches, the page cache, runc's binary, SQLite's file.
    for n in 0..=runs {
        let warmup = n == 0;
        // The janitor's sweep refills the pool (untimed), so a member is ready for this round.
        let started = Instant::now();
        let report = sweep(&pooled).await;
        if !warmup {
            refill.push(started.elapsed());
        }
        assert!(
            ready_members(store.as_ref()).await >= 1,
            "no ready member after a sweep: {report:?}"
        );
        for step in 0..3 {
            match (n + step) % 3 {
                0 => {
                    let id = thread(&format!("bench-pooled-{n}"));
                    let (first, total) = quietly(timed_first_exec(&pooled, &id, true)).await;
                    // Diagnostic: the same command again, the container's cgroup now cached.
                    let started = Instant::now();
                    let again = pooled.exec(&id, run_true()).await.expect("exec again");
                    let again_took = started.elapsed();
                    assert_eq!(again.exit_code, Some(0), "{again:?}");
                    if !warmup {
                        pooled_row.push(first, total);
                        second_exec.push(again_took);
                    }
                    pooled.destroy(&id, Cause::User).await.expect("destroy");
                }
                1 => {
                    let id = thread(&format!("bench-unpooled-{n}"));
                    let (first, total) = quietly(timed_first_exec(&unpooled, &id, false)).await;
                    if !warmup {
                        unpooled_row.push(first, total);
                    }
                    pooled.destroy(&id, Cause::User).await.expect("destroy");
                }
                _ => {
                    let id = format!("bare-{n}");
                    let (first, total) = quietly(bare.run_and_exec(&id)).await;
                    if !warmup {
                        bare_row.push(first, total);
                    }
                    let state_took = bare.remove(&id).await;
                    if !warmup {
                        runc_state.push(state_took);
                    }
                }
            }
        }
    }

    // Clean up: drain the pool (size 0 retires what is ready), drop the bare bundle's sandbox.
    let drained = sweep(&drain).await;
    assert_eq!(ready_members(store.as_ref()).await, 0, "{drained:?}");
    bundle_maker
        .kill(&source)
        .await
        .expect("kill the bare bundle");
    let left = provider.list(&BTreeMap::new()).await.expect("list");
    if !left.is_empty() {
        eprintln!("warning: {} sandboxes left after the bench", left.len());
    }

    let results = Results {
        pooled: pooled_row,
        unpooled: unpooled_row,
        bare: bare_row,
        refill,
        second_exec,
        runc_state,
    };
    results.print(runs, provider.config().user_namespaces);
}

/// What the rounds measured.
struct Results {
    pooled: Row,
    unpooled: Row,
    bare: Row,
    refill: Vec<Duration>,
    second_exec: Vec<Duration>,
    runc_state: Vec<Duration>,
}

impl Results {
    /// The rows, the diagnostics and the ratios of the medians, against the goal.
    fn print(&self, runs: usize, user_namespaces: bool) {
        println!();
        println!(
            "warm pool: first command of a new thread (resolve + exec `true`), {runs} runs each, \
             interleaved; runc provider, user namespaces {}, no disk quota; SQLite store and queue",
            user_namespaces
        );
        println!("{:<28} {:>10} {:>10}", "row", "median ms", "p90 ms");
        for row in [&self.pooled, &self.unpooled, &self.bare] {
            println!(
                "{:<28} {:>10.1} {:>10.1}",
                row.name,
                row.median(),
                percentile(&row.total, 0.9)
            );
            for (half, samples) in row.halves.iter().zip([&row.first, &row.second]) {
                println!(
                    "{:<28} {:>10.1} {:>10.1}",
                    format!("  {half}"),
                    percentile(samples, 0.5),
                    percentile(samples, 0.9)
                );
            }
        }
        println!(
            "{:<28} {:>10.1} {:>10.1}   (untimed in the rows: the janitor's cost)",
            "refill sweep (pool of 1)",
            percentile(&self.refill, 0.5),
            percentile(&self.refill, 0.9)
        );
        println!("where a first exec goes (diagnostics, not in the rows):");
        for (name, samples) in [
            ("pooled, second exec", &self.second_exec),
            ("one `runc state` call", &self.runc_state),
        ] {
            println!(
                "{:<28} {:>10.1} {:>10.1}",
                format!("  {name}"),
                percentile(samples, 0.5),
                percentile(samples, 0.9)
            );
        }
        let (p, u, b) = (
            self.pooled.median(),
            self.unpooled.median(),
            self.bare.median(),
        );
        println!();
        println!("ratios of medians:");
        println!("  pooled / bare runc   {:.2}", p / b);
        println!("  pooled / unpooled    {:.2}", p / u);
        println!("  unpooled / bare runc {:.2}", u / b);
        println!(
            "  pooled / bare runc's run --detach alone {:.2}",
            p / percentile(&self.bare.first, 0.5)
        );
        println!(
            "goal (the pooled path under half of bare runc's create, pooled / bare runc < {GOAL_RATIO}): {}",
            if p / b < GOAL_RATIO { "met" } else { "not met" }
        );
    }
}
