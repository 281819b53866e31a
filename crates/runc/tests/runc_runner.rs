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

use sandboxes::{new_sandbox, root_provider, sh_ok};

/// The parent of the command's wrapper: pid 1 (the runner) when the runner started it, 0 (the
/// parent is outside the sandbox's pid namespace) when `runc exec` did.
const STARTER: &str = "sed -n 's/^PPid:[[:space:]]*//p' /proc/$PPID/status";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_users_commands_start_through_the_runner_and_roots_through_runc_exec() {
    let Some((p, _kill, _dir)) = root_provider("the command runner", |_| {}).await else {
        return;
    };
    let id = new_sandbox(&p).await;
    assert_eq!(sh_ok(&p, &id, "cat /proc/1/comm").await, "threadbox-init\n");
    assert_eq!(
        sh_ok(&p, &id, STARTER).await,
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
    let Some((p, _kill, _dir)) = root_provider("the command runner", |_| {}).await else {
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
    sh_ok(&p, &id, "for i in $(seq 200); do (true &); done").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let zombies = sh_ok(&p, &id, "ps -eo stat= | grep -c '^Z' || true").await;
    assert_eq!(zombies, "0\n", "the runner reaps the sandbox's orphans");
    assert_eq!(
        sh_ok(&p, &id, STARTER).await,
        "1\n",
        "the runner still serves"
    );
    p.kill(&id).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_commands_at_once_each_get_their_own_output() {
    let Some((p, _kill, _dir)) = root_provider("the command runner", |_| {}).await else {
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
    let Some((p, _kill, _dir)) = root_provider("the command runner", |_| {}).await else {
        return;
    };
    let id = new_sandbox(&p).await;
    // As a sandbox made before the runner has it: no socket in its bundle.
    let socket = p.config().sandboxes_dir().join(&id).join("run/runner.sock");
    std::fs::remove_file(&socket).expect("the runner's socket is in the bundle");
    assert_eq!(sh_ok(&p, &id, STARTER).await, "0\n", "runc exec started it");
    let timed = ExecRequest {
        timeout: Duration::from_millis(300),
        ..ExecRequest::shell("sleep 30")
    };
    let out = p.exec(&id, timed).await.unwrap();
    assert!(out.timed_out, "{out:?}");
    p.kill(&id).await.unwrap();
}

// ---- Audit of the command runner (branch `audit`): each test below states a property the
// runner path should share with `runc exec`, or a hostile sandbox's move it should survive.

fn as_root(script: &str) -> ExecRequest {
    let mut request = ExecRequest::shell(script);
    request.user = SandboxUser::Root;
    request
}

/// `runc exec` enters the working directory before it drops to the user (runc chdirs while it
/// is still root in the sandbox), so a directory of mode 000 works as a command's cwd. The
/// runner checks only `is_dir` (a `stat`), and the child's `chdir` as the user then fails
/// inside `Command::spawn`: the refusal reads "cannot start \"/bin/sh\": Permission denied",
/// which `not_started` does not recognise, so the caller gets an internal error (500) that
/// blames runc ("runc exec failed: ...") for a request that used to run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_a_working_directory_the_user_cannot_enter_works_as_under_runc_exec() {
    let Some((p, _kill, _dir)) = root_provider("the command runner", |_| {}).await else {
        return;
    };
    let id = new_sandbox(&p).await;
    sh_ok(
        &p,
        &id,
        "mkdir -p /home/user/locked && chmod 000 /home/user/locked",
    )
    .await;
    let locked = || ExecRequest {
        cwd: Some("/home/user/locked".into()),
        ..ExecRequest::shell("pwd")
    };
    let by_runner = p.exec(&id, locked()).await;
    // The same request through `runc exec` (a sandbox without the runner's socket).
    let socket = p.config().sandboxes_dir().join(&id).join("run/runner.sock");
    std::fs::remove_file(&socket).expect("the runner's socket is in the bundle");
    let by_runc = p.exec(&id, locked()).await;
    p.kill(&id).await.unwrap();
    assert!(
        matches!(&by_runc, Ok(out) if out.stdout == "/home/user/locked\n"),
        "runc exec: {by_runc:?}"
    );
    assert!(
        matches!(&by_runner, Ok(out) if out.stdout == "/home/user/locked\n"),
        "the runner answers otherwise than runc exec: {by_runner:?} (runc exec: {by_runc:?})"
    );
}

/// What a command sees of its own process (signal mask and dispositions, credentials,
/// limits, umask, session, environment) is the same whichever way it started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_a_command_sees_the_same_process_whichever_way_it_started() {
    let Some((p, _kill, _dir)) = root_provider("the command runner", |_| {}).await else {
        return;
    };
    let id = new_sandbox(&p).await;
    let probe = "grep -E '^(SigBlk|SigIgn|SigCgt|NoNewPrivs|Seccomp|Cap[A-Za-z]+|Groups|Uid|Gid)' \
                 /proc/self/status; echo umask $(umask); ulimit -a; \
                 echo oom $(cat /proc/self/oom_score_adj); \
                 echo session-leader $([ \"$(ps -o sid= -p $$ | tr -d ' ')\" = \"$PPID\" ] && echo wrapper); \
                 env | grep -v -E '^(_|PWD|SHLVL|OLDPWD)=' | sort; \
                 ls /proc/$PPID/fd | sort -n | tr '\\n' ' '";
    let by_runner = sh_ok(&p, &id, probe).await;
    let socket = p.config().sandboxes_dir().join(&id).join("run/runner.sock");
    std::fs::remove_file(&socket).expect("the runner's socket is in the bundle");
    let by_runc = sh_ok(&p, &id, probe).await;
    p.kill(&id).await.unwrap();
    assert!(
        by_runner.contains("SigBlk") && by_runner.contains("umask"),
        "{by_runner}"
    );
    assert_eq!(
        by_runner, by_runc,
        "the runner's command (left) and runc exec's (right) differ"
    );
}

/// Starts, in the sandbox, a process of the user's that SIGSTOPs every process it can in a loop
/// (`kill -STOP -1`: all the user's but pid 1 and itself), out of any command's group and
/// parentage so no timeout takes it along; then runs short commands until one fails (the
/// runner no longer answers): that error, how long the 500 ms command took and how many
/// commands it took, or `None`.
async fn wedge_the_runner(p: &RuncProvider, id: &str) -> Option<(ProviderError, Duration, usize)> {
    sh_ok(
        p,
        id,
        "(setsid sh -c 'echo $$ >/tmp/stopper; sleep 1; while :; do kill -STOP -1; done' \
         </dev/null >/dev/null 2>&1 &)",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for tries in 1..=60 {
        let started = std::time::Instant::now();
        let request = ExecRequest {
            timeout: Duration::from_millis(500),
            ..ExecRequest::shell("true")
        };
        if let Err(e) = p.exec(id, request).await {
            return Some((e, started.elapsed(), tries));
        }
    }
    None
}

/// Kills the process [`wedge_the_runner`] started (root's commands start through runc exec,
/// out of the user's reach).
async fn kill_the_stopper(p: &RuncProvider, id: &str) {
    let out = p
        .exec(id, as_root("kill -KILL $(cat /tmp/stopper)"))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
}

/// Everything in the sandbox runs as the runner's uid, so any of it may SIGSTOP the child the
/// runner has forked but not yet exec'd (`kill -STOP -1` in a loop does it within a few
/// commands). A runner that waited for that child's exec (as `Command::spawn` does, which it
/// once used) would never accept again, nor reap, and every later command of the user would
/// wait the provider's whole `call_timeout` and fail, even once the process that did it is
/// gone. The runner answers at the fork now; a stopped command is the caller's to time out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_a_stopped_child_does_not_wedge_the_runner() {
    let Some((p, _kill, _dir)) = root_provider("the command runner", |c| {
        c.call_timeout = Duration::from_secs(3);
    })
    .await
    else {
        return;
    };
    let id = new_sandbox(&p).await;
    let wedged = wedge_the_runner(&p, &id).await;
    kill_the_stopper(&p, &id).await;
    let after = p
        .exec(
            &id,
            ExecRequest {
                timeout: Duration::from_secs(2),
                ..ExecRequest::shell("echo ok")
            },
        )
        .await;
    let processes = p
        .exec(&id, as_root("ps -eo pid=,ppid=,stat=,comm="))
        .await
        .map(|o| o.stdout);
    p.kill(&id).await.unwrap();
    assert!(
        matches!(&after, Ok(out) if out.stdout == "ok\n"),
        "once the stopper is gone the user's commands run again; got {after:?}, after a \
         500 ms command failed with {wedged:?}; the sandbox's processes: {processes:?}"
    );
}

/// A command whose caller was told it failed must not run later. The runner serves one
/// connection at a time, so a host that gave up on a busy runner (its deadline passed) has
/// closed a connection whose request is still queued: the runner must not start it (it looks
/// for the hang-up first), and one that started meanwhile is killed when its answer cannot be
/// delivered, since nobody would watch, time out or kill it. Here the runner is kept busy by
/// a connection that says nothing (it waits for it up to its own deadline, 5 s), while a
/// second one sends a whole request and hangs up. (With both guards taken out, the command
/// runs and this fails.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_a_command_the_caller_was_told_failed_does_not_run_later() {
    use std::io::Write;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;
    let Some((p, _kill, _dir)) = root_provider("the command runner", |_| {}).await else {
        return;
    };
    let id = new_sandbox(&p).await;
    let socket = p.config().sandboxes_dir().join(&id).join("run/runner.sock");
    let busy = UnixStream::connect(&socket).expect("connect to the runner");
    let mut gone = UnixStream::connect(&socket).expect("connect to the runner");
    let null = || {
        std::fs::File::options()
            .read(true)
            .write(true)
            .open("/dev/null")
            .unwrap()
    };
    let fds = [null(), null(), null(), null()];
    let borrowed = [
        fds[0].as_fd(),
        fds[1].as_fd(),
        fds[2].as_fd(),
        fds[3].as_fd(),
    ];
    let mut payload = Vec::new();
    for word in [
        "/home/user",
        "0",
        "/bin/sh",
        "-c",
        "echo ran >>/home/user/late",
    ] {
        payload.extend_from_slice(word.as_bytes());
        payload.push(0);
    }
    let mut header = 0x7462_7231u32.to_le_bytes().to_vec();
    header.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    let mut space = [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(4))];
    let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
    control.push(rustix::net::SendAncillaryMessage::ScmRights(&borrowed));
    rustix::net::sendmsg(
        &gone,
        &[std::io::IoSlice::new(&header)],
        &mut control,
        rustix::net::SendFlags::NOSIGNAL,
    )
    .unwrap();
    gone.write_all(&payload).unwrap();
    drop(gone);
    // The runner's deadline for the silent one, and a little more.
    tokio::time::sleep(Duration::from_secs(6)).await;
    drop(busy);
    let late = p
        .exec(
            &id,
            ExecRequest::shell("cat /home/user/late 2>/dev/null; true"),
        )
        .await
        .unwrap()
        .stdout;
    p.kill(&id).await.unwrap();
    assert_eq!(late, "", "a request whose host had hung up was started");
}

/// A provider opened again on the same state (threadbox restarted) reaches the runners of the
/// sandboxes the earlier one made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_a_restarted_provider_reaches_the_runners_it_did_not_start() {
    let Some((p, _kill, _dir)) = root_provider("the command runner", |_| {}).await else {
        return;
    };
    let id = new_sandbox(&p).await;
    let config = p.config().clone();
    drop(p);
    let again = RuncProvider::open(config).await.expect("open again");
    assert_eq!(
        sh_ok(&again, &id, STARTER).await,
        "1\n",
        "the runner started it"
    );
    again.kill(&id).await.unwrap();
}
