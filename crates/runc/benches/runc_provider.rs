//! How fast the runc provider's lifecycle is, against the targets of the issue that asked for
//! it (not asserted: they depend on the machine). Run as root with runc installed:
//!
//! ```text
//! cargo bench -p threadbox-runc --bench runc_provider
//! THREADBOX_BENCH_USER_NAMESPACES=0 cargo bench -p threadbox-runc --bench runc_provider
//! ```
//!
//! Prints the median and 99th percentile (nearest rank) of each operation over `RUNS` runs, and
//! the time to destroy a sandbox holding 100,000 files (`BIG_TREE_RUNS` runs). Creates and the
//! big destroy are measured twice in the same run, with the disk quota (the default: the home is
//! an image of its own) and without it (a plain directory), so the quota's cost is a difference
//! measured on the same machine at the same time.

use std::time::{Duration, Instant};

use threadbox_core::ports::{CreateSandbox, ExecRequest, NetworkProfile, SandboxProvider};
use threadbox_runc::{RuncProvider, SandboxLimits};

#[path = "../tests/support/sandboxes.rs"]
mod sandboxes;
use sandboxes::{bench_request, bench_runc, state_config};

const RUNS: usize = 30;

fn request(n: usize) -> CreateSandbox {
    bench_request("bench", n, NetworkProfile::Restricted)
}

struct Row {
    name: &'static str,
    target_ms: Option<f64>,
    samples: Vec<Duration>,
}

impl Row {
    fn new(name: &'static str, target_ms: Option<f64>) -> Self {
        Self {
            name,
            target_ms,
            samples: Vec::with_capacity(RUNS),
        }
    }

    fn percentile(&self, p: f64) -> f64 {
        let mut sorted = self.samples.clone();
        sorted.sort();
        let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1].as_secs_f64() * 1000.0
    }
}

async fn timed<T>(samples: &mut Vec<Duration>, fut: impl std::future::Future<Output = T>) -> T {
    let start = Instant::now();
    let out = fut.await;
    samples.push(start.elapsed());
    out
}

/// Sandboxes destroyed with 100,000 files in them (each takes seconds to fill).
const BIG_TREE_RUNS: usize = 3;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let Some(runc) = bench_runc("runc_provider") else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = state_config(dir.path(), runc);
    // THREADBOX_BENCH_USER_NAMESPACES=0 measures sandboxes without their own user namespace
    // (host uid 1000, as before per-sandbox id ranges), for the before/after comparison.
    config.user_namespaces = std::env::var("THREADBOX_BENCH_USER_NAMESPACES").as_deref() != Ok("0");
    println!("user namespaces: {}", config.user_namespaces);
    let mut plain_config = config.clone();
    plain_config.state_dir = dir.path().join("plain");
    plain_config.limits = SandboxLimits {
        disk: None,
        ..config.limits.clone()
    };
    let quota = config.limits.disk.expect("a quota by default");
    println!(
        "disk quota: {} MiB, {} files",
        quota.bytes >> 20,
        quota.inodes
    );
    let p = RuncProvider::open(config).await.expect("open provider");
    let plain = RuncProvider::open(plain_config)
        .await
        .expect("open the provider without a quota");
    let echo = || ExecRequest::shell("true");

    let mut create_exec = Row::new("create to first exec", Some(100.0));
    let mut create_exec_plain = Row::new("  without disk quota", None);
    let mut exec_rt = Row::new("exec round trip", Some(40.0));
    let mut pause = Row::new("pause", Some(20.0));
    let mut resume = Row::new("resume (connect)", Some(20.0));
    let mut kill = Row::new("kill", None);

    // Alternating, so both see the same machine; the quota's spare images refill in between
    // as they would between creates in use.
    let mut ids = Vec::new();
    let mut plain_ids = Vec::new();
    for n in 0..RUNS {
        for (provider, row, kept) in [
            (&plain, &mut create_exec_plain, &mut plain_ids),
            (&p, &mut create_exec, &mut ids),
        ] {
            let id = timed(&mut row.samples, async {
                let id = provider
                    .create(request(n))
                    .await
                    .expect("create")
                    .sandbox_id;
                let out = provider.exec(&id, echo()).await.expect("first exec");
                assert_eq!(out.exit_code, Some(0));
                id
            })
            .await;
            kept.push(id);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for id in &plain_ids {
        plain.kill(id).await.expect("kill");
    }

    let id = ids[0].clone();
    for _ in 0..RUNS {
        let out = timed(&mut exec_rt.samples, p.exec(&id, echo())).await;
        assert_eq!(out.expect("exec").exit_code, Some(0));
    }
    for _ in 0..RUNS {
        timed(&mut pause.samples, p.pause(&id))
            .await
            .expect("pause");
        let connected = timed(&mut resume.samples, p.connect(&id))
            .await
            .expect("resume");
        assert!(connected.resumed);
    }
    for id in &ids {
        timed(&mut kill.samples, p.kill(id)).await.expect("kill");
    }

    println!();
    println!("runc provider, {RUNS} runs each (p99 = nearest rank; with {RUNS} runs, the slowest)");
    println!(
        "{:<22} {:>10} {:>10} {:>10}",
        "operation", "median ms", "p99 ms", "target ms"
    );
    for row in [
        &create_exec,
        &create_exec_plain,
        &exec_rt,
        &pause,
        &resume,
        &kill,
    ] {
        let target = row
            .target_ms
            .map(|t| format!("< {t:.0}"))
            .unwrap_or_else(|| "-".into());
        println!(
            "{:<22} {:>10.1} {:>10.1} {:>10}",
            row.name,
            row.percentile(0.5),
            row.percentile(0.99),
            target
        );
    }

    println!(
        "the disk quota's cost at create: {:+.1} ms (median with minus median without)",
        create_exec.percentile(0.5) - create_exec_plain.percentile(0.5)
    );
    big_tree_kills(&p, &plain).await;
}

// Destroying a sandbox whose files form a large tree: one unmount and one unlink with the
// quota, the iterative removal's walk without.
async fn big_tree_kills(p: &RuncProvider, plain: &RuncProvider) {
    let mut big_kill = Row::new("kill, 100,000 files", None);
    let mut big_kill_plain = Row::new("  without disk quota", None);
    for n in 0..BIG_TREE_RUNS {
        for (provider, row) in [(p, &mut big_kill), (plain, &mut big_kill_plain)] {
            let id = provider
                .create(request(RUNS + n))
                .await
                .expect("create")
                .sandbox_id;
            let mut fill = ExecRequest::shell(
                "mkdir -p t && cd t && seq 1000 | xargs mkdir && for d in $(seq 1000); do \
                 (cd $d && seq 100 | xargs touch); done && find . -type f | wc -l",
            );
            fill.timeout = Duration::from_secs(600);
            let out = provider.exec(&id, fill).await.expect("fill");
            assert_eq!(out.stdout.trim(), "100000", "{out:?}");
            timed(&mut row.samples, provider.kill(&id))
                .await
                .expect("kill");
        }
    }
    for row in [&big_kill, &big_kill_plain] {
        println!(
            "{:<22} {:>10.1} {:>10.1} {:>10}   ({BIG_TREE_RUNS} runs: 1,000 folders of 100 files)",
            row.name,
            row.percentile(0.5),
            row.percentile(0.99),
            "-"
        );
    }
}
