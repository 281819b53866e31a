//! `RuncProvider` against real runc: the provider conformance suite, then what only a real
//! sandbox can show (isolation, limits, freezing, restarts).
//!
//! Needs root and runc (`apt-get install runc`); without either, each test says so and passes
//! without running. Every test has its own state directory, and a guard deletes its containers
//! with `runc delete --force` even when the test fails.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use threadbox_core::ports::{
    CreateSandbox, ExecCommand, ExecRequest, FileKind, ProviderError, SandboxProvider, SandboxState,
};
use threadbox_runc::{DiskQuota, RuncConfig, RuncProvider, SandboxLimits};
use threadbox_testing::provider_conformance as suite;

#[path = "support/sandboxes.rs"]
mod sandboxes;
use sandboxes::{kill_all, new_sandbox, runc_or_skip, state_config};

/// A state directory, and on drop every container left in it deleted.
struct Fixture {
    config: RuncConfig,
    _dir: tempfile::TempDir,
}

impl Fixture {
    /// `None` (after saying why) when this machine cannot run sandboxes.
    fn new(limits: SandboxLimits) -> Option<Self> {
        let runc = runc_or_skip("sandboxes")?;
        let dir = tempfile::tempdir().expect("temp dir");
        let mut config = state_config(dir.path(), runc);
        config.limits = limits;
        Some(Self { config, _dir: dir })
    }

    async fn provider(&self) -> RuncProvider {
        RuncProvider::open(self.config.clone())
            .await
            .expect("open the provider")
    }

    fn runc(&self, args: &[&str]) -> std::process::Output {
        std::process::Command::new(&self.config.runc_binary)
            .arg("--root")
            .arg(self.config.runc_root())
            .args(args)
            .output()
            .expect("run runc")
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // Kill what a failed test left through a provider of our own: it thaws, kills, reaps
        // the inits (this process is their subreaper, so a bare `runc delete --force` would
        // wait for a reap that never comes) and deletes.
        kill_all(self.config.clone());
        // Whatever that missed (if the provider could not even open).
        let listed = self.runc(&["list", "--quiet"]);
        for id in String::from_utf8_lossy(&listed.stdout).split_whitespace() {
            let _ = self.runc(&["delete", "--force", id]);
        }
        // And the mounts of sandboxes the provider did not kill (user namespace pins, root
        // tmpfs, home volumes), deepest first.
        let mut mounts = mounts_under(&self.config.state_dir);
        mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for mount_point in mounts {
            let _ = std::process::Command::new("umount")
                .arg("--lazy")
                .arg(&mount_point)
                .status();
        }
    }
}

macro_rules! fixture {
    () => {
        fixture!(SandboxLimits::default())
    };
    ($limits:expr) => {
        match Fixture::new($limits) {
            Some(f) => f,
            None => return,
        }
    };
}

/// A fixture, its provider and one new sandbox in it: where most tests start.
macro_rules! sandbox {
    () => {{
        let fixture = fixture!();
        let p = fixture.provider().await;
        let id = new_sandbox(&p).await;
        (fixture, p, id)
    }};
}

/// The conformance suite, one test per function, on a fixture of its own.
async fn conformance_provider(_test: &str) -> Option<(Fixture, Arc<dyn SandboxProvider>)> {
    let fixture = Fixture::new(SandboxLimits::default())?;
    let provider: Arc<dyn SandboxProvider> = Arc::new(fixture.provider().await);
    Some((fixture, provider))
}

mod conformance {
    use super::conformance_provider;
    threadbox_testing::provider_conformance_tests!(conformance_provider);
}

async fn sh(p: &RuncProvider, id: &str, cmd: &str) -> threadbox_core::ports::ExecResult {
    p.exec(id, ExecRequest::shell(cmd)).await.expect("exec")
}

#[tokio::test]
async fn no_network_but_loopback() {
    let (_fixture, p, id) = sandbox!();

    let out = sh(
        &p,
        &id,
        "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '",
    )
    .await;
    assert_eq!(out.stdout, "lo\n", "only loopback: {out:?}");

    // A server on the host's loopback is out of reach: the sandbox's 127.0.0.1 is its own.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let out = sh(
        &p,
        &id,
        &format!("bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}' && echo connected"),
    )
    .await;
    assert_ne!(out.exit_code, Some(0), "{out:?}");
    assert!(!out.stdout.contains("connected"));
    p.kill(&id).await.unwrap();
}

#[tokio::test]
async fn host_processes_and_etc_are_invisible() {
    let fixture = fixture!();
    let p = fixture.provider().await;
    let owner = suite::fresh_owner(1);
    let id = p
        .create(suite::create_request(owner.clone()))
        .await
        .unwrap()
        .sandbox_id;

    let out = sh(&p, &id, "ls /proc | grep -c '^[0-9]'").await;
    let pids: u32 = out.stdout.trim().parse().unwrap();
    assert!(
        pids < 10,
        "only the sandbox's own processes are visible, saw {pids}"
    );
    // The command runner, which starts the commands.
    let out = sh(&p, &id, "cat /proc/1/comm").await;
    assert_eq!(
        out.stdout, "threadbox-init\n",
        "pid 1 is the sandbox's init: {out:?}"
    );

    let passwd = sh(&p, &id, "cat /etc/passwd").await.stdout;
    assert!(passwd.contains("user:x:1000:1000:"));
    let host_passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    for line in host_passwd.lines().filter(|l| !l.starts_with("root:")) {
        let name = line.split(':').next().unwrap();
        if name != "nobody" {
            assert!(
                !passwd.contains(&format!("\n{name}:")),
                "host user {name} leaked into the sandbox"
            );
        }
    }
    let out = sh(&p, &id, "test -e /etc/shadow; echo $?").await;
    assert_eq!(out.stdout, "1\n", "no /etc/shadow inside");

    let hostname = sh(&p, &id, "hostname").await.stdout;
    let host_hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_ne!(hostname.trim(), host_hostname.trim());
    assert!(hostname.starts_with("tb-conformance-"), "{hostname}");
    p.kill(&id).await.unwrap();
}

#[tokio::test]
async fn unprivileged_user_and_read_only_system() {
    let (_fixture, p, id) = sandbox!();

    assert_eq!(sh(&p, &id, "id -u; id -g").await.stdout, "1000\n1000\n");
    let status = sh(
        &p,
        &id,
        "grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs)' /proc/self/status",
    )
    .await
    .stdout;
    assert!(status.contains("CapEff:\t0000000000000000"), "{status}");
    assert!(status.contains("CapBnd:\t0000000000000000"), "{status}");
    assert!(status.contains("NoNewPrivs:\t1"), "{status}");

    for target in ["/usr/evil", "/etc/evil", "/evil"] {
        let out = sh(&p, &id, &format!("touch {target}")).await;
        assert_ne!(out.exit_code, Some(0), "{target} must not be writable");
    }
    let out = sh(&p, &id, "touch /home/user/ok /tmp/ok && echo fine").await;
    assert_eq!(out.stdout, "fine\n");
    // runc's masked /proc paths.
    assert_eq!(sh(&p, &id, "cat /proc/kcore | wc -c").await.stdout, "0\n");
    // No user namespaces: the seccomp filter refuses them.
    let out = sh(&p, &id, "unshare --user true").await;
    assert_ne!(out.exit_code, Some(0), "{out:?}");
    p.kill(&id).await.unwrap();
}

#[tokio::test]
async fn a_fork_bomb_hits_the_pid_limit_and_the_sandbox_survives() {
    let (_fixture, p, id) = sandbox!();

    // Fork 400 sleepers; the pid limit (256) stops it (bash retries a failed fork with
    // growing pauses, so the timeout bounds it, and kills the tree).
    let mut request = ExecRequest::shell(
        "bash -c 'for i in $(seq 400); do sleep 120 & done; echo all 400 started; wait'",
    );
    request.timeout = Duration::from_secs(3);
    let out = p.exec(&id, request).await.unwrap();
    assert!(out.timed_out, "{out:?}");
    assert!(
        out.stderr.contains("fork") && out.stderr.contains("Resource temporarily unavailable"),
        "the pid limit stopped the forks: {out:?}"
    );
    assert!(!out.stdout.contains("all 400 started"));

    let out = sh(
        &p,
        &id,
        "echo alive; cat /proc/[0-9]*/cmdline | tr '\\0' ' '",
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert!(out.stdout.starts_with("alive\n"));
    assert!(
        !out.stdout.contains("sleep 120"),
        "the bomb's processes are gone: {}",
        out.stdout
    );
    p.kill(&id).await.unwrap();
}

#[tokio::test]
async fn memory_and_tmp_limits_hold() {
    let fixture = fixture!(SandboxLimits {
        memory_bytes: 64 * 1024 * 1024,
        tmp_bytes: 8 * 1024 * 1024,
        ..SandboxLimits::default()
    });
    let p = fixture.provider().await;
    let id = new_sandbox(&p).await;

    let out = sh(
        &p,
        &id,
        // tail keeps everything after the last newline: all 256 MiB of it. The pipeline's
        // status is tail's, so the command ends killed.
        "head -c 256M /dev/zero | tail > /dev/null",
    )
    .await;
    assert!(out.out_of_memory, "{out:?}");
    assert_eq!(out.exit_code, None);

    let out = sh(
        &p,
        &id,
        "head -c 16M /dev/zero > /tmp/big; echo $?; wc -c < /tmp/big",
    )
    .await;
    let mut lines = out.stdout.lines();
    assert_ne!(lines.next(), Some("0"), "writing past /tmp's size fails");
    let written: u64 = lines.next().unwrap().trim().parse().unwrap();
    assert!(written <= 8 * 1024 * 1024, "{written}");

    let out = sh(&p, &id, "rm /tmp/big; echo still here").await;
    assert_eq!(out.stdout, "still here\n");
    assert!(!out.out_of_memory);
    p.kill(&id).await.unwrap();
}

fn count_lines(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&b| b == b'\n').count()
}

#[tokio::test]
async fn pause_freezes_processes_and_resume_continues_them() {
    let (_fixture, p, id) = sandbox!();

    let out = sh(
        &p,
        &id,
        "nohup sh -c 'while :; do echo tick >> /home/user/ticks; sleep 0.02; done' \
         >/dev/null 2>&1 &",
    )
    .await;
    assert_eq!(out.exit_code, Some(0));
    tokio::time::sleep(Duration::from_millis(300)).await;

    p.pause(&id).await.unwrap();
    let frozen = count_lines(&p.read_file(&id, "/home/user/ticks").await.unwrap());
    assert!(frozen > 0, "the counter ran before the pause");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let still = count_lines(&p.read_file(&id, "/home/user/ticks").await.unwrap());
    assert_eq!(frozen, still, "nothing runs while paused");

    assert!(p.connect(&id).await.unwrap().resumed);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let resumed = count_lines(&p.read_file(&id, "/home/user/ticks").await.unwrap());
    assert!(resumed > still, "the counter goes on after resume");
    p.kill(&id).await.unwrap();
}

#[tokio::test]
async fn pause_is_refused_while_a_command_runs() {
    let fixture = fixture!();
    let p = std::sync::Arc::new(fixture.provider().await);
    let id = new_sandbox(&p).await;

    let running = {
        let (p, id) = (p.clone(), id.clone());
        tokio::spawn(async move {
            p.exec(&id, ExecRequest::shell("sleep 1.5; echo done"))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    match p.pause(&id).await {
        Err(ProviderError::Conflict(message)) => assert!(message.contains("command is running")),
        other => panic!("pause during a command: {other:?}"),
    }
    let out = running.await.unwrap().unwrap();
    assert_eq!(out.stdout, "done\n");
    p.pause(&id).await.expect("pause once the command is done");

    // And a paused sandbox runs nothing until it is resumed.
    match p.exec(&id, ExecRequest::shell("true")).await {
        Err(ProviderError::Conflict(message)) => assert!(message.contains("paused")),
        other => panic!("exec while paused: {other:?}"),
    }
    p.kill(&id).await.unwrap();
}

#[tokio::test]
async fn a_timeout_kills_the_whole_process_tree() {
    let (_fixture, p, id) = sandbox!();

    let mut request = ExecRequest::shell("sleep 101 & sleep 102 & (sleep 103 &); sleep 104");
    request.timeout = Duration::from_millis(800);
    let out = p.exec(&id, request).await.unwrap();
    assert!(out.timed_out);

    let out = sh(&p, &id, "cat /proc/[0-9]*/cmdline | tr '\\0' ' '").await;
    for n in 101..=104 {
        assert!(
            !out.stdout.contains(&format!("sleep {n}")),
            "sleep {n} survived the timeout: {}",
            out.stdout
        );
    }
    p.kill(&id).await.unwrap();
}

#[tokio::test]
async fn big_output_is_capped_without_blocking_the_command() {
    let (_fixture, p, id) = sandbox!();

    // 20 MB through a 64 KiB cap: the command must run to its end, not stall on a full pipe.
    let out = sh(
        &p,
        &id,
        "head -c 20000000 /dev/zero | tr '\\0' y; echo end >&2",
    )
    .await;
    assert_eq!(out.exit_code, Some(0));
    assert!(out.truncated);
    assert_eq!(out.stdout.len(), 64 * 1024);
    assert_eq!(out.stderr, "end\n");
    // A background child holding stdout open does not hold up the result.
    let started = std::time::Instant::now();
    let out = sh(&p, &id, "sleep 30 & echo quick").await;
    assert_eq!(out.stdout, "quick\n");
    assert!(started.elapsed() < Duration::from_secs(5));
    p.kill(&id).await.unwrap();
}

/// A name that is not UTF-8 is listed, with its exact bytes in `name_base64`, and a recursive
/// delete removes a folder holding such names (it used to stop at them and fail).
#[tokio::test]
async fn names_that_are_not_utf8_are_listed_and_removable() {
    let (_fixture, p, id) = sandbox!();
    let out = sh(
        &p,
        &id,
        "mkdir -p /home/user/odd/deeper && touch \"/home/user/odd/$(printf 'bad\\377name')\" \
         \"/home/user/odd/deeper/$(printf '\\376')\" /home/user/odd/plain.txt",
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");

    let listed = p.list_dir(&id, "/home/user/odd").await.expect("list");
    let odd = listed
        .iter()
        .find(|e| e.name_base64.is_some())
        .unwrap_or_else(|| panic!("the odd name is listed: {listed:?}"));
    assert_eq!(
        odd.name_base64.as_deref(),
        Some("YmFk/25hbWU="),
        "b\"bad\\xffname\""
    );
    assert_eq!(odd.name, "bad\u{fffd}name");
    assert_eq!(odd.path, "/home/user/odd/bad\u{fffd}name");
    let plain = listed
        .iter()
        .find(|e| e.name == "plain.txt")
        .expect("plain");
    assert_eq!(plain.name_base64, None);
    assert_eq!(listed.len(), 3, "{listed:?}");

    p.remove(&id, "/home/user/odd", true)
        .await
        .expect("a recursive delete removes every name");
    assert!(p.stat(&id, "/home/user/odd").await.is_err());
}

/// A file the sandbox keeps growing is read up to the size it had when opened: the answer's
/// Content-Length promised that much, and a writer inside must not make a download endless.
#[tokio::test]
async fn an_open_file_reads_only_the_size_it_had_when_opened() {
    use tokio::io::AsyncReadExt;
    let (_fixture, p, id) = sandbox!();
    let out = sh(&p, &id, "printf 0123456789 > /home/user/growing").await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");

    let mut open = p.open_file(&id, "/home/user/growing").await.expect("open");
    assert_eq!(open.size, 10);
    let out = sh(&p, &id, "head -c 100000 /dev/zero >> /home/user/growing").await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");

    let mut read = Vec::new();
    open.reader.read_to_end(&mut read).await.expect("read");
    assert_eq!(read, b"0123456789");
    p.kill(&id).await.unwrap();
}

#[tokio::test]
async fn paths_outside_and_escaping_symlinks_are_refused() {
    let (_fixture, p, id) = sandbox!();

    let out = sh(
        &p,
        &id,
        "ln -s /etc/shadow /home/user/shadow && ln -s ../../../etc /home/user/etc && \
         ln -s /home/user/real.txt /home/user/good && echo inside > /home/user/real.txt && \
         ln -s /tmp /home/user/tmplink && echo t > /tmp/t.txt",
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");

    for path in [
        "/home/user/shadow",
        "/home/user/etc/passwd",
        "/etc/passwd",
        "/usr/bin/env",
        "/proc/1/environ",
    ] {
        match p.read_file(&id, path).await {
            Err(ProviderError::InvalidRequest(message)) => assert!(
                message.contains(path),
                "the error names the path {path}: {message}"
            ),
            other => panic!("{path} was not refused: {other:?}"),
        }
    }
    // Writing through an escaping link is refused and changes nothing on the host.
    let host_shadow = std::fs::read("/etc/shadow").ok();
    assert!(matches!(
        p.write_file(&id, "/home/user/shadow", b"pwned").await,
        Err(ProviderError::InvalidRequest(_))
    ));
    assert_eq!(std::fs::read("/etc/shadow").ok(), host_shadow);
    assert!(p
        .glob(&id, "/home/user/etc/*")
        .await
        .unwrap_or_default()
        .is_empty());
    assert!(p.list_dir(&id, "/home/user/etc").await.is_err());
    assert!(p.grep(&id, "root", "/home/user/etc").await.is_err());

    // Links that stay inside work, and the links themselves can be looked at.
    assert_eq!(
        p.read_file(&id, "/home/user/good").await.unwrap(),
        b"inside\n"
    );
    assert_eq!(
        p.read_file(&id, "/home/user/tmplink/t.txt").await.unwrap(),
        b"t\n"
    );
    assert_eq!(
        p.stat(&id, "/home/user/shadow").await.unwrap().kind,
        FileKind::Symlink
    );

    // Files the API writes belong to the sandbox's user.
    p.write_file(&id, "/home/user/new/owned.txt", b"x")
        .await
        .unwrap();
    let out = sh(
        &p,
        &id,
        "stat -c '%u:%g' /home/user/new /home/user/new/owned.txt",
    )
    .await;
    assert_eq!(out.stdout, "1000:1000\n1000:1000\n");

    // Malformed ids never reach the filesystem.
    for bad in ["rc-../../etc", "../x", "rc-0123456789AB", ""] {
        assert!(matches!(
            p.info(bad).await,
            Err(ProviderError::InvalidRequest(_))
        ));
    }
    assert!(matches!(
        p.info("rc-000000000000").await,
        Err(ProviderError::Gone(_))
    ));
    p.kill(&id).await.unwrap();
}

#[tokio::test]
async fn sandboxes_survive_a_provider_restart() {
    let fixture = fixture!();
    let (running, paused, owner) = {
        let p = fixture.provider().await;
        let owner = suite::fresh_owner(3);
        let running = p
            .create(suite::create_request(owner.clone()))
            .await
            .unwrap()
            .sandbox_id;
        let paused = new_sandbox(&p).await;
        p.write_file(&paused, "/home/user/note.txt", b"kept")
            .await
            .unwrap();
        p.pause(&paused).await.unwrap();
        (running, paused, owner)
    };

    let p = fixture.provider().await;
    let info = p.info(&running).await.unwrap();
    assert_eq!(info.state, SandboxState::Running);
    assert_eq!(info.owner(), Some(owner.clone()));
    assert_eq!(p.info(&paused).await.unwrap().state, SandboxState::Paused);
    assert_eq!(p.list(&owner.to_metadata()).await.unwrap().len(), 1);

    assert_eq!(sh(&p, &running, "echo hi").await.stdout, "hi\n");
    assert!(p.connect(&paused).await.unwrap().resumed);
    assert_eq!(sh(&p, &paused, "cat note.txt").await.stdout, "kept");
    p.kill(&running).await.unwrap();
    p.kill(&paused).await.unwrap();
}

fn age_dir(path: &Path) {
    let old = std::time::SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::open(path)
        .unwrap()
        .set_modified(old)
        .unwrap();
}

#[tokio::test]
async fn leftovers_are_swept_and_reported_gone() {
    let (fixture, p, id) = sandbox!();
    let bundle: PathBuf = fixture.config.sandboxes_dir().join(&id);

    // The container disappears behind the provider's back; its bundle stays.
    assert!(fixture.runc(&["delete", "--force", &id]).status.success());
    assert!(matches!(p.info(&id).await, Err(ProviderError::Gone(_))));
    assert!(matches!(
        p.exec(&id, ExecRequest::shell("true")).await,
        Err(ProviderError::Gone(_))
    ));

    // A fresh bundle might be a create in progress elsewhere, so it is spared...
    drop(p);
    let p = fixture.provider().await;
    assert!(bundle.exists());
    // ...an old one is swept on startup.
    age_dir(&bundle);
    drop(p);
    let p = fixture.provider().await;
    assert!(!bundle.exists(), "the leftover bundle was removed");
    p.kill(&id).await.expect("kill of a swept sandbox succeeds");

    // A sandbox whose bundle vanished has its container removed by list.
    let other = new_sandbox(&p).await;
    let other_bundle = fixture.config.sandboxes_dir().join(&other);
    // (Its home and root are mounts: the bundle cannot go before they do.)
    for mount in ["home", "rootfs"] {
        let unmounted = std::process::Command::new("umount")
            .arg(other_bundle.join(mount))
            .status()
            .unwrap();
        assert!(unmounted.success());
    }
    std::fs::remove_dir_all(&other_bundle).unwrap();
    assert!(p.list(&BTreeMap::new()).await.unwrap().is_empty());
    let listed = fixture.runc(&["list", "--quiet"]);
    assert!(!String::from_utf8_lossy(&listed.stdout).contains(&other));
}

#[tokio::test]
async fn create_env_is_validated() {
    let fixture = fixture!();
    let p = fixture.provider().await;
    let mut request: CreateSandbox = suite::create_request(suite::fresh_owner(1));
    request.env.insert("BAD=NAME".into(), "x".into());
    assert!(matches!(
        p.create(request).await,
        Err(ProviderError::InvalidRequest(_))
    ));
}

/// Zombies that are children of this process (the provider reaps what runc leaves it).
fn our_zombies() -> Vec<String> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("stat")).ok())
        .filter(|stat| {
            let rest = &stat[stat.rfind(')').unwrap() + 2..];
            let mut fields = rest.split(' ');
            fields.next() == Some("Z") && fields.next() == Some(me.as_str())
        })
        .collect()
}

/// Set in the child process [`in_a_process_of_its_own`] starts.
const ISOLATED: &str = "THREADBOX_TEST_ISOLATED";

/// Run the test `name` of this binary again in a child process and assert that it passed. For
/// checks of process-wide state: nextest gives every test a process of its own, but `cargo test`
/// runs a binary's tests as threads of one process, where the other tests' sandboxes come and go
/// meanwhile. True in the child, which then runs the test's body.
fn in_a_process_of_its_own(name: &str) -> bool {
    if std::env::var_os(ISOLATED).is_some() {
        return true;
    }
    let output = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(ISOLATED, "1")
        .output()
        .expect("run the test in a child process");
    assert!(
        output.status.success(),
        "{name} failed in its own process:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    false
}

#[tokio::test]
async fn no_zombies_are_left_behind() {
    // It counts this process's zombie children, which other tests' sandboxes also make.
    if !in_a_process_of_its_own("no_zombies_are_left_behind") {
        return;
    }
    let (_fixture, p, id) = sandbox!();
    for _ in 0..5 {
        sh(&p, &id, "true").await;
    }
    let mut request = ExecRequest::shell("sleep 60");
    request.timeout = Duration::from_millis(300);
    assert!(p.exec(&id, request).await.unwrap().timed_out);
    p.pause(&id).await.unwrap();
    p.connect(&id).await.unwrap();
    let started = std::time::Instant::now();
    p.kill(&id).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "kill took {:?}",
        started.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(our_zombies(), Vec::<String>::new());
}

/// A sandbox's home holding a chain of directories 30,000 deep is destroyed with the process
/// alive; a recursive removal overflowed the stack and aborted the whole process there. Both
/// kinds of home: a volume (unmounted and unlinked) and, without a quota, a plain directory
/// (walked).
#[tokio::test]
async fn a_tree_thirty_thousand_deep_is_destroyed_without_harm() {
    thirty_thousand_deep(SandboxLimits::default()).await;
}

#[tokio::test]
async fn a_tree_thirty_thousand_deep_in_a_plain_home_is_destroyed_without_harm() {
    thirty_thousand_deep(SandboxLimits {
        disk: None,
        ..SandboxLimits::default()
    })
    .await;
}

async fn thirty_thousand_deep(limits: SandboxLimits) {
    let fixture = fixture!(limits);
    let p = fixture.provider().await;
    let id = new_sandbox(&p).await;
    let made = sh(
        &p,
        &id,
        "python3 -c 'import os\nfor _ in range(30000):\n    os.mkdir(\"d\"); os.chdir(\"d\")\nopen(\"leaf\", \"w\").write(\"x\")' && echo made",
    )
    .await;
    assert_eq!(made.stdout, "made\n", "{made:?}");
    p.kill(&id).await.expect("the kill succeeds");
    assert!(
        !fixture.config.sandboxes_dir().join(&id).exists(),
        "the bundle is gone"
    );
    assert!(matches!(p.info(&id).await, Err(ProviderError::Gone(_))));
}

/// The syscalls a sandbox could use to attack the kernel or another process are refused with
/// EPERM. Unfiltered, each of these calls would fail differently (EFAULT, EBADF) or succeed.
#[cfg(target_arch = "x86_64")]
#[tokio::test]
async fn seccomp_refuses_io_uring_ptrace_and_reading_other_processes() {
    let (_fixture, p, id) = sandbox!();
    let script = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
calls = {
    "io_uring_setup": (425, 1, 0),
    "pidfd_getfd": (438, -1, 0, 0),
    "process_vm_readv": (310, os.getpid(), 0, 0, 0, 0, 0),
    "ptrace": (101, 0, 0, 0, 0),
    "kcmp": (312, os.getpid(), os.getpid(), 0, 0, 0),
    "fsopen": (430, 0, 0),
    "perf_event_open": (298, 0, 0, -1, -1, 0),
}
for name, args in calls.items():
    ctypes.set_errno(0)
    r = libc.syscall(*args)
    print(name, r, ctypes.get_errno())
"#;
    let mut request = ExecRequest::shell("");
    request.command = threadbox_core::ports::ExecCommand::Argv(vec![
        "python3".into(),
        "-c".into(),
        script.into(),
    ]);
    let out = p.exec(&id, request).await.unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    for name in [
        "io_uring_setup",
        "pidfd_getfd",
        "process_vm_readv",
        "ptrace",
        "kcmp",
        "fsopen",
        "perf_event_open",
    ] {
        assert!(
            out.stdout.lines().any(|l| l == format!("{name} -1 1")),
            "{name} not refused with EPERM:\n{}",
            out.stdout
        );
    }
    p.kill(&id).await.unwrap();
}

/// No core dumps, and no file larger than the limit.
#[tokio::test]
async fn core_dumps_are_off_and_file_size_is_capped() {
    let fixture = fixture!(SandboxLimits {
        file_size_bytes: 1024 * 1024,
        ..SandboxLimits::default()
    });
    let p = fixture.provider().await;
    let id = new_sandbox(&p).await;
    let limits = sh(&p, &id, "ulimit -c").await;
    assert_eq!(limits.stdout, "0\n", "{limits:?}");
    let big = sh(
        &p,
        &id,
        "head -c 2000000 /dev/zero > big; echo status $?; stat -c %s big",
    )
    .await;
    assert!(big.stdout.contains("status 153"), "SIGXFSZ: {big:?}");
    assert!(big.stdout.ends_with("1048576\n"), "{big:?}");
    p.kill(&id).await.unwrap();
}

/// A runc without the fix for a known container escape is refused at start, naming the CVE and
/// the way out, unless the operator allows it knowingly.
#[tokio::test]
async fn an_unpatched_runtime_is_refused_unless_allowed() {
    let Some(fixture) = Fixture::new(SandboxLimits::default()) else {
        return;
    };
    // A stand-in runc that reports an unpatched upstream version and belongs to no package.
    let fake = fixture._dir.path().join("old-runc");
    std::fs::write(
        &fake,
        "#!/bin/sh\ncase \"$*\" in\n  *--version*) echo 'runc version 1.1.5'; echo 'commit: v1.1.5' ;;\n  *list*) echo null ;;\n  *) exit 1 ;;\nesac\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut config = fixture.config.clone();
    config.runc_binary = fake;
    let refused = RuncProvider::open(config.clone())
        .await
        .err()
        .expect("refused");
    let message = refused.to_string();
    assert!(
        matches!(refused, ProviderError::Unsupported(_)),
        "{refused:?}"
    );
    assert!(
        message.contains("CVE-2024-21626") && message.contains("--allow-unpatched-runc"),
        "{message}"
    );
    config.allow_unpatched_runtime = true;
    RuncProvider::open(config).await.expect("allowed knowingly");
}

/// An argument or environment value past the kernel's per-string limit is a bad request named as
/// such, not a runtime failure (execve's E2BIG used to surface as a 502).
#[tokio::test]
async fn oversized_arguments_are_invalid_requests() {
    let (_fixture, p, id) = sandbox!();
    let mut request = ExecRequest::shell("true");
    request.command =
        threadbox_core::ports::ExecCommand::Argv(vec!["echo".into(), "x".repeat(130 * 1024)]);
    let err = p.exec(&id, request).await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::InvalidRequest(m) if m.contains("at most 131071 bytes")),
        "{err:?}"
    );
    let mut request = ExecRequest::shell("true");
    request.env.insert("BIG".into(), "v".repeat(130 * 1024));
    assert!(matches!(
        p.exec(&id, request).await,
        Err(ProviderError::InvalidRequest(_))
    ));
    // Just under the limit still runs.
    let fits = sh(&p, &id, &format!("echo {} | wc -c", "y".repeat(120 * 1024))).await;
    assert_eq!(fits.stdout.trim(), (120 * 1024 + 1).to_string(), "{fits:?}");
    p.kill(&id).await.unwrap();
}

/// A daemon the command leaves behind that grabs the wrapper's status pipe (`pidfd_getfd`, as
/// the issue found possible) cannot keep the answer waiting. Two defences: seccomp refuses the
/// grab, and the provider watches the command's exit through a pidfd, not the pipe's closing.
/// (Reopening the pipe through /proc is denied too: it belongs to root, mode 0600.)
#[cfg(target_arch = "x86_64")]
#[tokio::test]
async fn a_daemon_grabbing_the_status_pipe_does_not_delay_the_answer() {
    let (_fixture, p, id) = sandbox!();
    let script = r#"
import ctypes, os, time
wrapper = os.getppid()
if os.fork() == 0:
    os.setsid()
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = libc.syscall(434, wrapper, 0)  # pidfd_open
    held = [libc.syscall(438, pidfd, n, 0) for n in (3, 10)]  # pidfd_getfd
    for n in (0, 1, 2):
        os.close(n)
    time.sleep(30)
    os._exit(0)
time.sleep(0.3)
print("done")
"#;
    let mut request = ExecRequest::shell("true");
    request.command = threadbox_core::ports::ExecCommand::Argv(vec![
        "python3".into(),
        "-c".into(),
        script.into(),
    ]);
    request.timeout = Duration::from_secs(20);
    let started = std::time::Instant::now();
    let out = p.exec(&id, request).await.unwrap();
    assert_eq!(
        (out.exit_code, out.stdout.as_str()),
        (Some(0), "done\n"),
        "{out:?}"
    );
    assert!(!out.timed_out, "{out:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "answered after {:?}",
        started.elapsed()
    );
    p.kill(&id).await.unwrap();
}

/// Running commands hold no blocking thread: with the pool cut to four, sixteen commands
/// sleeping five seconds leave room for other blocking work (SQLite runs there).
#[test]
fn running_commands_leave_the_blocking_pool_free() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(4)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let fixture = fixture!();
        // Room for all sixteen in one sandbox (the default caps would refuse most of them).
        let mut config = fixture.config.clone();
        config.max_commands_per_sandbox = 16;
        config.max_commands = 16;
        let p = std::sync::Arc::new(RuncProvider::open(config).await.unwrap());
        let id = new_sandbox(&p).await;
        let started = std::time::Instant::now();
        let commands: Vec<_> = (0..16)
            .map(|_| {
                let (p, id) = (p.clone(), id.clone());
                tokio::spawn(async move { p.exec(&id, ExecRequest::shell("sleep 5")).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let probe = std::time::Instant::now();
        tokio::task::spawn_blocking(|| ()).await.unwrap();
        let waited = probe.elapsed();
        for command in commands {
            assert_eq!(command.await.unwrap().unwrap().exit_code, Some(0));
        }
        let total = started.elapsed();
        eprintln!("blocking probe waited {waited:?}; 16 five-second commands took {total:?}");
        assert!(
            waited < Duration::from_secs(2),
            "the pool was full for {waited:?}"
        );
        p.kill(&id).await.unwrap();
    });
}

fn limit_of(result: Result<threadbox_core::ports::ExecResult, ProviderError>) -> &'static str {
    match result {
        Err(ProviderError::LimitReached { limit, .. }) => limit.code(),
        other => panic!("expected a limit, got {other:?}"),
    }
}

/// Commands per sandbox and per host, and sandboxes per host, are capped with an answer that
/// names the limit; places free up as commands end and sandboxes go.
#[tokio::test]
async fn commands_and_sandboxes_are_capped_with_the_limit_named() {
    let fixture = fixture!();
    let mut config = fixture.config.clone();
    config.max_commands_per_sandbox = 2;
    config.max_commands = 3;
    config.max_sandboxes = 2;
    let p = std::sync::Arc::new(RuncProvider::open(config).await.unwrap());
    let a = new_sandbox(&p).await;
    let b = new_sandbox(&p).await;
    match p.create(suite::create_request(suite::fresh_owner(3))).await {
        Err(ProviderError::LimitReached { limit, .. }) => {
            assert_eq!(limit.code(), "too_many_sandboxes")
        }
        other => panic!("a third sandbox: {other:?}"),
    }

    let long = |id: &String| {
        let (p, id) = (p.clone(), id.clone());
        tokio::spawn(async move { p.exec(&id, ExecRequest::shell("sleep 2")).await })
    };
    let running = [long(&a), long(&a)];
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        limit_of(p.exec(&a, ExecRequest::shell("true")).await),
        "too_many_commands_in_thread"
    );
    let third = long(&b);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        limit_of(p.exec(&b, ExecRequest::shell("true")).await),
        "too_many_commands"
    );
    for command in running {
        assert_eq!(command.await.unwrap().unwrap().exit_code, Some(0));
    }
    third.await.unwrap().unwrap();
    assert_eq!(sh(&p, &a, "echo again").await.stdout, "again\n");
    p.kill(&b).await.unwrap();
    new_sandbox(&p).await;
}

/// The host uid of a sandbox's container init, from `/proc/<pid>/status` on the host.
fn host_uid_of_init(fixture: &Fixture, id: &str) -> u32 {
    let state = fixture.runc(&["state", id]);
    let state: serde_json::Value = serde_json::from_slice(&state.stdout).expect("runc state");
    let pid = state["pid"].as_u64().expect("init pid");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uids = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .expect("Uid line");
    // Real, effective, saved, filesystem: all the same for the init.
    uids.split_whitespace().next().unwrap().parse().unwrap()
}

/// Holds inotify instances until it cannot make another, says how many it got and why it
/// stopped in /home/user/held, then keeps them until /home/user/release appears.
const HOLD_INOTIFY: &str = r#"
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
fds = []
while True:
    fd = libc.inotify_init1(0)
    if fd < 0:
        break
    fds.append(fd)
with open("/home/user/held", "w") as f:
    f.write("%d %d" % (len(fds), ctypes.get_errno()))
while not os.path.exists("/home/user/release"):
    time.sleep(0.05)
"#;

/// A Python script run with the host's python3 (the host's /usr is visible inside).
fn python(script: &str) -> ExecRequest {
    ExecRequest {
        command: ExecCommand::Argv(vec!["python3".into(), "-c".into(), script.into()]),
        ..ExecRequest::shell("")
    }
}

const ONE_INOTIFY: &str =
    "import ctypes; fd = ctypes.CDLL(None).inotify_init1(0); print('ok' if fd >= 0 else 'failed')";

#[tokio::test]
async fn each_sandbox_is_a_host_uid_of_its_own_and_per_uid_limits_stay_apart() {
    let mut fixture = fixture!();
    fixture.config.user_namespaces = true;
    let p = fixture.provider().await;
    let (a, b) = (new_sandbox(&p).await, new_sandbox(&p).await);

    let (uid_a, uid_b) = (
        host_uid_of_init(&fixture, &a),
        host_uid_of_init(&fixture, &b),
    );
    assert_ne!(uid_a, uid_b, "two sandboxes share a host uid");
    for uid in [uid_a, uid_b] {
        assert!(
            uid >= 1_000_000_000,
            "host uid {uid} is not from a sandbox range"
        );
    }
    // Inside, the same user as ever; and what the file API writes is that user's.
    assert_eq!(sh(&p, &a, "id -u; id -g").await.stdout, "1000\n1000\n");
    p.write_file(&a, "/home/user/api.txt", b"x").await.unwrap();
    p.make_dir(&a, "/home/user/made/by/api").await.unwrap();
    let owners = sh(&p, &a, "stat -c %u:%g api.txt made made/by/api").await;
    assert_eq!(
        owners.stdout, "1000:1000\n1000:1000\n1000:1000\n",
        "{owners:?}"
    );

    // One sandbox takes every inotify instance its uid may have...
    let max: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_user_instances")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let hold = p.exec(&a, python(HOLD_INOTIFY));
    let check = async {
        let held = loop {
            match p.read_file(&a, "/home/user/held").await {
                Ok(held) => break String::from_utf8(held).unwrap(),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        // ...and no other sandbox, nor the host's uid 1000, is short of one.
        let other = p.exec(&b, python(ONE_INOTIFY)).await.unwrap();
        let host = std::process::Command::new("python3")
            .args(["-c", ONE_INOTIFY])
            .uid(1000)
            .gid(1000)
            .output()
            .unwrap();
        p.write_file(&a, "/home/user/release", b"").await.unwrap();
        (
            held,
            other.stdout,
            String::from_utf8_lossy(&host.stdout).into_owned(),
        )
    };
    let (held_exit, (held, other, host)) = tokio::join!(hold, check);
    assert_eq!(held_exit.unwrap().exit_code, Some(0));
    // EMFILE after exactly the per-user limit: the limit that was reached is the uid's.
    assert_eq!(
        held,
        format!("{max} 24"),
        "the sandbox did not hit its own uid's limit"
    );
    assert_eq!(
        other, "ok\n",
        "another sandbox could not make an inotify instance"
    );
    assert_eq!(
        host, "ok\n",
        "the host's uid 1000 could not make an inotify instance"
    );

    // Each range is recorded while its sandbox lives and freed when it is destroyed.
    let ranges = || ranges_owned_by(&fixture).len();
    assert_eq!(ranges(), 2);
    p.kill(&a).await.unwrap();
    assert_eq!(ranges(), 1);
    p.kill(&b).await.unwrap();
    assert_eq!(ranges(), 0);
}

/// Mount points under `dir` in this (the host's) mount namespace.
fn mounts_under(dir: &Path) -> Vec<String> {
    let dir = format!("{}/", dir.display());
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|line| line.split(' ').nth(4).map(str::to_owned))
        .filter(|mount_point| mount_point.starts_with(&dir))
        .collect()
}

fn host_free_bytes(path: &Path) -> u64 {
    let stat = rustix::fs::statvfs(path).unwrap();
    stat.f_bavail * stat.f_frsize
}

/// The home is a filesystem of the quota's size: filling it gets ENOSPC inside, the file API
/// meets the same limit, another sandbox still writes, the host's disk only pays for what was
/// written, and the usage shows in the sandbox's info. A kill leaves no mount behind.
#[tokio::test]
async fn the_disk_quota_holds_and_nothing_outside_pays_for_it() {
    let quota = DiskQuota {
        bytes: 64 << 20,
        inodes: 2048,
    };
    let fixture = fixture!(SandboxLimits {
        disk: Some(quota),
        ..SandboxLimits::default()
    });
    let p = fixture.provider().await;
    let filler = new_sandbox(&p).await;
    let neighbour = new_sandbox(&p).await;
    let state_dir = &fixture.config.state_dir;

    // What the sandbox sees: its own small filesystem, not the host's disk.
    let df = sh(&p, &filler, "df -k --output=size /home/user | tail -1").await;
    let size_kib: u64 = df
        .stdout
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{df:?}"));
    assert!(
        (40 << 10..=64 << 10).contains(&size_kib),
        "df shows {size_kib} KiB"
    );

    let free_before = host_free_bytes(state_dir);
    let fill = sh(
        &p,
        &filler,
        "head -c 200000000 /dev/zero > /home/user/big; echo status=$?",
    )
    .await;
    assert!(
        fill.stderr.contains("No space left on device") && fill.stdout.contains("status=1"),
        "{fill:?}"
    );
    let fallocate = sh(&p, &filler, "fallocate -l 1G /home/user/more").await;
    assert_ne!(fallocate.exit_code, Some(0), "{fallocate:?}");
    let grown = free_before.saturating_sub(host_free_bytes(state_dir));
    assert!(
        grown < 80 << 20,
        "the host's disk lost {grown} bytes for a 64 MiB quota"
    );

    // The file API writes into the same filesystem, so it meets the same limit.
    let put = p
        .write_file(&filler, "/home/user/via-api", &vec![7u8; 4 << 20])
        .await
        .expect_err("the disk is full");
    assert!(
        matches!(&put, ProviderError::NoSpace(m) if m.contains("no space left")),
        "{put:?}"
    );

    // Files count too: the inode limit stops a flood of empty ones.
    sh(&p, &filler, "rm -f /home/user/big /home/user/more").await;
    let files = sh(
        &p,
        &filler,
        "mkdir /home/user/many && cd /home/user/many && i=0; \
         while [ $i -lt 3000 ]; do touch f$i 2>/dev/null || break; i=$((i+1)); done; \
         echo made=$i",
    )
    .await;
    let made: u64 = files
        .stdout
        .trim()
        .strip_prefix("made=")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{files:?}"));
    assert!((1500..2048).contains(&made), "{made} files made: {files:?}");

    let info = p.info(&filler).await.unwrap();
    let disk = info.disk.expect("a sandbox with a quota reports its disk");
    assert_eq!(disk.limit_inodes, 2048);
    assert!(disk.used_inodes >= made, "{disk:?}");
    assert!(disk.limit_bytes <= quota.bytes && disk.limit_bytes > quota.bytes / 2);

    // The neighbour is untouched.
    let write = sh(
        &p,
        &neighbour,
        "head -c 1000000 /dev/zero > /home/user/f && echo ok",
    )
    .await;
    assert_eq!(write.stdout, "ok\n", "{write:?}");
    let neighbour_disk = p.info(&neighbour).await.unwrap().disk.unwrap();
    assert!(neighbour_disk.used_inodes < 100, "{neighbour_disk:?}");

    // Inside, no mount names where the sandbox lives on the host.
    let mountinfo = sh(&p, &neighbour, "cat /proc/self/mountinfo").await;
    assert!(mountinfo.stdout.contains(" /home/user "), "{mountinfo:?}");
    assert!(
        !mountinfo.stdout.contains(&*state_dir.to_string_lossy()),
        "{}",
        mountinfo.stdout
    );

    p.kill(&filler).await.unwrap();
    p.kill(&neighbour).await.unwrap();
    assert_eq!(
        mounts_under(&fixture.config.sandboxes_dir()),
        Vec::<String>::new()
    );
}

/// Creates take formatted images from the pool, which refills itself in the background;
/// leftovers of a format cut short, and spares made for another quota, go at the next start.
#[tokio::test]
async fn home_volumes_come_from_a_pool_that_refills_itself() {
    let fixture = fixture!();
    let volumes = fixture.config.volumes_dir();
    let spares = || -> Vec<String> {
        std::fs::read_dir(&volumes)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let settled = |want: usize| async move {
        for _ in 0..200 {
            let now = spares();
            if now.len() == want && now.iter().all(|n| n.starts_with("spare-")) {
                return now;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the pool did not settle at {want} spares: {:?}", spares());
    };
    {
        let p = fixture.provider().await;
        let first = settled(fixture.config.spare_volumes).await;
        let id = new_sandbox(&p).await;
        let after = settled(fixture.config.spare_volumes).await;
        assert!(
            first.iter().any(|n| !after.contains(n)),
            "the create took a spare: {first:?} then {after:?}"
        );
        p.kill(&id).await.unwrap();
    }
    let half_formatted = volumes.join(".formatting-123-456-0.img");
    std::fs::write(&half_formatted, b"half").unwrap();
    age_dir(&half_formatted);
    std::fs::write(volumes.join("spare-999b-9i-1-2-3.img"), b"other quota").unwrap();
    let _p = fixture.provider().await;
    settled(fixture.config.spare_volumes).await;
}

/// A streaming exec whose receiver has gone away does not stop the command: it runs to its end.
/// (That output arrives as it is written is the conformance suite's.)
#[tokio::test]
async fn streaming_exec_runs_on_when_nobody_reads() {
    let (_fixture, p, id) = sandbox!();
    let (sink, gone) = tokio::sync::mpsc::channel(1);
    drop(gone);
    let result = p
        .exec_streaming(
            &id,
            ExecRequest::shell("seq 100000; echo done > /home/user/after"),
            sink,
        )
        .await
        .expect("exec");
    assert_eq!(result.exit_code, Some(0));
    assert_eq!(
        sh(&p, &id, "cat /home/user/after").await.stdout,
        "done\n",
        "the command ran to its end with nobody reading"
    );
    p.kill(&id).await.unwrap();
}

/// The host id table's entries whose owner is a bundle of this fixture's provider.
fn ranges_owned_by(fixture: &Fixture) -> Vec<PathBuf> {
    let ours = std::fs::canonicalize(fixture.config.sandboxes_dir()).unwrap();
    std::fs::read_dir(&fixture.config.id_ranges_dir)
        .unwrap()
        .filter_map(|entry| {
            let owner = PathBuf::from(std::fs::read_to_string(entry.ok()?.path()).ok()?);
            owner.starts_with(&ours).then_some(owner)
        })
        .collect()
}

/// Two providers over different state directories (two `threadbox dev` data directories) share
/// the host's id table, so their sandboxes never get the same host ids; each one's sweep leaves
/// the other's live ranges alone, and a table a state directory kept of its own before is moved
/// into the host's.
#[tokio::test]
async fn providers_on_one_host_share_one_id_table() {
    let table = tempfile::tempdir().unwrap();
    let mut first = fixture!();
    let mut second = fixture!();
    for fixture in [&mut first, &mut second] {
        fixture.config.id_ranges_dir = table.path().join("idranges");
    }
    let (p1, p2) = (first.provider().await, second.provider().await);
    let (a, b) = (new_sandbox(&p1).await, new_sandbox(&p2).await);
    assert_ne!(host_uid_of_init(&first, &a), host_uid_of_init(&second, &b));
    assert_eq!(ranges_owned_by(&first).len(), 1);
    assert_eq!(ranges_owned_by(&second).len(), 1);

    // Reopening one sweeps the table; the other's live range stays.
    drop(p1);
    let p1 = first.provider().await;
    assert_eq!(ranges_owned_by(&second).len(), 1);

    // A state directory's own old table: its live sandbox's slot joins the host's.
    let legacy = second.config.state_dir.join("idranges");
    std::fs::create_dir(&legacy).unwrap();
    std::fs::write(legacy.join("4242"), &b).unwrap();
    drop(p2);
    let p2 = second.provider().await;
    assert!(!legacy.exists());
    assert_eq!(
        std::fs::read_to_string(table.path().join("idranges/4242")).unwrap(),
        std::fs::canonicalize(second.config.sandboxes_dir())
            .unwrap()
            .join(&b)
            .to_string_lossy()
    );
    p1.kill(&a).await.unwrap();
    p2.kill(&b).await.unwrap();
    assert!(ranges_owned_by(&first).is_empty());
}

/// A sandbox whose process table is full (a background process forked until the pid limit
/// refused it) is still under control through the process API: listing, reading and killing
/// need no new process in the sandbox, and what does need one (a command) is refused as the
/// thread's own limit, naming it, instead of failing as the provider's error.
#[tokio::test]
async fn at_its_pid_limit_a_sandbox_is_still_listed_read_and_killed() {
    use threadbox_core::ports::{
        new_process_id, ProcessSignal, ProcessState, StartProcess, DEFAULT_OUTPUT_CHUNKS,
    };
    let fixture = fixture!(SandboxLimits {
        pids: 64,
        ..SandboxLimits::default()
    });
    let p = fixture.provider().await;
    let id = new_sandbox(&p).await;
    // It says so before it fills the table: the output ring forks its writer for the first
    // chunk when the first output comes, and could not at the limit.
    let filler = threadbox_testing::FORK_FILLER;
    let process = new_process_id();
    p.start_process(
        &id,
        StartProcess {
            id: process.clone(),
            command: ExecCommand::Argv(vec!["python3".into(), "-c".into(), filler.into()]),
            cwd: None,
            env: BTreeMap::new(),
            pty: None,
            output_chunks: DEFAULT_OUTPUT_CHUNKS,
            user: Default::default(),
        },
    )
    .await
    .expect("start_process");
    // Its output, read from the host while the sandbox is full.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let read = p.read_process_output(&id, &process, 0, 1024).await;
        match read {
            Ok(out) if String::from_utf8_lossy(&out.data).contains("full after") => break,
            other => assert!(
                std::time::Instant::now() < deadline,
                "the sandbox never filled up: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let listed = p.list_processes(&id).await.expect("listed at the limit");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].state, ProcessState::Running);
    match p.exec(&id, ExecRequest::shell("true")).await {
        Err(ProviderError::LimitReached { limit, message, .. }) => {
            assert_eq!(limit.code(), "too_many_processes_in_thread");
            assert!(message.contains("64"), "names the limit: {message}");
        }
        other => panic!("a command at the pid limit: {other:?}"),
    }
    // KILL reaches the whole group; the record says how it ended; commands run again.
    p.signal_process(&id, &process, ProcessSignal::Kill)
        .await
        .expect("killed at the limit");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let ended = loop {
        let all = p.list_processes(&id).await.expect("list_processes");
        if all[0].state != ProcessState::Running {
            break all[0].clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still running: {all:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(ended.exit_code, Some(137), "{ended:?}");
    assert_eq!(sh(&p, &id, "echo again").await.stdout, "again\n");
    p.kill(&id).await.unwrap();
}
