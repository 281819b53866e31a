//! Memory per runc sandbox, idle and paused: what one thread's sandbox costs the host while it
//! waits. Prints figures; asserts nothing about size. Run as root with runc installed:
//!
//! ```text
//! cargo bench -p threadbox-runc --bench runc_memory
//! ```
//!
//! N sandboxes (10, `THREADBOX_BENCH_SANDBOXES`) are created and each runs one command (so the
//! shell and its libraries have been loaded once, as after a thread's first message), then left
//! idle; each one's cgroup charge (`memory.usage_in_bytes` on cgroup v1, `memory.current` on v2,
//! page cache included) is read. Then all are paused (frozen) and read again. (The machine's
//! free memory is not used: on a shared build machine other processes move it far more than a
//! sandbox does.)

use std::time::Duration;

use threadbox_core::ports::{CreateSandbox, ExecRequest, NetworkProfile, SandboxProvider};
use threadbox_runc::RuncProvider;

#[path = "../tests/support/sandboxes.rs"]
mod sandboxes;
use sandboxes::{bench_request, bench_runc, state_config};

fn request(n: usize) -> CreateSandbox {
    bench_request("bench-memory", n, NetworkProfile::Restricted)
}

fn mib(bytes: f64) -> String {
    format!("{:.2}", bytes / (1024.0 * 1024.0))
}

/// Median and 99th percentile (nearest rank) of byte counts.
fn summary(mut values: Vec<u64>) -> (f64, f64) {
    values.sort_unstable();
    let rank = |p: f64| ((p * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1;
    (values[rank(0.5)] as f64, values[rank(0.99)] as f64)
}

async fn read_all(p: &RuncProvider, ids: &[String]) -> Vec<u64> {
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        out.push(p.memory_usage(id).await.expect("memory usage"));
    }
    out
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let Some(runc) = bench_runc("runc_memory") else {
        return;
    };
    let count: usize = std::env::var("THREADBOX_BENCH_SANDBOXES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10)
        .max(1);
    let dir = tempfile::tempdir().expect("temp dir");
    let p = RuncProvider::open(state_config(dir.path(), runc))
        .await
        .expect("open provider");

    let mut ids = Vec::with_capacity(count);
    for n in 0..count {
        let id = p.create(request(n)).await.expect("create").sandbox_id;
        let out = p
            .exec(&id, ExecRequest::shell("echo ready"))
            .await
            .expect("first exec");
        assert_eq!(out.exit_code, Some(0));
        ids.push(id);
    }
    // Let the first commands' exits settle before reading.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle = read_all(&p, &ids).await;

    for id in &ids {
        p.pause(id).await.expect("pause");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let paused = read_all(&p, &ids).await;

    for id in &ids {
        p.kill(id).await.expect("kill");
    }

    let (idle_median, idle_p99) = summary(idle);
    let (paused_median, paused_p99) = summary(paused);
    println!();
    println!(
        "runc sandbox memory, {count} sandboxes (cgroup charge incl. page cache; p99 = nearest rank)"
    );
    println!("{:<10} {:>12} {:>12}", "state", "median MiB", "p99 MiB");
    for (state, median, p99) in [
        ("idle", idle_median, idle_p99),
        ("paused", paused_median, paused_p99),
    ] {
        println!("{:<10} {:>12} {:>12}", state, mib(median), mib(p99));
    }
}
