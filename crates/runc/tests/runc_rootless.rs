//! The runc provider run by an ordinary user (rootless): the provider conformance suite and the
//! isolation a rootless sandbox still has, through real runc.
//!
//! Run by a non-root user, every test here runs in place. Run as root (CI), the tests proper
//! skip, and [`every_test_passes_as_an_ordinary_user`] runs this same test binary again as the
//! account `threadbox-rootless` (made if missing) through `runuser`, and fails if any test fails
//! there. Without user namespaces for unprivileged users the tests skip, saying why, unless
//! `THREADBOX_REQUIRE_SANDBOXES` is set, which makes that a failure.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use threadbox_core::ports::{
    ExecCommand, ExecRequest, ProviderError, SandboxProvider, SandboxState, DEFAULT_OUTPUT_CAP,
};
use threadbox_runc::{RuncConfig, RuncProvider, SandboxLimits};

#[path = "support/sandboxes.rs"]
mod sandboxes;
use sandboxes::{kill_all, new_sandbox, required, runc_or_skip, state_config};

/// The account the tests run as when started by root.
const USER: &str = "threadbox-rootless";

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// A rootless provider's state directory; `None` (after saying why) as root or where rootless
/// sandboxes cannot run.
struct Fixture {
    config: RuncConfig,
    _dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Option<Self> {
        if is_root() {
            // Root runs these as USER instead (see the module docs).
            return None;
        }
        let runc = runc_or_skip("rootless sandboxes")?;
        let dir = tempfile::tempdir().expect("temp dir");
        let mut config = state_config(dir.path(), runc);
        // Rootless has no disk quota (it needs mounts); asking for one is refused.
        config.limits = SandboxLimits {
            disk: None,
            ..SandboxLimits::default()
        };
        Some(Self { config, _dir: dir })
    }

    async fn provider(&self) -> RuncProvider {
        RuncProvider::open(self.config.clone())
            .await
            .expect("open the rootless provider")
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // Kill whatever a failed test left.
        kill_all(self.config.clone());
    }
}

async fn conformance_provider(_test: &str) -> Option<(Fixture, Arc<dyn SandboxProvider>)> {
    let fixture = Fixture::new()?;
    let provider: Arc<dyn SandboxProvider> = Arc::new(fixture.provider().await);
    Some((fixture, provider))
}

mod conformance {
    use super::conformance_provider;
    threadbox_testing::provider_conformance_tests!(conformance_provider);
}

async fn run(p: &RuncProvider, id: &str, script: &str) -> (Option<i32>, String) {
    let result = p
        .exec(
            id,
            ExecRequest {
                user: Default::default(),
                command: ExecCommand::Shell(script.to_owned()),
                cwd: None,
                env: BTreeMap::new(),
                stdin: None,
                timeout: Duration::from_secs(20),
                output_cap: DEFAULT_OUTPUT_CAP,
            },
        )
        .await
        .expect("exec");
    (result.exit_code, result.stdout + &result.stderr)
}

/// A fixture, its provider and one new sandbox in it; without a fixture (see [`Fixture::new`])
/// the test ends there.
macro_rules! sandbox {
    () => {{
        let Some(fixture) = Fixture::new() else {
            return;
        };
        let p = fixture.provider().await;
        let id = new_sandbox(&p).await;
        (fixture, p, id)
    }};
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rootless_sandbox_is_still_isolated() {
    let (_fixture, p, id) = sandbox!();
    assert!(p.is_rootless());

    // The sandbox's user: its namespace's root (the one id an unprivileged caller can map),
    // named `user`, with no capabilities; everything of the host's is `nobody`'s.
    let (code, out) = run(
        &p,
        &id,
        "id -u; id -un; grep CapEff /proc/self/status; stat -c %U /usr/bin",
    )
    .await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.starts_with("0\nuser\n"), "{out}");
    assert!(out.contains("CapEff:\t0000000000000000"), "{out}");
    assert!(out.ends_with("nobody\n"), "{out}");
    // Its own pid namespace: the host's processes (this test's among them) are not there.
    let (_, out) = run(&p, &id, "ls /proc | grep -c '^[0-9]'").await;
    let visible: u32 = out.trim().parse().expect("a count");
    assert!(visible < 10, "{visible} processes visible: {out}");
    // A read-only root and /usr, a writable home.
    let (code, out) = run(
        &p,
        &id,
        "touch /usr/x 2>&1; touch /x 2>&1; echo ok > ~/f && cat ~/f",
    )
    .await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.matches("Read-only file system").count() == 2, "{out}");
    assert!(out.ends_with("ok\n"), "{out}");
    // No network: loopback only, so nothing on the host is reachable.
    let (_, out) = run(
        &p,
        &id,
        "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '",
    )
    .await;
    assert_eq!(out.trim(), "lo", "{out}");
    // A new user namespace inside is refused (the seccomp filter), so no capabilities to gain.
    let (code, out) = run(&p, &id, "unshare -U true 2>&1; echo $?").await;
    assert_eq!(code, Some(0));
    assert_ne!(out.trim().lines().last(), Some("0"), "{out}");
    p.kill(&id).await.expect("kill");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_stops_every_process_until_resume() {
    let (fixture, p, id) = sandbox!();
    // A background counter, detached from the exec that starts it.
    let (code, out) = run(
        &p,
        &id,
        "nohup sh -c 'n=0; while true; do n=$((n+1)); echo $n > ~/count; sleep 0.05; done' \
         >/dev/null 2>&1 &",
    )
    .await;
    assert_eq!(code, Some(0), "{out}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    p.pause(&id).await.expect("pause");
    assert_eq!(p.info(&id).await.expect("info").state, SandboxState::Paused);
    let home = fixture.config.sandboxes_dir().join(&id).join("home");
    let at_pause = std::fs::read_to_string(home.join("count")).unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        std::fs::read_to_string(home.join("count")).unwrap(),
        at_pause,
        "the counter moved while paused"
    );
    // A paused sandbox runs nothing until it is resumed.
    let refused = p
        .exec(
            &id,
            ExecRequest {
                user: Default::default(),
                command: ExecCommand::Shell("true".into()),
                cwd: None,
                env: BTreeMap::new(),
                stdin: None,
                timeout: Duration::from_secs(5),
                output_cap: DEFAULT_OUTPUT_CAP,
            },
        )
        .await;
    assert!(
        matches!(refused, Err(ProviderError::Conflict(_))),
        "{refused:?}"
    );
    assert!(p.connect(&id).await.expect("resume").resumed);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_ne!(
        std::fs::read_to_string(home.join("count")).unwrap(),
        at_pause,
        "the counter did not move after resume"
    );
    // Killing a paused sandbox takes every process with it.
    p.pause(&id).await.expect("pause again");
    p.kill(&id).await.expect("kill");
    assert!(matches!(p.info(&id).await, Err(ProviderError::Gone(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_quota_is_refused_rootless_with_the_way_out() {
    let Some(fixture) = Fixture::new() else {
        return;
    };
    let mut config = fixture.config.clone();
    config.limits.disk = SandboxLimits::default().disk;
    let Err(refused) = RuncProvider::open(config).await else {
        panic!("a rootless provider with a disk quota opened");
    };
    assert!(
        refused.to_string().contains("--disk-quota none"),
        "{refused}"
    );
}

/// As root: every test above, run by an ordinary account.
#[test]
fn every_test_passes_as_an_ordinary_user() {
    if !is_root() {
        return;
    }
    let Some((_, stderr)) =
        sandboxes::rerun_as_ordinary_user(USER, "every_test_passes_as_an_ordinary_user")
    else {
        return;
    };
    if required() {
        assert!(
            !stderr.contains("SKIPPED"),
            "tests skipped as {USER}:\n{stderr}"
        );
    }
}

/// Rootless, the provider is only the owner of a sandbox's files, not root: what the sandbox
/// locked (no read, no write, no search) must still go with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_the_sandbox_locked_is_still_removed() {
    let (fixture, p, id) = sandbox!();
    let (code, out) = run(
        &p,
        &id,
        "mkdir -p a/b/c && touch a/b/c/f a/b/g && chmod 000 a/b/c && chmod 500 a/b && chmod 000 a",
    )
    .await;
    assert_eq!(code, Some(0), "{out}");
    let bundle = fixture.config.sandboxes_dir().join(&id);
    assert!(bundle.exists());
    p.kill(&id).await.expect("kill");
    assert!(!bundle.exists(), "the bundle outlived the kill");
}
