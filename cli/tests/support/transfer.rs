//! Moving big files through the real server and watching its memory while it happens: the
//! file-streaming tests and benchmark share these.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A process's resident set, in bytes.
pub fn rss(pid: u32) -> u64 {
    try_rss(pid).unwrap_or_else(|| panic!("no VmRSS for process {pid}"))
}

/// The same, or `None` once the process is gone.
fn try_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())?;
    Some(kib * 1024)
}

/// A process's highest resident set while this lives, sampled every 10 ms.
pub struct PeakRss {
    pid: u32,
    peak: Arc<AtomicU64>,
    sampler: tokio::task::JoinHandle<()>,
}

impl PeakRss {
    pub fn start(pid: u32) -> Self {
        let peak = Arc::new(AtomicU64::new(rss(pid)));
        let sampler = {
            let peak = peak.clone();
            tokio::spawn(async move {
                while let Some(now) = try_rss(pid) {
                    peak.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
        };
        Self { pid, peak, sampler }
    }

    /// The peak so far, with one last sample.
    pub fn stop(self) -> u64 {
        self.sampler.abort();
        let last = try_rss(self.pid).unwrap_or_default();
        self.peak.load(Ordering::SeqCst).max(last)
    }
}

/// PUT `size` zero bytes to `path` with `Transfer-Encoding: chunked` (so the server cannot
/// know the size up front), in 1 MiB chunks; the answer's status and body.
pub async fn put_chunked(base: &str, path: &str, size: u64) -> (u16, String) {
    const CHUNK: u64 = 1024 * 1024;
    let zeros = vec![0u8; CHUNK as usize];
    let chunks = (0..size)
        .step_by(CHUNK as usize)
        .map(|sent| &zeros[..(size - sent).min(CHUNK) as usize]);
    send_chunked(base, &format!("PUT {path}"), "", chunks).await
}

/// Send `request` (`METHOD /path`) with `headers` (each ending in CRLF) and a body in `chunks`
/// with `Transfer-Encoding: chunked` (so the server cannot know its size up front) over a plain
/// socket; the answer's status and body. Sending stops early if the server answers and closes
/// first.
pub async fn send_chunked<'a>(
    base: &str,
    request: &str,
    headers: &str,
    chunks: impl Iterator<Item = &'a [u8]>,
) -> (u16, String) {
    let address = base.trim_start_matches("http://");
    let mut socket = tokio::net::TcpStream::connect(address).await.unwrap();
    let head = format!(
        "{request} HTTP/1.1\r\nHost: {address}\r\n{headers}Transfer-Encoding: chunked\r\n\
         Connection: close\r\n\r\n"
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    for chunk in chunks {
        let frame = [format!("{:x}\r\n", chunk.len()).as_bytes(), chunk, b"\r\n"].concat();
        if socket.write_all(&frame).await.is_err() {
            break;
        }
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

/// GET `url` and count its bytes as they come (each must be zero); the count.
pub async fn get_zeros(http: &reqwest::Client, url: &str) -> u64 {
    let mut response = http.get(url).send().await.unwrap();
    assert_eq!(response.status(), 200, "GET {url}");
    let mut received = 0u64;
    while let Some(chunk) = response.chunk().await.unwrap() {
        assert!(chunk.iter().all(|b| *b == 0));
        received += chunk.len() as u64;
    }
    received
}
