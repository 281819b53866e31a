//! File GETs stream from the sandbox's file to the socket: a file far over the file API's old
//! 100 MiB cap comes out whole through the real `threadbox dev`, and the server's resident
//! memory grows by much less than the file. Needs root and runc, like the other end-to-end tests.

mod support;

use serde_json::json;
use support::{dev_missing, prerequisites_met, DevServer};

/// The server's resident set, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS");
    kib * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_over_the_old_cap_streams_out_in_bounded_memory() {
    if !prerequisites_met(
        "a_file_over_the_old_cap_streams_out_in_bounded_memory",
        &dev_missing(),
    ) {
        return;
    }
    const SIZE: u64 = 300 * 1024 * 1024;
    let dev = DevServer::start(&[]).await;
    let made = dev
        .post(
            "/v1/threads/big-file/exec",
            Some(json!({"cmd": format!("head -c {SIZE} /dev/zero > big.bin && echo made")})),
        )
        .await;
    assert_eq!(made["stdout"], "made\n", "{made}");

    let before = rss(dev.pid());
    let mut response = dev
        .http
        .get(format!(
            "{}/v1/threads/big-file/files/home/user/big.bin",
            dev.url
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let (mut received, mut peak) = (0u64, before);
    while let Some(chunk) = response.chunk().await.unwrap() {
        assert!(chunk.iter().all(|b| *b == 0));
        received += chunk.len() as u64;
        if received % (16 * 1024 * 1024) < chunk.len() as u64 {
            peak = peak.max(rss(dev.pid()));
        }
    }
    assert_eq!(received, SIZE, "the whole file");
    let growth = peak.saturating_sub(before);
    assert!(
        growth < 64 * 1024 * 1024,
        "the server grew by {} MiB streaming a {} MiB file",
        growth / (1024 * 1024),
        SIZE / (1024 * 1024)
    );
}
