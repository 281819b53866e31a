//! The warm pool end to end: the real `threadbox dev` on runc with `--warm-pool 2`, driven over
//! HTTP. New threads take sandboxes the janitor made ahead, each its own, with a home as fresh as
//! a created sandbox's; the janitor refills the pool and its reconciliation leaves members and
//! the threads that took them alone; resetting a thread kills the member it took.
//!
//! Needs root and runc; skipped without them, or failed when `THREADBOX_REQUIRE_SANDBOXES` is set.

mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{dev_missing, prerequisites_met, DevServer};

/// Wait until the server has `n` containers (the janitor sweeps every second here).
async fn wait_for_containers(dev: &DevServer, n: usize) -> BTreeSet<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = dev.containers();
        if now.len() == n {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "{} containers, not {n}; stderr:\n{}",
            now.len(),
            dev.stderr()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn run(dev: &DevServer, thread: &str, command: &str) -> String {
    let out = dev
        .post(
            &format!("/v1/threads/{thread}/exec"),
            Some(json!({ "cmd": command })),
        )
        .await;
    assert_eq!(out["exit_code"], 0, "{command}: {out}");
    out["stdout"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_threads_take_fresh_members_of_their_own_and_the_pool_refills() {
    if !prerequisites_met(
        "new_threads_take_fresh_members_of_their_own_and_the_pool_refills",
        &dev_missing(),
    ) {
        return;
    }
    let dev = DevServer::start(&["--warm-pool", "2"]).await;
    assert!(
        dev.stdout_lines()
            .iter()
            .any(|l| l.contains("2 sandboxes made ahead per network profile")),
        "the banner names the pool: {:?}",
        dev.stdout_lines()
    );
    let members = wait_for_containers(&dev, 2).await;

    let first: Value = dev.post("/v1/threads/pooled-1/resolve", None).await;
    assert_eq!(first["pooled"], true, "{first}");
    assert_eq!(first["created"], true, "{first}");
    let first_sandbox = first["sandbox_id"].as_str().unwrap().to_owned();
    assert!(
        members.contains(&first_sandbox),
        "{first} not in {members:?}"
    );

    let second: Value = dev.post("/v1/threads/pooled-2/resolve", None).await;
    assert_eq!(second["pooled"], true, "{second}");
    let second_sandbox = second["sandbox_id"].as_str().unwrap().to_owned();
    assert_ne!(first_sandbox, second_sandbox, "never one member twice");

    // A member's home is what a created sandbox's is: compare with a thread that created its
    // own while the pool was off for it (a network profile nobody pools).
    let fresh: Value = dev
        .post(
            "/v1/threads/created-1/resolve",
            Some(json!({ "network": { "networked": { "allow": ["pypi.org"] } } })),
        )
        .await;
    assert_eq!(fresh["pooled"], false, "{fresh}");
    let listing = "ls -A ~; id -un; pwd";
    let created_home = run(&dev, "created-1", listing).await;
    assert_eq!(run(&dev, "pooled-1", listing).await, created_home);

    // Each thread's sandbox is its own.
    run(&dev, "pooled-1", "echo mine > ~/note").await;
    assert_eq!(
        run(&dev, "pooled-2", "ls ~/note 2>/dev/null || echo absent").await,
        "absent\n"
    );

    // The janitor refills the pool: two threads, two new members, the fresh thread's sandbox.
    let all = wait_for_containers(&dev, 5).await;
    assert!(all.contains(&first_sandbox) && all.contains(&second_sandbox));
    // Several sweeps later, reconciliation has killed none of them.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(dev.containers(), all, "stderr:\n{}", dev.stderr());
    assert_eq!(run(&dev, "pooled-1", "cat ~/note").await, "mine\n");

    // A reset destroys the member the thread took (a fresh sandbox replaces it, itself from
    // the pool), and the janitor makes the pool whole again.
    let reset: Value = dev.post("/v1/threads/pooled-1/reset", None).await;
    assert_eq!(reset["pooled"], true, "{reset}");
    let after = wait_for_containers(&dev, 5).await;
    assert!(!after.contains(&first_sandbox), "{after:?}");
    assert_eq!(
        run(&dev, "pooled-1", "ls ~/note 2>/dev/null || echo absent").await,
        "absent\n"
    );
}
