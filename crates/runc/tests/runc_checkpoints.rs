//! Checkpoints, restore and fork through real runc: as root (a home volume with its quota, each
//! sandbox its own host ids) and, run by root, the same tests again as an ordinary account
//! (rootless: a plain home directory, `SIGSTOP` for the freeze), like `runc_rootless`.
//!
//! What is checked: a checkpoint is consistent while a process writes; a restore puts the home
//! back in place, stops the running processes and names them; a fork is another machine (its own
//! hostname, machine id and host ids, a copy of the home, none of the source's processes) and
//! the source runs on; bad input changes nothing; and a crash (SIGKILL at each of the provider's
//! fault points, in a child process running one of these tests) leaves the home as it was or
//! as asked once a provider opens the state again.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use threadbox_core::domain::CheckpointId;
use threadbox_core::ports::{
    ExecCommand, ExecRequest, ForkSandbox, ProviderError, SandboxProvider, StartProcess,
    DEFAULT_OUTPUT_CAP,
};
use threadbox_runc::{RuncConfig, RuncProvider, SandboxLimits};
use threadbox_testing::provider_conformance::{create_request, fresh_owner};

#[path = "support/sandboxes.rs"]
mod sandboxes;
use sandboxes::{kill_all, new_sandbox, runc_or_skip, state_config};

/// The account the tests run as again when started by root.
const USER: &str = "threadbox-rootless";
/// Set in a child process: the fault test it runs, and the state directory it works in.
const CHILD_STATE: &str = "THREADBOX_CHECKPOINT_TEST_STATE";

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// A provider's state directory, removed (its sandboxes killed) when the test ends.
struct Fixture {
    config: RuncConfig,
    _dir: Option<tempfile::TempDir>,
}

impl Fixture {
    fn new() -> Option<Self> {
        let runc = runc_or_skip("checkpoint tests")?;
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().to_owned();
        Some(Self::over(&path, runc, Some(dir)))
    }

    fn over(path: &Path, runc: std::path::PathBuf, dir: Option<tempfile::TempDir>) -> Self {
        let mut config = state_config(path, runc);
        if !is_root() {
            // Rootless has no disk quota (it needs mounts).
            config.limits = SandboxLimits {
                disk: None,
                ..SandboxLimits::default()
            };
        }
        Self { config, _dir: dir }
    }

    async fn provider(&self) -> RuncProvider {
        RuncProvider::open(self.config.clone())
            .await
            .expect("open the provider")
    }

    fn home(&self, id: &str) -> std::path::PathBuf {
        self.config.sandboxes_dir().join(id).join("home")
    }

    /// Every entry in every thread's checkpoint folder (`.partial-` ones too), as
    /// `thread-folder/name`.
    fn checkpoints(&self) -> Vec<String> {
        let list = |dir: &Path| -> Vec<std::fs::DirEntry> {
            std::fs::read_dir(dir)
                .map(|d| d.flatten().collect())
                .unwrap_or_default()
        };
        let mut names = Vec::new();
        for thread in list(&self.config.state_dir.join("checkpoints")) {
            for entry in list(&thread.path()) {
                names.push(format!(
                    "{}/{}",
                    thread.file_name().to_string_lossy(),
                    entry.file_name().to_string_lossy()
                ));
            }
        }
        names.sort();
        names
    }

    /// Where checkpoint `cp`'s copy of the home is.
    fn copy_of(&self, cp: &CheckpointId) -> std::path::PathBuf {
        let found = self
            .checkpoints()
            .into_iter()
            .find(|name| name.ends_with(&format!("/{cp}")))
            .expect("the checkpoint's folder");
        self.config
            .state_dir
            .join("checkpoints")
            .join(found)
            .join("home")
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if self._dir.is_some() {
            kill_all(self.config.clone());
        }
    }
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
                timeout: Duration::from_secs(30),
                output_cap: DEFAULT_OUTPUT_CAP,
            },
        )
        .await
        .expect("exec");
    (result.exit_code, result.stdout + &result.stderr)
}

/// `script`'s stdout, which must succeed.
/// A background process running `script` (it outlives the call, as the API's do).
fn background(script: &str) -> StartProcess {
    StartProcess {
        id: threadbox_core::ports::new_process_id(),
        command: ExecCommand::Shell(script.to_owned()),
        cwd: None,
        env: BTreeMap::new(),
        pty: None,
        output_chunks: 1,
        user: Default::default(),
    }
}

/// The thread a sandbox belongs to.
async fn thread_of(p: &RuncProvider, id: &str) -> threadbox_core::domain::ThreadId {
    p.info(id)
        .await
        .expect("info")
        .owner()
        .expect("owner")
        .thread_id
}

async fn out(p: &RuncProvider, id: &str, script: &str) -> String {
    let (code, out) = run(p, id, script).await;
    assert_eq!(code, Some(0), "{script}: {out}");
    out
}

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
async fn a_checkpoint_is_consistent_while_a_process_writes() {
    let (fixture, p, id) = sandbox!();
    // Two files always written in order, a then b, each replaced whole: any instant of the home
    // has b equal to a or one behind it. A copy taken while the writer ran on could see more.
    // Rootless, the freeze is SIGSTOP to each process in turn, which a loop forking without
    // pause can outrun (the pause then fails, and says so, after a few tries): there the
    // writer rests 50 ms a turn, as in `runc_rootless`'s pause test.
    let rest = if is_root() { "" } else { "sleep 0.05;" };
    p.start_process(
        &id,
        background(&format!(
            "i=0; while :; do i=$((i+1)); echo $i > a.t && mv a.t a; echo $i > b.t && mv b.t b; \
             for n in 1 2 3 4 5 6 7 8; do echo $i > pad$n; done; {rest} done"
        )),
    )
    .await
    .expect("start the writer");
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..5 {
        let cp = CheckpointId::generate();
        let taken = p.checkpoint(&id, &cp, 1 << 30).await.expect("checkpoint");
        assert!(taken.files >= 2, "{taken:?}");
        let copy = fixture.copy_of(&cp);
        let read = |name: &str| -> u64 {
            std::fs::read_to_string(copy.join(name))
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        };
        let (a, b) = (read("a"), read("b"));
        assert!(
            b == a || b + 1 == a,
            "a={a} b={b}: not one instant of the home"
        );
        p.delete_checkpoint(&thread_of(&p, &id).await, &cp)
            .await
            .expect("delete");
        assert!(!copy.exists());
    }
    // The writer ran on after each.
    let before = std::fs::read_to_string(fixture.home(&id).join("a")).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_ne!(
        std::fs::read_to_string(fixture.home(&id).join("a")).unwrap(),
        before
    );
}

/// One step of the busy writer below, `i`: the log first, then a folder made and an older one
/// removed, a header rewritten in place with the file's mtime put back (only its ctime moves),
/// an atomic pair, and last the counter `n`.
const BUSY_STEP: &str = "i=$((i+1)); echo $i >> log; mkdir -p s/$i && echo $i > s/$i/v; \
    rm -rf s/$((i-3)); printf '%08d' $i | dd of=big bs=8 count=1 conv=notrunc 2>/dev/null; \
    touch -m -d @1000000000 big; echo $i > a.t && mv a.t a; echo $i > b.t && mv b.t b; \
    echo $i > n.t && mv n.t n;";

/// The home `home` (a checkpoint's or a fork's copy) is one instant of the busy writer's: with
/// `n` = k, step k is whole and step k+1 at most begun.
fn assert_one_instant(home: &Path) {
    let read = |name: &str| std::fs::read_to_string(home.join(name)).unwrap_or_default();
    let k: u64 = read("n").trim().parse().expect("the counter");
    let log: Vec<u64> = read("log").lines().map(|l| l.parse().unwrap()).collect();
    let last = *log.last().expect("a log");
    assert!(last == k || last == k + 1, "log at {last}, counter {k}");
    assert_eq!(log, (1..=last).collect::<Vec<_>>(), "the log is whole");
    let begun = last == k + 1;
    let mut folders: Vec<u64> = std::fs::read_dir(home.join("s"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().parse().unwrap())
        .collect();
    folders.sort_unstable();
    for j in folders.iter().copied() {
        assert!(
            j + 2 >= k && j <= k + 1,
            "folder {j} with the counter at {k}: {folders:?}"
        );
        assert!(j <= k || begun, "folder {j} before its step began");
        let v = read(&format!("s/{j}/v"));
        assert!(
            v.trim() == j.to_string() || (j == k + 1 && v.is_empty()),
            "s/{j}/v = {v:?}"
        );
    }
    for j in k.saturating_sub(1).max(1)..=k {
        assert!(
            folders.contains(&j),
            "folder {j} missing at {k}: {folders:?}"
        );
    }
    if !begun && k >= 3 {
        assert!(
            folders.contains(&(k - 2)),
            "folder {} removed early: {folders:?}",
            k - 2
        );
    }
    let big = std::fs::read(home.join("big")).unwrap();
    assert_eq!(big.len(), 65536);
    let header: u64 = String::from_utf8_lossy(&big[..8])
        .parse()
        .expect("a header");
    assert!(
        header == k || (begun && header == k + 1),
        "header {header} at {k}"
    );
    let (a, b): (u64, u64) = (
        read("a").trim().parse().unwrap(),
        read("b").trim().parse().unwrap(),
    );
    assert!(b == a || b + 1 == a, "a={a} b={b}");
    assert!(a == k || (begun && a == k + 1), "a={a} at {k}");
    let data = std::fs::read_dir(home.join("data")).unwrap().count();
    assert_eq!(data, 48, "the bulk is whole");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_and_a_fork_are_one_instant_of_a_home_changing_throughout() {
    let (fixture, p, id) = sandbox!();
    // Enough bulk that the first pass, the sandbox running, takes a while.
    out(
        &p,
        &id,
        "mkdir -p data s && for j in $(seq 1 48); do head -c 1048576 /dev/urandom > data/f$j; \
         done && head -c 65536 /dev/zero > big",
    )
    .await;
    let rest = if is_root() { "" } else { "sleep 0.05;" };
    p.start_process(
        &id,
        background(&format!("i=0; while :; do {BUSY_STEP} {rest} done")),
    )
    .await
    .expect("start the writer");
    tokio::time::sleep(Duration::from_millis(300)).await;
    for round in 0..5 {
        let cp = CheckpointId::generate();
        p.checkpoint(&id, &cp, 1 << 30).await.expect("checkpoint");
        assert_one_instant(&fixture.copy_of(&cp));
        p.delete_checkpoint(&thread_of(&p, &id).await, &cp)
            .await
            .expect("delete");
        if round < 2 {
            let forked = p
                .fork(ForkSandbox {
                    source: id.clone(),
                    checkpoint: None,
                    create: create_request(fresh_owner(1)),
                })
                .await
                .expect("fork")
                .sandbox_id;
            assert_one_instant(&fixture.home(&forked));
            p.kill(&forked).await.expect("kill the fork");
        }
    }
    assert!(
        fixture.checkpoints().is_empty(),
        "{:?}",
        fixture.checkpoints()
    );
    // The writer ran on.
    let before = std::fs::read_to_string(fixture.home(&id).join("n")).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_ne!(
        std::fs::read_to_string(fixture.home(&id).join("n")).unwrap(),
        before
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_puts_the_home_back_in_place_and_names_what_it_stopped() {
    let (fixture, p, id) = sandbox!();
    out(&p, &id, "mkdir -p src/deep && echo one > src/deep/f && ln -s src/deep/f link && chmod 640 src/deep/f").await;
    let cp = CheckpointId::generate();
    let taken = p.checkpoint(&id, &cp, 1 << 30).await.expect("checkpoint");
    assert_eq!(taken.files, 4, "src, deep, f, link: {taken:?}");

    out(
        &p,
        &id,
        "echo two > src/deep/f && echo new > made-after && rm link",
    )
    .await;
    p.start_process(&id, background("exec sleep 1000"))
        .await
        .expect("start a sleeper");
    let restored = p.restore(&id, &cp).await.expect("restore");
    assert!(
        restored
            .stopped
            .iter()
            .any(|s| s.command.contains("sleep 1000")),
        "{restored:?}"
    );
    let after = out(
        &p,
        &id,
        "cat src/deep/f; readlink link; ls; stat -c '%a %u' src/deep/f; id -u",
    )
    .await;
    let lines: Vec<&str> = after.lines().collect();
    assert_eq!(lines[0], "one", "{after}");
    assert_eq!(lines[1], "src/deep/f", "{after}");
    assert!(!after.contains("made-after"), "{after}");
    let (mode_owner, me) = (lines[lines.len() - 2], lines[lines.len() - 1]);
    assert_eq!(
        mode_owner,
        format!("640 {me}"),
        "the file is the sandbox user's again"
    );
    let (_, procs) = run(
        &p,
        &id,
        "ps -eo args 2>/dev/null || cat /proc/[0-9]*/cmdline",
    )
    .await;
    assert!(!procs.contains("sleep 1000"), "{procs}");
    assert!(!fixture
        .config
        .sandboxes_dir()
        .join(&id)
        .join("restoring")
        .exists());

    // An unknown checkpoint is refused and changes nothing.
    let unknown = p.restore(&id, &CheckpointId::generate()).await;
    assert!(
        matches!(unknown, Err(ProviderError::NotFound(_))),
        "{unknown:?}"
    );
    assert_eq!(out(&p, &id, "cat src/deep/f").await, "one\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_is_another_machine_with_a_copy_of_the_home() {
    let (fixture, p, id) = sandbox!();
    out(
        &p,
        &id,
        "echo plan > plan.md && mkdir locked && echo x > locked/f && chmod 000 locked",
    )
    .await;
    p.start_process(&id, background("exec sleep 1001"))
        .await
        .expect("start a sleeper");
    let source_id = out(&p, &id, "hostname; cat /etc/machine-id").await;

    let fork = ForkSandbox {
        source: id.clone(),
        checkpoint: None,
        create: create_request(fresh_owner(1)),
    };
    let forked = p.fork(fork).await.expect("fork").sandbox_id;
    assert_ne!(forked, id);
    assert_eq!(out(&p, &forked, "cat plan.md").await, "plan\n");
    assert_eq!(
        out(&p, &forked, "stat -c %a locked").await,
        "0\n",
        "modes are copied"
    );
    let fork_id = out(&p, &forked, "hostname; cat /etc/machine-id").await;
    let (src_lines, fork_lines): (Vec<&str>, Vec<&str>) =
        (source_id.lines().collect(), fork_id.lines().collect());
    assert_ne!(src_lines[0], fork_lines[0], "its own hostname");
    assert_ne!(src_lines[1], fork_lines[1], "its own machine id");
    assert_eq!(fork_lines[1].len(), 32);
    let (_, procs) = run(&p, &forked, "cat /proc/[0-9]*/cmdline | tr '\\0' ' '").await;
    assert!(
        !procs.contains("sleep 1001"),
        "none of the source's processes: {procs}"
    );
    // The source runs on, its sleeper too.
    let (_, procs) = run(&p, &id, "cat /proc/[0-9]*/cmdline | tr '\\0' ' '").await;
    assert!(procs.contains("sleep 1001"), "{procs}");
    assert_eq!(
        out(&p, &forked, "echo mine > plan.md && cat plan.md").await,
        "mine\n"
    );
    assert_eq!(
        out(&p, &id, "cat plan.md").await,
        "plan\n",
        "the two homes are apart"
    );
    if is_root() {
        let owner = |sandbox: &str| {
            std::fs::metadata(fixture.home(sandbox).join("plan.md"))
                .unwrap()
                .uid()
        };
        assert_ne!(
            owner(&id),
            owner(&forked),
            "each sandbox owns its files by its own host ids"
        );
    }

    // From a checkpoint, after the source changed.
    let cp = CheckpointId::generate();
    p.checkpoint(&id, &cp, 1 << 30).await.expect("checkpoint");
    out(&p, &id, "echo later > plan.md").await;
    let from_cp = p
        .fork(ForkSandbox {
            source: id.clone(),
            checkpoint: Some(cp.clone()),
            create: create_request(fresh_owner(1)),
        })
        .await
        .expect("fork at the checkpoint")
        .sandbox_id;
    assert_eq!(out(&p, &from_cp, "cat plan.md").await, "plan\n");
    let unknown = p
        .fork(ForkSandbox {
            source: id.clone(),
            checkpoint: Some(CheckpointId::generate()),
            create: create_request(fresh_owner(1)),
        })
        .await;
    assert!(
        matches!(unknown, Err(ProviderError::NotFound(_))),
        "{unknown:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_home_over_the_cap_is_refused_with_the_numbers_and_nothing_kept() {
    let (fixture, p, id) = sandbox!();
    out(&p, &id, "head -c 3000000 /dev/urandom > big").await;
    let refused = p.checkpoint(&id, &CheckpointId::generate(), 1 << 20).await;
    let Err(ProviderError::NoSpace(message)) = refused else {
        panic!("{refused:?}");
    };
    assert!(message.contains("1048576"), "{message}");
    assert!(
        fixture.checkpoints().is_empty(),
        "{:?}",
        fixture.checkpoints()
    );
    // The sandbox is thawed and works.
    assert_eq!(out(&p, &id, "echo ok").await, "ok\n");
    let again = p.checkpoint(&id, &CheckpointId::generate(), 1 << 30).await;
    assert!(again.is_ok(), "{again:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_threads_checkpoints_are_its_own_and_go_with_it() {
    let (fixture, p, id) = sandbox!();
    let other = new_sandbox(&p).await;
    let (mine, theirs) = (CheckpointId::generate(), CheckpointId::generate());
    p.checkpoint(&id, &mine, 1 << 30).await.expect("checkpoint");
    p.checkpoint(&other, &theirs, 1 << 30)
        .await
        .expect("checkpoint");
    // Another thread's checkpoint is not found from this one's sandbox.
    let refused = p.restore(&id, &theirs).await;
    assert!(
        matches!(refused, Err(ProviderError::NotFound(_))),
        "{refused:?}"
    );
    let refused = p
        .fork(ForkSandbox {
            source: id.clone(),
            checkpoint: Some(theirs.clone()),
            create: create_request(fresh_owner(1)),
        })
        .await;
    assert!(
        matches!(refused, Err(ProviderError::NotFound(_))),
        "{refused:?}"
    );
    // A copy no record names (a crash before its record) goes with its thread all the same.
    let stray = fixture
        .copy_of(&mine)
        .parent()
        .unwrap()
        .with_file_name("cp-00000000000000000001");
    std::fs::create_dir_all(stray.join("home")).unwrap();
    p.delete_thread_checkpoints(&thread_of(&p, &id).await)
        .await
        .expect("delete the thread's");
    let left = fixture.checkpoints();
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].ends_with(theirs.as_str()), "{left:?}");
}

/// A crash at `point` while the child process runs `work` over a state directory, then a
/// provider opening that directory again. Returns the fixture and the sandbox.
async fn crash_at(point: &str, test: &str) -> Option<(Fixture, RuncProvider, String)> {
    let fixture = Fixture::new()?;
    let exe = std::env::current_exe().expect("this test binary");
    let status = Command::new(exe)
        .args([
            test,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("THREADBOX_FAULT", point)
        .env(CHILD_STATE, &fixture.config.state_dir)
        .status()
        .expect("run the child");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(9),
        "the child did not die at {point}: {status:?}"
    );
    let p = fixture.provider().await;
    let id = std::fs::read_to_string(fixture.config.state_dir.join("sandbox-under-test"))
        .expect("the child named its sandbox");
    Some((fixture, p, id))
}

/// The child's side of the crash tests: a provider over the parent's state directory.
async fn child() -> Option<(Fixture, RuncProvider, String)> {
    let state = std::env::var_os(CHILD_STATE)?;
    let runc = runc_or_skip("checkpoint crash tests")?;
    let dir = Path::new(&state).parent().unwrap().to_owned();
    let fixture = Fixture::over(&dir, runc, None);
    let p = fixture.provider().await;
    let id = new_sandbox(&p).await;
    std::fs::write(fixture.config.state_dir.join("sandbox-under-test"), &id).unwrap();
    out(&p, &id, "echo before > f").await;
    Some((fixture, p, id))
}

#[tokio::test]
#[ignore = "run by the crash tests in a child process"]
async fn child_checkpoints() {
    let Some((_f, p, id)) = child().await else {
        return;
    };
    let _ = p.checkpoint(&id, &CheckpointId::generate(), 1 << 30).await;
}

#[tokio::test]
#[ignore = "run by the crash tests in a child process"]
async fn child_restores() {
    let Some((f, p, id)) = child().await else {
        return;
    };
    let cp = CheckpointId::parse("cp-0000000000000000c0de").unwrap();
    p.checkpoint(&id, &cp, 1 << 30).await.expect("checkpoint");
    out(&p, &id, "echo after > f && echo extra > g").await;
    std::fs::write(
        f.config.state_dir.join("checkpoint-under-test"),
        cp.as_str(),
    )
    .unwrap();
    let _ = p.restore(&id, &cp).await;
}

#[tokio::test]
#[ignore = "run by the crash tests in a child process"]
async fn child_forks() {
    let Some((_f, p, id)) = child().await else {
        return;
    };
    let _ = p
        .fork(ForkSandbox {
            source: id.clone(),
            checkpoint: None,
            create: create_request(fresh_owner(1)),
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_mid_checkpoint_leaves_no_half_copy_and_a_working_sandbox() {
    // Between the two passes (the sandbox never frozen), and after the frozen one.
    for point in ["checkpoint-warmed", "checkpoint-before-publish"] {
        let Some((f, p, id)) = crash_at(point, "child_checkpoints").await else {
            return;
        };
        assert!(
            f.checkpoints().is_empty(),
            "{point}: the open removed the half copy: {:?}",
            f.checkpoints()
        );
        assert!(
            !p.connect(&id).await.expect("connect").resumed,
            "{point}: thawed before the crash"
        );
        assert_eq!(out(&p, &id, "cat f").await, "before\n");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_mid_restore_is_finished_by_the_next_open() {
    for point in ["restore-marked", "restore-emptied"] {
        let Some((f, p, id)) = crash_at(point, "child_restores").await else {
            return;
        };
        assert!(
            !f.config
                .sandboxes_dir()
                .join(&id)
                .join("restoring")
                .exists(),
            "{point}"
        );
        let home = out(&p, &id, "cat f; test -e g && echo g || echo no-g").await;
        assert_eq!(
            home, "before\nno-g\n",
            "{point}: the home is as asked, whole"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_mid_fork_leaves_the_source_as_it_was() {
    let Some((_f, p, id)) = crash_at("fork-copying", "child_forks").await else {
        return;
    };
    // Frozen when the process died; the thread's next use resumes it (a sandbox paused behind
    // the record's back), with its home untouched.
    assert!(p.connect(&id).await.expect("connect").resumed);
    assert_eq!(
        out(&p, &id, "cat f").await,
        "before\n",
        "the source runs on as it was"
    );
}

/// As root: every test above (but this one and the children), run by an ordinary account.
#[test]
fn every_test_passes_as_an_ordinary_user() {
    if !is_root() || std::env::var_os(CHILD_STATE).is_some() {
        return;
    }
    if runc_or_skip("rootless checkpoint tests").is_none() {
        return;
    }
    sandboxes::rerun_as_ordinary_user(USER, "every_test_passes_as_an_ordinary_user");
}
