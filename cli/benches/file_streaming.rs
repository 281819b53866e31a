//! A 1 GiB file into a sandbox and back out through the real `threadbox dev`: the file API
//! streams both ways, so the server's resident memory should grow by far less than the file
//! (the target is under 64 MiB). Prints each direction's time, throughput and the server's peak
//! growth over its resident set before (median of `RUNS` runs).
//!
//! Run as root with runc: `cargo bench -p threadbox --bench file_streaming` (part of
//! `scripts/bench.sh`). `cli/tests/file_streaming.rs` checks smaller files in CI.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::transfer::{get_zeros, put_chunked, rss, PeakRss};
use support::{dev_missing, DevServer};

const SIZE: u64 = 1 << 30;
const RUNS: usize = 3;

struct Sample {
    took: Duration,
    growth: u64,
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

fn report(direction: &str, samples: &[Sample]) {
    let mib = (SIZE >> 20) as f64;
    let seconds = median(samples.iter().map(|s| s.took.as_secs_f64()).collect());
    let growth = median(
        samples
            .iter()
            .map(|s| s.growth as f64 / f64::from(1 << 20))
            .collect(),
    );
    println!(
        "{direction:<4} {:>8.2} s {:>10.0} MiB/s {:>14.1} MiB   (target < 64 MiB)",
        seconds,
        mib / seconds,
        growth
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let missing = dev_missing();
    if !missing.is_empty() {
        eprintln!("file_streaming bench skipped: needs {}", missing.join(", "));
        return;
    }
    let dev = DevServer::start(&[]).await;
    let route = "/v1/threads/streaming/files/home/user/big.bin";
    // The thread and its sandbox exist before anything is measured.
    let ready = dev
        .post("/v1/threads/streaming/exec", Some(json!({"cmd": "true"})))
        .await;
    assert_eq!(ready["exit_code"], 0, "{ready}");

    let (mut uploads, mut downloads) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        let before = rss(dev.pid());
        let peak = PeakRss::start(dev.pid());
        let started = Instant::now();
        let (status, answer) = put_chunked(&dev.url, route, SIZE).await;
        let took = started.elapsed();
        assert_eq!(status, 200, "{answer}");
        uploads.push(Sample {
            took,
            growth: peak.stop().saturating_sub(before),
        });

        let before = rss(dev.pid());
        let peak = PeakRss::start(dev.pid());
        let started = Instant::now();
        let received = get_zeros(&dev.http, &format!("{}{route}", dev.url)).await;
        let took = started.elapsed();
        assert_eq!(received, SIZE);
        downloads.push(Sample {
            took,
            growth: peak.stop().saturating_sub(before),
        });
        // An upload replaces the file only once it is whole, so the next one would need room
        // for two in the 2 GiB quota.
        let removed = dev
            .http
            .delete(format!("{}{route}", dev.url))
            .send()
            .await
            .unwrap();
        assert!(removed.status().is_success(), "{}", removed.status());
    }
    println!();
    println!("a 1 GiB file through threadbox dev's file API, median of {RUNS} runs");
    println!(
        "{:<4} {:>10} {:>16} {:>18}",
        "", "time", "throughput", "server RSS growth"
    );
    report("PUT", &uploads);
    report("GET", &downloads);
}
