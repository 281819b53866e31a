//! The tools: `run_command`, `read_file`, `write_file`, `list_dir`, `stat`, `make_dir`, `glob`,
//! `grep`, `remove`, `pause`, `resume` and `status`, for background processes
//! `start_process`, `list_processes`, `read_process_output`, `write_process_input` and
//! `stop_process`, and for checkpoints `checkpoint`, `list_checkpoints`, `restore` and `fork`,
//! on any [`SandboxBackend`].
//!
//! The input schemas come from the parameter types (unknown fields refused). Arguments that do not
//! fit the schema are a tool error (`isError`, code `invalid_request`) rather than a protocol
//! error, so the model sees what was wrong; so is every failure of the backend, with the API's
//! error code.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, ProgressNotificationParam, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{schemars, tool, tool_handler, tool_router, RoleServer, ServerHandler};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::{ExecBody, ProcessBody, SandboxBackend, ToolFailure};
use threadbox_api::wire::CommandSpec;
use threadbox_core::ports::{
    OutputChunk, ProcessSignal, ProcessState, SandboxUser, MAX_OUTPUT_READ,
};

/// The most of a file `read_file` returns: a model's context is the limit, not the API's.
pub const READ_LIMIT: usize = 1024 * 1024;
/// Progress notifications carry at most this much output each.
const PROGRESS_TEXT: usize = 4096;
/// The most of a process's output `read_process_output` returns unless asked for more (up to the
/// API's most, [`MAX_OUTPUT_READ`]).
pub const DEFAULT_OUTPUT_READ: u64 = 64 * 1024;
/// How long `stop_process` waits for a process to end after a signal that ends processes.
const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
/// How often it looks meanwhile.
const STOP_POLL: std::time::Duration = std::time::Duration::from_millis(250);

/// One thread's sandbox as MCP tools over `B`.
pub struct SandboxTools<B: SandboxBackend> {
    backend: Arc<B>,
    thread: String,
    /// Send a command's output as progress notifications while it runs (when the host asks for
    /// progress). Off over stateless HTTP, where the answer is one JSON body.
    progress: bool,
    tool_router: ToolRouter<Self>,
}

impl<B: SandboxBackend> Clone for SandboxTools<B> {
    fn clone(&self) -> Self {
        Self {
            backend: self.backend.clone(),
            thread: self.thread.clone(),
            progress: self.progress,
            tool_router: self.tool_router.clone(),
        }
    }
}

/// Tool arguments as `T`, or why they are not: deserializing never fails, so a bad argument
/// becomes the tool's error result instead of a JSON-RPC error. Its schema is `T`'s.
pub struct Checked<T>(Result<T, String>);

impl<'de, T: DeserializeOwned> Deserialize<'de> for Checked<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Ok(Checked(
            serde_json::from_value(value).map_err(|e| format!("invalid arguments: {e}")),
        ))
    }
}

impl<T: schemars::JsonSchema> schemars::JsonSchema for Checked<T> {
    fn schema_name() -> Cow<'static, str> {
        T::schema_name()
    }

    fn schema_id() -> Cow<'static, str> {
        T::schema_id()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        T::json_schema(generator)
    }

    fn inline_schema() -> bool {
        T::inline_schema()
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCommand {
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
    /// Run it as the sandbox's root (to install packages, say) rather than its user.
    #[serde(default)]
    as_root: bool,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TakeCheckpoint {
    /// A few words saying what the checkpoint is before (at most 200 characters).
    label: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RestoreCheckpoint {
    /// The checkpoint's id (`cp-...`), from `checkpoint` or `list_checkpoints`.
    checkpoint: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Fork {
    /// The new thread's id (letters, digits, `-`, `_`, `.`, `:`); it must not exist yet.
    thread: String,
    /// Start from this checkpoint (`cp-...`) instead of the home as it is now.
    checkpoint: Option<String>,
    /// The new thread's network profile (`"restricted"`, `"networked"` or
    /// `{"networked": {"allow": [...]}}`); the default is this thread's.
    network: Option<Value>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PathArg {
    /// An absolute path in the sandbox, under /home/user or /tmp.
    path: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFile {
    /// An absolute path in the sandbox, under /home/user or /tmp; parents are created.
    path: String,
    /// The new contents (replaces the file whole).
    content: String,
    /// `content` is base64 (for bytes that are not text).
    #[serde(default)]
    base64: bool,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Glob {
    /// The folder to search from, an absolute path (for example /home/user).
    path: String,
    /// A pattern relative to `path`: `*.py`, `src/**/*.rs`, `[ab]?.txt`.
    glob: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Grep {
    /// A file, or a folder searched to any depth, as an absolute path.
    path: String,
    /// A regular expression to look for, line by line.
    pattern: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Remove {
    /// An absolute path in the sandbox, under /home/user or /tmp.
    path: String,
    /// Remove a directory and everything in it.
    #[serde(default)]
    recursive: bool,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartProcess {
    /// A shell command line, run with /bin/sh -c. Give this or `argv`.
    command: Option<String>,
    /// A program and its arguments, run without a shell. Give this or `command`.
    argv: Option<Vec<String>>,
    /// Working directory (absolute); the default is /home/user.
    cwd: Option<String>,
    /// Environment variables for the process.
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// How long the process keeps the sandbox awake with no output, no input and no reads of
    /// its output (default 600 seconds, at least 1, at most 86400); after that the sandbox may
    /// be paused, which freezes the process until the sandbox is next used.
    idle_timeout_seconds: Option<u64>,
    /// Run it as the sandbox's root rather than its user.
    #[serde(default)]
    as_root: bool,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadProcessOutput {
    /// The process's id, as start_process or list_processes give it.
    process_id: String,
    /// The offset to read from: 0 for the start of the output, or the `next` of the previous read.
    #[serde(default)]
    after: u64,
    /// The most bytes to return (default 65536, at most 1048576).
    max: Option<u64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteProcessInput {
    /// The process's id, as start_process or list_processes give it.
    process_id: String,
    /// Text written to the process's standard input as it is (end a line with \n).
    text: String,
}

/// A signal `stop_process` sends: the API's own, by its name; TERM unless given.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(transparent)]
pub struct Signal(ProcessSignal);

impl Default for Signal {
    fn default() -> Self {
        Signal(ProcessSignal::Term)
    }
}

impl Signal {
    /// Whether a process is expected to end on it (so `stop_process` waits to see it end).
    fn ends(self) -> bool {
        !matches!(self.0, ProcessSignal::Stop | ProcessSignal::Cont)
    }
}

/// The signals' names, from the API's list (the core has no schemas of its own).
impl schemars::JsonSchema for Signal {
    fn schema_name() -> Cow<'static, str> {
        "Signal".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let names: Vec<&str> = ProcessSignal::ALL.iter().map(|s| s.name()).collect();
        schemars::json_schema!({
            "description": "A signal `stop_process` sends.",
            "type": "string",
            "enum": names,
        })
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StopProcess {
    /// The process's id, as start_process or list_processes give it.
    process_id: String,
    /// The signal to send to the process and its children: TERM (the default) asks it to end,
    /// KILL forces it, INT is Ctrl-C, HUP a hang-up; STOP and CONT pause and continue it.
    #[serde(default)]
    signal: Signal,
}

/// Output bytes for the model: `text` when they are UTF-8, `base64` when not; and how many of
/// them that covers. A character cut by the end of the read is left for the next one, so text
/// read piece by piece stays text.
fn output_field(data: &[u8]) -> (&'static str, String, usize) {
    match std::str::from_utf8(data) {
        Ok(text) => ("text", text.to_owned(), data.len()),
        Err(cut) if cut.error_len().is_none() && cut.valid_up_to() > 0 => {
            let whole = &data[..cut.valid_up_to()];
            let text = String::from_utf8_lossy(whole).into_owned();
            ("text", text, whole.len())
        }
        Err(_) => (
            "base64",
            base64::engine::general_purpose::STANDARD.encode(data),
            data.len(),
        ),
    }
}

/// The command of `run_command` or `start_process` as the API's bodies take it: exactly one of
/// a shell line (`command`, not blank) or `argv` (not empty).
fn command(
    command: Option<String>,
    argv: Option<Vec<String>>,
    cwd: Option<String>,
    env: BTreeMap<String, String>,
) -> Result<CommandSpec, String> {
    let (cmd, argv) = match (command, argv) {
        (Some(cmd), None) if !cmd.trim().is_empty() => (Some(cmd), None),
        (None, Some(argv)) if !argv.is_empty() => (None, Some(argv)),
        _ => return Err("give exactly one of command (a shell line) or argv".into()),
    };
    Ok(CommandSpec {
        cmd,
        argv,
        cwd,
        env,
    })
}

/// Seconds as the bodies' milliseconds.
fn millis(seconds: Option<u64>) -> Option<u64> {
    seconds.map(|s| s.saturating_mul(1000))
}

/// A failure as the tool's error result: the model sees the message and the code.
fn tool_error(failure: ToolFailure) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(failure.to_json().to_string())])
}

fn invalid(message: &str) -> CallToolResult {
    tool_error(ToolFailure::invalid(message))
}

fn outcome<T: serde::Serialize>(result: Result<T, ToolFailure>) -> CallToolResult {
    match result {
        Ok(value) => CallToolResult::structured(json!(value)),
        Err(failure) => tool_error(failure),
    }
}

/// The arguments, or the tool error that says what is wrong with them.
macro_rules! checked {
    ($args:expr) => {
        match $args {
            Ok(args) => args,
            Err(why) => return invalid(&why),
        }
    };
}

/// The next chunk of output, or never once there is none to wait for.
async fn next_chunk(output: &mut Option<mpsc::UnboundedReceiver<OutputChunk>>) -> OutputChunk {
    if let Some(receiver) = output {
        if let Some(chunk) = receiver.recv().await {
            return chunk;
        }
    }
    std::future::pending().await
}

#[tool_router]
impl<B: SandboxBackend> SandboxTools<B> {
    /// The tools for `thread`'s sandbox; `progress` sends `run_command`'s output as progress
    /// notifications (stdio), off where the transport answers in one piece (stateless HTTP).
    pub fn new(backend: Arc<B>, thread: String, progress: bool) -> Self {
        Self {
            backend,
            thread,
            progress,
            tool_router: Self::tool_router(),
        }
    }

    #[tool(
        description = "Run a command in the thread's Linux sandbox (created on first use, resumed if paused; files persist between calls). Returns exit_code, stdout, stderr, timed_out and truncated. Over stdio the output also arrives as progress notifications while it runs; over the API's HTTP endpoint (stateless) there are none, the output comes with the result."
    )]
    async fn run_command(
        &self,
        Parameters(Checked(args)): Parameters<Checked<RunCommand>>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let args = checked!(args);
        let spec = checked!(command(args.command, args.argv, args.cwd, args.env));
        let input = ExecBody {
            stdin: args.stdin,
            timeout_ms: millis(args.timeout_seconds),
            user: args.as_root.then_some(SandboxUser::Root),
            ..ExecBody::running(spec)
        };
        let token = context.meta.get_progress_token().filter(|_| self.progress);
        let (sink, mut output) = match token {
            Some(_) => {
                let (sink, output) = mpsc::unbounded_channel();
                (Some(sink), Some(output))
            }
            None => (None, None),
        };
        let mut step = 0u32;
        let mut notify = |chunk: OutputChunk| {
            let (name, bytes) = match chunk {
                OutputChunk::Stdout(bytes) => ("stdout", bytes),
                OutputChunk::Stderr(bytes) => ("stderr", bytes),
            };
            step += 1;
            let text = String::from_utf8_lossy(&bytes);
            let text: String = text.chars().take(PROGRESS_TEXT).collect();
            token.clone().map(|token| {
                ProgressNotificationParam::new(token, f64::from(step))
                    .with_message(format!("{name}: {text}"))
            })
        };
        let exec = self.backend.exec(&self.thread, input, sink);
        tokio::pin!(exec);
        let result = loop {
            tokio::select! {
                result = &mut exec => break result,
                chunk = next_chunk(&mut output) => {
                    if let Some(note) = notify(chunk) {
                        // A host that stopped listening for progress still gets the result.
                        let _ = context.peer.notify_progress(note).await;
                    }
                }
                // A host that cancels the call wants the command stopped: dropping the call
                // stops it (the HTTP client's stream asks the API to kill it).
                () = context.ct.cancelled() => return invalid("cancelled"),
            }
        };
        // Output sent before the end and not yet passed on.
        if let Some(receiver) = output.as_mut() {
            while let Ok(chunk) = receiver.try_recv() {
                if let Some(note) = notify(chunk) {
                    let _ = context.peer.notify_progress(note).await;
                }
            }
        }
        match result {
            Ok(result) => CallToolResult::structured(json!({
                "exit_code": result.exit_code,
                "stdout": result.stdout,
                "stderr": result.stderr,
                "timed_out": result.timed_out,
                "truncated": result.truncated,
                "out_of_memory": result.out_of_memory,
                "duration_ms": result.duration_ms,
            })),
            Err(failure) => tool_error(failure),
        }
    }

    #[tool(
        description = "Read a file from the sandbox (at most 1 MiB). Text comes as `text`; other bytes as `base64`. A path that does not exist is an error with code `file_not_found`."
    )]
    async fn read_file(
        &self,
        Parameters(Checked(args)): Parameters<Checked<PathArg>>,
    ) -> CallToolResult {
        let args = checked!(args);
        let read = self
            .backend
            .read_file(&self.thread, &args.path, READ_LIMIT)
            .await;
        let bytes = match read {
            Ok(Some(bytes)) => bytes,
            Ok(None) => {
                return invalid(&format!(
                    "{} is more than read_file returns ({READ_LIMIT} bytes); read a part with run_command (head, tail, sed -n)",
                    args.path
                ))
            }
            Err(failure) => return tool_error(failure),
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
    async fn write_file(
        &self,
        Parameters(Checked(args)): Parameters<Checked<WriteFile>>,
    ) -> CallToolResult {
        let args = checked!(args);
        let contents = if args.base64 {
            match base64::engine::general_purpose::STANDARD.decode(&args.content) {
                Ok(bytes) => bytes,
                Err(e) => return invalid(&format!("content is not base64: {e}")),
            }
        } else {
            args.content.into_bytes()
        };
        let written = self
            .backend
            .write_file(&self.thread, &args.path, contents)
            .await
            .map(|size| json!({"path": args.path, "size": size}));
        outcome(written)
    }

    #[tool(description = "List a folder in the sandbox: each entry's name, kind, size and mtime.")]
    async fn list_dir(
        &self,
        Parameters(Checked(args)): Parameters<Checked<PathArg>>,
    ) -> CallToolResult {
        let args = checked!(args);
        let entries = self.backend.list_dir(&self.thread, &args.path).await;
        outcome(entries.map(|entries| json!({"path": args.path, "entries": entries})))
    }

    #[tool(description = "Describe a path in the sandbox: kind, size and mtime.")]
    async fn stat(
        &self,
        Parameters(Checked(args)): Parameters<Checked<PathArg>>,
    ) -> CallToolResult {
        let args = checked!(args);
        outcome(self.backend.stat(&self.thread, &args.path).await)
    }

    #[tool(description = "Make a folder in the sandbox, with its missing parents.")]
    async fn make_dir(
        &self,
        Parameters(Checked(args)): Parameters<Checked<PathArg>>,
    ) -> CallToolResult {
        let args = checked!(args);
        let made = self
            .backend
            .make_dir(&self.thread, &args.path)
            .await
            .map(|()| json!({"path": args.path, "kind": "dir"}));
        outcome(made)
    }

    #[tool(description = "Find paths under a folder matching a glob pattern (`**` for any depth).")]
    async fn glob(&self, Parameters(Checked(args)): Parameters<Checked<Glob>>) -> CallToolResult {
        let args = checked!(args);
        let paths = self
            .backend
            .glob(&self.thread, &args.path, &args.glob)
            .await;
        outcome(paths.map(|paths| json!({"paths": paths})))
    }

    #[tool(
        description = "Find the lines matching a regular expression in a file or under a folder; each match has path, line_number and line."
    )]
    async fn grep(&self, Parameters(Checked(args)): Parameters<Checked<Grep>>) -> CallToolResult {
        let args = checked!(args);
        let matches = self
            .backend
            .grep(&self.thread, &args.path, &args.pattern)
            .await;
        outcome(matches.map(|matches| json!({"matches": matches})))
    }

    #[tool(description = "Remove a file, or a folder (with everything in it when recursive).")]
    async fn remove(
        &self,
        Parameters(Checked(args)): Parameters<Checked<Remove>>,
    ) -> CallToolResult {
        let args = checked!(args);
        let removed = self
            .backend
            .remove(&self.thread, &args.path, args.recursive)
            .await
            .map(|()| json!({"removed": args.path}));
        outcome(removed)
    }

    #[tool(
        description = "Pause the sandbox (its memory and files are kept; the next command resumes it)."
    )]
    async fn pause(&self) -> CallToolResult {
        outcome(self.backend.pause(&self.thread).await)
    }

    #[tool(description = "Resume the sandbox if it is paused.")]
    async fn resume(&self) -> CallToolResult {
        outcome(self.backend.resume(&self.thread).await)
    }

    #[tool(
        description = "Start a command in the background in the sandbox (a dev server, a watcher, a long build or test run) and return at once with its `id`; it keeps running between calls (and through pauses). Read its output (stdout and stderr merged; the last 1 MiB is kept) with read_process_output, write to its input with write_process_input, end it with stop_process."
    )]
    async fn start_process(
        &self,
        Parameters(Checked(args)): Parameters<Checked<StartProcess>>,
    ) -> CallToolResult {
        let args = checked!(args);
        let spec = checked!(command(args.command, args.argv, args.cwd, args.env));
        let input = ProcessBody {
            idle_timeout_ms: millis(args.idle_timeout_seconds),
            user: args.as_root.then_some(SandboxUser::Root),
            ..ProcessBody::running(spec)
        };
        outcome(self.backend.start_process(&self.thread, input).await)
    }

    #[tool(
        description = "The sandbox's background processes, running and ended: each one's id, command, state (running, exited, or lost when its supervisor died), exit_code (128+n when signal n ended it) and output_bytes."
    )]
    async fn list_processes(&self) -> CallToolResult {
        let listed = self.backend.list_processes(&self.thread).await;
        outcome(listed.map(|processes| json!({ "processes": processes })))
    }

    #[tool(
        description = "Read a background process's output (stdout and stderr merged) from offset `after` (0: from the start). Returns `text` (or `base64` for bytes that are not text), `next` (pass it as `after` to read on), `more` (output past what was returned), and the process's `state` and `exit_code`. Output older than the last 1 MiB is dropped; `missed` says how many bytes were."
    )]
    async fn read_process_output(
        &self,
        Parameters(Checked(args)): Parameters<Checked<ReadProcessOutput>>,
    ) -> CallToolResult {
        let args = checked!(args);
        let max = args.max.unwrap_or(DEFAULT_OUTPUT_READ);
        if max == 0 || max > MAX_OUTPUT_READ {
            return invalid(&format!(
                "max must be between 1 and {MAX_OUTPUT_READ}; got {max}"
            ));
        }
        let read = self
            .backend
            .read_process_output(&self.thread, &args.process_id, args.after, max)
            .await;
        let read = match read {
            Ok(read) => read,
            Err(failure) => return tool_error(failure),
        };
        let (field, data, covered) = output_field(&read.data);
        let next = read.offset + covered as u64;
        let mut answer = json!({
            "process_id": read.info.id,
            "offset": read.offset,
            "next": next,
            "more": next < read.info.output_bytes,
            "state": read.info.state,
            "exit_code": read.info.exit_code,
        });
        answer[field] = json!(data);
        if read.offset > args.after {
            answer["missed"] = json!(read.offset - args.after);
        }
        CallToolResult::structured(answer)
    }

    #[tool(
        description = "Write text to a background process's standard input (end a line with \\n, as Enter would)."
    )]
    async fn write_process_input(
        &self,
        Parameters(Checked(args)): Parameters<Checked<WriteProcessInput>>,
    ) -> CallToolResult {
        let args = checked!(args);
        let size = args.text.len();
        let written = self
            .backend
            .write_process_input(&self.thread, &args.process_id, args.text.into_bytes())
            .await
            .map(|()| json!({"process_id": args.process_id, "written": size}));
        outcome(written)
    }

    #[tool(
        description = "Stop a background process: send it and its children a signal (TERM by default; KILL forces it). Waits up to 5 s for it to end and returns its `state` and `exit_code` (143 after TERM, 137 after KILL); a process still running may need KILL."
    )]
    async fn stop_process(
        &self,
        Parameters(Checked(args)): Parameters<Checked<StopProcess>>,
    ) -> CallToolResult {
        let args = checked!(args);
        let sent = self
            .backend
            .signal_process(&self.thread, &args.process_id, args.signal.0)
            .await;
        if let Err(failure) = sent {
            return tool_error(failure);
        }
        let mut answer = json!({
            "process_id": args.process_id,
            "signal": args.signal.0,
        });
        // The signal went; how the process stands after it is extra, best effort.
        let deadline = tokio::time::Instant::now() + STOP_WAIT;
        loop {
            let Ok(all) = self.backend.list_processes(&self.thread).await else {
                break;
            };
            let Some(info) = all.into_iter().find(|p| p.id == args.process_id) else {
                break;
            };
            answer["state"] = json!(info.state);
            answer["exit_code"] = json!(info.exit_code);
            let waiting = args.signal.ends() && info.state == ProcessState::Running;
            if !waiting || tokio::time::Instant::now() + STOP_POLL > deadline {
                break;
            }
            tokio::time::sleep(STOP_POLL).await;
        }
        CallToolResult::structured(answer)
    }

    #[tool(
        description = "Take a checkpoint of the sandbox's /home/user: a copy of every file as it is now, to put back later with restore (before a risky change, say). Returns its id, bytes and files. The thread keeps its newest checkpoints within the server's limits, the oldest dropped first."
    )]
    async fn checkpoint(
        &self,
        Parameters(Checked(args)): Parameters<Checked<TakeCheckpoint>>,
    ) -> CallToolResult {
        let args = checked!(args);
        outcome(self.backend.checkpoint(&self.thread, args.label).await)
    }

    #[tool(
        description = "The thread's checkpoints, newest first: each one's id, created_at (epoch ms), bytes, files, label and cause (user, or turn: taken before a command ran)."
    )]
    async fn list_checkpoints(&self) -> CallToolResult {
        outcome(self.backend.list_checkpoints(&self.thread).await)
    }

    #[tool(
        description = "Put /home/user back as a checkpoint holds it, in place: files made since are gone, changed ones are as they were. Every running process in the sandbox is stopped first; the answer names them."
    )]
    async fn restore(
        &self,
        Parameters(Checked(args)): Parameters<Checked<RestoreCheckpoint>>,
    ) -> CallToolResult {
        let args = checked!(args);
        outcome(self.backend.restore(&self.thread, &args.checkpoint).await)
    }

    #[tool(
        description = "Fork this thread into a new one (`thread`, which must not exist): a new sandbox, another machine, whose /home/user is a copy of this one's as it is now (or at `checkpoint`). This sandbox keeps running. Use it to try two approaches side by side."
    )]
    async fn fork(&self, Parameters(Checked(args)): Parameters<Checked<Fork>>) -> CallToolResult {
        let args = checked!(args);
        outcome(
            self.backend
                .fork(&self.thread, &args.thread, args.checkpoint, args.network)
                .await,
        )
    }

    #[tool(
        description = "The thread's state: its status (active, paused, ...), sandbox, idle time, disk usage and recent lifecycle events."
    )]
    async fn status(&self) -> CallToolResult {
        outcome(self.backend.status(&self.thread).await)
    }
}

#[tool_handler(router = self.tool_router)]
impl<B: SandboxBackend> ServerHandler for SandboxTools<B> {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("threadbox", env!("CARGO_PKG_VERSION")))
            .with_instructions(format!(
                "Tools for one persistent Linux sandbox, the one of threadbox thread {:?}: run \
                 commands (to their end with run_command, or in the background with \
                 start_process) and work with its files under /home/user (kept across calls and \
                 pauses) and /tmp. It has no network.",
                self.thread
            ))
    }
}

#[cfg(test)]
mod tests {
    use super::output_field;

    #[test]
    fn output_is_text_with_a_cut_character_left_for_the_next_read() {
        assert_eq!(output_field(b"ready\n"), ("text", "ready\n".into(), 6));
        // "é" is two bytes; a read that ends between them stops before it.
        let cut = [b'a', 0xc3];
        assert_eq!(output_field(&cut), ("text", "a".into(), 1));
        // Alone, or bytes that are not UTF-8 at all, they come as base64.
        assert_eq!(output_field(&[0xc3]), ("base64", "ww==".into(), 1));
        assert_eq!(output_field(&[0xff, b'a']), ("base64", "/2E=".into(), 2));
        assert_eq!(output_field(b""), ("text", String::new(), 0));
    }
}
