//! Driving the runc command line: one short-lived `runc` process per operation, each bounded by
//! a timeout, all sharing one `--root` inside our state directory.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::Deserialize;
use tokio::process::Command;

use threadbox_core::ports::ProviderError;

/// Open files per process in a sandbox.
const SANDBOX_NOFILE: libc::rlim_t = 4096;
/// How much of a failed `runc run`'s stderr is kept for its error.
const RUN_STDERR_KEPT: usize = 64 * 1024;

/// A container as `runc state` and `runc list --format json` describe it.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct ContainerState {
    pub id: String,
    /// The init process's pid on the host; 0 once it has stopped.
    pub pid: i32,
    pub status: ContainerStatus,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ContainerStatus {
    Creating,
    Created,
    Running,
    Paused,
    Stopped,
    #[serde(other)]
    Unknown,
}

impl ContainerStatus {
    /// A stopped container's init is dead: nothing can run in it again.
    pub fn is_alive(self) -> bool {
        !matches!(self, ContainerStatus::Stopped | ContainerStatus::Unknown)
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum RuncError {
    #[error("runc {op} did not finish within {after:?}")]
    TimedOut { op: &'static str, after: Duration },
    #[error("could not run {binary}: {source}")]
    Spawn {
        binary: PathBuf,
        source: std::io::Error,
    },
    #[error("runc {op} failed: {message}")]
    Failed { op: &'static str, message: String },
    #[error("runc {op} printed output we could not read: {source}")]
    BadOutput {
        op: &'static str,
        source: serde_json::Error,
    },
}

impl From<RuncError> for ProviderError {
    fn from(err: RuncError) -> Self {
        match err {
            // A hung runc usually means a loaded host; trying again later may work.
            RuncError::TimedOut { .. } => ProviderError::Unavailable(err.to_string()),
            _ => ProviderError::Internal(err.to_string()),
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Runc {
    binary: PathBuf,
    root: PathBuf,
    call_timeout: Duration,
    /// RLIMIT_FSIZE for the sandbox's processes (see `command`).
    file_size_limit: u64,
    /// Rootless: there is no cgroup freezer, so pause stops the processes with signals and
    /// marks the container paused with a file in this directory (see `rootless`).
    signal_freezer: Option<PathBuf>,
}

impl Runc {
    /// Waits for a runc process within the call timeout: a hung runc (a loaded host) is
    /// `TimedOut`, and waiting on it failing names the binary.
    async fn in_time<T>(
        &self,
        op: &'static str,
        wait: impl std::future::Future<Output = std::io::Result<T>>,
    ) -> Result<T, RuncError> {
        tokio::time::timeout(self.call_timeout, wait)
            .await
            .map_err(|_| RuncError::TimedOut {
                op,
                after: self.call_timeout,
            })?
            .map_err(|source| RuncError::Spawn {
                binary: self.binary.clone(),
                source,
            })
    }

    pub fn new(
        binary: PathBuf,
        root: PathBuf,
        call_timeout: Duration,
        file_size_limit: u64,
    ) -> Self {
        Self {
            binary,
            root,
            call_timeout,
            file_size_limit,
            signal_freezer: None,
        }
    }

    /// Pause and resume with signals, recording paused containers in `markers` (rootless).
    pub fn with_signal_freezer(mut self, markers: PathBuf) -> Self {
        self.signal_freezer = Some(markers);
        self
    }

    /// Whether the signal freezer has this container paused (always false with the cgroup
    /// freezer, which runc itself enforces).
    pub fn marked_paused(&self, id: &str) -> bool {
        self.paused_marker(id).is_some_and(|m| m.exists())
    }

    fn paused_marker(&self, id: &str) -> Option<PathBuf> {
        self.signal_freezer.as_ref().map(|dir| dir.join(id))
    }

    /// A running container with a pause marker is paused (rootless).
    fn with_marker(&self, mut state: ContainerState) -> ContainerState {
        if state.status == ContainerStatus::Running
            && self.paused_marker(&state.id).is_some_and(|m| m.exists())
        {
            state.status = ContainerStatus::Paused;
        }
        state
    }

    pub fn call_timeout(&self) -> Duration {
        self.call_timeout
    }

    /// A `runc --root <ours>` command for callers that need more control over the child's
    /// stdio than [`Runc::call`] gives (exec).
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(&self.binary);
        cmd.arg("--root").arg(&self.root);
        // The sandbox's rlimits, inherited by the container's processes from runc. Not in the
        // spec: runc applies those with prlimit from the host side, which needs
        // CAP_SYS_RESOURCE over the sandbox's user namespace once it is not root's, and hosts
        // (and containers running us) may lack it. Lowering one's own limits needs nothing.
        // SAFETY: setrlimit is async-signal-safe and allocates nothing.
        // No core dumps (a crashing process would write its memory into the home), and no
        // file past the sandbox's size limit.
        let file_size = self.file_size_limit as libc::rlim_t;
        unsafe {
            cmd.pre_exec(move || {
                for (resource, value) in [
                    (libc::RLIMIT_NOFILE, SANDBOX_NOFILE),
                    (libc::RLIMIT_CORE, 0),
                    (libc::RLIMIT_FSIZE, file_size),
                ] {
                    let limit = libc::rlimit {
                        rlim_cur: value,
                        rlim_max: value,
                    };
                    if libc::setrlimit(resource, &limit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        cmd
    }

    pub async fn version(&self) -> Result<String, RuncError> {
        let out = self.call("--version", &["--version"]).await?;
        Ok(String::from_utf8_lossy(&out)
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned())
    }

    /// `runc run --detach`: create and start the container in one call.
    ///
    /// The container's init inherits runc's stdio; it points them at /dev/null as its first
    /// act, so the stderr pipe we read runc's errors from closes as soon as the init is up.
    ///
    /// `passed` become the init's fds 3, 4, ... (`--preserve-fds`): the command runner's image
    /// and socket (see `runner`).
    pub async fn run_detached(
        &self,
        id: &str,
        bundle: &Path,
        pid_file: &Path,
        passed: &[BorrowedFd<'_>],
    ) -> Result<(), RuncError> {
        let count = passed.len().to_string();
        let mut args = vec![
            OsStr::new("run"),
            OsStr::new("--detach"),
            OsStr::new("--bundle"),
            bundle.as_os_str(),
            OsStr::new("--pid-file"),
            pid_file.as_os_str(),
        ];
        if !passed.is_empty() {
            args.extend([OsStr::new("--preserve-fds"), OsStr::new(&count)]);
        }
        args.push(OsStr::new(id));
        let passed: Vec<RawFd> = passed.iter().map(AsRawFd::as_raw_fd).collect();
        let run = || {
            use tracing::Instrument;
            self.call_run(&args, &passed)
                .instrument(tracing::debug_span!("runc", op = "run"))
        };
        match run().await {
            // runc 1.1 copies itself before starting a container (its guard against
            // CVE-2019-5736); unprivileged, the copy has been seen to fail once with EBUSY while
            // other runc processes start. The attempt left at most a half-made container: remove
            // it and try once more.
            Err(RuncError::Failed { message, .. }) if message.contains("cloned binary") => {
                tracing::warn!(container = id, %message, "runc could not clone itself; retrying once");
                let _ = self.delete_force(id).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                run().await.map(drop)
            }
            other => other.map(drop),
        }
    }

    /// `runc run`: its stdio is the container init's too, until the init points it at
    /// /dev/null, so the answer is runc's exit, not the end of its output (which waited for the
    /// init's shell to start: about 3 ms of every create, the floor benchmark found). Its
    /// stderr is read meanwhile and kept only when it fails; after a success the reader ends
    /// on its own once the init lets go of the pipe.
    async fn call_run<S: AsRef<OsStr>>(
        &self,
        args: &[S],
        passed: &[RawFd],
    ) -> Result<(), RuncError> {
        use tokio::io::AsyncReadExt;
        let mut cmd = self.command();
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if !passed.is_empty() {
            let passed = passed.to_vec();
            // SAFETY: only async-signal-safe calls (fcntl, dup2) on descriptors this (child)
            // process holds, into a buffer allocated before the fork.
            unsafe {
                let mut moved = vec![-1; passed.len()];
                cmd.pre_exec(move || pass_fds(&passed, &mut moved));
            }
        }
        let mut child = cmd.spawn().map_err(|source| RuncError::Spawn {
            binary: self.binary.clone(),
            source,
        })?;
        let mut stderr = child.stderr.take().expect("stderr is piped");
        let reader = tokio::spawn(async move {
            // Kept up to a bound, read to the end: runc must never block on a full pipe.
            let mut kept = Vec::new();
            let mut chunk = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut chunk).await {
                if n == 0 {
                    break;
                }
                let room = RUN_STDERR_KEPT.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..n.min(room)]);
            }
            kept
        });
        let status = self.in_time("run", child.wait()).await?;
        if status.success() {
            return Ok(());
        }
        // Failed: no init holds the pipe, so its end comes with runc's.
        let said = tokio::time::timeout(self.call_timeout, reader)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        Err(RuncError::Failed {
            op: "run",
            message: error_message(&said),
        })
    }

    /// The container's state, or `None` when runc has no such container.
    pub async fn state(&self, id: &str) -> Result<Option<ContainerState>, RuncError> {
        match self.call("state", &["state", id]).await {
            Ok(out) => serde_json::from_slice(&out)
                .map(|state| Some(self.with_marker(state)))
                .map_err(|source| RuncError::BadOutput {
                    op: "state",
                    source,
                }),
            // runc's CLI reports a missing container only in words; this message has been the
            // same since runc 1.0 (libcontainer's ErrNotExist).
            Err(RuncError::Failed { message, .. }) if message.contains("does not exist") => {
                Ok(None)
            }
            Err(err) => Err(err),
        }
    }

    pub async fn list(&self) -> Result<Vec<ContainerState>, RuncError> {
        let out = self.call("list", &["list", "--format", "json"]).await?;
        // With no containers runc prints `null`.
        let listed: Option<Vec<ContainerState>> = serde_json::from_slice(&out)
            .map_err(|source| RuncError::BadOutput { op: "list", source })?;
        Ok(listed
            .unwrap_or_default()
            .into_iter()
            .map(|state| self.with_marker(state))
            .collect())
    }

    /// Freeze every process of the container: the cgroup freezer, or rootless `SIGSTOP`.
    pub async fn pause(&self, id: &str) -> Result<(), RuncError> {
        let Some(marker) = self.paused_marker(id) else {
            return self.call("pause", &["pause", id]).await.map(drop);
        };
        let init = self.running_init("pause", id).await?;
        // Marked first: a crash between the two leaves a paused-looking sandbox whose resume
        // continues whatever was stopped, never a stopped one that looks running.
        std::fs::write(&marker, b"").map_err(|e| failed("pause", e))?;
        tokio::task::spawn_blocking(move || super::rootless::stop_all(init))
            .await
            .map_err(|e| failed("pause", std::io::Error::other(e)))?
            .map_err(|e| failed("pause", e))
    }

    pub async fn resume(&self, id: &str) -> Result<(), RuncError> {
        let Some(marker) = self.paused_marker(id) else {
            return self.call("resume", &["resume", id]).await.map(drop);
        };
        let init = self.running_init("resume", id).await?;
        tokio::task::spawn_blocking(move || super::rootless::continue_all(init))
            .await
            .map_err(|e| failed("resume", std::io::Error::other(e)))?
            .map_err(|e| failed("resume", e))?;
        remove_marker(&marker).map_err(|e| failed("resume", e))
    }

    /// The init pid of a live container, for the signal freezer; refused like runc refuses to
    /// pause a paused container or resume a running one.
    async fn running_init(&self, op: &'static str, id: &str) -> Result<i32, RuncError> {
        let state = self.state(id).await?.ok_or_else(|| RuncError::Failed {
            op,
            message: format!("container {id} does not exist"),
        })?;
        let wanted = if op == "pause" {
            ContainerStatus::Running
        } else {
            ContainerStatus::Paused
        };
        if state.status != wanted || state.pid <= 0 {
            return Err(RuncError::Failed {
                op,
                message: format!("container {id} is not {wanted:?}"),
            });
        }
        Ok(state.pid)
    }

    /// Kill every process of the container (paused or not) and forget it.
    pub async fn delete_force(&self, id: &str) -> Result<(), RuncError> {
        if let Some(marker) = self.paused_marker(id) {
            // Stopped processes die of SIGKILL; the marker must not outlive them.
            remove_marker(&marker).map_err(|e| failed("delete", e))?;
        }
        self.call("delete", &["delete", "--force", id])
            .await
            .map(drop)
    }

    /// Run `runc --root <ours> <args>`, bounded by the call timeout; stdout on success, runc's
    /// own error message on failure.
    async fn call<S: AsRef<OsStr>>(
        &self,
        op: &'static str,
        args: &[S],
    ) -> Result<Vec<u8>, RuncError> {
        use tracing::Instrument;
        self.call_untraced(op, args)
            .instrument(tracing::debug_span!("runc", op))
            .await
    }

    async fn call_untraced<S: AsRef<OsStr>>(
        &self,
        op: &'static str,
        args: &[S],
    ) -> Result<Vec<u8>, RuncError> {
        // These calls (state, pause, resume, delete, list) start no process of the sandbox, so
        // they go without the `pre_exec` hook that sets its rlimits (`command`, for `run` and
        // `exec`): with a hook the standard library must fork this whole process, without one
        // it spawns runc with `posix_spawn` (vfork), about half a millisecond less per call.
        let mut cmd = Command::new(&self.binary);
        cmd.arg("--root").arg(&self.root);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A timed-out call is dropped; this makes sure the runc process goes with it.
            .kill_on_drop(true);
        let child = cmd.spawn().map_err(|source| RuncError::Spawn {
            binary: self.binary.clone(),
            source,
        })?;
        let output = self.in_time(op, child.wait_with_output()).await?;
        if output.status.success() {
            Ok(output.stdout)
        } else {
            Err(RuncError::Failed {
                op,
                message: error_message(&output.stderr),
            })
        }
    }
}

/// runc logs errors as `time="..." level=error msg="..."`; keep the `msg` parts, which are what
/// a person needs, or the whole text when it has another shape.
fn failed(op: &'static str, error: std::io::Error) -> RuncError {
    RuncError::Failed {
        op,
        message: error.to_string(),
    }
}

fn remove_marker(marker: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(marker) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

pub(crate) fn error_message(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let messages: Vec<String> = text
        .lines()
        .filter_map(|line| {
            let start = line.find("msg=\"")? + 5;
            let rest = &line[start..];
            // The message ends at the first unescaped quote.
            let mut msg = String::new();
            let mut chars = rest.chars();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => msg.extend(chars.next()),
                    '"' => break,
                    c => msg.push(c),
                }
            }
            Some(msg)
        })
        .collect();
    if messages.is_empty() {
        text.trim().to_owned()
    } else {
        messages.join("; ")
    }
}

/// In the forked child, before exec'ing runc: put `passed` at fds 3, 4, ... without close-on-exec.
/// Each is first moved above them all, so one already sitting at a target is not overwritten
/// before it is placed.
fn pass_fds(passed: &[RawFd], moved: &mut [RawFd]) -> std::io::Result<()> {
    let first = 3 + passed.len() as RawFd;
    for (fd, to) in passed.iter().zip(moved.iter_mut()) {
        // SAFETY: fcntl on a descriptor of this process.
        *to = unsafe { libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, first) };
        if *to < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    for (i, fd) in moved.iter().enumerate() {
        // SAFETY: dup2 between descriptors of this process; it clears close-on-exec.
        if unsafe { libc::dup2(*fd, 3 + i as RawFd) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_are_extracted() {
        let stderr = br#"time="2026-01-01T00:00:00Z" level=error msg="exec failed: chdir to cwd (\"/nope\") set in config.json failed""#;
        assert_eq!(
            error_message(stderr),
            r#"exec failed: chdir to cwd ("/nope") set in config.json failed"#
        );
        assert_eq!(error_message(b"plain failure\n"), "plain failure");
    }

    #[test]
    fn states_parse() {
        let json = r#"{"ociVersion":"1.0.2-dev","id":"rc-0123456789ab","pid":7153,"status":"paused",
            "bundle":"/x","rootfs":"/x/rootfs","created":"2026-11-22T00:42:47Z",
            "annotations":{"threadbox.thread_id":"t"},"owner":""}"#;
        let state: ContainerState = serde_json::from_str(json).unwrap();
        assert_eq!(state.status, ContainerStatus::Paused);
        assert_eq!(state.pid, 7153);
        assert_eq!(state.annotations["threadbox.thread_id"], "t");
        let odd: ContainerState =
            serde_json::from_str(r#"{"id":"x","pid":0,"status":"weird"}"#).unwrap();
        assert_eq!(odd.status, ContainerStatus::Unknown);
        assert!(!odd.status.is_alive());
    }
}
