//! The load run shared by `cli/tests/load.rs` (a few dozen threads, in CI) and
//! `cli/benches/load.rs` (a thousand, in `scripts/bench.sh`): many threads resolved through the
//! real `threadbox dev` with bounded concurrency, each running a command in its own runc sandbox;
//! then the janitor, with tiny idle and retention windows, reaps every sandbox. Only loopback is
//! touched, and the run is bounded in count and time.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;

use super::DevServer;

/// What a load run is asked to do.
pub struct LoadPlan {
    pub threads: usize,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// How long the janitor may take to reap everything once the load is done.
    pub reap_deadline: Duration,
}

/// What a load run measured.
#[derive(Debug)]
pub struct LoadReport {
    pub threads: usize,
    pub concurrency: usize,
    pub wall: Duration,
    /// Per request (resolve + create on first use + the command), sorted.
    pub latencies: Vec<Duration>,
    /// The most sandboxes alive at once, sampled while the load ran.
    pub peak_sandboxes: usize,
    /// `threadbox dev`'s peak resident memory (VmHWM), and its resident memory at the end.
    pub peak_rss_kib: u64,
    pub end_rss_kib: u64,
    /// The machine's MemAvailable before the load, at its lowest, and after the reaping.
    pub mem_available_before_kib: u64,
    pub mem_available_min_kib: u64,
    pub mem_available_after_kib: u64,
    /// How long after the last request the janitor had reaped every sandbox.
    pub reaped_after: Duration,
    /// Open file descriptors and threads of `threadbox dev` before and after.
    pub fds_before: usize,
    pub fds_after: usize,
    pub threads_before: usize,
    pub threads_after: usize,
}

impl LoadReport {
    pub fn percentile_ms(&self, p: f64) -> f64 {
        let idx = ((self.latencies.len() as f64 - 1.0) * p).round() as usize;
        self.latencies[idx].as_secs_f64() * 1000.0
    }

    pub fn print(&self) {
        let mib = |kib: u64| kib as f64 / 1024.0;
        println!();
        println!(
            "load: {} threads through threadbox dev (runc), {} requests in flight, each one exec in a fresh sandbox",
            self.threads, self.concurrency
        );
        println!(
            "  wall time          {:.1} s ({:.1} threads/s)",
            self.wall.as_secs_f64(),
            self.threads as f64 / self.wall.as_secs_f64()
        );
        println!(
            "  request latency    median {:.1} ms, p99 {:.1} ms (resolve, create, first exec)",
            self.percentile_ms(0.5),
            self.percentile_ms(0.99)
        );
        println!("  sandboxes at peak  {}", self.peak_sandboxes);
        println!(
            "  threadbox dev RSS  peak {:.1} MiB (VmHWM), {:.1} MiB after reaping",
            mib(self.peak_rss_kib),
            mib(self.end_rss_kib)
        );
        println!(
            "  machine available  {:.0} MiB before, {:.0} MiB at the lowest, {:.0} MiB after",
            mib(self.mem_available_before_kib),
            mib(self.mem_available_min_kib),
            mib(self.mem_available_after_kib)
        );
        println!(
            "  reaped             every sandbox {:.1} s after the last request",
            self.reaped_after.as_secs_f64()
        );
        println!(
            "  leaks              fds {} → {}, OS threads {} → {}, containers 0, bundles 0, child processes 0",
            self.fds_before, self.fds_after, self.threads_before, self.threads_after
        );
    }
}

/// Flags for the server a load run needs: idle and retention short enough that the janitor
/// reaps everything soon after the load.
///
/// The load keeps up to a thousand idle sandboxes alive at once, more than the default cap (as
/// many as fit in memory if each used its whole 512 MiB); idle ones use a few MiB, so the load
/// raises the cap, as an operator who knows the workload would.
pub const LOAD_FLAGS: &[&str] = &[
    "--idle-pause",
    "2s",
    "--retention",
    "4s",
    "--max-sandboxes",
    "2000",
];

pub async fn run(dev: &DevServer, plan: &LoadPlan) -> LoadReport {
    let pid = dev.pid();
    let data = dev.data_dir().to_path_buf();
    let fds_before = fd_count(pid);
    let threads_before = os_threads(pid);
    let mem_available_before_kib = mem_available_kib();

    // Sample the sandbox count and free memory while the load runs.
    let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let (sampling, data) = (sampling.clone(), data.clone());
        std::thread::spawn(move || {
            let (mut peak, mut min_avail) = (0, u64::MAX);
            while sampling.load(std::sync::atomic::Ordering::SeqCst) {
                peak = peak.max(containers(&data).len());
                min_avail = min_avail.min(mem_available_kib());
                std::thread::sleep(Duration::from_millis(500));
            }
            (peak, min_avail)
        })
    };

    let started = Instant::now();
    let deadline = started + Duration::from_secs(60) + plan.threads as u32 * Duration::from_secs(1);
    let mut latencies: Vec<Duration> = futures::stream::iter(0..plan.threads)
        .map(|i| async move {
            let thread = format!("load-{i:05}");
            let t0 = Instant::now();
            let out = dev
                .post(
                    &format!("/v1/threads/{thread}/exec"),
                    Some(json!({"cmd": format!("echo {i}")})),
                )
                .await;
            assert_eq!(out["stdout"], format!("{i}\n"), "{thread}: {out}");
            assert!(Instant::now() < deadline, "the load ran past its deadline");
            t0.elapsed()
        })
        .buffer_unordered(plan.concurrency.max(1))
        .collect()
        .await;
    let wall = started.elapsed();
    latencies.sort();
    let peak_rss_kib = status_kib(pid, "VmHWM:");

    // The janitor pauses each thread after 2 s and destroys it after 4 s idle.
    let load_done = Instant::now();
    loop {
        let left = containers(&data);
        let bundles = bundles(&data);
        if left.is_empty() && bundles.is_empty() {
            break;
        }
        assert!(
            load_done.elapsed() < plan.reap_deadline,
            "not reaped within {:?}: {} containers, {} bundles left",
            plan.reap_deadline,
            left.len(),
            bundles.len()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let reaped_after = load_done.elapsed();
    sampling.store(false, std::sync::atomic::Ordering::SeqCst);
    let (peak_sandboxes, mem_available_min_kib) = sampler.join().unwrap();

    // Every record says destroyed.
    let mut destroyed = 0;
    let mut cursor = String::new();
    loop {
        let page = dev.get(&format!("/v1/threads?limit=500{cursor}")).await;
        for r in page["threads"].as_array().unwrap() {
            assert_eq!(r["status"], "destroyed", "{r}");
            destroyed += 1;
        }
        match page["next"].as_str() {
            Some(next) => cursor = format!("&cursor={next}"),
            None => break,
        }
    }
    assert_eq!(destroyed, plan.threads);
    // Nothing left behind in the server: no child processes, descriptors and threads back to
    // where they were (a little slack for pooled connections and idle runtime workers).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(children(pid), Vec::<u32>::new(), "child processes left");
    let fds_after = fd_count(pid);
    let threads_after = os_threads(pid);
    assert!(
        fds_after <= fds_before + 16,
        "fds {fds_before} → {fds_after}"
    );
    LoadReport {
        threads: plan.threads,
        concurrency: plan.concurrency,
        wall,
        latencies,
        peak_sandboxes,
        peak_rss_kib,
        end_rss_kib: status_kib(pid, "VmRSS:"),
        mem_available_before_kib,
        mem_available_min_kib,
        mem_available_after_kib: mem_available_kib(),
        reaped_after,
        fds_before,
        fds_after,
        threads_before,
        threads_after,
    }
}

fn containers(data: &Path) -> Vec<String> {
    Command::new("runc")
        .arg("--root")
        .arg(data.join("sandboxes").join("runc"))
        .args(["list", "-q"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn bundles(data: &Path) -> BTreeSet<String> {
    std::fs::read_dir(data.join("sandboxes").join("sandboxes"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

fn os_threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count())
}

/// A `kB` field of `/proc/<pid>/status`.
fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn mem_available_kib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("MemAvailable:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Processes whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok()?.parse::<u32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                .and_then(|stat| {
                    // The fourth field, after the command name in parentheses.
                    let after = stat.rsplit_once(')')?.1;
                    after.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}
