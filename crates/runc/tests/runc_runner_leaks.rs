//! Audit of the command runner: whatever way a command through it ends, the host keeps
//! nothing of it. A file of its own, so no other test shares the process whose descriptors and
//! tasks it counts.
//!
//! Needs root and runc; skips with a message elsewhere, and fails instead under
//! `THREADBOX_REQUIRE_SANDBOXES=1`.

#[path = "support/sandboxes.rs"]
mod sandboxes;

use std::sync::Arc;
use std::time::Duration;

use threadbox_core::ports::{ExecRequest, SandboxProvider};
use threadbox_runc::RuncProvider;

use sandboxes::{new_sandbox, root_provider, sh_ok};

/// The host's descriptors open now (this test process is the provider's host).
fn host_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Whatever way a command through the runner ends (its exit, its timeout, a refusal, a child
/// left holding its output, a caller that went away midway), the host keeps no descriptor and
/// no task of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_the_host_keeps_nothing_of_a_command_through_the_runner() {
    let Some((p, _kill, _dir)) = root_provider("the command runner", |_| {}).await else {
        return;
    };
    let p = Arc::new(p);
    let id = new_sandbox(&p).await;
    let round = |p: Arc<RuncProvider>, id: String| async move {
        let _ = p.exec(&id, ExecRequest::shell("echo hi")).await;
        let _ = p
            .exec(
                &id,
                ExecRequest {
                    timeout: Duration::from_millis(200),
                    ..ExecRequest::shell("sleep 5")
                },
            )
            .await;
        let _ = p
            .exec(
                &id,
                ExecRequest {
                    cwd: Some("/nowhere".into()),
                    ..ExecRequest::shell("true")
                },
            )
            .await;
        let _ = p.exec(&id, ExecRequest::shell("sleep 3 & echo left")).await;
        // A caller that gives up before the runner answers, and one while the command runs.
        for wait in [0, 1, 50] {
            let _ = tokio::time::timeout(
                Duration::from_millis(wait),
                p.exec(&id, ExecRequest::shell("sleep 2")),
            )
            .await;
        }
    };
    round(p.clone(), id.clone()).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (fds, tasks) = (
        host_fds(),
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks(),
    );
    for _ in 0..5 {
        round(p.clone(), id.clone()).await;
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (fds_after, tasks_after) = (
        host_fds(),
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks(),
    );
    let left = sh_ok(
        &p,
        &id,
        "ps -eo stat=,comm= | grep -v -e '^R' | sort | uniq -c",
    )
    .await;
    p.kill(&id).await.unwrap();
    assert_eq!(
        (fds_after, tasks_after),
        (fds, tasks),
        "host descriptors and tasks after one round and after five more; in the sandbox: {left}"
    );
}
