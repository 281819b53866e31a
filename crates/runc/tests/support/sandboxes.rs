//! What the runc tests and benchmarks share: finding runc or saying why there is none (a
//! failure instead where CI asks for sandboxes), a provider's state directory, killing what a
//! test left behind, and the request for a benchmark's sandbox.

#![allow(dead_code)] // each test or bench that includes this uses part of it

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use threadbox_core::domain::ThreadId;
use threadbox_core::ports::{CreateSandbox, NetworkProfile, SandboxOwner, SandboxProvider};
use threadbox_runc::{host_can_run_sandboxes, RuncConfig, RuncProvider};

/// Whether a machine that cannot run sandboxes must fail loudly instead of passing on skips
/// (CI sets `THREADBOX_REQUIRE_SANDBOXES`).
pub fn required() -> bool {
    std::env::var_os("THREADBOX_REQUIRE_SANDBOXES").is_some()
}

/// `None`, after saying why `what` cannot run here; a panic instead when they are required.
pub fn require_or_skip<T>(what: &str, why: String) -> Option<T> {
    if required() {
        panic!("THREADBOX_REQUIRE_SANDBOXES is set but {what} cannot run here: {why}");
    }
    eprintln!("SKIPPED: {why}");
    None
}

/// The runc binary for a test, or `None` as [`require_or_skip`] says.
pub fn runc_or_skip(what: &str) -> Option<PathBuf> {
    host_can_run_sandboxes().map_or_else(|why| require_or_skip(what, why), Some)
}

/// The runc binary for a benchmark, or `None` after saying why it is skipped.
pub fn bench_runc(bench: &str) -> Option<PathBuf> {
    host_can_run_sandboxes()
        .map_err(|why| eprintln!("{bench} bench skipped: {why}"))
        .ok()
}

/// A provider's settings over `dir/state`, with `runc`.
pub fn state_config(dir: &Path, runc: PathBuf) -> RuncConfig {
    let mut config = RuncConfig::new(dir.join("state"));
    config.runc_binary = runc;
    config
}

/// Kill every sandbox of a state directory through a provider of its own, which also takes
/// their links and mounts. On a thread of its own, since a test's runtime may still be running
/// the caller.
pub fn kill_all(config: RuncConfig) {
    let _ = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        runtime.block_on(async {
            let provider = RuncProvider::open(config).await.ok()?;
            for info in provider.list(&BTreeMap::new()).await.ok()? {
                let _ = provider.kill(&info.sandbox_id).await;
            }
            Some(())
        })
    })
    .join();
}

/// On drop (a failed test too), every sandbox of the state directory killed ([`kill_all`]).
pub struct KillAll(pub RuncConfig);

impl Drop for KillAll {
    fn drop(&mut self) {
        kill_all(self.0.clone());
    }
}

/// A provider as root on a state directory of its own (`tweak` may change its configuration
/// first), the guard that kills what it leaves, and the directory; `None` (after saying why)
/// where this machine cannot run sandboxes as root.
pub async fn root_provider(
    what: &str,
    tweak: impl FnOnce(&mut RuncConfig),
) -> Option<(RuncProvider, KillAll, tempfile::TempDir)> {
    let runc = runc_or_skip(what)?;
    if !rustix::process::geteuid().is_root() {
        return require_or_skip(what, format!("{what}: these tests run as root"));
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = state_config(dir.path(), runc);
    tweak(&mut config);
    let kill = KillAll(config.clone());
    let p = RuncProvider::open(config).await.expect("open the provider");
    Some((p, kill, dir))
}

/// The stdout of `script` run as the sandbox's user, which must exit 0.
pub async fn sh_ok(p: &RuncProvider, id: &str, script: &str) -> String {
    let out = p
        .exec(id, threadbox_core::ports::ExecRequest::shell(script))
        .await
        .expect(script);
    assert_eq!(out.exit_code, Some(0), "{script}: {out:?}");
    out.stdout
}

/// A new sandbox for a thread of its own, as the conformance suite asks for one.
pub async fn new_sandbox(p: &RuncProvider) -> String {
    p.create(threadbox_testing::provider_conformance::create_request(
        threadbox_testing::provider_conformance::fresh_owner(1),
    ))
    .await
    .expect("create")
    .sandbox_id
}

/// A benchmark's `n`th sandbox, for the thread `{prefix}-{n}`.
pub fn bench_request(prefix: &str, n: usize, network: NetworkProfile) -> CreateSandbox {
    CreateSandbox {
        image: threadbox_core::domain::ImageName::host(),
        owner: SandboxOwner {
            thread_id: ThreadId::parse(&format!("{prefix}-{n}")).expect("thread id"),
            generation: 1,
        },
        network,
        timeout: Duration::from_secs(600),
        env: Default::default(),
    }
}

/// As root: runs this test binary again as the ordinary account `user`, every test but
/// `this_test` (the caller), and asserts they passed and that some ran. `None` (with a message,
/// or a failure where sandboxes are required) when the account cannot be made; else what the
/// run printed on stdout and stderr.
pub fn rerun_as_ordinary_user(user: &str, this_test: &str) -> Option<(String, String)> {
    let exe = std::env::current_exe().expect("this test binary");
    if let Err(why) = threadbox_testing::accounts::ensure_system_account(user) {
        if required() {
            panic!("{why}");
        }
        eprintln!("SKIPPED: {why}");
        return None;
    }
    let output = std::process::Command::new("runuser")
        .args(["-u", user, "--"])
        .arg(&exe)
        .args(["--skip", this_test, "--test-threads", "2"])
        .env("HOME", "/tmp")
        .env("TMPDIR", "/tmp")
        .output()
        .expect("run the tests as an ordinary user");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        output.status.success(),
        "the rootless tests failed as {user}:\n{stdout}\n{stderr}"
    );
    assert!(
        !stdout.contains(" 0 passed"),
        "nothing ran as {user}:\n{stdout}"
    );
    Some((stdout, stderr))
}
