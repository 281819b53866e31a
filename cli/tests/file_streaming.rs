//! File GETs stream from the sandbox's file to the socket: a file far over the file API's old
//! 100 MiB cap comes out whole through the real `threadbox dev`, and the server's resident
//! memory grows by much less than the file. Needs root and runc, like the other end-to-end tests.

mod support;

use serde_json::json;
use support::transfer::{get_zeros, put_chunked, rss, PeakRss};
use support::{dev_missing, prerequisites_met, DevServer};

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
    let peak = PeakRss::start(dev.pid());
    let url = format!("{}/v1/threads/big-file/files/home/user/big.bin", dev.url);
    let received = get_zeros(&dev.http, &url).await;
    let peak = peak.stop();
    assert_eq!(received, SIZE, "the whole file");
    let growth = peak.saturating_sub(before);
    assert!(
        growth < 64 * 1024 * 1024,
        "the server grew by {} MiB streaming a {} MiB file",
        growth / (1024 * 1024),
        SIZE / (1024 * 1024)
    );
}

/// PUTs stream into the sandbox too: 90 MiB arrive whole with the server growing by much less,
/// and an upload past the largest file a sandbox may write (`--max-file-size`, here 100 MiB) is
/// 413 and leaves the file it would have replaced as it was, with no partial file beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_stream_in_and_an_oversized_one_changes_nothing() {
    if !prerequisites_met(
        "uploads_stream_in_and_an_oversized_one_changes_nothing",
        &dev_missing(),
    ) {
        return;
    }
    const SIZE: u64 = 90 * 1024 * 1024;
    let dev = DevServer::start(&["--max-file-size", "100MiB"]).await;
    let route = |path: &str| format!("/v1/threads/uploads/files/home/user/{path}");
    let url = |path: &str| format!("{}{}", dev.url, route(path));

    let before = rss(dev.pid());
    let peak = PeakRss::start(dev.pid());
    let (status, answer) = put_chunked(&dev.url, &route("in/big.bin"), SIZE).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains(&format!("\"size\":{SIZE}")), "{answer}");
    let peak = peak.stop();
    let stat: serde_json::Value = dev
        .get("/v1/threads/uploads/files/home/user/in/big.bin?stat=true")
        .await;
    assert_eq!(stat["size"], SIZE);
    let growth = peak.saturating_sub(before);
    assert!(
        growth < 64 * 1024 * 1024,
        "the server grew by {} MiB taking a {} MiB upload",
        growth / (1024 * 1024),
        SIZE / (1024 * 1024)
    );

    let kept = dev
        .http
        .put(url("in/kept.txt"))
        .body("old contents")
        .send()
        .await
        .unwrap();
    assert_eq!(kept.status(), 200);
    let (status, answer) = put_chunked(&dev.url, &route("in/kept.txt"), 101 * 1024 * 1024).await;
    assert_eq!(status, 413, "{answer}");
    assert!(answer.contains("payload_too_large"), "{answer}");
    let now = dev.http.get(url("in/kept.txt")).send().await.unwrap();
    assert_eq!(now.text().await.unwrap(), "old contents");
    let listing = dev
        .get("/v1/threads/uploads/files/home/user/in?list=true")
        .await;
    let names: Vec<&str> = listing["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["big.bin", "kept.txt"],
        "no partial upload left behind"
    );
}
