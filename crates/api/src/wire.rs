//! The exec and process bodies and their event streams as they go over the wire, written once
//! for the three that speak them: the server (`http`, and the live-events WebSocket's `exec` and
//! `pty` frames), the MCP tools (`threadbox-mcp`) and the CLI's HTTP client.
//!
//! - [`ExecBody`] (`POST /v1/threads/{id}/exec`) and [`ProcessBody`]
//!   (`POST /v1/threads/{id}/processes`), each with the checks that turn it into the use cases'
//!   request, so a body is refused the same way whoever sends it. Fields left out are not sent
//!   (`skip_serializing_if`), so a client's JSON is exactly what it set.
//! - [`Payload`]: bytes as `{"text"}` when they are UTF-8, `{"base64"}` when not, in process
//!   input, process output and stream events.
//! - The server-sent events' names and `data`: [`OutputFrame`] (`stdout`, `stderr`, `output`),
//!   [`ExitFrame`] (`exit`), [`EndFrame`] (`end`) and [`ErrorFrame`] (`error`). The server writes
//!   them through [`to_json`], a JSON object with its keys in order, as it always has; the
//!   WebSocket's `exec_output`, `exec_exit` and `pty_output` frames carry the same payload and
//!   exit fields.
//! - [`Utf8Pieces`]: how an output stream is cut into text and bytes that are not, for the events
//!   and the frames alike.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::http::{sandbox_path, ApiError, MAX_EXEC_TIMEOUT};
use threadbox_core::ports::{
    ExecCommand, ExecRequest, ExecResult, OutputStream, ProcessInfo, PtySize, SandboxUser,
    DEFAULT_EXEC_TIMEOUT, DEFAULT_OUTPUT_CAP, DEFAULT_OUTPUT_CHUNKS, MAX_OUTPUT_CHUNKS,
};
use threadbox_core::usecases::{ProcessRequest, DEFAULT_PROCESS_IDLE, MAX_PROCESS_IDLE};

/// A command's output on standard output, as an exec stream's event.
pub const STDOUT: &str = "stdout";
/// A command's output on standard error.
pub const STDERR: &str = "stderr";
/// The command's end, last ([`ExitFrame`]).
pub const EXIT: &str = "exit";
/// A background process's output, with its offset ([`OutputFrame`]).
pub const OUTPUT: &str = "output";
/// A follow's end, last ([`EndFrame`]).
pub const END: &str = "end";
/// Last, instead of the end, when it could not be reached ([`ErrorFrame`]).
pub const ERROR: &str = "error";

/// What every command body starts with: the command (a shell line or a program and its
/// arguments), where it runs and its environment.
#[derive(Clone, Debug, Default)]
pub struct CommandSpec {
    pub cmd: Option<String>,
    pub argv: Option<Vec<String>>,
    pub cwd: Option<String>,
    pub env: BTreeMap<String, String>,
}

/// A command body: [`CommandSpec`]'s fields, declared here once, then the body's own. (Not a
/// `#[serde(flatten)]` of the spec: flattening loses `deny_unknown_fields`'s list of the
/// expected fields in its refusals.)
macro_rules! command_body {
    ($(#[$meta:meta])* pub struct $name:ident { $($(#[$field_meta:meta])* pub $field:ident: $ty:ty,)* }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, Serialize, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            /// A shell command line, run with `/bin/sh -c`.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub cmd: Option<String>,
            /// A program and its arguments, run without a shell.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub argv: Option<Vec<String>>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub cwd: Option<String>,
            #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
            pub env: BTreeMap<String, String>,
            /// Who runs it: `"user"` (the default) or `"root"`, the sandbox's root.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub user: Option<SandboxUser>,
            $($(#[$field_meta])* pub $field: $ty,)*
        }

        impl $name {
            /// A body running `spec`, the rest as the API's defaults have it.
            pub fn running(spec: CommandSpec) -> Self {
                Self {
                    cmd: spec.cmd,
                    argv: spec.argv,
                    cwd: spec.cwd,
                    env: spec.env,
                    ..Self::default()
                }
            }
        }
    };
}

command_body! {
    /// An exec body; the live-events WebSocket's `exec` frame takes the same fields.
    pub struct ExecBody {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub stdin: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub timeout_ms: Option<u64>,
        /// With a streamed answer: kill the command if the client goes away before it ends (by
        /// default it runs on to its end, its output dropped).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pub kill_on_disconnect: bool,
        /// Take a checkpoint of the home first (cause `turn`), so the command can be undone by
        /// restoring it; the answer names it. A refused checkpoint runs nothing.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pub checkpoint: bool,
    }
}

impl ExecBody {
    /// Turn the body into a request, or say exactly what is wrong with it.
    pub fn into_request(self) -> Result<ExecRequest, ApiError> {
        let command = command_of(self.cmd, self.argv)?;
        let cwd = self.cwd.map(|c| sandbox_path(&c)).transpose()?;
        check_env(&self.env)?;
        let timeout = millis_within("timeout_ms", self.timeout_ms, 1, MAX_EXEC_TIMEOUT)?
            .unwrap_or(DEFAULT_EXEC_TIMEOUT);
        let request = ExecRequest {
            user: self.user.unwrap_or_default(),
            command,
            cwd,
            env: self.env,
            stdin: self.stdin.map(String::into_bytes),
            timeout,
            output_cap: DEFAULT_OUTPUT_CAP,
        };
        request.check_sizes().map_err(invalid)?;
        Ok(request)
    }
}

command_body! {
    /// A background process's body; the live-events WebSocket's `pty` frame takes the same
    /// fields.
    pub struct ProcessBody {
        /// Run on a terminal of this size.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub pty: Option<PtySize>,
        /// Chunks of 256 KiB of output kept (1 to 64; default 4, so the last 1 MiB).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub output_chunks: Option<u32>,
        /// How long the process keeps the thread awake without output or input (default 10
        /// min).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub idle_timeout_ms: Option<u64>,
    }
}

impl ProcessBody {
    /// Turn the body into a request, or say exactly what is wrong with it.
    pub fn into_request(self) -> Result<ProcessRequest, ApiError> {
        let command = command_of(self.cmd, self.argv)?;
        check_env(&self.env)?;
        let cwd = self.cwd.map(|c| sandbox_path(&c)).transpose()?;
        let pty = self
            .pty
            .map(|size| size.check().map_err(|e| invalid(e.to_string())))
            .transpose()?;
        let output_chunks = match self.output_chunks {
            None => DEFAULT_OUTPUT_CHUNKS,
            Some(n) if (1..=MAX_OUTPUT_CHUNKS).contains(&n) => n,
            Some(n) => {
                return Err(invalid(format!(
                    "output_chunks must be between 1 and {MAX_OUTPUT_CHUNKS}; got {n}"
                )))
            }
        };
        let idle_limit = millis_within(
            "idle_timeout_ms",
            self.idle_timeout_ms,
            1_000,
            MAX_PROCESS_IDLE,
        )?
        .unwrap_or(DEFAULT_PROCESS_IDLE);
        let request = ProcessRequest {
            command,
            cwd,
            env: self.env,
            pty,
            output_chunks,
            idle_limit,
            user: self.user.unwrap_or_default(),
        };
        // The command and environment are held to the exec's size limits.
        let mut as_exec = ExecRequest::shell("");
        as_exec.command = request.command.clone();
        as_exec.env = request.env.clone();
        as_exec.check_sizes().map_err(invalid)?;
        Ok(request)
    }
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::bad_request("invalid_request", message)
}

/// `ms` milliseconds as a duration when given, refused outside `least` ms to `most`.
pub fn millis_within(
    name: &str,
    ms: Option<u64>,
    least: u64,
    most: Duration,
) -> Result<Option<Duration>, ApiError> {
    match ms {
        None => Ok(None),
        Some(ms) if ms >= least && Duration::from_millis(ms) <= most => {
            Ok(Some(Duration::from_millis(ms)))
        }
        Some(ms) => Err(invalid(format!(
            "{name} must be between {least} and {}; got {ms}",
            most.as_millis()
        ))),
    }
}

/// The command of an exec or process body: a shell line (`cmd`) or a program and its arguments
/// (`argv`), exactly one, non-empty and without NUL bytes.
fn command_of(cmd: Option<String>, argv: Option<Vec<String>>) -> Result<ExecCommand, ApiError> {
    let command = match (cmd, argv) {
        (Some(_), Some(_)) => return Err(invalid("give either cmd or argv, not both")),
        (None, None) => {
            return Err(invalid(
                "give cmd (a shell command line) or argv (a program and its arguments)",
            ))
        }
        (Some(cmd), None) if cmd.trim().is_empty() => return Err(invalid("cmd is empty")),
        (Some(cmd), None) => ExecCommand::Shell(cmd),
        (None, Some(argv)) if argv.first().is_none_or(|p| p.is_empty()) => {
            return Err(invalid("argv must start with a program name"))
        }
        (None, Some(argv)) => ExecCommand::Argv(argv),
    };
    let words: Vec<&str> = match &command {
        ExecCommand::Shell(cmd) => vec![cmd],
        ExecCommand::Argv(argv) => argv.iter().map(String::as_str).collect(),
    };
    if words.iter().any(|w| w.contains('\0')) {
        return Err(invalid("the command contains a NUL byte"));
    }
    Ok(command)
}

/// Environment names usable as `NAME=value`, values without NUL.
/// Environment names non-empty without `=` or NUL, values without NUL: what `execve` can take.
pub fn check_env(env: &BTreeMap<String, String>) -> Result<(), ApiError> {
    for (key, value) in env {
        if key.is_empty() || key.contains(['=', '\0']) {
            return Err(invalid(format!(
                "environment variable name {key:?} must be non-empty without '=' or NUL"
            )));
        }
        if value.contains('\0') {
            return Err(invalid(format!(
                "environment variable {key:?} contains a NUL byte"
            )));
        }
    }
    Ok(())
}

/// Bytes in JSON: `{"text"}` when they are UTF-8, `{"base64"}` when not; exactly one of them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Payload {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base64: Option<String>,
}

/// Why a [`Payload`] holds no bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum PayloadError {
    Neither,
    Both,
    /// `base64` that does not decode, and why.
    Base64(String),
}

impl Payload {
    /// `bytes` as text when they are UTF-8, else as base64.
    pub fn of(bytes: &[u8]) -> Self {
        match std::str::from_utf8(bytes) {
            Ok(text) => Self::text(text),
            Err(_) => Self::bytes(bytes),
        }
    }

    pub fn text(text: &str) -> Self {
        Self {
            text: Some(text.to_owned()),
            base64: None,
        }
    }

    /// `bytes` as base64, whatever they are.
    pub fn bytes(bytes: &[u8]) -> Self {
        Self {
            text: None,
            base64: Some(base64::engine::general_purpose::STANDARD.encode(bytes)),
        }
    }

    /// The bytes it holds.
    pub fn decode(self) -> Result<Vec<u8>, PayloadError> {
        match (self.text, self.base64) {
            (Some(text), None) => Ok(text.into_bytes()),
            (None, Some(encoded)) => base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|e| PayloadError::Base64(e.to_string())),
            (None, None) => Err(PayloadError::Neither),
            (Some(_), Some(_)) => Err(PayloadError::Both),
        }
    }
}

/// `stdout` / `stderr` (an exec's) or `output` (a process's, with `offset`, where in its output
/// the bytes start): `{"text"}` or `{"base64"}`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OutputFrame {
    #[serde(flatten)]
    pub data: Payload,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// A process's output: the stream the bytes came from (`stdout` or `stderr`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<OutputStream>,
}

/// `exit`: how the command ended (its output came before, as events).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ExitFrame {
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
    pub timed_out: bool,
    pub truncated: bool,
    pub out_of_memory: bool,
}

impl From<&ExecResult> for ExitFrame {
    fn from(result: &ExecResult) -> Self {
        Self {
            exit_code: result.exit_code,
            duration_ms: result.duration_ms,
            timed_out: result.timed_out,
            truncated: result.truncated,
            out_of_memory: result.out_of_memory,
        }
    }
}

impl ExitFrame {
    /// The result it says, with no output (the output came as events).
    pub fn into_result(self) -> ExecResult {
        ExecResult {
            exit_code: self.exit_code,
            stdout: String::new(),
            stderr: String::new(),
            duration_ms: self.duration_ms,
            timed_out: self.timed_out,
            truncated: self.truncated,
            out_of_memory: self.out_of_memory,
        }
    }
}

/// `end`: the offset to read on from, and the process as it stands (`null` when the server
/// could not tell).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EndFrame {
    pub next: u64,
    pub process: Option<ProcessInfo>,
}

/// `error`: the API's error body (`code`, `message`) with the `status` a plain call would have
/// answered and, for a limit, `retry_after` in seconds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ErrorFrame {
    pub code: String,
    pub message: String,
    pub status: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
}

impl From<ApiError> for ErrorFrame {
    fn from(error: ApiError) -> Self {
        Self {
            code: error.code.to_owned(),
            message: error.message,
            status: error.status.as_u16(),
            retry_after: error.retry_after,
        }
    }
}

/// A piece of one output stream: text where the bytes are UTF-8, bytes where not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    Bytes(Vec<u8>),
}

impl Piece {
    /// The piece as a frame's `text` or `base64`.
    pub fn payload(&self) -> Payload {
        match self {
            Piece::Text(text) => Payload::text(text),
            Piece::Bytes(bytes) => Payload::bytes(bytes),
        }
    }

    /// How many bytes of output it holds.
    pub fn byte_len(&self) -> usize {
        match self {
            Piece::Text(text) => text.len(),
            Piece::Bytes(bytes) => bytes.len(),
        }
    }
}

/// One output stream cut into pieces: text where the bytes are UTF-8, bytes where not, a
/// character cut at the end of a read held back for the next one. By default adjacent bytes
/// that are not UTF-8 go together (the WebSocket's frames); [`Utf8Pieces::separate`] makes each
/// such sequence a piece of its own (the HTTP exec's events).
#[derive(Default)]
pub struct Utf8Pieces {
    held: Vec<u8>,
    separate: bool,
}

impl Utf8Pieces {
    /// Each sequence that is not UTF-8 a piece of its own.
    pub fn separate() -> Self {
        Self {
            held: Vec::new(),
            separate: true,
        }
    }

    /// How many bytes are held back, waiting for the rest of their character.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    pub fn push(&mut self, bytes: &[u8]) -> Vec<Piece> {
        let mut data = std::mem::take(&mut self.held);
        data.extend_from_slice(bytes);
        let mut pieces = Vec::new();
        let mut rest: &[u8] = &data;
        while !rest.is_empty() {
            match std::str::from_utf8(rest) {
                Ok(text) => {
                    pieces.push(Piece::Text(text.to_owned()));
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    if !valid.is_empty() {
                        // The first `valid_up_to` bytes are UTF-8 by definition.
                        let text = std::str::from_utf8(valid).unwrap_or_default();
                        pieces.push(Piece::Text(text.to_owned()));
                    }
                    match e.error_len() {
                        None => {
                            self.held = after.to_vec();
                            break;
                        }
                        Some(bad) => {
                            match pieces.last_mut() {
                                Some(Piece::Bytes(bytes)) if !self.separate => {
                                    bytes.extend_from_slice(&after[..bad])
                                }
                                _ => pieces.push(Piece::Bytes(after[..bad].to_vec())),
                            }
                            rest = &after[bad..];
                        }
                    }
                }
            }
        }
        pieces
    }

    /// What is still held when the stream ends: a cut character that never got whole.
    pub fn finish(&mut self) -> Vec<Piece> {
        let held = std::mem::take(&mut self.held);
        if held.is_empty() {
            Vec::new()
        } else {
            vec![Piece::Bytes(held)]
        }
    }
}

/// `GET …/processes/{pid}/output`: where the bytes start, where the next read starts, the bytes
/// and the process; with `stderr`, the parts of the bytes (`[from, to)` output offsets, in
/// order) that came from stderr, the rest being stdout.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OutputPage {
    pub offset: u64,
    pub next: u64,
    #[serde(flatten)]
    pub data: Payload,
    pub process: ProcessInfo,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stderr: Vec<[u64; 2]>,
}

/// A body or frame as the server sends it: a JSON object with its keys in order (as `json!`
/// writes them), so the wire stays what it was before these types. They are plain data and
/// always serialize.
pub fn to_json<T: Serialize>(frame: &T) -> serde_json::Value {
    serde_json::to_value(frame).unwrap_or(serde_json::Value::Null)
}

/// [`to_json`] as text, an event's `data`.
pub fn frame_json<T: Serialize>(frame: &T) -> String {
    to_json(frame).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bodies_send_only_what_was_set() {
        let exec = ExecBody {
            argv: Some(vec!["ls".into()]),
            kill_on_disconnect: true,
            ..ExecBody::default()
        };
        assert_eq!(
            serde_json::to_value(&exec).unwrap(),
            json!({"argv": ["ls"], "kill_on_disconnect": true})
        );
        assert_eq!(
            serde_json::to_value(ProcessBody::default()).unwrap(),
            json!({})
        );
        // A refusal names the fields a body takes (which a `#[serde(flatten)]` would lose).
        let refused = serde_json::from_value::<ProcessBody>(json!({"cmd": "ls", "shell": "sh"}))
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("unknown field `shell`, expected one of `cmd`, `argv`"),
            "{refused}"
        );
    }

    #[test]
    fn frames_keep_their_wire_text() {
        let result = ExecResult {
            exit_code: Some(0),
            stdout: String::new(),
            stderr: String::new(),
            duration_ms: 5,
            timed_out: false,
            truncated: false,
            out_of_memory: false,
        };
        assert_eq!(
            frame_json(&ExitFrame::from(&result)),
            r#"{"duration_ms":5,"exit_code":0,"out_of_memory":false,"timed_out":false,"truncated":false}"#
        );
        let output = OutputFrame {
            data: Payload::of(b"\xff"),
            offset: Some(3),
            stream: None,
        };
        assert_eq!(frame_json(&output), r#"{"base64":"/w==","offset":3}"#);
        let output = OutputFrame {
            stream: Some(OutputStream::Stderr),
            ..output
        };
        assert_eq!(
            frame_json(&output),
            r#"{"base64":"/w==","offset":3,"stream":"stderr"}"#
        );
        let error = ErrorFrame {
            code: "busy".into(),
            message: "later".into(),
            status: 429,
            retry_after: None,
        };
        assert_eq!(
            frame_json(&error),
            r#"{"code":"busy","message":"later","status":429}"#
        );
    }

    #[test]
    fn payloads_are_text_or_base64_never_both() {
        assert_eq!(
            Payload::of("é".as_bytes()).decode().unwrap(),
            "é".as_bytes()
        );
        assert_eq!(Payload::of(&[0xff]).base64.as_deref(), Some("/w=="));
        assert_eq!(Payload::default().decode(), Err(PayloadError::Neither));
        let both = Payload {
            text: Some("a".into()),
            base64: Some("YQ==".into()),
        };
        assert_eq!(both.decode(), Err(PayloadError::Both));
        let bad = Payload {
            text: None,
            base64: Some("!!".into()),
        };
        assert!(matches!(bad.decode(), Err(PayloadError::Base64(_))));
    }
}
