//! The sandbox provider port: E2B in production, runc locally.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use crate::domain::SandboxUser;
use crate::domain::{CheckpointId, ImageInfo, ImageName, Millis, ThreadId};

pub mod exec_files;
/// The network types are pure data with their validation, so they live in the domain (a
/// session record keeps its thread's profile); the port re-exports them for providers.
pub use crate::domain::network::{
    always_refused_v4, is_always_refused, AllowEntry, Allowlist, AllowlistError, IpNet,
    NetworkProfile, MAX_ALLOW_ENTRIES,
};
pub mod processes;
mod refusals;

pub use processes::{
    check_output_offset, new_process_id, valid_process_id, OutputStream, ProcessChunk, ProcessInfo,
    ProcessOutput, ProcessSignal, ProcessSink, ProcessState, PtySize, StartProcess,
    DEFAULT_OUTPUT_CHUNKS, MAX_INPUT_BYTES, MAX_LISTED_PROCESSES, MAX_OUTPUT_CHUNKS,
    MAX_OUTPUT_OFFSET, MAX_OUTPUT_READ, MAX_PROCESSES, OUTPUT_CHUNK_BYTES,
};
pub use refusals::{
    clean_destination, NetworkRefusals, RefusalReason, RefusedBy, RefusedDestination,
    MAX_DESTINATION_CHARS, MAX_RECENT_REFUSALS,
};

/// Metadata keys every provider stores with a sandbox, so reconciliation can find its owner.
pub const META_THREAD_ID: &str = "threadbox.thread_id";
pub const META_GENERATION: &str = "threadbox.generation";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// The provider does not have this sandbox (any more).
    #[error("sandbox {0} is gone")]
    Gone(String),
    /// The sandbox is in a state that forbids this now (being killed, running a command).
    #[error("sandbox conflict: {0}")]
    Conflict(String),
    #[error("provider rate limit hit{}", retry_after.map(|d| format!("; retry after {} ms", d.as_millis())).unwrap_or_default())]
    RateLimited { retry_after: Option<Duration> },
    #[error("provider refused our credentials: {0}")]
    Unauthorized(String),
    /// A transient failure (5xx, timeout, connection refused): retrying may help.
    #[error("provider unavailable: {0}")]
    Unavailable(String),
    /// The request itself is wrong (bad path, file too large, unknown profile); retrying will not help.
    #[error("{0}")]
    InvalidRequest(String),
    /// A path the request names does not exist in the sandbox (the sandbox itself does: a
    /// sandbox the provider lost is `Gone`). The message names the path.
    #[error("{0}")]
    NotFound(String),
    /// The sandbox's disk (its home's quota, or its `/tmp`) has no room for what the request
    /// writes: retrying will not help until something there is removed.
    #[error("{0}")]
    NoSpace(String),
    /// The provider cannot do this at all here (for example a network profile it does not offer).
    #[error("not supported: {0}")]
    Unsupported(String),
    #[error("provider failure: {0}")]
    Internal(String),
    /// One of threadbox's own capacity limits is reached (commands running in the sandbox or on
    /// the host, sandboxes on the host). Retrying after `retry_after` may succeed.
    #[error("{message}")]
    LimitReached {
        limit: Limit,
        message: String,
        retry_after: Duration,
    },
}

/// Which capacity limit a request met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// Commands running at once in one sandbox (one thread).
    CommandsInSandbox,
    /// Commands running at once across the host.
    Commands,
    /// Sandboxes alive (running or paused) on the host.
    Sandboxes,
    /// Process ids in one sandbox: its pid limit is reached, so nothing new can start in it
    /// (a command, or the small scripts some process operations run) until some of its
    /// processes end.
    ProcessesInSandbox,
}

impl Limit {
    /// The error code the API and the Slack replies name it by.
    pub fn code(self) -> &'static str {
        match self {
            Limit::CommandsInSandbox => "too_many_commands_in_thread",
            Limit::Commands => "too_many_commands",
            Limit::Sandboxes => "too_many_sandboxes",
            Limit::ProcessesInSandbox => "too_many_processes_in_thread",
        }
    }

    /// The caller's own share (its thread) rather than the whole host's.
    pub fn is_per_thread(self) -> bool {
        matches!(self, Limit::CommandsInSandbox | Limit::ProcessesInSandbox)
    }
}

/// Whether text a shell or runtime printed says a fork failed for want of process ids: bash's
/// `fork: retry: Resource temporarily unavailable`, dash's `Cannot fork`, runc's `resource
/// temporarily unavailable` (EAGAIN from `clone` or the pids controller).
pub fn is_fork_failure(text: &str) -> bool {
    let text = text.to_ascii_lowercase();
    text.contains("cannot fork")
        || text.contains("fork: ")
        || text.contains("resource temporarily unavailable")
}

/// The error of a sandbox at its process limit (`pids`, when the provider knows it): the
/// caller's own thread is full, so 429, with what to do about it.
pub fn process_limit_reached(pids: Option<u32>) -> ProviderError {
    let limit = pids.map_or_else(|| "its limit".to_owned(), |n| format!("its limit of {n}"));
    ProviderError::LimitReached {
        limit: Limit::ProcessesInSandbox,
        message: format!(
            "the sandbox has no process ids left ({limit} is reached), so nothing new can start \
             in it: stop some of its processes (a background process can be signalled) and try \
             again"
        ),
        retry_after: Duration::from_secs(2),
    }
}

impl ProviderError {
    pub fn is_gone(&self) -> bool {
        matches!(self, ProviderError::Gone(_))
    }
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ProviderError::RateLimited { .. }
                | ProviderError::Unavailable(_)
                | ProviderError::LimitReached { .. }
        )
    }
}

/// Who a sandbox belongs to; stored as provider metadata under `META_*` keys.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxOwner {
    pub thread_id: ThreadId,
    pub generation: u64,
}

impl SandboxOwner {
    pub fn to_metadata(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (META_THREAD_ID.to_owned(), self.thread_id.to_string()),
            (META_GENERATION.to_owned(), self.generation.to_string()),
        ])
    }

    /// Read an owner back from provider metadata; `None` for sandboxes threadbox did not tag. A
    /// warm pool member's owner is its tag ([`ThreadId::pool_member`]), generation 0.
    pub fn from_metadata(meta: &BTreeMap<String, String>) -> Option<Self> {
        Some(Self {
            thread_id: ThreadId::from_tag(meta.get(META_THREAD_ID)?).ok()?,
            generation: meta.get(META_GENERATION)?.parse().ok()?,
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateSandbox {
    pub owner: SandboxOwner,
    pub network: NetworkProfile,
    /// What the sandbox starts from: a name the provider lists in [`SandboxProvider::images`].
    pub image: ImageName,
    /// How long the sandbox may live without a keep-alive before the provider stops it.
    pub timeout: Duration,
    pub env: BTreeMap<String, String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreatedSandbox {
    pub sandbox_id: String,
    /// A provider-side session reference (E2B's access token id, for example), if any.
    pub provider_session_id: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxState {
    Running,
    Paused,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxInfo {
    pub sandbox_id: String,
    pub state: SandboxState,
    pub metadata: BTreeMap<String, String>,
    pub started_at: Option<Millis>,
    /// When the provider will stop the sandbox unless its timeout is extended.
    pub deadline: Option<Millis>,
    /// What its home holds against its quota, where the provider has one to show.
    pub disk: Option<DiskUsage>,
}

/// A sandbox's disk as it stands: what it holds against its limits (bytes, and files).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskUsage {
    pub used_bytes: u64,
    pub limit_bytes: u64,
    pub used_inodes: u64,
    pub limit_inodes: u64,
}

impl SandboxInfo {
    pub fn owner(&self) -> Option<SandboxOwner> {
        SandboxOwner::from_metadata(&self.metadata)
    }
}

/// What connect-or-resume did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Connected {
    /// True when the sandbox was paused and has been resumed.
    pub resumed: bool,
    /// A new provider session reference when resuming issues one.
    pub provider_session_id: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecCommand {
    /// Run through `/bin/sh -c`.
    Shell(String),
    /// Run directly, no shell.
    Argv(Vec<String>),
}

pub const DEFAULT_EXEC_TIMEOUT: Duration = Duration::from_secs(60);
pub const DEFAULT_OUTPUT_CAP: usize = 64 * 1024;
pub const DEFAULT_FILE_CAP: u64 = 100 * 1024 * 1024;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecRequest {
    pub command: ExecCommand,
    pub cwd: Option<String>,
    pub env: BTreeMap<String, String>,
    pub stdin: Option<Vec<u8>>,
    /// The whole process tree is killed when this runs out.
    pub timeout: Duration,
    /// Bytes kept per stream; the rest is dropped and the result says so.
    pub output_cap: usize,
    /// Who runs it inside the sandbox: its user (the default) or its root.
    pub user: SandboxUser,
}

/// The longest single argument or `NAME=value` environment string a command may get: the
/// kernel's `MAX_ARG_STRLEN` (128 KiB, its terminating NUL included). Past it `execve` fails
/// with E2BIG, which without this check surfaced as a provider failure (502), not a bad request.
pub const MAX_ARG_BYTES: usize = 128 * 1024 - 1;
/// The most bytes of arguments and environment together: well under the kernel's `ARG_MAX`
/// (2 MiB with the default stack limit), leaving room for what the provider itself passes.
pub const MAX_ARGS_TOTAL_BYTES: usize = 1024 * 1024;

impl ExecRequest {
    /// Whether the command line and environment fit what the kernel passes to a program, with
    /// the limit named when they do not.
    pub fn check_sizes(&self) -> Result<(), String> {
        let words: Vec<&str> = match &self.command {
            ExecCommand::Shell(cmd) => vec![cmd.as_str()],
            ExecCommand::Argv(argv) => argv.iter().map(String::as_str).collect(),
        };
        let env = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), k.len() + 1 + v.len()));
        let mut total = 0;
        for (i, word) in words.iter().enumerate() {
            if word.len() > MAX_ARG_BYTES {
                return Err(format!(
                    "argument {} is {} bytes; one argument may be at most {MAX_ARG_BYTES} bytes \
                     (pass large input as stdin or a file instead)",
                    i + 1,
                    word.len()
                ));
            }
            total += word.len() + 1;
        }
        for (name, len) in env {
            if len > MAX_ARG_BYTES {
                return Err(format!(
                    "environment variable {name} is {len} bytes as NAME=value; one may be at \
                     most {MAX_ARG_BYTES} bytes"
                ));
            }
            total += len + 1;
        }
        if total > MAX_ARGS_TOTAL_BYTES {
            return Err(format!(
                "the arguments and environment are {total} bytes together; the limit is \
                 {MAX_ARGS_TOTAL_BYTES} bytes"
            ));
        }
        Ok(())
    }

    pub fn shell(cmd: impl Into<String>) -> Self {
        Self {
            user: Default::default(),
            command: ExecCommand::Shell(cmd.into()),
            cwd: None,
            env: BTreeMap::new(),
            stdin: None,
            timeout: DEFAULT_EXEC_TIMEOUT,
            output_cap: DEFAULT_OUTPUT_CAP,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecResult {
    /// `None` when the process was killed by a signal (timeout, out of memory).
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub duration_ms: u64,
    pub timed_out: bool,
    /// True when either stream went over the output cap.
    pub truncated: bool,
    /// True when the kernel's OOM killer ended the command.
    pub out_of_memory: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    Other,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// The name as text. A name that is not UTF-8 shows each byte that is not as U+FFFD here and
    /// in `path`, and carries its exact bytes in `name_base64`.
    pub name: String,
    /// The absolute path inside the sandbox.
    pub path: String,
    pub kind: FileKind,
    pub size: u64,
    pub modified: Option<Millis>,
    /// Only for a name that is not UTF-8: its bytes, base64 (standard alphabet, padded). Such an
    /// entry cannot be addressed by its path (paths are text); a recursive delete of its folder
    /// removes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_base64: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrepMatch {
    pub path: String,
    pub line_number: u64,
    pub line: String,
}

/// An upload's bytes as they arrive; an item that is an error ends the upload with it.
pub type FileChunks =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<Vec<u8>, ProviderError>> + Send>>;

/// A piece of a running command's output, as it comes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutputChunk {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
}

impl OutputChunk {
    pub fn bytes(&self) -> &[u8] {
        match self {
            OutputChunk::Stdout(bytes) | OutputChunk::Stderr(bytes) => bytes,
        }
    }
}

/// Where a streaming exec sends its output.
pub type OutputSink = tokio::sync::mpsc::Sender<OutputChunk>;

/// How long a streaming caller may leave output unread before it counts as gone. Waiting for it
/// is what keeps output in order and memory bounded; giving up on it is what stops a caller
/// that holds the connection open without reading from pinning the command's slot for ever.
pub const SLOW_READER: Duration = Duration::from_secs(30);

/// Send `chunk` on; false when the receiver is gone or did not take it within [`SLOW_READER`],
/// after which nothing more should be sent to it.
pub async fn forward(sink: &OutputSink, chunk: OutputChunk) -> bool {
    matches!(
        tokio::time::timeout(SLOW_READER, sink.send(chunk)).await,
        Ok(Ok(()))
    )
}

/// The error of an upload past its limit.
pub fn too_large_upload(path: &str, limit: u64) -> ProviderError {
    ProviderError::InvalidRequest(format!(
        "{path}: the upload is over the file API's limit of {limit} bytes"
    ))
}

/// A file open for reading: its size when opened, and its bytes as they are read, at most `size`
/// of them (what the answer's Content-Length promised).
pub struct OpenFile {
    pub size: u64,
    pub reader: std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>,
}

impl std::fmt::Debug for OpenFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenFile")
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

/// What taking a checkpoint made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointTaken {
    /// The bytes the copy holds (allocated, so a sparse or cloned copy counts what it uses).
    pub bytes: u64,
    /// The files, directories and links in it.
    pub files: u64,
    /// How long the sandbox's processes were frozen for it.
    pub stalled: Duration,
}

/// A process a restore stopped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoppedProcess {
    /// Its pid inside the sandbox.
    pub pid: u32,
    /// Its command line, as the sandbox showed it (hostile text: shown, never parsed).
    pub command: String,
}

/// What a restore did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restored {
    /// The processes that were running and were stopped so the home could be put back.
    pub stopped: Vec<StoppedProcess>,
}

/// A new sandbox started from another's home: as it is now, or as a checkpoint holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForkSandbox {
    /// The sandbox whose home is copied (it keeps running).
    pub source: String,
    /// Start from this checkpoint (of the source's thread) rather than the home as it is now.
    pub checkpoint: Option<CheckpointId>,
    /// The new sandbox, as a create would make it.
    pub create: CreateSandbox,
}

/// The error of a provider without checkpoints, naming it.
pub fn checkpoints_unsupported(provider: &str) -> ProviderError {
    ProviderError::Unsupported(format!(
        "the {provider} provider cannot take, restore or fork checkpoints of a sandbox's home"
    ))
}

/// A sandbox engine. Every call names the sandbox by id; a sandbox the provider no longer has
/// answers `ProviderError::Gone`, except `kill`, for which gone is success.
#[async_trait]
pub trait SandboxProvider: Send + Sync {
    /// A short name stored on session records ("runc", "e2b").
    fn name(&self) -> &str;

    /// The images this provider can start a sandbox from, `host` first. The default, for a
    /// provider without registered images, is the host image alone.
    fn images(&self) -> Vec<ImageInfo> {
        vec![ImageInfo::host(self.name())]
    }

    async fn create(&self, request: CreateSandbox) -> Result<CreatedSandbox, ProviderError>;
    /// Make sure the sandbox is running, resuming it if it is paused.
    async fn connect(&self, sandbox_id: &str) -> Result<Connected, ProviderError>;
    /// Pausing a paused sandbox succeeds.
    async fn pause(&self, sandbox_id: &str) -> Result<(), ProviderError>;
    /// Killing a sandbox that is already gone succeeds.
    async fn kill(&self, sandbox_id: &str) -> Result<(), ProviderError>;
    /// Move the sandbox's deadline to `timeout` from now (the keep-alive).
    async fn set_timeout(&self, sandbox_id: &str, timeout: Duration) -> Result<(), ProviderError>;
    /// Change the network of a live (or paused) sandbox to `profile`, keeping its files and
    /// processes. The default, for providers that cannot, is `Unsupported`: the thread's profile
    /// then reaches its next sandbox (a reset, or a recreate), which is made with it.
    async fn set_network(
        &self,
        sandbox_id: &str,
        profile: &NetworkProfile,
    ) -> Result<(), ProviderError> {
        let _ = (sandbox_id, profile);
        Err(ProviderError::Unsupported(format!(
            "the {} provider cannot change a live sandbox's network",
            self.name()
        )))
    }
    /// What the sandbox's network refused so far (see [`NetworkRefusals`]). `None` when this
    /// provider cannot tell for this sandbox: the default, for providers whose egress is not
    /// their own (E2B), and runc's answer for a sandbox with no network at all.
    async fn network_refusals(
        &self,
        sandbox_id: &str,
    ) -> Result<Option<NetworkRefusals>, ProviderError> {
        let _ = sandbox_id;
        Ok(None)
    }
    async fn info(&self, sandbox_id: &str) -> Result<SandboxInfo, ProviderError>;

    // Checkpoints of the home: a provider without them answers `Unsupported`, naming itself.

    /// Whether this provider takes, restores and forks checkpoints: `Ok`, or the
    /// `Unsupported` error its `checkpoint`, `restore` and `fork` would answer. The use cases
    /// ask first, before they resume, hold or write anything, so a fork on a provider without
    /// them leaves no thread behind and a Slack turn costs no store write. A provider that
    /// leaves those three at their defaults answers [`checkpoints_unsupported`] here too.
    fn checkpoint_support(&self) -> Result<(), ProviderError> {
        Ok(())
    }

    /// Copy the sandbox's `/home/user` as it is now, consistent even while its processes write,
    /// under `id` (a new id), as a checkpoint of the sandbox's thread (its owner). A home holding more than `max_bytes` is refused (`NoSpace`, with
    /// both numbers) before anything is copied.
    async fn checkpoint(
        &self,
        sandbox_id: &str,
        id: &CheckpointId,
        max_bytes: u64,
    ) -> Result<CheckpointTaken, ProviderError> {
        let _ = (sandbox_id, id, max_bytes);
        Err(checkpoints_unsupported(self.name()))
    }
    /// Put checkpoint `id` (of the sandbox's thread) back as the sandbox's `/home/user`, in
    /// place, stopping its running processes (named in the answer). An unknown checkpoint is `NotFound`, and changes nothing.
    async fn restore(
        &self,
        sandbox_id: &str,
        id: &CheckpointId,
    ) -> Result<Restored, ProviderError> {
        let _ = (sandbox_id, id);
        Err(checkpoints_unsupported(self.name()))
    }
    /// A new sandbox whose home is a copy of the source's (now, or at the checkpoint): another
    /// machine (its own hostname, machine id and ids), none of the source's processes.
    async fn fork(&self, request: ForkSandbox) -> Result<CreatedSandbox, ProviderError> {
        let _ = request;
        Err(checkpoints_unsupported(self.name()))
    }
    /// Delete `thread_id`'s checkpoint `id`; one that is not there succeeds (a provider without
    /// checkpoints has none).
    async fn delete_checkpoint(
        &self,
        thread_id: &ThreadId,
        id: &CheckpointId,
    ) -> Result<(), ProviderError> {
        let _ = (thread_id, id);
        Ok(())
    }
    /// Delete every checkpoint copy of `thread_id` (its destroy), recorded or not: one a crash
    /// left unrecorded goes with the rest.
    async fn delete_thread_checkpoints(&self, thread_id: &ThreadId) -> Result<(), ProviderError> {
        let _ = thread_id;
        Ok(())
    }
    /// Sandboxes whose metadata contains every pair in `metadata`; an empty map lists them all.
    async fn list(
        &self,
        metadata: &BTreeMap<String, String>,
    ) -> Result<Vec<SandboxInfo>, ProviderError>;

    async fn exec(
        &self,
        sandbox_id: &str,
        request: ExecRequest,
    ) -> Result<ExecResult, ProviderError>;

    /// `exec`, with the output sent to `output` as it comes instead of kept in the result
    /// (whose `stdout` and `stderr` are then empty). The output cap applies all the same. A
    /// receiver that goes away, or stops reading for [`SLOW_READER`], is given up on: the
    /// command runs on to its end. The default runs `exec` and sends each stream whole once the
    /// command ends; providers that can do better send as it comes.
    async fn exec_streaming(
        &self,
        sandbox_id: &str,
        request: ExecRequest,
        output: OutputSink,
    ) -> Result<ExecResult, ProviderError> {
        let mut result = self.exec(sandbox_id, request).await?;
        let stdout = std::mem::take(&mut result.stdout).into_bytes();
        let stderr = std::mem::take(&mut result.stderr).into_bytes();
        for chunk in [OutputChunk::Stdout(stdout), OutputChunk::Stderr(stderr)] {
            if !chunk.bytes().is_empty() && !forward(&output, chunk).await {
                break;
            }
        }
        Ok(result)
    }

    async fn read_file(&self, sandbox_id: &str, path: &str) -> Result<Vec<u8>, ProviderError>;
    /// The file open for reading as a stream, with its size: memory stays bounded whatever the
    /// size, and what the provider refuses (no such file, a directory) is refused here, before
    /// anything is sent. The default reads the whole file (`read_file`, within its cap);
    /// providers that can do better stream from the file itself.
    async fn open_file(&self, sandbox_id: &str, path: &str) -> Result<OpenFile, ProviderError> {
        let contents = self.read_file(sandbox_id, path).await?;
        Ok(OpenFile {
            size: contents.len() as u64,
            reader: Box::pin(std::io::Cursor::new(contents)),
        })
    }
    /// Creates missing parent directories.
    async fn write_file(
        &self,
        sandbox_id: &str,
        path: &str,
        contents: &[u8],
    ) -> Result<(), ProviderError>;
    /// The largest upload `write_file_from` takes. The default, for providers that gather an
    /// upload in memory, is the file cap; a provider that writes as the bytes come may take
    /// more.
    fn upload_limit(&self) -> u64 {
        DEFAULT_FILE_CAP
    }
    /// Write `chunks` to `path` as they come, at most `limit` bytes, creating missing parent
    /// directories; the number of bytes written. The file changes only once every chunk is in:
    /// a stream that fails or passes `limit` leaves `path` as it was. The default gathers the
    /// chunks and calls `write_file`; providers that can do better write as they go.
    async fn write_file_from(
        &self,
        sandbox_id: &str,
        path: &str,
        mut chunks: FileChunks,
        limit: u64,
    ) -> Result<u64, ProviderError> {
        use futures::StreamExt;
        let mut contents = Vec::new();
        while let Some(chunk) = chunks.next().await {
            contents.extend_from_slice(&chunk?);
            if contents.len() as u64 > limit {
                return Err(too_large_upload(path, limit));
            }
        }
        self.write_file(sandbox_id, path, &contents).await?;
        Ok(contents.len() as u64)
    }

    // The rest of the file API has defaults that run small scripts through `exec_streaming`
    // (`exec_files`): a provider gets them for free and overrides what it can do better.

    /// A directory's entries, sorted by path.
    async fn list_dir(
        &self,
        sandbox_id: &str,
        path: &str,
    ) -> Result<Vec<FileEntry>, ProviderError> {
        exec_files::list_dir(self, sandbox_id, path).await
    }
    async fn stat(&self, sandbox_id: &str, path: &str) -> Result<FileEntry, ProviderError> {
        exec_files::stat(self, sandbox_id, path).await
    }
    /// Make a directory and its missing parents.
    async fn make_dir(&self, sandbox_id: &str, path: &str) -> Result<(), ProviderError> {
        exec_files::make_dir(self, sandbox_id, path).await
    }
    /// Removing what is not there succeeds; a non-empty directory needs `recursive`.
    async fn remove(
        &self,
        sandbox_id: &str,
        path: &str,
        recursive: bool,
    ) -> Result<(), ProviderError> {
        exec_files::remove(self, sandbox_id, path, recursive).await
    }
    /// Paths matching a shell glob pattern (`**` for any depth).
    async fn glob(&self, sandbox_id: &str, pattern: &str) -> Result<Vec<String>, ProviderError> {
        exec_files::glob(self, sandbox_id, pattern).await
    }
    /// Lines matching a regular expression under `path`.
    async fn grep(
        &self,
        sandbox_id: &str,
        pattern: &str,
        path: &str,
    ) -> Result<Vec<GrepMatch>, ProviderError> {
        exec_files::grep(self, sandbox_id, pattern, path).await
    }

    // Background processes: kept by the sandbox itself, through small scripts run with
    // `exec_streaming` (`processes`), so they outlive the request and this process.

    /// Start a command that outlives the request; it is running when this returns.
    async fn start_process(
        &self,
        sandbox_id: &str,
        request: StartProcess,
    ) -> Result<ProcessInfo, ProviderError> {
        processes::start(self, sandbox_id, request).await
    }
    /// The sandbox's processes, running and ended, oldest first.
    async fn list_processes(&self, sandbox_id: &str) -> Result<Vec<ProcessInfo>, ProviderError> {
        processes::list(self, sandbox_id).await
    }
    /// Up to `max` bytes of a process's output from offset `after`.
    async fn read_process_output(
        &self,
        sandbox_id: &str,
        process_id: &str,
        after: u64,
        max: u64,
    ) -> Result<ProcessOutput, ProviderError> {
        processes::read_output(self, sandbox_id, process_id, after, max).await
    }
    /// A process's output from `after` as it comes, each piece with its offset, until it ends
    /// or `timeout` passes; the offset reached.
    async fn follow_process_output(
        &self,
        sandbox_id: &str,
        process_id: &str,
        after: u64,
        timeout: Duration,
        output: ProcessSink,
    ) -> Result<u64, ProviderError> {
        processes::follow_output(self, sandbox_id, process_id, after, timeout, output).await
    }
    async fn write_process_input(
        &self,
        sandbox_id: &str,
        process_id: &str,
        data: &[u8],
    ) -> Result<(), ProviderError> {
        processes::write_input(self, sandbox_id, process_id, data).await
    }
    /// Signal a process's whole group; an ended process ignores it.
    async fn signal_process(
        &self,
        sandbox_id: &str,
        process_id: &str,
        signal: ProcessSignal,
    ) -> Result<(), ProviderError> {
        processes::signal(self, sandbox_id, process_id, signal).await
    }
    /// Resize a process's terminal.
    async fn resize_process(
        &self,
        sandbox_id: &str,
        process_id: &str,
        size: PtySize,
    ) -> Result<(), ProviderError> {
        processes::resize(self, sandbox_id, process_id, size).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argument_sizes_are_checked_one_by_one_and_together() {
        let mut request = ExecRequest::shell("x".repeat(MAX_ARG_BYTES));
        request.check_sizes().unwrap();
        request.command = ExecCommand::Shell("x".repeat(MAX_ARG_BYTES + 1));
        assert!(request.check_sizes().unwrap_err().contains("argument 1"));
        request.command = ExecCommand::Argv(vec!["y".repeat(100 * 1024); 11]);
        assert!(request.check_sizes().unwrap_err().contains("together"));
        request.command = ExecCommand::Shell("true".into());
        request.env.insert("K".into(), "v".repeat(MAX_ARG_BYTES));
        assert!(request
            .check_sizes()
            .unwrap_err()
            .contains("environment variable K"));
    }
}
