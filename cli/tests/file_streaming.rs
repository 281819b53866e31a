//! File GETs stream from the sandbox's file to the socket: a file far over the file API's old
//! 100 MiB cap comes out whole through the real `threadbox dev`, and the server's resident
//! memory grows by much less than the file. Needs root and runc, like the other end-to-end tests.

mod support;

use serde_json::json;
use support::transfer::{get_zeros, put_chunked, rss, PeakRss};
use support::{dev_missing, prerequisites_met, DevServer};

/// The server's resident memory at its `peak` grew from `before` by less than 64 MiB while
/// `doing` something with far more bytes than that.
fn assert_grew_little(before: u64, peak: u64, doing: &str) {
    let growth = peak.saturating_sub(before);
    assert!(
        growth < 64 * 1024 * 1024,
        "the server grew by {} MiB {doing}",
        growth / (1024 * 1024)
    );
}

/// The names in the directory at `route` (a files route), as its listing gives them.
async fn listed(dev: &DevServer, route: &str) -> Vec<String> {
    let listing = dev.get(&format!("{route}?list=true")).await;
    listing["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_owned())
        .collect()
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
    let peak = PeakRss::start(dev.pid());
    let url = format!("{}/v1/threads/big-file/files/home/user/big.bin", dev.url);
    let received = get_zeros(&dev.http, &url).await;
    let peak = peak.stop();
    assert_eq!(received, SIZE, "the whole file");
    assert_grew_little(
        before,
        peak,
        &format!("streaming a {} MiB file", SIZE >> 20),
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
    assert_grew_little(before, peak, &format!("taking a {} MiB upload", SIZE >> 20));

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
    let names = listed(&dev, "/v1/threads/uploads/files/home/user/in").await;
    assert_eq!(
        names,
        ["big.bin", "kept.txt"],
        "no partial upload left behind"
    );
}

/// Uploads reach the sandbox's `/tmp` (a tmpfs of its own user namespace, where the host's root
/// has no id: finishing an upload there as root failed with EOVERFLOW, a 502 that left the
/// whole temp file behind), the file the sandbox user's. One that does not fit is 507
/// `no_space` and leaves nothing beside it; a file that is not there is 404 `file_not_found`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_reach_tmp_and_a_full_one_says_so_and_leaves_nothing() {
    if !prerequisites_met(
        "uploads_reach_tmp_and_a_full_one_says_so_and_leaves_nothing",
        &dev_missing(),
    ) {
        return;
    }
    let dev = DevServer::start(&[]).await;
    let route = |path: &str| format!("/v1/threads/tmp-uploads/files/{path}");
    let url = |path: &str| format!("{}{}", dev.url, route(path));

    let put = dev
        .http
        .put(url("tmp/in/a.txt"))
        .body("hello /tmp")
        .send()
        .await
        .unwrap();
    let status = put.status();
    assert_eq!(status, 200, "{}", put.text().await.unwrap());
    let got = dev.http.get(url("tmp/in/a.txt")).send().await.unwrap();
    assert_eq!(got.text().await.unwrap(), "hello /tmp");
    let mine = dev
        .post(
            "/v1/threads/tmp-uploads/exec",
            Some(json!({"cmd": "cat /tmp/in/a.txt; [ -O /tmp/in/a.txt ] && echo ' and mine'"})),
        )
        .await;
    assert_eq!(mine["stdout"], "hello /tmp and mine\n", "{mine}");

    // /tmp is 256 MiB by default: fill most of it, then upload more than what is left.
    let filled = dev
        .post(
            "/v1/threads/tmp-uploads/exec",
            Some(json!({"cmd": "head -c 200M /dev/zero > /tmp/fill && echo filled"})),
        )
        .await;
    assert_eq!(filled["stdout"], "filled\n", "{filled}");
    let (status, answer) = put_chunked(&dev.url, &route("tmp/in/big.bin"), 100 * 1024 * 1024).await;
    assert_eq!(status, 507, "{answer}");
    assert!(answer.contains("\"no_space\""), "{answer}");
    assert!(answer.contains("/tmp/in/big.bin"), "{answer}");
    let names = listed(&dev, "/v1/threads/tmp-uploads/files/tmp/in").await;
    assert_eq!(names, ["a.txt"], "no partial upload left behind");
    let used = dev
        .post(
            "/v1/threads/tmp-uploads/exec",
            Some(json!({"cmd": "du -sm /tmp | cut -f1"})),
        )
        .await;
    let used: u64 = used["stdout"].as_str().unwrap().trim().parse().unwrap();
    assert!(
        used <= 201,
        "/tmp holds {used} MiB: the failed upload's bytes stayed"
    );

    for missing in [
        "tmp/in/nope.txt",
        "home/user/nope.txt",
        "tmp/no/such/dir.txt",
    ] {
        let answer = dev.http.get(url(missing)).send().await.unwrap();
        assert_eq!(answer.status(), 404, "GET {missing}");
        let body: serde_json::Value = answer.json().await.unwrap();
        assert_eq!(body["error"]["code"], "file_not_found", "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("no such file or directory"),
            "{body}"
        );
        let stat = dev
            .http
            .get(format!("{}?stat=true", url(missing)))
            .send()
            .await
            .unwrap();
        assert_eq!(stat.status(), 404, "stat {missing}");
    }
}
