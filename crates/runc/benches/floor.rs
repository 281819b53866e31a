//! At the floor: how close threadbox's create, exec, pause and resume come to runc's own, a new
//! thread's first command with the warm pool against a bare cold create, and the time a paused
//! thread takes from a command sent to it to its first byte of output. Bare runc is measured in
//! the same run, interleaved, on a copy of the sandbox's own bundle (its `config.json`: user
//! namespace, mounts, cgroup limits, seccomp; and its root filesystem). Figures only: the goals
//! are printed as met or not, never asserted. Run as root with runc installed:
//!
//! ```text
//! cargo bench -p threadbox-runc --bench floor
//! THREADBOX_BENCH_RUNS=30 cargo bench -p threadbox-runc --bench floor
//! THREADBOX_BENCH_COMMAND_RUNNER=0 cargo bench -p threadbox-runc --bench floor  # via runc exec
//! ```
//!
//! threadbox here is the use cases (`Threadbox`) over the real runc provider, the SQLite store
//! and the SQLite lifecycle queue, as `threadbox dev` wires them, without its HTTP layer.
//! Each round (`THREADBOX_BENCH_RUNS`, 15 by default, after one untimed round) times, in pairs
//! whose order alternates:
//!
//! - **create → first command**: `resolve` of a new thread (no pool) + `exec true`, against
//!   `runc run --detach` + `runc exec <id> true` (the bare cold create).
//! - **warm pool**: the same on a threadbox with a pool of one, refilled by an untimed sweep
//!   before each round, against the same bare cold create.
//! - **exec**: `exec true` in an active thread, against `runc exec <id> true`.
//! - **pause** and **resume** of that thread (`Threadbox::pause`, `Threadbox::resume`),
//!   against `runc pause` and `runc resume` of a bare container on the bundle.
//! - **wake**: `exec_streaming` of `echo woke` to the paused thread (it resumes and runs in the
//!   same call), to the first output byte, against `runc resume` + `runc exec` of the same to
//!   its first byte.
//!
//! Then the tables of where the time goes (every threadbox span closed during each timed call,
//! collected by a tracing layer: `support/spans.rs`), and the warm pool's burst: 10 new threads
//! within one second (one every 100 ms, each resolve + `exec true` running on its own) with the
//! default pool size, once refilled only by the janitor's sweep and once refilled on each take
//! (`Threadbox::with_pool_refills`, as `threadbox dev` runs it): how many took a member.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use threadbox_core::domain::{pool_key, Cause, MemberState, ThreadId};
use threadbox_core::ports::{
    DurableQueue, ExecCommand, ExecRequest, NetworkProfile, OutputChunk, SandboxProvider,
    SystemClock, WarmPoolStore,
};
use threadbox_core::usecases::{Config, SweepOptions, Threadbox, WarmPool, DEFAULT_POOL_MAX_AGE};
use threadbox_runc::DEFAULT_WARM_POOL;
use threadbox_sqlite::{QueueConfig, SqliteQueue, SqliteSessionStore};
use threadbox_testing::bench::{self, load_average, percentile};

#[path = "support/bare.rs"]
mod bare;
#[path = "../tests/support/sandboxes.rs"]
mod sandboxes;
#[path = "support/spans.rs"]
mod spans;

use bare::BareRunc;
use sandboxes::{bench_runc, state_config};
use spans::{Breakdown, SpanTimes};

const DEFAULT_RUNS: usize = 15;
const BURST: usize = 10;
const BURST_WINDOW: Duration = Duration::from_secs(1);

fn thread(name: &str) -> ThreadId {
    ThreadId::parse(name).expect("thread id")
}

fn argv(args: &[&str]) -> ExecRequest {
    ExecRequest {
        command: ExecCommand::Argv(args.iter().map(|a| a.to_string()).collect()),
        ..ExecRequest::shell("true")
    }
}

/// One figure: threadbox's samples and bare runc's, paired.
struct Figure {
    name: &'static str,
    goal: &'static str,
    /// threadbox / bare runc at most this (`None`: an absolute goal, in `goal`).
    ratio_goal: Option<f64>,
    ours: Vec<Duration>,
    bare: Vec<Duration>,
}

impl Figure {
    fn new(name: &'static str, ratio_goal: Option<f64>, goal: &'static str) -> Self {
        Self {
            name,
            goal,
            ratio_goal,
            ours: Vec::new(),
            bare: Vec::new(),
        }
    }

    fn ratio(&self) -> f64 {
        percentile(&self.ours, 0.5) / percentile(&self.bare, 0.5)
    }
}

/// Let the host settle (teardown, the reaper) before a timed call.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(20)).await;
}

async fn sweep(tb: &Threadbox) {
    let report = tb
        .sweep(SweepOptions::for_duration(Duration::from_secs(120)))
        .await;
    assert_eq!(report.failures, 0, "{report:?}");
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

/// A new thread's first command: resolve, then `exec true`; whether it came from the pool.
async fn first_command(tb: &Threadbox, id: &ThreadId) -> (Duration, bool) {
    let started = Instant::now();
    let handle = tb.resolve(id).await.expect("resolve");
    let out = tb.exec(id, argv(&["true"])).await.expect("exec");
    let took = started.elapsed();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert!(handle.created, "{handle:?}");
    (took, handle.pooled)
}

/// A command sent to a paused thread, to its first byte of output; and to its end.
async fn wake(tb: &Threadbox, id: &ThreadId) -> (Duration, Duration) {
    let (sink, mut chunks) = tokio::sync::mpsc::channel::<OutputChunk>(16);
    let started = Instant::now();
    let run = tb.exec_streaming(id, argv(&["echo", "woke"]), sink);
    let first = async {
        loop {
            match chunks.recv().await {
                Some(chunk) if !chunk.bytes().is_empty() => return started.elapsed(),
                Some(_) => continue,
                None => panic!("the woken command printed nothing"),
            }
        }
    };
    let (out, first) = tokio::join!(run, first);
    let out = out.expect("exec in a paused thread");
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    (first, started.elapsed())
}

struct Bench {
    times: SpanTimes,
    breakdown: Breakdown,
    record: bool,
}

impl Bench {
    /// Time `call` as threadbox's side of `path`, keeping its spans.
    async fn ours<T>(
        &mut self,
        path: &'static str,
        call: impl std::future::Future<Output = T>,
    ) -> (T, Duration) {
        settle().await;
        self.times.take();
        let started = Instant::now();
        let out = call.await;
        let took = started.elapsed();
        let spans = self.times.take();
        if self.record {
            self.breakdown.add(path, spans);
        }
        (out, took)
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let Some(runc) = bench_runc("floor") else {
        return;
    };
    let times = SpanTimes::install();
    let runs = bench::runs(DEFAULT_RUNS);
    let load_before = load_average();
    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = state_config(dir.path(), runc.clone());
    // `THREADBOX_BENCH_COMMAND_RUNNER=0`: every command through `runc exec`, as before the
    // runner (the "before" of BENCHMARKS.md's table, run back to back with the default).
    config.command_runner = std::env::var("THREADBOX_BENCH_COMMAND_RUNNER").as_deref() != Ok("0");
    let Some((provider, bundle_maker)) = bare::providers("floor", config, dir.path()).await else {
        return;
    };
    let user_namespaces = provider.config().user_namespaces;

    let db = dir.path().join("threadbox.db");
    let store = Arc::new(SqliteSessionStore::open(&db).expect("open the store"));
    let events: Arc<dyn DurableQueue> =
        Arc::new(SqliteQueue::open(&db, "lifecycle", QueueConfig::default()).expect("queue"));
    let tb = Threadbox::new(
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
    let pooled = tb.clone().with_warm_pool(pool.clone());

    let (bare, source) = BareRunc::on_copy_of(&bundle_maker, runc, dir.path()).await;
    let live = thread("floor-live");
    tb.resolve(&live).await.expect("the live thread");
    bare.run("bare-live").await;

    let mut create = Figure::new("new thread: create → first command", Some(1.1), "≤ 1.1");
    let mut warm = Figure::new(
        "new thread, warm pool, vs a bare cold create",
        Some(0.5),
        "≤ 0.5",
    );
    let mut exec = Figure::new("exec round trip", Some(0.8), "≤ 0.8");
    let mut pause = Figure::new("pause", Some(1.2), "≤ 1.2");
    let mut resume = Figure::new("resume", Some(1.5), "≤ 1.5");
    let mut woke = Figure::new(
        "wake: paused thread, command → first output byte",
        None,
        "≤ 20 ms",
    );
    // The bare cold create's halves, for the create path's parts.
    let (mut bare_run, mut bare_exec) = (Vec::new(), Vec::new());
    let mut bench = Bench {
        times,
        breakdown: Breakdown::default(),
        record: false,
    };

    for n in 0..=runs {
        bench.record = n > 0;
        let ours_first = n % 2 == 0;
        sweep(&pooled).await;
        assert!(ready_members(store.as_ref()).await >= 1, "no ready member");

        // A cold create, threadbox's and bare runc's; the pooled first command.
        let fresh = thread(&format!("floor-create-{n}"));
        let bare_id = format!("bare-create-{n}");
        let mut ours = Duration::ZERO;
        let mut theirs = Duration::ZERO;
        let mut bare_ran = Duration::ZERO;
        for side in [ours_first, !ours_first] {
            if side {
                let ((took, from_pool), _) = bench
                    .ours("create → first command", first_command(&tb, &fresh))
                    .await;
                assert!(!from_pool);
                ours = took;
            } else {
                settle().await;
                (bare_ran, theirs) = bare.run_and_exec(&bare_id).await;
            }
        }
        tb.destroy(&fresh, Cause::User).await.expect("destroy");
        bare.remove(&bare_id).await;
        let fresh = thread(&format!("floor-pooled-{n}"));
        let ((pooled_took, from_pool), _) = bench
            .ours(
                "new thread with the warm pool",
                first_command(&pooled, &fresh),
            )
            .await;
        assert!(from_pool, "the pooled thread did not take a member");
        pooled.destroy(&fresh, Cause::User).await.expect("destroy");

        // exec, pause, resume and wake on the live thread and the live bare container.
        let mut round = [Duration::ZERO; 8];
        for side in [ours_first, !ours_first] {
            if side {
                let (out, took) = bench.ours("exec", tb.exec(&live, argv(&["true"]))).await;
                assert_eq!(out.expect("exec").exit_code, Some(0));
                round[0] = took;
                let (paused, took) = bench.ours("pause", tb.pause(&live)).await;
                paused.expect("pause");
                round[1] = took;
                let (resumed, took) = bench.ours("resume", tb.resume(&live)).await;
                assert!(resumed.expect("resume").resumed);
                round[2] = took;
                tb.pause(&live).await.expect("pause before the wake");
                let ((first, _), _) = bench
                    .ours("wake: paused → first output byte", wake(&tb, &live))
                    .await;
                round[3] = first;
            } else {
                settle().await;
                round[4] = bare.timed(&["exec", "bare-live", "true"]).await;
                settle().await;
                round[5] = bare.timed(&["pause", "bare-live"]).await;
                settle().await;
                round[6] = bare.timed(&["resume", "bare-live"]).await;
                bare.call(&["pause", "bare-live"]).await;
                settle().await;
                let started = Instant::now();
                bare.call(&["resume", "bare-live"]).await;
                bare.exec_first_byte("bare-live", &["echo", "woke"]).await;
                round[7] = started.elapsed();
            }
        }
        if n == 0 {
            continue;
        }
        create.ours.push(ours);
        create.bare.push(theirs);
        bare_run.push(bare_ran);
        bare_exec.push(theirs - bare_ran);
        warm.ours.push(pooled_took);
        warm.bare.push(theirs);
        for (i, figure) in [&mut exec, &mut pause, &mut resume, &mut woke]
            .into_iter()
            .enumerate()
        {
            figure.ours.push(round[i]);
            figure.bare.push(round[i + 4]);
        }
    }

    let figures = [create, warm, exec, pause, resume, woke];
    println!();
    println!(
        "at the floor: threadbox (use cases, runc provider, SQLite store and queue) against bare \
         runc on a copy of the same bundle, {runs} rounds, interleaved; user namespaces {}, \
         no disk quota",
        user_namespaces
    );
    println!(
        "load average (1, 5, 15 min) at the start: {load_before}; at the end: {}",
        load_average()
    );
    println!(
        "| figure | threadbox median ms (p90) | bare runc median ms (p90) | ratio | goal | met |"
    );
    println!("|---|---|---|---|---|---|");
    for f in &figures {
        let met = match f.ratio_goal {
            Some(goal) => f.ratio() <= goal,
            None => percentile(&f.ours, 0.5) <= 20.0,
        };
        println!(
            "| {} | {:.1} ({:.1}) | {:.1} ({:.1}) | {:.2} | {} | {} |",
            f.name,
            percentile(&f.ours, 0.5),
            percentile(&f.ours, 0.9),
            percentile(&f.bare, 0.5),
            percentile(&f.bare, 0.9),
            f.ratio(),
            f.goal,
            if met { "yes" } else { "no" }
        );
    }
    println!(
        "(bare runc's side: run --detach + exec true for both new-thread rows; exec true; pause; \
         resume; resume + exec echo to its first byte for the wake)"
    );
    println!(
        "bare cold create's halves: run --detach {:.1} ms, exec true {:.1} ms (medians)",
        percentile(&bare_run, 0.5),
        percentile(&bare_exec, 0.5)
    );
    bench.breakdown.print();

    burst(&tb, &store).await;

    // Clean up: the pool drained, the live thread destroyed, the bare containers deleted.
    sweep(&tb.clone().with_warm_pool(WarmPool { size: 0, ..pool })).await;
    tb.destroy(&live, Cause::User).await.expect("destroy");
    bare.remove("bare-live").await;
    bundle_maker
        .kill(&source)
        .await
        .expect("kill the bare bundle");
    let left = provider.list(&BTreeMap::new()).await.expect("list");
    if !left.is_empty() {
        eprintln!("warning: {} sandboxes left after the bench", left.len());
    }
}

/// 10 new threads within a second with the default pool size: refilled by the sweep only, then
/// on each take. Prints how many took a member, and their first commands' median.
async fn burst(tb: &Threadbox, store: &Arc<SqliteSessionStore>) {
    println!();
    println!(
        "warm pool burst: {BURST} new threads within {BURST_WINDOW:?} (one every {:?}), default \
         pool size {DEFAULT_WARM_POOL}, filled by a sweep first",
        BURST_WINDOW / BURST as u32
    );
    println!("| refill | took a member | first command median ms (p90) |");
    println!("|---|---|---|");
    for on_take in [false, true] {
        let pool = WarmPool {
            store: store.clone(),
            size: DEFAULT_WARM_POOL,
            max_age: DEFAULT_POOL_MAX_AGE,
        };
        let mut pooled = tb.clone().with_warm_pool(pool.clone());
        let stop = Arc::new(tokio::sync::Notify::new());
        let refiller = on_take.then(|| {
            let taken = Arc::new(tokio::sync::Notify::new());
            pooled = pooled.clone().with_pool_refills(taken.clone());
            let (refilling, stop) = (pooled.clone(), stop.clone());
            // What `threadbox dev` runs; a refill under way finishes before it stops.
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = taken.notified() => {}
                        _ = stop.notified() => break,
                    }
                    refilling.refill_pool().await;
                }
            })
        });
        sweep(&pooled).await;
        let mut runs = Vec::new();
        for i in 0..BURST {
            let (tb, id) = (
                pooled.clone(),
                thread(&format!("floor-burst-{on_take}-{i}")),
            );
            runs.push(tokio::spawn(async move {
                let (took, from_pool) = first_command(&tb, &id).await;
                tb.destroy(&id, Cause::User).await.expect("destroy");
                (took, from_pool)
            }));
            tokio::time::sleep(BURST_WINDOW / BURST as u32).await;
        }
        let mut took = Vec::new();
        let mut members = 0;
        for run in runs {
            let (t, from_pool) = run.await.expect("burst thread");
            took.push(t);
            members += usize::from(from_pool);
        }
        if let Some(refiller) = refiller {
            stop.notify_one();
            refiller.await.expect("refiller");
        }
        println!(
            "| {} | {members} of {BURST} | {:.1} ({:.1}) |",
            if on_take {
                "on each take (threadbox dev)"
            } else {
                "the janitor's sweep only"
            },
            percentile(&took, 0.5),
            percentile(&took, 0.9)
        );
        // Drain what the refills made before the next row.
        sweep(&tb.clone().with_warm_pool(WarmPool { size: 0, ..pool })).await;
    }
}
