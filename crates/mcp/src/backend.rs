//! The tools' backend over the use cases: what the API's MCP endpoint runs. Every input goes
//! through the same checks as the API's own routes (the exec and process bodies, sandbox paths,
//! process ids, glob and grep patterns) and every failure carries the code and status the API would answer with.

use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;

use super::{ExecBody, OutputSink, ProcessBody, SandboxBackend, ToolFailure};
use threadbox_api::http::{checkpoint_id as parse_checkpoint_id, sandbox_path, ApiError};
use threadbox_core::domain::{
    CheckpointCause, CheckpointId, Millis, NetworkProfile, Session, ThreadId,
};
use threadbox_core::ports::{
    valid_process_id, ExecResult, FileEntry, GrepMatch, ProcessInfo, ProcessOutput, ProcessSignal,
    MAX_INPUT_BYTES, MAX_OUTPUT_READ,
};
use threadbox_core::usecases::{ForkRequest, Threadbox};

/// How many recent lifecycle events `status` shows, as `GET /v1/threads/{id}` does.
const RECENT_EVENTS: usize = 20;

/// [`SandboxBackend`] over [`Threadbox`]. Commands run to their end and answer whole: it sends
/// nothing to an output sink.
#[derive(Clone)]
pub struct ThreadboxBackend {
    tb: Threadbox,
    /// The longest a command may run (see [`super::ExecLimit`]); `None`: the API's own limits.
    exec_limit: Option<Duration>,
}

impl ThreadboxBackend {
    pub fn new(tb: Threadbox) -> Self {
        Self {
            tb,
            exec_limit: None,
        }
    }

    /// Commands at most `limit` long; without a timeout, `limit` is theirs.
    pub fn with_exec_limit(mut self, limit: Option<Duration>) -> Self {
        self.exec_limit = limit;
        self
    }
}

fn thread_id(raw: &str) -> Result<ThreadId, ToolFailure> {
    ThreadId::parse(raw)
        .map_err(|e| ApiError::bad_request("invalid_thread_id", e.to_string()).into())
}

/// A process id as the API's routes check it.
fn process_id(raw: &str) -> Result<&str, ToolFailure> {
    if valid_process_id(raw) {
        Ok(raw)
    } else {
        Err(ApiError::bad_request(
            "invalid_process_id",
            "a process id is 1 to 32 letters and digits",
        )
        .into())
    }
}

fn checkpoint_id(raw: &str) -> Result<CheckpointId, ToolFailure> {
    parse_checkpoint_id(raw).map_err(ToolFailure::from)
}

fn path(raw: &str) -> Result<String, ToolFailure> {
    sandbox_path(raw).map_err(ToolFailure::from)
}

/// A session as the API shows it: the record plus how long it has been idle.
fn session_view(session: &Session, now: Millis) -> Result<Value, ToolFailure> {
    let idle_seconds = now.since(session.last_activity_at).as_secs();
    let mut view = to_value(session)?;
    if let Value::Object(fields) = &mut view {
        fields.insert("idle_seconds".into(), json!(idle_seconds));
    }
    Ok(view)
}

fn to_value<T: Serialize>(value: &T) -> Result<Value, ToolFailure> {
    serde_json::to_value(value).map_err(|e| ToolFailure {
        code: "internal".into(),
        message: format!("could not show the answer: {e}"),
        status: Some(500),
        retry_after: None,
    })
}

#[async_trait]
impl SandboxBackend for ThreadboxBackend {
    async fn exec(
        &self,
        thread: &str,
        input: ExecBody,
        _output: Option<OutputSink>,
    ) -> Result<ExecResult, ToolFailure> {
        let thread = thread_id(thread)?;
        let mut input = input;
        if let Some(limit) = self.exec_limit {
            let limit_ms = limit.as_millis() as u64;
            match input.timeout_ms {
                Some(ms) if ms > limit_ms => {
                    return Err(ApiError::bad_request(
                        "exec_timeout_over_gateway_limit",
                        format!(
                            "timeout_seconds {} is over {}: through API Gateway a command must \
                             finish within {} s. Run longer work in the background with \
                             start_process and read its output with read_process_output.",
                            ms / 1000,
                            limit.as_secs(),
                            limit.as_secs()
                        ),
                    )
                    .into());
                }
                Some(_) => {}
                None => input.timeout_ms = Some(limit_ms),
            }
        }
        // The API's exec body, so the command is checked exactly as `POST .../exec` checks it.
        let take_checkpoint = input.checkpoint;
        let request = input.into_request()?;
        if take_checkpoint {
            self.tb.resolve(&thread).await?;
            self.tb
                .checkpoint(&thread, None, CheckpointCause::Turn)
                .await?;
        }
        Ok(self.tb.exec(&thread, request).await?)
    }

    async fn read_file(
        &self,
        thread: &str,
        file: &str,
        limit: usize,
    ) -> Result<Option<Vec<u8>>, ToolFailure> {
        let (thread, file) = (thread_id(thread)?, path(file)?);
        let opened = self.tb.peek_open_file(&thread, &file).await?;
        if opened.size > limit as u64 {
            return Ok(None);
        }
        // One byte past the limit tells a file that grew since it was opened.
        let mut contents = Vec::new();
        let read = opened
            .reader
            .take(limit as u64 + 1)
            .read_to_end(&mut contents)
            .await;
        read.map_err(|e| ToolFailure {
            code: "sandbox_error".into(),
            message: format!("reading {file} failed: {e}"),
            status: Some(502),
            retry_after: None,
        })?;
        Ok((contents.len() <= limit).then_some(contents))
    }

    async fn write_file(
        &self,
        thread: &str,
        file: &str,
        contents: Vec<u8>,
    ) -> Result<u64, ToolFailure> {
        let (thread, file) = (thread_id(thread)?, path(file)?);
        let limit = self.tb.upload_limit();
        if contents.len() as u64 > limit {
            return Err(ApiError::new(
                axum::http::StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                format!("a file body may hold at most {limit} bytes"),
            )
            .into());
        }
        self.tb.write_file(&thread, &file, &contents).await?;
        Ok(contents.len() as u64)
    }

    async fn list_dir(&self, thread: &str, dir: &str) -> Result<Vec<FileEntry>, ToolFailure> {
        let (thread, dir) = (thread_id(thread)?, path(dir)?);
        Ok(self.tb.peek_dir(&thread, &dir).await?)
    }

    async fn stat(&self, thread: &str, file: &str) -> Result<FileEntry, ToolFailure> {
        let (thread, file) = (thread_id(thread)?, path(file)?);
        Ok(self.tb.peek_stat(&thread, &file).await?)
    }

    async fn make_dir(&self, thread: &str, dir: &str) -> Result<(), ToolFailure> {
        let (thread, dir) = (thread_id(thread)?, path(dir)?);
        Ok(self.tb.make_dir(&thread, &dir).await?)
    }

    async fn glob(&self, thread: &str, dir: &str, glob: &str) -> Result<Vec<String>, ToolFailure> {
        let (thread, dir) = (thread_id(thread)?, path(dir)?);
        if glob.is_empty() || glob.starts_with('/') || glob.contains('\0') {
            return Err(ApiError::bad_request(
                "invalid_query",
                "glob is a pattern relative to the path, like *.rs or src/**/*.toml",
            )
            .into());
        }
        let pattern = format!("{}/{glob}", dir.trim_end_matches('/'));
        Ok(self.tb.peek_glob(&thread, &pattern).await?)
    }

    async fn grep(
        &self,
        thread: &str,
        under: &str,
        pattern: &str,
    ) -> Result<Vec<GrepMatch>, ToolFailure> {
        let (thread, under) = (thread_id(thread)?, path(under)?);
        if pattern.is_empty() || pattern.contains('\0') {
            return Err(ApiError::bad_request(
                "invalid_query",
                "grep is a regular expression to look for",
            )
            .into());
        }
        Ok(self.tb.peek_grep(&thread, pattern, &under).await?)
    }

    async fn remove(&self, thread: &str, file: &str, recursive: bool) -> Result<(), ToolFailure> {
        let (thread, file) = (thread_id(thread)?, path(file)?);
        Ok(self.tb.remove(&thread, &file, recursive).await?)
    }

    async fn pause(&self, thread: &str) -> Result<Value, ToolFailure> {
        let session = self.tb.pause(&thread_id(thread)?).await?;
        session_view(&session, self.tb.clock.now())
    }

    async fn resume(&self, thread: &str) -> Result<Value, ToolFailure> {
        to_value(&self.tb.resume(&thread_id(thread)?).await?)
    }

    async fn status(&self, thread: &str) -> Result<Value, ToolFailure> {
        let thread = thread_id(thread)?;
        let (session, events) = self
            .tb
            .session_with_recent_events(&thread, RECENT_EVENTS)
            .await?;
        let mut view = json!({
            "session": session_view(&session, self.tb.clock.now())?,
            "events": to_value(&events)?,
        });
        // Best effort, as the API's show: the record is the answer, the provider's view extra.
        if let Ok(sandbox) = self.tb.peek_sandbox(&thread).await {
            view["sandbox"] = to_value(&sandbox)?;
        }
        Ok(view)
    }

    async fn start_process(
        &self,
        thread: &str,
        input: ProcessBody,
    ) -> Result<ProcessInfo, ToolFailure> {
        let thread = thread_id(thread)?;
        // The API's process body, so the command is checked exactly as `POST .../processes` does.
        let request = input.into_request()?;
        Ok(self.tb.start_process(&thread, request).await?)
    }

    async fn list_processes(&self, thread: &str) -> Result<Vec<ProcessInfo>, ToolFailure> {
        Ok(self.tb.list_processes(&thread_id(thread)?).await?)
    }

    async fn read_process_output(
        &self,
        thread: &str,
        process: &str,
        after: u64,
        max: u64,
    ) -> Result<ProcessOutput, ToolFailure> {
        let (thread, process) = (thread_id(thread)?, process_id(process)?);
        if max == 0 || max > MAX_OUTPUT_READ {
            return Err(ApiError::bad_request(
                "invalid_request",
                format!("max must be between 1 and {MAX_OUTPUT_READ}; got {max}"),
            )
            .into());
        }
        Ok(self
            .tb
            .read_process_output(&thread, process, after, max)
            .await?)
    }

    async fn write_process_input(
        &self,
        thread: &str,
        process: &str,
        data: Vec<u8>,
    ) -> Result<(), ToolFailure> {
        let (thread, process) = (thread_id(thread)?, process_id(process)?);
        if data.len() > MAX_INPUT_BYTES {
            return Err(ApiError::bad_request(
                "invalid_request",
                format!(
                    "input may be at most {MAX_INPUT_BYTES} bytes at a time; got {}",
                    data.len()
                ),
            )
            .into());
        }
        Ok(self.tb.write_process_input(&thread, process, &data).await?)
    }

    async fn signal_process(
        &self,
        thread: &str,
        process: &str,
        signal: ProcessSignal,
    ) -> Result<(), ToolFailure> {
        let (thread, process) = (thread_id(thread)?, process_id(process)?);
        Ok(self.tb.signal_process(&thread, process, signal).await?)
    }

    async fn checkpoint(&self, thread: &str, label: Option<String>) -> Result<Value, ToolFailure> {
        let thread = thread_id(thread)?;
        let taken = self
            .tb
            .checkpoint(&thread, label.as_deref(), CheckpointCause::User)
            .await?;
        to_value(&taken)
    }

    async fn list_checkpoints(&self, thread: &str) -> Result<Value, ToolFailure> {
        let thread = thread_id(thread)?;
        let checkpoints = self.tb.list_checkpoints(&thread).await?;
        Ok(json!({ "checkpoints": to_value(&checkpoints)? }))
    }

    async fn restore(&self, thread: &str, checkpoint: &str) -> Result<Value, ToolFailure> {
        let thread = thread_id(thread)?;
        let id = checkpoint_id(checkpoint)?;
        to_value(&self.tb.restore(&thread, &id).await?)
    }

    async fn fork(
        &self,
        thread: &str,
        new_thread: &str,
        checkpoint: Option<String>,
        network: Option<Value>,
    ) -> Result<Value, ToolFailure> {
        let source = thread_id(thread)?;
        let new = ThreadId::parse(new_thread).map_err(|e| {
            ToolFailure::from(ApiError::bad_request(
                "invalid_thread_id",
                format!("thread: {e}"),
            ))
        })?;
        let checkpoint = checkpoint.as_deref().map(checkpoint_id).transpose()?;
        let network = network
            .map(|value| {
                serde_json::from_value::<NetworkProfile>(value).map_err(|e| {
                    ToolFailure::from(ApiError::bad_request(
                        "invalid_network",
                        format!("network: {e}"),
                    ))
                })
            })
            .transpose()?;
        let handle = self
            .tb
            .fork(ForkRequest {
                source,
                thread: new,
                checkpoint,
                network,
            })
            .await?;
        to_value(&handle)
    }
}
