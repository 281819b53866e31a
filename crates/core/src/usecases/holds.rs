//! Holds and keep-alive, and the work that runs under a hold: commands and file operations.
//!
//! A hold is written into the session record, so the janitor's conditional pause claim fails
//! while one is live, whichever process holds it. Holds expire, so a crashed holder cannot pin a
//! sandbox forever; a long-running holder renews with `keep_alive`, which also pushes the
//! provider's own timeout out.

use std::time::Duration;

use tracing::Instrument;

use crate::domain::{Hold, Millis, Session, Status, ThreadId};
use crate::ports::{
    ExecRequest, ExecResult, FileChunks, FileEntry, GrepMatch, OutputSink, ProviderError,
};

use super::error::UseCaseError;
use super::hold_request::HoldRequest;
use super::resolve::{ResolveOptions, SandboxHandle};
use super::threadbox::{Step, Threadbox};

/// Extra hold time beyond a command's own timeout, covering the round trips around it.
const HOLD_GRACE: Duration = Duration::from_secs(30);

impl Threadbox {
    /// Resolve the thread and take a hold in the same write. Release it with `release_hold`.
    pub async fn acquire_hold(
        &self,
        thread_id: &ThreadId,
        request: HoldRequest,
    ) -> Result<SandboxHandle, UseCaseError> {
        self.resolve_with(
            thread_id,
            ResolveOptions {
                create: true,
                hold: Some(request),
                ..Default::default()
            },
        )
        .await
    }

    /// Drop a hold. Returns whether it was still there (an expired hold is already gone).
    pub async fn release_hold(
        &self,
        thread_id: &ThreadId,
        hold_id: &str,
    ) -> Result<bool, UseCaseError> {
        self.update_holds(thread_id, |s, now, timers| {
            s.release_hold(hold_id, now, timers)
        })
        .await
    }

    /// Extend a live hold by `ttl` from now and push the provider's timeout out. Returns false
    /// when the hold had already expired or been released (the caller should re-acquire).
    pub async fn keep_alive(
        &self,
        thread_id: &ThreadId,
        hold_id: &str,
        ttl: Duration,
    ) -> Result<bool, UseCaseError> {
        self.renew_hold(thread_id, hold_id, ttl, false).await
    }

    /// `keep_alive`; with `expired_too`, a hold still in the record but expired is renewed as
    /// well (a background process's, seen active again: see `Session::prune_holds`).
    pub(super) async fn renew_hold(
        &self,
        thread_id: &ThreadId,
        hold_id: &str,
        ttl: Duration,
        expired_too: bool,
    ) -> Result<bool, UseCaseError> {
        let renewed = self
            .update_holds(thread_id, |s, now, timers| {
                let Some(hold) = s
                    .holds
                    .iter()
                    .find(|h| h.hold_id == hold_id && (expired_too || h.expires_at > now))
                    .cloned()
                else {
                    return false;
                };
                s.acquire_hold(
                    Hold {
                        expires_at: now.plus(ttl),
                        ..hold
                    },
                    now,
                    timers,
                );
                true
            })
            .await?;
        if renewed {
            let session = self.load(thread_id).await?;
            if let Some(id) = session.sandbox_id.as_deref() {
                self.provider
                    .set_timeout(id, self.config.sandbox_timeout.max(ttl))
                    .await?;
            }
        }
        Ok(renewed)
    }

    async fn update_holds(
        &self,
        thread_id: &ThreadId,
        edit: impl Fn(&mut Session, Millis, &crate::domain::Timers) -> bool,
    ) -> Result<bool, UseCaseError> {
        loop {
            let current = self.load(thread_id).await?;
            let mut next = current.clone();
            let now = self.clock.now();
            let result = edit(&mut next, now, &self.config.timers);
            if let Step::Moved(_) = self.write(next, current.version, vec![]).await? {
                return Ok(result);
            }
        }
    }

    /// Run a command in the thread's sandbox (creating or resuming it first) under a hold, so
    /// nothing pauses it mid-command. A sandbox found gone is handled by the thread's policy and,
    /// when recreated, the command runs once more in the new sandbox.
    #[tracing::instrument(skip(self, request), fields(thread_id = %thread_id))]
    pub async fn exec(
        &self,
        thread_id: &ThreadId,
        request: ExecRequest,
    ) -> Result<ExecResult, UseCaseError> {
        self.run_command(thread_id, request, None).await
    }

    /// `exec`, with the output sent to `output` as it comes (see
    /// `SandboxProvider::exec_streaming`); the result carries the rest. The hold lasts as long
    /// as the command, whether or not anyone still reads its output.
    pub async fn exec_streaming(
        &self,
        thread_id: &ThreadId,
        request: ExecRequest,
        output: OutputSink,
    ) -> Result<ExecResult, UseCaseError> {
        self.run_command(thread_id, request, Some(output)).await
    }

    /// A command under a hold as long as its timeout, its output kept or streamed.
    async fn run_command(
        &self,
        thread_id: &ThreadId,
        request: ExecRequest,
        output: Option<OutputSink>,
    ) -> Result<ExecResult, UseCaseError> {
        let keep_alive = request.timeout + HOLD_GRACE;
        let hold = HoldRequest::new("exec", keep_alive);
        self.with_sandbox(thread_id, hold, |sandbox_id| {
            let (request, output) = (request.clone(), output.clone());
            async move {
                if keep_alive > self.config.sandbox_timeout {
                    self.provider
                        .set_timeout(&sandbox_id, keep_alive)
                        .await
                        .ok();
                }
                let span = tracing::debug_span!("provider.exec");
                let result = match output {
                    Some(output) => {
                        self.provider
                            .exec_streaming(&sandbox_id, request, output)
                            .instrument(span)
                            .await
                    }
                    None => {
                        self.provider
                            .exec(&sandbox_id, request)
                            .instrument(span)
                            .await
                    }
                };
                match result {
                    // Killed, but not by its timeout or memory: if its sandbox was taken away
                    // (a reset or destroy kills what runs in it), that is the answer, not an
                    // exit status the command never chose.
                    Ok(r) if r.exit_code.is_none() && !r.timed_out && !r.out_of_memory => {
                        match self
                            .interrupted(thread_id, &sandbox_id, Status::Active)
                            .await
                        {
                            Some(_) => Err(ProviderError::Conflict(format!(
                                "the command was killed with sandbox {sandbox_id}"
                            ))),
                            None => Ok(r),
                        }
                    }
                    other => other,
                }
            }
        })
        .await
    }

    /// Run `op` on the thread's resolved sandbox (created or resumed first) under `hold`, so
    /// nothing pauses it meanwhile; the hold is released after. A sandbox the provider says is
    /// gone, or paused behind our back (E2B's autoPause), is folded into the record (resumed,
    /// recreated or expired by the thread's policy) and `op` runs once more. One taken away by
    /// a pause, reset or destroy of the thread while `op` ran is `Interrupted` (`race`).
    pub(super) async fn with_sandbox<T, F, Fut>(
        &self,
        thread_id: &ThreadId,
        hold: HoldRequest,
        op: F,
    ) -> Result<T, UseCaseError>
    where
        F: Fn(String) -> Fut,
        Fut: std::future::Future<Output = Result<T, ProviderError>>,
    {
        let mut retried = false;
        loop {
            let handle = self
                .acquire_hold(thread_id, hold.clone())
                .instrument(tracing::debug_span!("resolve"))
                .await?;
            let result = op(handle.sandbox_id.clone()).await;
            if let Some(hold_id) = handle.hold_id.as_deref() {
                let released = self
                    .release_hold(thread_id, hold_id)
                    .instrument(tracing::debug_span!("hold.release"))
                    .await;
                if let Err(error) = released {
                    tracing::warn!(%error, "releasing a hold failed; it expires on its own");
                }
            }
            let error = match result {
                Ok(value) => return Ok(value),
                Err(error) => error,
            };
            self.retry_once_after(thread_id, &handle.sandbox_id, error, &mut retried)
                .await?;
        }
    }

    pub async fn read_file(
        &self,
        thread_id: &ThreadId,
        path: &str,
    ) -> Result<Vec<u8>, UseCaseError> {
        self.with_sandbox(
            thread_id,
            HoldRequest::new("files", HOLD_GRACE),
            |id| async move { self.provider.read_file(&id, path).await },
        )
        .await
    }

    /// The largest file upload the provider takes (see `SandboxProvider::upload_limit`).
    pub fn upload_limit(&self) -> u64 {
        self.provider.upload_limit()
    }

    /// Stream an upload into a file of the thread's sandbox (created or resumed first) under a
    /// hold, at most `limit` bytes; the number written. A sandbox found gone before the upload
    /// started is handled as for any file operation; one lost mid-upload takes the bytes sent
    /// with it, and the caller is told to send them again.
    pub async fn write_file_from(
        &self,
        thread_id: &ThreadId,
        path: &str,
        chunks: FileChunks,
        limit: u64,
    ) -> Result<u64, UseCaseError> {
        let chunks = std::sync::Mutex::new(Some(chunks));
        self.with_sandbox(thread_id, HoldRequest::new("files", HOLD_GRACE), |id| {
            let taken = chunks.lock().unwrap().take();
            async move {
                match taken {
                    Some(chunks) => {
                        self.provider
                            .write_file_from(&id, path, chunks, limit)
                            .await
                    }
                    None => Err(ProviderError::Unavailable(format!(
                        "{path}: the sandbox went away during the upload; send it again"
                    ))),
                }
            }
        })
        .await
    }

    pub async fn write_file(
        &self,
        thread_id: &ThreadId,
        path: &str,
        contents: &[u8],
    ) -> Result<(), UseCaseError> {
        self.with_sandbox(
            thread_id,
            HoldRequest::new("files", HOLD_GRACE),
            |id| async move { self.provider.write_file(&id, path, contents).await },
        )
        .await
    }

    pub async fn list_dir(
        &self,
        thread_id: &ThreadId,
        path: &str,
    ) -> Result<Vec<FileEntry>, UseCaseError> {
        self.with_sandbox(
            thread_id,
            HoldRequest::new("files", HOLD_GRACE),
            |id| async move { self.provider.list_dir(&id, path).await },
        )
        .await
    }

    pub async fn stat(&self, thread_id: &ThreadId, path: &str) -> Result<FileEntry, UseCaseError> {
        self.with_sandbox(
            thread_id,
            HoldRequest::new("files", HOLD_GRACE),
            |id| async move { self.provider.stat(&id, path).await },
        )
        .await
    }

    pub async fn remove(
        &self,
        thread_id: &ThreadId,
        path: &str,
        recursive: bool,
    ) -> Result<(), UseCaseError> {
        self.with_sandbox(
            thread_id,
            HoldRequest::new("files", HOLD_GRACE),
            |id| async move { self.provider.remove(&id, path, recursive).await },
        )
        .await
    }

    /// Make a directory (and its missing parents) in the thread's sandbox, under a hold.
    pub async fn make_dir(&self, thread_id: &ThreadId, path: &str) -> Result<(), UseCaseError> {
        self.with_sandbox(
            thread_id,
            HoldRequest::new("files", HOLD_GRACE),
            |id| async move { self.provider.make_dir(&id, path).await },
        )
        .await
    }

    pub async fn glob(
        &self,
        thread_id: &ThreadId,
        pattern: &str,
    ) -> Result<Vec<String>, UseCaseError> {
        self.with_sandbox(
            thread_id,
            HoldRequest::new("files", HOLD_GRACE),
            |id| async move { self.provider.glob(&id, pattern).await },
        )
        .await
    }

    pub async fn grep(
        &self,
        thread_id: &ThreadId,
        pattern: &str,
        path: &str,
    ) -> Result<Vec<GrepMatch>, UseCaseError> {
        self.with_sandbox(
            thread_id,
            HoldRequest::new("files", HOLD_GRACE),
            |id| async move { self.provider.grep(&id, pattern, path).await },
        )
        .await
    }
}
