//! The command runner (every container's init, `runner/main.rs`) through the real provider and
//! runc: it starts the user's commands (root's still go through `runc exec`), it outlives
//! whatever the sandbox sends it, it reaps what the sandbox orphans, it serves many commands at
//! once, and a sandbox without one (made before it) still runs commands through `runc exec`.
//!
//! Needs root and runc; skips with a message elsewhere, and fails instead under
//! `THREADBOX_REQUIRE_SANDBOXES=1`.

#[path = "support/sandboxes.rs"]
mod sandboxes;

use std::sync::Arc;
use std::time::Duration;

use threadbox_core::ports::{
    ExecCommand, ExecRequest, ProviderError, SandboxProvider, SandboxUser,
};
use threadbox_runc::RuncProvider;

use sandboxes::{new_sandbox, require_or_skip, runc_or_skip, state_config, KillAll};

/// A provider on a state directory of its own, and the guard that kills what it leaves.
async fn provider(what: &str) -> Option<(RuncProvider, KillAll, tempfile::TempDir)> {
    let runc = runc_or_skip(what)?;
    if !rustix::process::geteuid().is_root() {
        return require_or_skip(
            what,
            "the runner's tests look at the host's side as root".into(),
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let config = state_config(dir.path(), runc);
    let kill = KillAll(config.clone());
    let p = RuncProvider::open(config).await.expect("open");
    Some((p, kill, dir))
}

async fn sh(p: &RuncProvider, id: &str, script: &str) -> String {
    let out = p.exec(id, ExecRequest::shell(script)).await.expect(script);
    assert_eq!(out.exit_code, Some(0), "{script}: {out:?}");
    out.stdout
}

/// The parent of the command's wrapper: pid 1 (the runner) when the runner started it, 0 (the
/// parent is outside the sandbox's pid namespace) when `runc exec` did.
const STARTER: &str = "sed -n 's/^PPid:[[:space:]]*//p' /proc/$PPID/status";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_users_commands_start_through_the_runner_and_roots_through_runc_exec() {
    let Some((p, _kill, _dir)) = provider("the command runner").await else {
        return;
    };
    let id = new_sandbox(&p).await;
    assert_eq!(sh(&p, &id, "cat /proc/1/comm").await, "threadbox-init\n");
    assert_eq!(
        sh(&p, &id, STARTER).await,
        "1\n",
        "the runner starts the user's"
    );
    let mut as_root = ExecRequest::shell(format!("id -u; {STARTER}"));
    as_root.user = SandboxUser::Root;
    let out = p.exec(&id, as_root).await.unwrap();
    assert_eq!(out.stdout, "0\n0\n", "root's go through runc exec: {out:?}");
    // The same command line either way: environment, working directory, stdin, exit status.
    let mut request = ExecRequest::shell("echo \"$GREETING from $(pwd)\"; cat; exit 3");
    request.env.insert("GREETING".into(), "hello".into());
    request.cwd = Some("/tmp".into());
    request.stdin = Some(b"input\n".to_vec());
    let out = p.exec(&id, request).await.unwrap();
    assert_eq!(out.stdout, "hello from /tmp\ninput\n");
    assert_eq!(out.exit_code, Some(3));
    let mut nowhere = ExecRequest::shell("true");
    nowhere.cwd = Some("/no/such/dir".into());
    match p.exec(&id, nowhere).await {
        Err(ProviderError::InvalidRequest(message)) => {
            assert!(message.contains("/no/such/dir"), "{message}")
        }
        other => panic!("a missing working directory: {other:?}"),
    }
    let missing = p
        .exec(
            &id,
            ExecRequest {
                command: ExecCommand::Argv(vec!["no-such-program".into()]),
                ..ExecRequest::shell("")
            },
        )
        .await
        .unwrap();
    assert_eq!(missing.exit_code, Some(127), "{missing:?}");
    p.kill(&id).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runner_outlives_what_the_sandbox_sends_it_and_reaps_its_orphans() {
    let Some((p, _kill, _dir)) = provider("the command runner").await else {
        return;
    };
    let id = new_sandbox(&p).await;
    // Signals from inside a pid namespace reach its init only where it handles them, and the
    // runner handles none (std's SIGSEGV and SIGBUS handlers are taken down at its start; a
    // signal that reached it would interrupt the request it serves, and the command's answer
    // would fail). The exec that sends them must succeed, and the next one too.
    let signals =
        "for s in SEGV SEGV BUS BUS TERM INT HUP USR1 PIPE KILL STOP; do kill -$s 1; done; \
                   echo sent";
    let out = p.exec(&id, ExecRequest::shell(signals)).await.unwrap();
    assert_eq!(out.stdout, "sent\n", "{out:?}");
    // Its memory and descriptors are not the sandbox's to open, though it runs as its user.
    let peek = p
        .exec(
            &id,
            ExecRequest::shell("head -c1 /proc/1/mem; ls /proc/1/fd"),
        )
        .await
        .unwrap();
    assert!(peek.stdout.is_empty(), "{peek:?}");
    assert!(peek.stderr.contains("Permission denied"), "{peek:?}");
    // Orphans: each `( ... &)` leaves a child whose parent exits at once.
    sh(&p, &id, "for i in $(seq 200); do (true &); done").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let zombies = sh(&p, &id, "ps -eo stat= | grep -c '^Z' || true").await;
    assert_eq!(zombies, "0\n", "the runner reaps the sandbox's orphans");
    assert_eq!(sh(&p, &id, STARTER).await, "1\n", "the runner still serves");
    p.kill(&id).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_commands_at_once_each_get_their_own_output() {
    let Some((p, _kill, _dir)) = provider("the command runner").await else {
        return;
    };
    let p = Arc::new(p);
    let id = new_sandbox(&p).await;
    // Four at a time, the sandbox's own cap, ten times over.
    for round in 0..10 {
        let runs: Vec<_> = (round * 4..round * 4 + 4)
            .map(|i| {
                let (p, id) = (p.clone(), id.clone());
                tokio::spawn(async move {
                    let out = p
                        .exec(
                            &id,
                            ExecRequest::shell(format!("sleep 0.$((RANDOM % 3)); echo {i}")),
                        )
                        .await
                        .unwrap();
                    (i, out.stdout)
                })
            })
            .collect();
        for run in runs {
            let (i, stdout) = run.await.unwrap();
            assert_eq!(stdout, format!("{i}\n"));
        }
    }
    p.kill(&id).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_without_a_runner_runs_commands_through_runc_exec() {
    let Some((p, _kill, _dir)) = provider("the command runner").await else {
        return;
    };
    let id = new_sandbox(&p).await;
    // As a sandbox made before the runner has it: no socket in its bundle.
    let socket = p.config().sandboxes_dir().join(&id).join("run/runner.sock");
    std::fs::remove_file(&socket).expect("the runner's socket is in the bundle");
    assert_eq!(sh(&p, &id, STARTER).await, "0\n", "runc exec started it");
    let timed = ExecRequest {
        timeout: Duration::from_millis(300),
        ..ExecRequest::shell("sleep 30")
    };
    let out = p.exec(&id, timed).await.unwrap();
    assert!(out.timed_out, "{out:?}");
    p.kill(&id).await.unwrap();
}
