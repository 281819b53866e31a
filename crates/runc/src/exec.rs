//! Running one command in a sandbox.
//!
//! The sandbox user's commands start through the command runner, the container's init (see
//! `runner`): a connection, a `fork` and an `exec` inside the sandbox, with our pipes as the
//! command's stdio. Root's commands, and every command in a sandbox made without a runner,
//! start with `runc exec --detach`, which returns at once, the stdio again our pipes, passed
//! straight through (no copying in runc). Either way the command runs under a small shell
//! wrapper that writes its exit status to an extra pipe (fd 3) as it ends, and becomes a
//! session and process-group leader. We wait for the wrapper's exit through a pidfd on
//! tokio's reactor, then read the status the pipe already holds: no thread is held per running
//! command (tokio's blocking pool, which SQLite also uses, stays free however many run), and
//! nothing in the sandbox can delay the answer by keeping the pipe open. A background child
//! still holding stdout open does not either. (Attached `runc exec` waits for every holder of
//! stdout to close it, so `server &` would hang the call until the timeout.)
//!
//! A timeout kills the whole tree with one `kill(-pgid)`, followed by a sweep of the
//! container's cgroup for descendants that left the group.

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::bundle::HOME;
use super::cgroup::ContainerCgroup;
use super::idmap::IdRange;
use super::process::{kill_tree, reap};
use super::runner::{self, StartError};
use super::runtime::{error_message, Runc};
use threadbox_core::ports::{
    forward, is_fork_failure, process_limit_reached, ExecCommand, ExecRequest, ExecResult,
    OutputChunk, OutputSink, ProviderError, SandboxUser,
};

/// Runs `"$@"` (the command) with fd 3 closed, then reports its status on fd 3.
const WRAPPER: &str = r#""$@" 3>&-; printf %d "$?" >&3"#;
/// After the command exits, how long output still held open by its background children is read.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(100);
/// After a timeout kill, how long to wait for the dying tree to close its output.
const DRAIN_AFTER_KILL: Duration = Duration::from_secs(2);
/// Bytes of a streamed command's output kept all the same, to tell why a wrapper that never
/// reported a status ended (its shell's own words come first).
const STREAMED_HEAD: usize = 256;

/// Why an exec did not produce a result.
#[derive(Debug)]
pub(crate) enum ExecError {
    /// runc refused to start the command (container paused or gone, bad working directory...):
    /// runc's message, for the caller to classify against the container's state.
    NotStarted(String),
    Provider(ProviderError),
}

impl From<ProviderError> for ExecError {
    fn from(e: ProviderError) -> Self {
        ExecError::Provider(e)
    }
}

/// Check a request before anything runs.
pub(crate) fn validate(request: &ExecRequest) -> Result<(), ProviderError> {
    let invalid = |m: String| Err(ProviderError::InvalidRequest(m));
    match &request.command {
        ExecCommand::Argv(argv) if argv.is_empty() => return invalid("empty argv".into()),
        ExecCommand::Argv(argv) if argv.iter().any(|a| a.contains('\0')) => {
            return invalid("argv contains a NUL byte".into())
        }
        ExecCommand::Shell(cmd) if cmd.contains('\0') => {
            return invalid("command contains a NUL byte".into())
        }
        _ => {}
    }
    request.check_sizes().or_else(invalid)?;
    if let Some(cwd) = &request.cwd {
        if !cwd.starts_with('/') || cwd.contains('\0') {
            return invalid(format!(
                "working directory {cwd:?} must be an absolute path"
            ));
        }
        // The kernel's PATH_MAX: no longer path can be a working directory.
        if cwd.len() >= 4096 {
            return invalid(format!(
                "a working directory of {} bytes is longer than a path can be (4095)",
                cwd.len()
            ));
        }
    }
    validate_env(&request.env)
}

/// Environment names must be usable as `NAME=value`.
pub(crate) fn validate_env(
    env: &std::collections::BTreeMap<String, String>,
) -> Result<(), ProviderError> {
    for (key, value) in env {
        if key.is_empty() || key.contains(['=', '\0']) || value.contains('\0') {
            return Err(ProviderError::InvalidRequest(format!(
                "bad environment variable {key:?}: names must be non-empty without '=' or NUL, \
                 values without NUL"
            )));
        }
    }
    Ok(())
}

/// Where to run: the container and what we know of it on the host.
pub(crate) struct ExecTarget<'a> {
    pub runc: &'a Runc,
    pub id: &'a str,
    /// The bundle's `run/` directory, for the pid file.
    pub run_dir: PathBuf,
    /// For the OOM count and the timeout sweep; both degrade gracefully without it.
    pub cgroup: Option<Arc<ContainerCgroup>>,
    /// Where the sandbox's ids land on the host: the stdio pipes are chowned to its user.
    pub ids: IdRange,
    /// The sandbox's pid limit, to name it when it stops a command from starting.
    pub pids_limit: Option<u32>,
    /// The bundle's `run/` directory when the sandbox's init is the command runner (see
    /// `runner`): the sandbox user's commands start through it.
    pub runner: Option<PathBuf>,
}

/// Run `request`; with `output`, its output goes there as it comes instead of into the result.
pub(crate) async fn run(
    target: ExecTarget<'_>,
    request: ExecRequest,
    output: Option<OutputSink>,
) -> Result<ExecResult, ExecError> {
    let started = Instant::now();
    let streaming = output.is_some();
    let oom_before = target.cgroup.as_ref().and_then(|c| c.oom_kills());
    let (status_read, status_write) = status_pipe()?;
    // A frozen runner would not answer until the sandbox is resumed: there, `runc exec`
    // refuses at once, and the refusal says why.
    let frozen = target.cgroup.as_ref().and_then(|c| c.is_frozen()) == Some(true);
    let by_runner = match &target.runner {
        Some(run_dir) if request.user == SandboxUser::User && !frozen => {
            start_by_runner(&target, run_dir, &request, &status_write, output.clone()).await?
        }
        _ => None,
    };
    let Launched {
        leader,
        exited,
        streams,
    } = match by_runner {
        Some(launched) => launched,
        None => start_by_runc(&target, &request, &status_write, output).await?,
    };
    // Our copy of the write end must go, or the status pipe never reports the wrapper's end.
    drop(status_write);
    let guard = TreeGuard {
        leader,
        cgroup: target.cgroup.clone(),
        armed: true,
    };
    let remaining = request.timeout.saturating_sub(started.elapsed());
    let timed_out = wait_for_leader(&guard, exited, remaining)
        .instrument(tracing::debug_span!("command.wait"))
        .await?;
    finish(
        guard,
        streams,
        &status_read,
        timed_out,
        started,
        oom_before,
        &target,
        streaming,
    )
    .await
}

/// A started command: its leader (the wrapper), a pidfd on it where the starter gave one, and
/// its streams.
struct Launched {
    leader: i32,
    exited: Option<OwnedFd>,
    streams: Streams,
}

/// Through the sandbox's command runner (see `runner`): `None` when the sandbox has none
/// listening, and nothing was sent.
async fn start_by_runner(
    target: &ExecTarget<'_>,
    run_dir: &Path,
    request: &ExecRequest,
    status_write: &OwnedFd,
    output: Option<OutputSink>,
) -> Result<Option<Launched>, ExecError> {
    use rustix::pipe::{pipe_with, PipeFlags};
    let pipe = || {
        pipe_with(PipeFlags::CLOEXEC)
            .map_err(|e| ProviderError::Internal(format!("cannot make a pipe: {e}")))
    };
    let (stdin_read, stdin_write) = pipe()?;
    let (stdout_read, stdout_write) = pipe()?;
    let (stderr_read, stderr_write) = pipe()?;
    // Our ends on tokio's reactor now, so nothing can fail once the command has started.
    let stdin = tokio::net::unix::pipe::Sender::from_owned_fd(stdin_write).map_err(io_error)?;
    let stdout = tokio::net::unix::pipe::Receiver::from_owned_fd(stdout_read).map_err(io_error)?;
    let stderr = tokio::net::unix::pipe::Receiver::from_owned_fd(stderr_read).map_err(io_error)?;
    // The sandbox user's, as `runc exec`'s are (see `prepare_child_fds`).
    let (uid, gid) = target.ids.on_host(request.user);
    for end in [&stdin_read, &stdout_write, &stderr_write] {
        let _ = rustix::fs::fchown(
            end,
            Some(rustix::fs::Uid::from_raw(uid)),
            Some(rustix::fs::Gid::from_raw(gid)),
        );
    }
    let argv = wrapped_argv(request);
    let cwd = request.cwd.clone().unwrap_or_else(|| HOME.to_owned());
    let env = request.env.clone();
    let within = target.runc.call_timeout();
    let run_dir = run_dir.to_owned();
    let cgroup = target.cgroup.clone();
    // On a task of its own: a caller that goes away while the runner answers must not leave
    // the command running unwatched, so the task kills what was started if nobody takes it.
    let (answer_to, answer) = tokio::sync::oneshot::channel();
    let status_write = status_write
        .try_clone()
        .map_err(|e| ProviderError::Internal(format!("cannot share the status pipe: {e}")))?;
    tokio::spawn(
        async move {
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            let ends = [stdin_read, stdout_write, stderr_write, status_write];
            let fds = [
                ends[0].as_fd(),
                ends[1].as_fd(),
                ends[2].as_fd(),
                ends[3].as_fd(),
            ];
            let started = runner::start(&run_dir, &argv, &cwd, &env, fds, within).await;
            // The command has its own copies now: ours must go, or its output never ends.
            drop(ends);
            if let Err(Ok(started)) = answer_to.send(started) {
                let leader = started.leader;
                tokio::task::spawn_blocking(move || kill_tree(leader, cgroup.as_deref()));
            }
        }
        .instrument(tracing::debug_span!("runner.start")),
    );
    let started = match answer.await {
        Ok(started) => started,
        Err(_) => Err(StartError::Broken("the runner's task ended".into())),
    };
    match started {
        Ok(started) => Ok(Some(Launched {
            leader: started.leader,
            exited: Some(started.exited),
            streams: Streams::start(Some(stdin), stdout, stderr, request, output),
        })),
        Err(StartError::Unreachable) => Ok(None),
        Err(StartError::Declined(why)) => {
            tracing::debug!(sandbox_id = target.id, %why, "the runner declined; through runc exec");
            Ok(None)
        }
        Err(StartError::Refused(words)) => Err(ExecError::NotStarted(words)),
        Err(StartError::Broken(why)) => Err(ProviderError::Unavailable(why).into()),
    }
}

fn io_error(e: std::io::Error) -> ExecError {
    ProviderError::Internal(format!("cannot set up the command's pipes: {e}")).into()
}

/// Through `runc exec --detach`: the command's leader once runc has started it.
async fn start_by_runc(
    target: &ExecTarget<'_>,
    request: &ExecRequest,
    status_write: &OwnedFd,
    output: Option<OutputSink>,
) -> Result<Launched, ExecError> {
    let pid_file = target
        .run_dir
        .join(format!("exec-{}.pid", uuid::Uuid::new_v4().simple()));
    // `runc exec` from spawn to its return (the command started): what bare runc's exec costs.
    let runc_span = tracing::debug_span!("runc", op = "exec");
    let entered = runc_span.enter();
    let mut child = runc_exec(target, request, &pid_file, status_write)
        .spawn()
        .map_err(|e| ProviderError::Internal(format!("could not run runc exec: {e}")))?;
    // From here the command may be running before runc returns (its output can even reach a
    // streaming caller first): a caller that goes away now must still take the command with it.
    let mut starting = StartingGuard {
        pid_file: pid_file.clone(),
        cgroup: target.cgroup.clone(),
        armed: true,
    };
    let streams = Streams::start(
        child.stdin.take(),
        child.stdout.take().expect("stdout is piped"),
        child.stderr.take().expect("stderr is piped"),
        request,
        output,
    );
    drop(entered);

    // runc returns once the command has started (or failed to).
    let runc_status = wait_for_runc(&mut child, target.runc)
        .instrument(runc_span)
        .await?;
    if !runc_status.success() {
        starting.armed = false;
        let stderr = streams.runc_stderr().await;
        let _ = std::fs::remove_file(&pid_file);
        return Err(ExecError::NotStarted(error_message(&stderr)));
    }
    let leader = read_pid_file(&pid_file).await;
    let _ = std::fs::remove_file(&pid_file);
    let leader = leader?;
    starting.armed = false;
    Ok(Launched {
        leader,
        exited: None,
        streams,
    })
}

/// Once the command's leader has exited or been killed: its status, its output, the result.
#[allow(clippy::too_many_arguments)]
async fn finish(
    mut guard: TreeGuard,
    streams: Streams,
    status_read: &OwnedFd,
    timed_out: bool,
    started: Instant,
    oom_before: Option<u64>,
    target: &ExecTarget<'_>,
    streaming: bool,
) -> Result<ExecResult, ExecError> {
    let leader = guard.leader;
    // The wrapper wrote its status before it exited, so it is in the pipe now, or never will be.
    let status_text = if timed_out {
        String::new()
    } else {
        read_available(status_read)
    };
    guard.armed = false;
    let duration = started.elapsed();
    // The wrapper has exited (its pidfd said so) or was killed; collect it if it is our child
    // (we are a subreaper; the runner reaps its own). One non-blocking wait: no blocking-pool
    // task per command.
    if !timed_out {
        reap(leader, Duration::ZERO);
    } else {
        tokio::task::spawn_blocking(move || reap(leader, Duration::from_millis(200)));
    }

    // Collect the output: it ends when every holder of the pipes has closed them, or when
    // the drain window passes (a background child may keep them open for ever).
    let grace = if timed_out {
        DRAIN_AFTER_KILL
    } else {
        DRAIN_AFTER_EXIT
    };
    let collected = streams
        .collect(grace)
        .instrument(tracing::debug_span!("output.drain"))
        .await;
    let oom_after = target.cgroup.as_ref().and_then(|c| c.oom_kills());
    let ended = Ended {
        reported: status_text.trim().parse().ok(),
        timed_out,
        out_of_memory: matches!((oom_before, oom_after), (Some(b), Some(a)) if a > b),
        duration,
    };
    ended.result(collected, streaming, target.pids_limit)
}

/// The command under the wrapper that reports its status on fd 3.
fn wrapped_argv(request: &ExecRequest) -> Vec<String> {
    let mut argv: Vec<String> = ["/bin/sh", "-c", WRAPPER, "sh"].map(String::from).to_vec();
    match &request.command {
        ExecCommand::Shell(script) => {
            argv.extend(["/bin/sh".to_owned(), "-c".to_owned(), script.clone()])
        }
        ExecCommand::Argv(words) => argv.extend(words.iter().cloned()),
    }
    argv
}

/// The pipe the wrapper reports the command's status on: our end never blocks (the status is
/// read once the command has exited); the command's end blocks as usual.
fn status_pipe() -> Result<(OwnedFd, OwnedFd), ProviderError> {
    let (status_read, status_write) = rustix::pipe::pipe_with(
        rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK,
    )
    .map_err(|e| ProviderError::Internal(format!("cannot make a pipe: {e}")))?;
    // NONBLOCK is per end: clear it on the write end.
    rustix::fs::fcntl_setfl(&status_write, rustix::fs::OFlags::empty())
        .map_err(|e| ProviderError::Internal(format!("cannot set up the status pipe: {e}")))?;
    Ok((status_read, status_write))
}

/// What the sandbox's root gets, over what its own user namespace owns only: Docker's default
/// set without `MKNOD` and `NET_RAW` (no device nodes, no raw sockets). Enough for a package
/// manager to own, chmod and chown what it installs and to drop to its own users; nothing over
/// the host, whose ids this namespace does not map. `noNewPrivileges` stays, and the seccomp
/// filter refuses what it refuses for the user (mounts, new namespaces, ...).
pub(crate) const ROOT_CAPABILITIES: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_SETFCAP",
    "CAP_AUDIT_WRITE",
];

/// `runc exec --detach` of the request under the wrapper, as the sandbox user, with our pipes
/// as its stdio and the status pipe's write end as its fd 3.
fn runc_exec(
    target: &ExecTarget<'_>,
    request: &ExecRequest,
    pid_file: &Path,
    status_write: &OwnedFd,
) -> tokio::process::Command {
    let mut cmd = target.runc.command();
    cmd.arg("exec")
        .arg("--detach")
        .arg("--pid-file")
        .arg(pid_file)
        .arg("--preserve-fds")
        .arg("1")
        .arg("--user")
        .arg({
            let (uid, gid) = target.ids.inside(request.user);
            format!("{uid}:{gid}")
        })
        .arg("--cwd")
        .arg(request.cwd.as_deref().unwrap_or(HOME));
    if request.user == SandboxUser::Root && !target.ids.is_rootless() {
        for cap in ROOT_CAPABILITIES {
            cmd.arg("--cap").arg(cap);
        }
    }
    for (key, value) in &request.env {
        cmd.arg("--env").arg(format!("{key}={value}"));
    }
    cmd.arg(target.id).args(["/bin/sh", "-c", WRAPPER, "sh"]);
    match &request.command {
        ExecCommand::Shell(script) => cmd.args(["/bin/sh", "-c", script]),
        ExecCommand::Argv(argv) => cmd.args(argv),
    };
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let status_fd = status_write.as_raw_fd();
    let owner = target.ids.on_host(request.user);
    // SAFETY: the closure only makes async-signal-safe system calls (fstat, fchown, fcntl,
    // dup2) on descriptors it does not own, and allocates nothing.
    unsafe {
        cmd.pre_exec(move || prepare_child_fds(status_fd, owner));
    }
    cmd
}

/// Wait for `runc exec` itself, which returns once the command has started (or failed to).
async fn wait_for_runc(
    child: &mut tokio::process::Child,
    runc: &Runc,
) -> Result<std::process::ExitStatus, ExecError> {
    match tokio::time::timeout(runc.call_timeout(), child.wait()).await {
        Ok(Ok(status)) => Ok(status),
        Ok(Err(e)) => Err(ProviderError::Internal(format!("waiting for runc exec: {e}")).into()),
        Err(_) => {
            let _ = child.kill().await;
            Err(ProviderError::Unavailable(format!(
                "runc exec did not start the command within {:?}",
                runc.call_timeout()
            ))
            .into())
        }
    }
}

/// Wait for the command's leader (the wrapper) to exit, at most `remaining`; past it, kill the
/// tree and give it [`DRAIN_AFTER_KILL`] to die. Whether it timed out.
///
/// Through a pidfd: it becomes readable when the process ends, costs no thread, and nothing in
/// the sandbox can hold it open (a process there could reopen the status pipe through /proc
/// and keep it from ever closing).
async fn wait_for_leader(
    guard: &TreeGuard,
    pidfd: Option<OwnedFd>,
    remaining: Duration,
) -> Result<bool, ExecError> {
    let exited = leader_exit(guard.leader, pidfd)
        .map_err(|e| ProviderError::Internal(format!("cannot watch the command: {e}")))?;
    let timed_out = match &exited {
        Some(exited) => tokio::time::timeout(remaining, exited.readable())
            .await
            .is_err(),
        // Already gone: it exited before we looked.
        None => false,
    };
    if timed_out {
        let (leader, cgroup) = (guard.leader, guard.cgroup.clone());
        let _ = tokio::task::spawn_blocking(move || kill_tree(leader, cgroup.as_deref())).await;
        if let Some(exited) = &exited {
            let _ = tokio::time::timeout(DRAIN_AFTER_KILL, exited.readable()).await;
        }
    }
    Ok(timed_out)
}

/// The command's stdin, fed from the request, and its stdout and stderr, read (and sent on,
/// when streaming) until their end or until told to stop.
struct Streams {
    stop: watch::Sender<bool>,
    stdin: JoinHandle<()>,
    stdout: JoinHandle<(Vec<u8>, bool)>,
    stderr: JoinHandle<(Vec<u8>, bool)>,
}

/// What the streams held at the end: each one's bytes and whether it was cut at the cap.
struct Collected {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    truncated: bool,
}

impl Streams {
    fn start<W, O, E>(
        stdin: Option<W>,
        stdout: O,
        stderr: E,
        request: &ExecRequest,
        output: Option<OutputSink>,
    ) -> Self
    where
        W: AsyncWrite + Unpin + Send + 'static,
        O: AsyncRead + Unpin + Send + 'static,
        E: AsyncRead + Unpin + Send + 'static,
    {
        let (stop, stop_rx) = watch::channel(false);
        let input = request.stdin.clone().unwrap_or_default();
        let stdin = tokio::spawn(async move {
            if let Some(mut stdin) = stdin {
                // A command that does not read its input closes the pipe: not our error.
                let _ = stdin.write_all(&input).await;
            }
        });
        let cap = request.output_cap;
        let forwards = output.map(|sink| {
            (
                Forward {
                    sink: sink.clone(),
                    wrap: OutputChunk::Stdout,
                },
                Forward {
                    sink,
                    wrap: OutputChunk::Stderr,
                },
            )
        });
        let (out_forward, err_forward) = forwards.unzip();
        Self {
            stdout: tokio::spawn(read_capped(stdout, cap, stop_rx.clone(), out_forward)),
            stderr: tokio::spawn(read_capped(stderr, cap, stop_rx, err_forward)),
            stop,
            stdin,
        }
    }

    /// What runc said on stderr when it did not start the command. Nothing started, so runc
    /// was the only writer of stderr and it has exited: the stream ends on its own (the stop
    /// is only a safety net).
    async fn runc_stderr(self) -> Vec<u8> {
        self.stdin.abort();
        let stop = self.stop;
        let stopper = tokio::spawn(async move {
            tokio::time::sleep(DRAIN_AFTER_KILL).await;
            let _ = stop.send(true);
        });
        let (stderr, _) = self.stderr.await.unwrap_or_default();
        stopper.abort();
        self.stdout.abort();
        stderr
    }

    /// Read both streams to their end, or until `grace` has passed.
    async fn collect(self, grace: Duration) -> Collected {
        let stop = self.stop;
        let stopper = tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            let _ = stop.send(true);
        });
        let (stdout, out_truncated) = self.stdout.await.unwrap_or_default();
        let (stderr, err_truncated) = self.stderr.await.unwrap_or_default();
        stopper.abort();
        self.stdin.abort();
        Collected {
            stdout,
            stderr,
            truncated: out_truncated || err_truncated,
        }
    }
}

/// How the command ended, as the wrapper and the cgroup tell it.
struct Ended {
    /// The status the wrapper reported, if it did.
    reported: Option<i32>,
    timed_out: bool,
    /// The cgroup's OOM kills went up while it ran.
    out_of_memory: bool,
    duration: Duration,
}

impl Ended {
    /// The result, or the sandbox's pid limit where that kept the command from starting.
    fn result(
        self,
        collected: Collected,
        streaming: bool,
        pids_limit: Option<u32>,
    ) -> Result<ExecResult, ExecError> {
        let Collected {
            stdout,
            stderr,
            truncated,
        } = collected;
        // The wrapper ended without a status and said it could not fork: the sandbox's pid
        // limit kept the command from starting at all. That is the thread's limit, not a result.
        if self.reported.is_none()
            && !self.timed_out
            && is_fork_failure(&String::from_utf8_lossy(&stderr))
        {
            return Err(process_limit_reached(pids_limit).into());
        }
        let (stdout, stderr) = if streaming {
            (Vec::new(), Vec::new())
        } else {
            (stdout, stderr)
        };
        let exit_code = match self.reported {
            _ if self.timed_out => None,
            // 128 + SIGKILL: the shell saw the command die of the OOM killer's signal.
            Some(137) if self.out_of_memory => None,
            code => code,
        };
        Ok(ExecResult {
            exit_code,
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
            duration_ms: self.duration.as_millis() as u64,
            timed_out: self.timed_out,
            truncated,
            out_of_memory: self.out_of_memory,
        })
    }
}

/// A readiness handle on the exit of `pid` (through `pidfd` when the starter gave one), or
/// `None` when it has already exited.
fn leader_exit(
    pid: i32,
    pidfd: Option<OwnedFd>,
) -> std::io::Result<Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>> {
    let Some(pid) = rustix::process::Pid::from_raw(pid) else {
        return Ok(None);
    };
    let opened = match pidfd {
        Some(pidfd) => Ok(pidfd),
        None => rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::NONBLOCK),
    };
    match opened {
        // SAFETY: an OwnedFd always returns the descriptor it owns, which stays open until the
        // AsyncFd (its owner from here on) is dropped.
        Ok(fd) => unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
        }
        .map(Some)
        .map_err(std::io::Error::from),
        Err(rustix::io::Errno::SRCH) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// What is in the (non-blocking) pipe now, up to a status's length.
fn read_available(pipe: &std::os::fd::OwnedFd) -> String {
    let mut buf = [0u8; 32];
    match rustix::io::read(pipe, &mut buf) {
        Ok(n) => String::from_utf8_lossy(&buf[..n]).into_owned(),
        Err(_) => String::new(),
    }
}

/// Kills the command's tree if the exec is abandoned midway (its future dropped), so a
/// cancelled call leaves nothing running that nobody waits for.
struct TreeGuard {
    leader: i32,
    cgroup: Option<Arc<ContainerCgroup>>,
    armed: bool,
}

/// The command while runc is still starting it: dropped then (the caller went away), it kills
/// whatever runc has started, found through the pid file runc writes as it starts the command.
/// runc itself is killed with its `Child` (kill on drop).
struct StartingGuard {
    pid_file: PathBuf,
    cgroup: Option<Arc<ContainerCgroup>>,
    armed: bool,
}

impl Drop for StartingGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let leader = std::fs::read_to_string(&self.pid_file)
            .ok()
            .and_then(|text| text.trim().parse::<i32>().ok());
        let _ = std::fs::remove_file(&self.pid_file);
        if let Some(leader) = leader {
            kill_tree(leader, self.cgroup.as_deref());
        }
    }
}

impl Drop for TreeGuard {
    fn drop(&mut self) {
        if self.armed {
            kill_tree(self.leader, self.cgroup.as_deref());
        }
    }
}

/// In the forked child, before exec'ing runc: make the stdio pipes the sandbox user's, so a
/// command can reopen `/dev/stdout` (pipes are created mode 0600, owned by us), and put the
/// status pipe at fd 3 for `--preserve-fds 1`.
fn prepare_child_fds(status_fd: RawFd, (uid, gid): (u32, u32)) -> std::io::Result<()> {
    for fd in 0..3 {
        // SAFETY: plain system calls on descriptors 0-2 of this (child) process.
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(fd, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFIFO {
                libc::fchown(fd, uid, gid);
            }
        }
    }
    // SAFETY: dup2/fcntl on descriptors of this process; dup2 clears close-on-exec on fd 3.
    let ok = unsafe {
        if status_fd == 3 {
            libc::fcntl(3, libc::F_SETFD, 0) != -1
        } else {
            libc::dup2(status_fd, 3) != -1
        }
    };
    if ok {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

async fn read_pid_file(path: &std::path::Path) -> Result<i32, ProviderError> {
    let text = tokio::fs::read_to_string(path).await.map_err(|e| {
        ProviderError::Internal(format!(
            "runc exec wrote no pid file {}: {e}",
            path.display()
        ))
    })?;
    text.trim()
        .parse()
        .map_err(|_| ProviderError::Internal(format!("runc exec wrote a bad pid file: {text:?}")))
}

/// Where a streaming exec's stream goes, and which stream it is.
struct Forward {
    sink: OutputSink,
    wrap: fn(Vec<u8>) -> OutputChunk,
}

/// Read a stream to its end (or until told to stop), keeping the first `cap` bytes and
/// discarding the rest, so a chatty command never blocks on a full pipe. With `forward`, the
/// first `cap` bytes are sent on as they come, and only the first [`STREAMED_HEAD`] kept; a
/// receiver that is gone or too slow (see `ports::forward`) is dropped and the rest discarded.
async fn read_capped<R: AsyncRead + Unpin>(
    mut reader: R,
    cap: usize,
    mut stop: watch::Receiver<bool>,
    mut forward_to: Option<Forward>,
) -> (Vec<u8>, bool) {
    let streaming = forward_to.is_some();
    let mut kept = Vec::new();
    let (mut seen, mut truncated) = (0usize, false);
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::select! {
            read = reader.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
            _ = stop.wait_for(|stop| *stop) => break,
        };
        let room = cap.saturating_sub(seen);
        let take = &buf[..n.min(room)];
        seen += take.len();
        truncated |= n > room;
        if !streaming {
            kept.extend_from_slice(take);
        } else {
            let room = STREAMED_HEAD.saturating_sub(kept.len());
            kept.extend_from_slice(&take[..take.len().min(room)]);
        }
        if let Some(to) = forward_to.as_ref().filter(|_| !take.is_empty()) {
            if !forward(&to.sink, (to.wrap)(take.to_vec())).await {
                forward_to = None;
            }
        }
    }
    (kept, truncated)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_validated() {
        let mut req = ExecRequest::shell("true");
        validate(&req).unwrap();
        req.cwd = Some("relative".into());
        assert!(validate(&req).is_err());
        req.cwd = None;
        req.env.insert("A=B".into(), "x".into());
        assert!(validate(&req).is_err());
        req.env.clear();
        req.command = ExecCommand::Argv(vec![]);
        assert!(validate(&req).is_err());
    }

    #[tokio::test]
    async fn output_is_capped_but_read_to_the_end() {
        let data = vec![b'x'; 100_000];
        let (_tx, rx) = watch::channel(false);
        let (kept, truncated) = read_capped(&data[..], 10, rx, None).await;
        assert_eq!(kept, b"xxxxxxxxxx");
        assert!(truncated);
        let (_tx, rx) = watch::channel(false);
        let (kept, truncated) = read_capped(&b"short"[..], 10, rx, None).await;
        assert_eq!(kept, b"short");
        assert!(!truncated);
    }
}
