//! `threadbox mcp --thread ID`: one thread's sandbox as an MCP server on stdio, for agent hosts
//! that spawn their tools (Claude, IDEs, the OpenAI Agents SDK). Built on the official Rust SDK
//! (`rmcp`); every tool is a call to threadbox's HTTP API (`--url`, `--api-key`, as for
//! `threads`), so it works the same against `threadbox dev` and a deployed stack.
//!
//! Tools: `run_command` (its output as progress notifications while it runs, when the host asks
//! for progress), `read_file`, `write_file`, `list_dir`, `stat`, `make_dir`, `glob`, `grep`,
//! `remove`, `pause`, `resume` and `status`. The input schemas come from the parameter types; an API error is a tool error
//! (`isError`) naming the API's code, so the model can read it and adapt.

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::Context;
use base64::Engine as _;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, ProgressNotificationParam, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{schemars, tool, tool_handler, tool_router, RoleServer, ServerHandler, ServiceExt};
use serde::Deserialize;
use serde_json::json;
use threadbox_shared::domain::ThreadId;
use threadbox_shared::ports::OutputChunk;

use crate::client::{ApiArgs, Client, ClientError, ExecSpec, ExecUpdate};

/// The most of a file `read_file` returns: a model's context is the limit, not the API's.
const READ_LIMIT: usize = 1024 * 1024;
/// Progress notifications carry at most this much output each.
const PROGRESS_TEXT: usize = 4096;

#[derive(clap::Args, Debug)]
pub struct McpArgs {
    /// The thread whose sandbox the tools act on (created on first use).
    #[arg(long, value_parser = thread_id)]
    thread: String,

    #[command(flatten)]
    api: ApiArgs,
}

fn thread_id(raw: &str) -> Result<String, String> {
    ThreadId::parse(raw)
        .map(|id| id.as_str().to_owned())
        .map_err(|e| e.to_string())
}

pub async fn run(args: McpArgs) -> anyhow::Result<ExitCode> {
    let client = args.api.client()?;
    let server = SandboxTools::new(client, args.thread);
    // stdout is the protocol's; logs go to stderr (main's subscriber writes there).
    let service = server
        .serve(rmcp::transport::stdio())
        .await
        .context("starting the MCP server on stdio")?;
    service.waiting().await.context("serving MCP")?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Clone)]
struct SandboxTools {
    client: Client,
    thread: String,
    tool_router: ToolRouter<Self>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct RunCommand {
    /// A shell command line, run with /bin/sh -c. Give this or `argv`.
    command: Option<String>,
    /// A program and its arguments, run without a shell. Give this or `command`.
    argv: Option<Vec<String>>,
    /// Working directory (absolute); the default is /home/user.
    cwd: Option<String>,
    /// Environment variables for the command.
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// Text passed to the command's standard input.
    stdin: Option<String>,
    /// Kill the command after this many seconds (at most 600; default 60).
    timeout_seconds: Option<u64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct PathArg {
    /// An absolute path in the sandbox, under /home/user or /tmp.
    path: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct WriteFile {
    /// An absolute path in the sandbox, under /home/user or /tmp; parents are created.
    path: String,
    /// The new contents (replaces the file whole).
    content: String,
    /// `content` is base64 (for bytes that are not text).
    #[serde(default)]
    base64: bool,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct Glob {
    /// The folder to search from, an absolute path (for example /home/user).
    path: String,
    /// A pattern relative to `path`: `*.py`, `src/**/*.rs`, `[ab]?.txt`.
    glob: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct Grep {
    /// A file, or a folder searched to any depth, as an absolute path.
    path: String,
    /// A regular expression to look for, line by line.
    pattern: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct Remove {
    /// An absolute path in the sandbox, under /home/user or /tmp.
    path: String,
    /// Remove a directory and everything in it.
    #[serde(default)]
    recursive: bool,
}

/// An API failure as the tool's error result: the model sees the message and the code.
fn tool_error(error: ClientError) -> CallToolResult {
    let body = match &error {
        ClientError::Api {
            status,
            code,
            message,
            retry_after,
        } => json!({
            "error": {"code": code, "message": message, "status": status, "retry_after": retry_after}
        }),
        other => json!({"error": {"code": "unreachable", "message": other.to_string()}}),
    };
    CallToolResult::error(vec![ContentBlock::text(body.to_string())])
}

fn invalid(message: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(
        json!({"error": {"code": "invalid_request", "message": message}}).to_string(),
    )])
}

fn outcome<T: serde::Serialize>(result: Result<T, ClientError>) -> CallToolResult {
    match result {
        Ok(value) => CallToolResult::structured(json!(value)),
        Err(error) => tool_error(error),
    }
}

#[tool_router]
impl SandboxTools {
    fn new(client: Client, thread: String) -> Self {
        Self {
            client,
            thread,
            tool_router: Self::tool_router(),
        }
    }

    #[tool(
        description = "Run a command in the thread's Linux sandbox (created on first use, resumed if paused; files persist between calls). Returns exit_code, stdout, stderr, timed_out and truncated; output also arrives as progress notifications while it runs."
    )]
    async fn run_command(
        &self,
        Parameters(args): Parameters<RunCommand>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let (cmd, argv) = match (args.command, args.argv) {
            (Some(cmd), None) if !cmd.trim().is_empty() => (Some(cmd), None),
            (None, Some(argv)) if !argv.is_empty() => (None, Some(argv)),
            _ => return invalid("give exactly one of command (a shell line) or argv"),
        };
        let spec = ExecSpec {
            cmd,
            argv,
            cwd: args.cwd,
            env: args.env,
            stdin: args.stdin,
            timeout_ms: args.timeout_seconds.map(|s| s.saturating_mul(1000)),
            // A host that cancels the call wants the command stopped.
            kill_on_disconnect: true,
        };
        let mut stream = match self.client.exec_streaming(&self.thread, &spec).await {
            Ok(stream) => stream,
            Err(error) => return tool_error(error),
        };
        let progress = context.meta.get_progress_token();
        let (mut stdout, mut stderr, mut step) = (Vec::new(), Vec::new(), 0u32);
        let result = loop {
            let update = tokio::select! {
                update = stream.next() => update,
                () = context.ct.cancelled() => return invalid("cancelled"),
            };
            match update {
                Ok(ExecUpdate::Output(chunk)) => {
                    let (name, bytes) = match chunk {
                        OutputChunk::Stdout(bytes) => ("stdout", bytes),
                        OutputChunk::Stderr(bytes) => ("stderr", bytes),
                    };
                    if let Some(token) = &progress {
                        step += 1;
                        let text = String::from_utf8_lossy(&bytes);
                        let text: String = text.chars().take(PROGRESS_TEXT).collect();
                        let note = ProgressNotificationParam::new(token.clone(), f64::from(step))
                            .with_message(format!("{name}: {text}"));
                        // A host that stopped listening for progress still gets the result.
                        let _ = context.peer.notify_progress(note).await;
                    }
                    if name == "stdout" {
                        stdout.extend_from_slice(&bytes);
                    } else {
                        stderr.extend_from_slice(&bytes);
                    }
                }
                Ok(ExecUpdate::Exit(result)) => break result,
                Err(error) => return tool_error(error),
            }
        };
        CallToolResult::structured(json!({
            "exit_code": result.exit_code,
            "stdout": String::from_utf8_lossy(&stdout),
            "stderr": String::from_utf8_lossy(&stderr),
            "timed_out": result.timed_out,
            "truncated": result.truncated,
            "out_of_memory": result.out_of_memory,
            "duration_ms": result.duration_ms,
        }))
    }

    #[tool(
        description = "Read a file from the sandbox (at most 1 MiB). Text comes as `text`; other bytes as `base64`."
    )]
    async fn read_file(&self, Parameters(args): Parameters<PathArg>) -> CallToolResult {
        let bytes = match self.client.read_file(&self.thread, &args.path, READ_LIMIT).await {
            Ok(Some(bytes)) => bytes,
            Ok(None) => {
                return invalid(&format!(
                    "{} is more than read_file returns ({READ_LIMIT} bytes); read a part with run_command (head, tail, sed -n)",
                    args.path
                ))
            }
            Err(error) => return tool_error(error),
        };
        CallToolResult::structured(match String::from_utf8(bytes) {
            Ok(text) => json!({"path": args.path, "text": text}),
            Err(not_text) => json!({
                "path": args.path,
                "base64": base64::engine::general_purpose::STANDARD.encode(not_text.as_bytes()),
            }),
        })
    }

    #[tool(
        description = "Write a file in the sandbox, replacing it whole; parent folders are created."
    )]
    async fn write_file(&self, Parameters(args): Parameters<WriteFile>) -> CallToolResult {
        let contents = if args.base64 {
            match base64::engine::general_purpose::STANDARD.decode(&args.content) {
                Ok(bytes) => bytes,
                Err(e) => return invalid(&format!("content is not base64: {e}")),
            }
        } else {
            args.content.into_bytes()
        };
        let written = self
            .client
            .write_file(&self.thread, &args.path, contents)
            .await
            .map(|size| json!({"path": args.path, "size": size}));
        outcome(written)
    }

    #[tool(description = "List a folder in the sandbox: each entry's name, kind, size and mtime.")]
    async fn list_dir(&self, Parameters(args): Parameters<PathArg>) -> CallToolResult {
        let entries = self.client.list_dir(&self.thread, &args.path).await;
        outcome(entries.map(|entries| json!({"path": args.path, "entries": entries})))
    }

    #[tool(description = "Describe a path in the sandbox: kind, size and mtime.")]
    async fn stat(&self, Parameters(args): Parameters<PathArg>) -> CallToolResult {
        outcome(self.client.stat(&self.thread, &args.path).await)
    }

    #[tool(description = "Make a folder in the sandbox, with its missing parents.")]
    async fn make_dir(&self, Parameters(args): Parameters<PathArg>) -> CallToolResult {
        let made = self
            .client
            .make_dir(&self.thread, &args.path)
            .await
            .map(|()| json!({"path": args.path, "kind": "dir"}));
        outcome(made)
    }

    #[tool(description = "Find paths under a folder matching a glob pattern (`**` for any depth).")]
    async fn glob(&self, Parameters(args): Parameters<Glob>) -> CallToolResult {
        let paths = self.client.glob(&self.thread, &args.path, &args.glob).await;
        outcome(paths.map(|paths| json!({"paths": paths})))
    }

    #[tool(
        description = "Find the lines matching a regular expression in a file or under a folder; each match has path, line_number and line."
    )]
    async fn grep(&self, Parameters(args): Parameters<Grep>) -> CallToolResult {
        let matches = self
            .client
            .grep(&self.thread, &args.path, &args.pattern)
            .await;
        outcome(matches.map(|matches| json!({"matches": matches})))
    }

    #[tool(description = "Remove a file, or a folder (with everything in it when recursive).")]
    async fn remove(&self, Parameters(args): Parameters<Remove>) -> CallToolResult {
        let removed = self
            .client
            .remove(&self.thread, &args.path, args.recursive)
            .await
            .map(|()| json!({"removed": args.path}));
        outcome(removed)
    }

    #[tool(
        description = "Pause the sandbox (its memory and files are kept; the next command resumes it)."
    )]
    async fn pause(&self) -> CallToolResult {
        outcome(self.client.pause(&self.thread).await)
    }

    #[tool(description = "Resume the sandbox if it is paused.")]
    async fn resume(&self) -> CallToolResult {
        outcome(self.client.resume(&self.thread).await)
    }

    #[tool(
        description = "The thread's state: its status (active, paused, ...), sandbox, idle time, disk usage and recent lifecycle events."
    )]
    async fn status(&self) -> CallToolResult {
        outcome(self.client.show(&self.thread).await)
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for SandboxTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("threadbox", env!("CARGO_PKG_VERSION")))
            .with_instructions(format!(
                "Tools for one persistent Linux sandbox, the one of threadbox thread {:?}: run \
                 commands and work with its files under /home/user (kept across calls and \
                 pauses) and /tmp. It has no network.",
                self.thread
            ))
    }
}
