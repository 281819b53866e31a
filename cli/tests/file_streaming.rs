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

/// PUT `size` zero bytes to `path` with `Transfer-Encoding: chunked` (so the server cannot
/// know the size up front) over a plain socket; the answer's status and body. Sending stops
/// early if the server answers and closes first.
async fn put_chunked(base: &str, path: &str, size: u64) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = base.trim_start_matches("http://");
    let mut socket = tokio::net::TcpStream::connect(address).await.unwrap();
    let head = format!(
        "PUT {path} HTTP/1.1\r\nHost: {address}\r\nTransfer-Encoding: chunked\r\n\
         Connection: close\r\n\r\n"
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    let chunk = vec![0u8; 1024 * 1024];
    let mut sent = 0u64;
    while sent < size {
        let n = (size - sent).min(chunk.len() as u64) as usize;
        let frame = [format!("{n:x}\r\n").as_bytes(), &chunk[..n], b"\r\n"].concat();
        if socket.write_all(&frame).await.is_err() {
            break;
        }
        sent += n as u64;
    }
    let _ = socket.write_all(b"0\r\n\r\n").await;
    let mut answer = Vec::new();
    let _ = socket.read_to_end(&mut answer).await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {answer:?}"));
    (status, answer)
}

/// PUTs stream into the sandbox too: 90 MiB arrive whole with the server growing by much less,
/// and an upload past the 100 MiB limit is 413 and leaves the file it would have replaced as it
/// was, with no partial file beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_stream_in_and_an_oversized_one_changes_nothing() {
    if !prerequisites_met(
        "uploads_stream_in_and_an_oversized_one_changes_nothing",
        &dev_missing(),
    ) {
        return;
    }
    const SIZE: u64 = 90 * 1024 * 1024;
    let dev = DevServer::start(&[]).await;
    let route = |path: &str| format!("/v1/threads/uploads/files/home/user/{path}");
    let url = |path: &str| format!("{}{}", dev.url, route(path));

    let before = rss(dev.pid());
    // The server's peak resident set while the upload runs, sampled every 10 ms.
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(before));
    let sampler = {
        let (pid, peak) = (dev.pid(), peak.clone());
        tokio::spawn(async move {
            loop {
                peak.fetch_max(rss(pid), std::sync::atomic::Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        })
    };
    let (status, answer) = put_chunked(&dev.url, &route("in/big.bin"), SIZE).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains(&format!("\"size\":{SIZE}")), "{answer}");
    sampler.abort();
    let peak = peak
        .load(std::sync::atomic::Ordering::SeqCst)
        .max(rss(dev.pid()));
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
