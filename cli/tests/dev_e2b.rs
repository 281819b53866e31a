//! `threadbox dev` on E2B: the whole local system (API, janitor, events, the CLI) with its
//! sandboxes on E2B, here the E2B contract fake on 127.0.0.1 (`threadbox_testing::
//! e2b_fake`, which runs commands for real in a user namespace of their own). The same tour as
//! `cli_dev_e2e.rs` on runc: exec through the CLI, the janitor's idle pause, resume, and a
//! sandbox E2B paused on its own timeout woken by the next command.
//!
//! Needs no runc: only `unshare` (util-linux) and user namespaces or root, for the fake.

mod support;

use std::time::Duration;

use support::e2b::{e2b_missing, start_on_e2b};
use support::{
    assert_exec_passes_through, follow_until_paused, prerequisites_met, resume_with_cli, text,
    threads,
};
use threadbox_testing::e2b_fake::{E2bFake, FakeState};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threadbox_dev_runs_its_sandboxes_on_e2b() {
    if !prerequisites_met("threadbox_dev_runs_its_sandboxes_on_e2b", &e2b_missing()) {
        return;
    }
    let fake = E2bFake::start().await;
    let dev = start_on_e2b(&fake, &["--idle-pause", "3s"]).await;
    let banner = dev.stdout_lines();
    assert!(
        banner
            .iter()
            .any(|l| l.contains("provider   e2b (") && l.contains("chosen by THREADBOX_PROVIDER")),
        "{banner:#?}"
    );
    assert!(
        !banner.iter().any(|l| l.trim_start().starts_with("disk ")),
        "runc's quota is not E2B's: {banner:#?}"
    );

    // Output and status pass through raw, from a command run in an E2B sandbox.
    assert_exec_passes_through(&dev, "tour").await;
    let shown = threads(&dev, &["show", "tour"]).await;
    assert!(
        text(&shown.stdout).contains("(e2b, generation 1)"),
        "{}",
        text(&shown.stdout)
    );

    // The janitor pauses the idle thread through E2B's pause.
    let paused = follow_until_paused(&dev, "tour").await;
    assert_eq!(paused["cause"], "idle", "{paused}");
    let record = dev.get("/v1/threads/tour").await;
    let sandbox_id = record["session"]["sandbox_id"].as_str().unwrap().to_owned();
    assert_eq!(
        fake.sandbox(&sandbox_id).map(|s| s.state),
        Some(FakeState::Paused),
        "E2B holds {sandbox_id} paused"
    );

    resume_with_cli(&dev, "tour").await;

    // E2B pauses a sandbox whose timeout passes on its own (autoPause); the next command
    // wakes it, files intact.
    let wrote = threads(&dev, &["exec", "tour", "-c", "echo kept > note"]).await;
    assert!(wrote.status.success(), "{}", text(&wrote.stderr));
    fake.advance(Duration::from_secs(24 * 3600));
    let read = threads(&dev, &["exec", "tour", "--", "cat", "note"]).await;
    assert!(read.status.success(), "{}", text(&read.stderr));
    assert_eq!(text(&read.stdout), "kept\n");
}
