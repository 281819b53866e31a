//! Background processes in a thread's sandbox (see `ports::provider::processes` for how the
//! sandbox keeps them).
//!
//! A running process is a live hold on its thread, so the janitor does not pause it mid-work:
//! the hold (`process-<id>`) is taken as the process starts, renewed while it shows activity
//! (new output, input written, its output read) and dropped when threadbox sees it end, or it
//! runs out after the caller's idle limit. Pausing the thread all the same (by request) freezes
//! the process with the sandbox, and resuming continues it; destroying the sandbox ends it.
//!
//! Its start and its end are events in the thread's stream (cause `process`, no change of
//! state). The end is written in the same conditional write that drops its hold, so it is
//! recorded once, whoever notices it first: a caller reading the process, or the watcher that
//! `threadbox dev` runs (`check_processes`). Lambda has no resident watcher, so there an end is
//! recorded when the API next looks at the process, and the hold lasts its idle limit from the
//! last time anyone did.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use crate::domain::{Cause, Session, Status, ThreadId, PROCESS_HOLD_PREFIX};
use crate::ports::{
    check_output_offset, new_process_id, ExecCommand, ProcessInfo, ProcessOutput, ProcessSignal,
    ProcessSink, ProcessState, ProviderError, PtySize, SandboxUser, StartProcess,
};

use super::error::UseCaseError;
use super::hold_request::HoldRequest;
use super::threadbox::{Step, Threadbox};

/// How long a process keeps its thread awake without activity, unless the caller says.
pub const DEFAULT_PROCESS_IDLE: Duration = Duration::from_secs(10 * 60);
/// The longest idle limit a caller may set.
pub const MAX_PROCESS_IDLE: Duration = Duration::from_secs(24 * 60 * 60);
/// The hold of a short operation on processes (listing, reading, signalling).
const OPERATION_HOLD: Duration = Duration::from_secs(60);

/// What a caller asks to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessRequest {
    pub command: ExecCommand,
    pub cwd: Option<String>,
    pub env: BTreeMap<String, String>,
    pub pty: Option<PtySize>,
    pub output_chunks: u32,
    /// How long the process keeps the thread awake without activity.
    pub idle_limit: Duration,
    /// Who runs it: the sandbox's user (the default) or its root.
    pub user: SandboxUser,
}

fn hold_id(process_id: &str) -> String {
    format!("{PROCESS_HOLD_PREFIX}{process_id}")
}

/// The hold's owner names the idle limit, so a renewal (by any process, Lambda or dev) knows it.
fn hold_owner(process_id: &str, idle: Duration) -> String {
    format!("process {process_id} idle {}s", idle.as_secs())
}

fn idle_of(owner: &str) -> Option<Duration> {
    let secs = owner.rsplit_once(" idle ")?.1.strip_suffix('s')?;
    secs.parse().ok().map(Duration::from_secs)
}

/// The scripts answer an unknown process id as a bad request naming it; callers get a 404.
fn process_error(thread_id: &ThreadId, process_id: &str, error: UseCaseError) -> UseCaseError {
    match error {
        UseCaseError::Provider(ProviderError::InvalidRequest(m))
            if m.starts_with("no such process") =>
        {
            UseCaseError::UnknownProcess {
                thread_id: thread_id.clone(),
                process_id: process_id.to_owned(),
            }
        }
        other => other,
    }
}

/// What a process's ending is called in the thread's events.
fn ended_detail(info: &ProcessInfo) -> String {
    match (info.state, info.exit_code) {
        (ProcessState::Lost, _) => format!("process {} lost: {}", info.id, info.command),
        (_, Some(code)) if code > 128 && code < 160 => format!(
            "process {} ended by signal {} (status {code}): {}",
            info.id,
            code - 128,
            info.command
        ),
        (_, Some(code)) => format!(
            "process {} exited with status {code}: {}",
            info.id, info.command
        ),
        (_, None) => format!("process {} ended: {}", info.id, info.command),
    }
}

impl Threadbox {
    /// Start a background process in the thread's sandbox (created or resumed first), holding
    /// the thread awake while it runs.
    pub async fn start_process(
        &self,
        thread_id: &ThreadId,
        request: ProcessRequest,
    ) -> Result<ProcessInfo, UseCaseError> {
        let id = new_process_id();
        let idle = request.idle_limit.min(MAX_PROCESS_IDLE);
        let hold = HoldRequest::named(hold_id(&id), hold_owner(&id, idle), idle);
        let mut retried = false;
        loop {
            let handle = self.acquire_hold(thread_id, hold.clone()).await?;
            if idle > self.config.sandbox_timeout {
                self.provider
                    .set_timeout(&handle.sandbox_id, idle)
                    .await
                    .ok();
            }
            let start = StartProcess {
                id: id.clone(),
                command: request.command.clone(),
                cwd: request.cwd.clone(),
                env: request.env.clone(),
                pty: request.pty,
                output_chunks: request.output_chunks,
                user: request.user,
            };
            match self.provider.start_process(&handle.sandbox_id, start).await {
                Ok(info) => {
                    let detail = format!("process {id} started: {}", info.command);
                    self.note_process(thread_id, detail, None).await?;
                    if info.state != ProcessState::Running {
                        // Over before we looked: record its end and drop its hold now.
                        self.process_ended(thread_id, &info).await?;
                    }
                    return Ok(info);
                }
                Err(error) => {
                    if let Err(e) = self.release_hold(thread_id, &hold_id(&id)).await {
                        tracing::warn!(error = %e, "releasing a process hold failed");
                    }
                    self.retry_once_after(thread_id, &handle.sandbox_id, error, &mut retried)
                        .await?;
                }
            }
        }
    }

    /// The thread's processes, running and ended; ends seen for the first time are recorded.
    pub async fn list_processes(
        &self,
        thread_id: &ThreadId,
    ) -> Result<Vec<ProcessInfo>, UseCaseError> {
        let all = self
            .with_process_hold(thread_id, |id| async move {
                self.provider.list_processes(&id).await
            })
            .await?;
        for info in all.iter().filter(|p| p.state != ProcessState::Running) {
            self.process_ended(thread_id, info).await?;
        }
        Ok(all)
    }

    /// Up to `max` bytes of a process's output from `after`. Reading counts as activity.
    pub async fn read_process_output(
        &self,
        thread_id: &ThreadId,
        process_id: &str,
        after: u64,
        max: u64,
    ) -> Result<ProcessOutput, UseCaseError> {
        // Checked here, before the sandbox is brought up: a bad offset changes nothing.
        check_output_offset(after)?;
        let output = self
            .with_process_hold(thread_id, |id| async move {
                self.provider
                    .read_process_output(&id, process_id, after, max)
                    .await
            })
            .await
            .map_err(|e| process_error(thread_id, process_id, e))?;
        self.after_touch(thread_id, &output.info).await?;
        Ok(output)
    }

    /// A process's output from `after` as it comes, until it ends or `timeout` passes; then
    /// the process as it stands and the offset reached. The thread is held meanwhile.
    pub async fn follow_process_output(
        &self,
        thread_id: &ThreadId,
        process_id: &str,
        after: u64,
        timeout: Duration,
        output: ProcessSink,
    ) -> Result<(u64, Option<ProcessInfo>), UseCaseError> {
        check_output_offset(after)?;
        let hold = HoldRequest::new("process-follow", timeout + OPERATION_HOLD);
        let handle = self.hold_existing(thread_id, hold).await?;
        // A reader that goes away ends the follow (dropping it stops the command that follows
        // inside the sandbox), so its hold is released now rather than at its timeout.
        let closed = output.clone();
        let reached = tokio::select! {
            reached = self.provider.follow_process_output(
                &handle.sandbox_id, process_id, after, timeout, output,
            ) => reached,
            () = closed.closed() => Ok(after),
        };
        if let Some(id) = handle.hold_id.as_deref() {
            self.release_hold(thread_id, id).await.ok();
        }
        let reached = match reached {
            Ok(reached) => reached,
            Err(e) => {
                let error = self.call_error(thread_id, &handle.sandbox_id, e).await;
                return Err(process_error(thread_id, process_id, error));
            }
        };
        let info = self
            .provider
            .list_processes(&handle.sandbox_id)
            .await
            .ok()
            .and_then(|all| all.into_iter().find(|p| p.id == process_id));
        if let Some(info) = &info {
            self.after_touch(thread_id, info).await?;
        }
        Ok((reached, info))
    }

    /// Write to a process's input. Counts as activity.
    pub async fn write_process_input(
        &self,
        thread_id: &ThreadId,
        process_id: &str,
        data: &[u8],
    ) -> Result<(), UseCaseError> {
        self.with_process_hold(thread_id, |id| async move {
            self.provider
                .write_process_input(&id, process_id, data)
                .await
        })
        .await
        .map_err(|e| process_error(thread_id, process_id, e))?;
        self.renew_process_hold(thread_id, process_id).await
    }

    pub async fn resize_process(
        &self,
        thread_id: &ThreadId,
        process_id: &str,
        size: PtySize,
    ) -> Result<(), UseCaseError> {
        self.with_process_hold(thread_id, |id| async move {
            self.provider.resize_process(&id, process_id, size).await
        })
        .await
        .map_err(|e| process_error(thread_id, process_id, e))
    }

    pub async fn signal_process(
        &self,
        thread_id: &ThreadId,
        process_id: &str,
        signal: ProcessSignal,
    ) -> Result<(), UseCaseError> {
        self.with_process_hold(thread_id, |id| async move {
            self.provider.signal_process(&id, process_id, signal).await
        })
        .await
        .map_err(|e| process_error(thread_id, process_id, e))
    }

    /// Look at the thread's processes without bringing anything up (the watcher's pass): ends
    /// are recorded and their holds dropped; a running process whose output grew since
    /// `seen` (its last output offset) has its hold renewed. Returns whether any still run.
    /// A thread that is not active (paused: its processes are frozen) is left for later.
    pub async fn check_processes(
        &self,
        thread_id: &ThreadId,
        seen: &mut HashMap<String, u64>,
    ) -> Result<bool, UseCaseError> {
        let session = self.load(thread_id).await?;
        let Some(sandbox_id) = session.sandbox_id.as_deref() else {
            return Ok(false);
        };
        if session.status != Status::Active {
            return Ok(session.status == Status::Paused || session.status.is_transitional());
        }
        let all = self.provider.list_processes(sandbox_id).await?;
        let mut running = false;
        for info in &all {
            if info.state != ProcessState::Running {
                self.process_ended(thread_id, info).await?;
                seen.remove(&info.id);
                continue;
            }
            running = true;
            let before = seen.insert(info.id.clone(), info.output_bytes);
            if before.is_some_and(|b| b < info.output_bytes) {
                self.renew_process_hold(thread_id, &info.id).await?;
            }
        }
        Ok(running)
    }

    /// Threads whose sessions hold a process hold, live or expired (a process whose end is
    /// not recorded yet): what the watcher looks at.
    pub async fn threads_with_processes(&self) -> Result<Vec<ThreadId>, UseCaseError> {
        let mut found = Vec::new();
        let mut after: Option<ThreadId> = None;
        loop {
            let page = self.store.list(200, after.as_ref()).await?;
            for session in &page.items {
                if session.sandbox_id.is_some() && session.holds.iter().any(|h| h.is_process()) {
                    found.push(session.thread_id.clone());
                }
            }
            match page.next.map(|next| ThreadId::parse(&next)) {
                Some(Ok(next)) => after = Some(next),
                _ => return Ok(found),
            }
        }
    }

    /// Bring up the thread's sandbox under `hold`, resuming a paused one (its processes are
    /// frozen there) but never creating one: a thread without a sandbox has no processes, and
    /// asking about them (a mistyped thread id, say) must not start a sandbox.
    async fn hold_existing(
        &self,
        thread_id: &ThreadId,
        hold: HoldRequest,
    ) -> Result<super::SandboxHandle, UseCaseError> {
        self.resolve_with(
            thread_id,
            super::ResolveOptions {
                create: false,
                hold: Some(hold),
                ..Default::default()
            },
        )
        .await
    }

    /// A short operation on existing processes, under a hold like any command.
    async fn with_process_hold<T, F, Fut>(
        &self,
        thread_id: &ThreadId,
        op: F,
    ) -> Result<T, UseCaseError>
    where
        F: Fn(String) -> Fut,
        Fut: std::future::Future<Output = Result<T, ProviderError>>,
    {
        let handle = self
            .hold_existing(thread_id, HoldRequest::new("processes", OPERATION_HOLD))
            .await?;
        let result = op(handle.sandbox_id.clone()).await;
        if let Some(id) = handle.hold_id.as_deref() {
            self.release_hold(thread_id, id).await.ok();
        }
        match result {
            Ok(value) => Ok(value),
            Err(e) => Err(self.call_error(thread_id, &handle.sandbox_id, e).await),
        }
    }

    /// After a caller touched a process: renew its hold while it runs, record its end once not.
    async fn after_touch(
        &self,
        thread_id: &ThreadId,
        info: &ProcessInfo,
    ) -> Result<(), UseCaseError> {
        if info.state == ProcessState::Running {
            self.renew_process_hold(thread_id, &info.id).await
        } else {
            self.process_ended(thread_id, info).await.map(drop)
        }
    }

    /// Push a running process's hold out by its idle limit: it was seen active just now. A
    /// hold that expired meanwhile (its process idle past its limit, or the watcher late) is
    /// renewed too while it is still in the record, since the activity proves the process
    /// works; one whose end was recorded is gone and stays gone.
    async fn renew_process_hold(
        &self,
        thread_id: &ThreadId,
        process_id: &str,
    ) -> Result<(), UseCaseError> {
        let session = self.load(thread_id).await?;
        let Some(hold) = session
            .holds
            .iter()
            .find(|h| h.hold_id == hold_id(process_id))
        else {
            return Ok(());
        };
        let idle = idle_of(&hold.owner).unwrap_or(DEFAULT_PROCESS_IDLE);
        self.renew_hold(thread_id, &hold.hold_id.clone(), idle, true)
            .await
            .map(drop)
    }

    /// Record a process's end and drop its hold, in one write, once: true if this call did.
    async fn process_ended(
        &self,
        thread_id: &ThreadId,
        info: &ProcessInfo,
    ) -> Result<bool, UseCaseError> {
        self.note_process(thread_id, ended_detail(info), Some(&hold_id(&info.id)))
            .await
    }

    /// Write a process event; with `release`, only if that hold is still in the record, and
    /// dropping it in the same write. True when the event was written.
    async fn note_process(
        &self,
        thread_id: &ThreadId,
        detail: String,
        release: Option<&str>,
    ) -> Result<bool, UseCaseError> {
        loop {
            let current: Session = self.load(thread_id).await?;
            let mut next = current.clone();
            let change = self.change(Some(detail.clone()));
            if let Some(hold) = release {
                if !next.holds.iter().any(|h| h.hold_id == hold) {
                    return Ok(false);
                }
                next.release_hold(hold, change.now, &self.config.timers);
            }
            let event = next.note(Cause::Process, change);
            if let Step::Moved(_) = self.write(next, current.version, vec![event]).await? {
                return Ok(true);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_idle_limit_travels_in_the_hold_owner() {
        let owner = hold_owner("abc", Duration::from_secs(90));
        assert_eq!(idle_of(&owner), Some(Duration::from_secs(90)));
        assert_eq!(idle_of("exec"), None);
    }

    #[test]
    fn ends_are_described_by_how_they_ended() {
        let mut info = ProcessInfo {
            id: "p1".into(),
            command: "sleep 9".into(),
            pty: false,
            state: ProcessState::Exited,
            exit_code: Some(0),
            started_at: None,
            ended_at: None,
            output_bytes: 0,
            output_start: 0,
        };
        assert!(ended_detail(&info).contains("exited with status 0"));
        info.exit_code = Some(143);
        assert!(ended_detail(&info).contains("ended by signal 15"));
        info.state = ProcessState::Lost;
        assert!(ended_detail(&info).contains("lost"));
    }
}
