//! Rootless sandboxes against root ones, in one run: create to first exec, an exec round trip,
//! pause and resume (connect), medians and their ratio. Run as root with runc installed:
//!
//! ```text
//! cargo bench -p threadbox-runc --bench runc_rootless
//! ```
//!
//! The root figures are measured in this process; the rootless ones by this same binary run
//! again as the account `threadbox-rootless` (made if missing) through `runuser`, which prints
//! its medians as one JSON line. Neither side has a disk quota (rootless cannot have one), so
//! the difference is the rootless mode's own: no cgroups (pause by signals) and runc's own user
//! namespace.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use threadbox_core::ports::{CreateSandbox, ExecRequest, NetworkProfile, SandboxProvider};
use threadbox_runc::{host_can_run_sandboxes, RuncProvider, SandboxLimits};

#[path = "../tests/support/sandboxes.rs"]
mod sandboxes;
use sandboxes::{bench_request, state_config};

const RUNS: usize = 20;
const USER: &str = "threadbox-rootless";
/// Set in the child that measures rootless.
const CHILD: &str = "THREADBOX_BENCH_ROOTLESS_CHILD";
const OPERATIONS: [&str; 4] = ["create to first exec", "exec round trip", "pause", "resume"];

fn request(n: usize) -> CreateSandbox {
    bench_request("bench-rootless", n, NetworkProfile::Restricted)
}

fn median_ms(samples: &mut [Duration]) -> f64 {
    samples.sort();
    samples[samples.len() / 2].as_secs_f64() * 1000.0
}

/// The medians of each operation over `RUNS` runs, in milliseconds.
async fn measure() -> BTreeMap<&'static str, f64> {
    let runc = host_can_run_sandboxes().expect("runc sandboxes can run here");
    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = state_config(dir.path(), runc);
    config.limits = SandboxLimits {
        disk: None,
        ..SandboxLimits::default()
    };
    let p = RuncProvider::open(config).await.expect("open the provider");
    let mut samples: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();
    let mut ids = Vec::new();
    for n in 0..RUNS {
        let start = Instant::now();
        let id = p.create(request(n)).await.expect("create").sandbox_id;
        p.exec(&id, ExecRequest::shell("true"))
            .await
            .expect("first exec");
        samples
            .entry(OPERATIONS[0])
            .or_default()
            .push(start.elapsed());
        ids.push(id);
    }
    let id = ids[0].clone();
    for _ in 0..RUNS {
        let start = Instant::now();
        let out = p.exec(&id, ExecRequest::shell("true")).await.expect("exec");
        assert_eq!(out.exit_code, Some(0));
        samples
            .entry(OPERATIONS[1])
            .or_default()
            .push(start.elapsed());
        let start = Instant::now();
        p.pause(&id).await.expect("pause");
        samples
            .entry(OPERATIONS[2])
            .or_default()
            .push(start.elapsed());
        let start = Instant::now();
        assert!(p.connect(&id).await.expect("resume").resumed);
        samples
            .entry(OPERATIONS[3])
            .or_default()
            .push(start.elapsed());
    }
    for id in &ids {
        p.kill(id).await.expect("kill");
    }
    samples
        .into_iter()
        .map(|(name, mut s)| (name, median_ms(&mut s)))
        .collect()
}

/// The rootless medians, measured by this binary run again as `USER`.
fn measure_rootless() -> Result<BTreeMap<String, f64>, String> {
    threadbox_testing::accounts::ensure_system_account(USER)?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let output = Command::new("runuser")
        .args(["-u", USER, "--"])
        .arg(exe)
        .env(CHILD, "1")
        .env("HOME", "/tmp")
        .env("TMPDIR", "/tmp")
        .output()
        .map_err(|e| format!("runuser: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "the rootless run failed: {stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let line = stdout
        .lines()
        .find(|l| l.starts_with('{'))
        .ok_or_else(|| format!("no figures from the rootless run: {stdout}"))?;
    serde_json::from_str(line).map_err(|e| format!("{e}: {line}"))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::var_os(CHILD).is_some() {
        let medians = measure().await;
        println!("{}", serde_json::to_string(&medians).expect("figures"));
        return;
    }
    if let Err(why) = host_can_run_sandboxes() {
        eprintln!("runc_rootless bench skipped: {why}");
        return;
    }
    if !rustix::process::geteuid().is_root() {
        eprintln!("runc_rootless bench skipped: run it as root (it measures both)");
        return;
    }
    let root = measure().await;
    let rootless = match measure_rootless() {
        Ok(figures) => figures,
        Err(why) => {
            eprintln!("runc_rootless bench: no rootless figures: {why}");
            return;
        }
    };
    println!();
    println!(
        "runc provider as root vs rootless, {RUNS} runs each, no disk quota on either (medians)"
    );
    println!(
        "{:<22} {:>10} {:>12} {:>8}",
        "operation", "root ms", "rootless ms", "ratio"
    );
    for name in OPERATIONS {
        let (a, b) = (root[name], rootless[name]);
        println!("{name:<22} {a:>10.1} {b:>12.1} {:>7.2}x", b / a);
    }
}
