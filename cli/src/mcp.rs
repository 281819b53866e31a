//! `threadbox mcp --thread ID`: one thread's sandbox as an MCP server on stdio, for agent hosts
//! that spawn their tools (Claude, IDEs, the OpenAI Agents SDK). Built on the official Rust SDK
//! (`rmcp`); every tool is a call to threadbox's HTTP API (`--url`, `--api-key`, as for
//! `threads`), so it works the same against `threadbox dev` and a deployed stack.
//!
//! The tools themselves are the shared crate's (`threadbox_mcp`), the same the API serves
//! at `POST /v1/threads/{id}/mcp`; here they run over the CLI's HTTP client ([`ClientBackend`]).
//! Tools: `run_command` (its output as progress notifications while it runs, when the host asks
//! for progress), `read_file`, `write_file`, `list_dir`, `stat`, `make_dir`, `glob`, `grep`,
//! `remove`, `pause`, `resume` and `status`; for background processes `start_process`,
//! `list_processes`, `read_process_output`, `write_process_input` and `stop_process`. An API error is a tool error (`isError`) naming the
//! API's code, so the model can read it and adapt.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use async_trait::async_trait;
use rmcp::ServiceExt;
use serde_json::Value;
use threadbox_core::ports::{
    ExecResult, FileEntry, GrepMatch, OutputChunk, ProcessInfo, ProcessOutput, ProcessSignal,
};
use threadbox_mcp::{ExecBody, OutputSink, ProcessBody, SandboxBackend, SandboxTools, ToolFailure};

use crate::client::{ApiArgs, Client, ClientError, ExecUpdate};
use crate::threads::thread_id;

#[derive(clap::Args, Debug)]
pub struct McpArgs {
    /// The thread whose sandbox the tools act on (created on first use).
    #[arg(long, value_parser = thread_id)]
    thread: String,

    #[command(flatten)]
    api: ApiArgs,
}

pub async fn run(args: McpArgs) -> anyhow::Result<ExitCode> {
    let client = args.api.client()?;
    let server = SandboxTools::new(Arc::new(ClientBackend(client)), args.thread, true);
    // stdout is the protocol's; logs go to stderr (main's subscriber writes there).
    let service = server
        .serve(rmcp::transport::stdio())
        .await
        .context("starting the MCP server on stdio")?;
    service.waiting().await.context("serving MCP")?;
    Ok(ExitCode::SUCCESS)
}

/// The tools' backend over threadbox's HTTP API.
struct ClientBackend(Client);

/// An API failure in the tools' terms: the API's code and status, or `unreachable`.
fn failure(error: ClientError) -> ToolFailure {
    match error {
        ClientError::Api {
            status,
            code,
            message,
            retry_after,
        } => ToolFailure {
            code,
            message,
            status: Some(status),
            retry_after,
        },
        other => ToolFailure {
            code: "unreachable".into(),
            message: other.to_string(),
            status: None,
            retry_after: None,
        },
    }
}

fn json<T: serde::Serialize>(value: T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

#[async_trait]
impl SandboxBackend for ClientBackend {
    async fn exec(
        &self,
        thread: &str,
        input: ExecBody,
        output: Option<OutputSink>,
    ) -> Result<ExecResult, ToolFailure> {
        let spec = ExecBody {
            // A host that cancels the call drops this stream and wants the command stopped.
            kill_on_disconnect: true,
            ..input
        };
        let mut stream = self
            .0
            .exec_streaming(thread, &spec)
            .await
            .map_err(failure)?;
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        loop {
            match stream.next().await.map_err(failure)? {
                ExecUpdate::Output(chunk) => {
                    match &chunk {
                        OutputChunk::Stdout(bytes) => stdout.extend_from_slice(bytes),
                        OutputChunk::Stderr(bytes) => stderr.extend_from_slice(bytes),
                    }
                    if let Some(sink) = &output {
                        // Nobody listening any more only means no progress.
                        let _ = sink.send(chunk);
                    }
                }
                ExecUpdate::Exit(result) => {
                    return Ok(ExecResult {
                        stdout: String::from_utf8_lossy(&stdout).into_owned(),
                        stderr: String::from_utf8_lossy(&stderr).into_owned(),
                        ..result
                    })
                }
            }
        }
    }

    async fn read_file(
        &self,
        thread: &str,
        path: &str,
        limit: usize,
    ) -> Result<Option<Vec<u8>>, ToolFailure> {
        self.0.read_file(thread, path, limit).await.map_err(failure)
    }

    async fn write_file(
        &self,
        thread: &str,
        path: &str,
        contents: Vec<u8>,
    ) -> Result<u64, ToolFailure> {
        self.0
            .write_file(thread, path, contents)
            .await
            .map_err(failure)
    }

    async fn list_dir(&self, thread: &str, path: &str) -> Result<Vec<FileEntry>, ToolFailure> {
        self.0.list_dir(thread, path).await.map_err(failure)
    }

    async fn stat(&self, thread: &str, path: &str) -> Result<FileEntry, ToolFailure> {
        self.0.stat(thread, path).await.map_err(failure)
    }

    async fn make_dir(&self, thread: &str, path: &str) -> Result<(), ToolFailure> {
        self.0.make_dir(thread, path).await.map_err(failure)
    }

    async fn glob(&self, thread: &str, path: &str, glob: &str) -> Result<Vec<String>, ToolFailure> {
        self.0.glob(thread, path, glob).await.map_err(failure)
    }

    async fn grep(
        &self,
        thread: &str,
        path: &str,
        pattern: &str,
    ) -> Result<Vec<GrepMatch>, ToolFailure> {
        self.0.grep(thread, path, pattern).await.map_err(failure)
    }

    async fn remove(&self, thread: &str, path: &str, recursive: bool) -> Result<(), ToolFailure> {
        self.0
            .remove(thread, path, recursive)
            .await
            .map_err(failure)
    }

    async fn pause(&self, thread: &str) -> Result<Value, ToolFailure> {
        self.0.pause(thread).await.map(json).map_err(failure)
    }

    async fn resume(&self, thread: &str) -> Result<Value, ToolFailure> {
        self.0.resume(thread).await.map(json).map_err(failure)
    }

    async fn status(&self, thread: &str) -> Result<Value, ToolFailure> {
        self.0.show(thread).await.map(json).map_err(failure)
    }

    async fn start_process(
        &self,
        thread: &str,
        input: ProcessBody,
    ) -> Result<ProcessInfo, ToolFailure> {
        self.0.start_process(thread, &input).await.map_err(failure)
    }

    async fn list_processes(&self, thread: &str) -> Result<Vec<ProcessInfo>, ToolFailure> {
        self.0.list_processes(thread).await.map_err(failure)
    }

    async fn read_process_output(
        &self,
        thread: &str,
        process_id: &str,
        after: u64,
        max: u64,
    ) -> Result<ProcessOutput, ToolFailure> {
        self.0
            .process_output(thread, process_id, after, Some(max))
            .await
            .map_err(failure)
    }

    async fn write_process_input(
        &self,
        thread: &str,
        process_id: &str,
        data: Vec<u8>,
    ) -> Result<(), ToolFailure> {
        self.0
            .write_process_input(thread, process_id, &data)
            .await
            .map_err(failure)
    }

    async fn signal_process(
        &self,
        thread: &str,
        process_id: &str,
        signal: ProcessSignal,
    ) -> Result<(), ToolFailure> {
        self.0
            .signal_process(thread, process_id, signal)
            .await
            .map_err(failure)
    }

    async fn checkpoint(&self, thread: &str, label: Option<String>) -> Result<Value, ToolFailure> {
        self.0
            .take_checkpoint(thread, label.as_deref())
            .await
            .map_err(failure)
    }

    async fn list_checkpoints(&self, thread: &str) -> Result<Value, ToolFailure> {
        self.0.list_checkpoints(thread).await.map_err(failure)
    }

    async fn restore(&self, thread: &str, checkpoint: &str) -> Result<Value, ToolFailure> {
        self.0.restore(thread, checkpoint).await.map_err(failure)
    }

    async fn fork(
        &self,
        thread: &str,
        new_thread: &str,
        checkpoint: Option<String>,
        network: Option<Value>,
    ) -> Result<Value, ToolFailure> {
        self.0
            .fork(thread, new_thread, checkpoint.as_deref(), network)
            .await
            .map_err(failure)
    }
}
