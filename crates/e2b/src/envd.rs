//! The data plane: envd, the agent inside each sandbox (docs/e2b.md §6 to §8).
//!
//! Commands run through `process.Process/Start`, a Connect server-streaming call with the JSON
//! codec; files move through envd's `/files` REST endpoint as raw bytes. Every request carries
//! the routing headers (`E2b-Sandbox-Id`, `E2b-Sandbox-Port`), so the same code talks to the
//! per-sandbox host, to the shared `sandbox.<domain>` host, or to a fake on 127.0.0.1; the
//! sandbox's access token (`X-Access-Token`); and the Linux user (`Authorization: Basic`).
//! Nothing here is retried, as in E2B's SDK: a command must not run twice.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::header::{CONTENT_LENGTH, CONTENT_TYPE};
use reqwest::{Client, Method, RequestBuilder, StatusCode};
use tokio::time::Instant;

use super::config::{Secret, ENVD_PORT};
use super::connect::{
    encode_bytes, encode_frame, parse_end_stream, parse_event, ConnectError, EndEvent, Event,
    FrameDecoder, ProcessConfig, StartRequest,
};
use super::errors::{E2bError, Plane};
use threadbox_core::ports::{forward, OutputChunk, OutputSink, SandboxUser};

// The Linux user a call runs as is the Basic username: the template's `user` unless a command
// asks for `root` (E2B's SDKs send it explicitly; older envd needs it).
/// How long past a command's own timeout we keep reading before giving up on envd's answer.
const GRACE: Duration = Duration::from_secs(5);
/// envd sends a keepalive event after this many idle seconds (the SDK's value).
const KEEPALIVE_SECS: &str = "50";

/// One sandbox's envd: where it answers and the token it wants.
#[derive(Clone)]
pub(crate) struct Target {
    pub sandbox_id: String,
    pub base: String,
    pub token: Secret,
}

/// A process to start.
pub(crate) struct ProcessSpec {
    pub cmd: String,
    pub args: Vec<String>,
    pub envs: BTreeMap<String, String>,
    pub cwd: Option<String>,
    pub stdin: Option<Vec<u8>>,
    pub timeout: Duration,
    pub output_cap: usize,
    /// Where the output goes as it comes, for a streaming exec; it is then not kept.
    pub output: Option<OutputSink>,
    /// Who runs it: the template's `user`, or `root`.
    pub user: SandboxUser,
}

/// What a finished (or abandoned) process produced.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ProcessOutput {
    /// `None` when a signal ended it (a timeout included).
    pub exit_code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub truncated: bool,
    pub timed_out: bool,
    pub duration: Duration,
}

#[derive(Clone)]
pub(crate) struct EnvdClient {
    http: Client,
    request_timeout: Duration,
}

impl EnvdClient {
    pub fn new(http: Client, request_timeout: Duration) -> Self {
        Self {
            http,
            request_timeout,
        }
    }

    fn request(&self, target: &Target, method: Method, path: &str) -> RequestBuilder {
        self.request_as(target, method, path, SandboxUser::User)
    }

    /// A call made as `user` (envd runs a process as the Basic username's Linux user).
    fn request_as(
        &self,
        target: &Target,
        method: Method,
        path: &str,
        user: SandboxUser,
    ) -> RequestBuilder {
        self.http
            .request(method, format!("{}{path}", target.base))
            .header("E2b-Sandbox-Id", &target.sandbox_id)
            .header("E2b-Sandbox-Port", ENVD_PORT.to_string())
            .header("X-Access-Token", target.token.expose())
            .header(
                "Authorization",
                format!(
                    "Basic {}",
                    encode_bytes(format!("{}:", user.as_str()).as_bytes())
                ),
            )
    }

    /// Run a process to its end, its timeout, or envd's failure.
    ///
    /// envd itself kills the process when `Connect-Timeout-Ms` runs out (closing the stream
    /// would not); we keep reading a little longer for its `end` event, and if none comes we
    /// send SIGKILL ourselves and report a timeout.
    pub async fn run(
        &self,
        target: &Target,
        spec: &ProcessSpec,
    ) -> Result<ProcessOutput, E2bError> {
        let started = Instant::now();
        let start = StartRequest {
            process: ProcessConfig {
                cmd: &spec.cmd,
                args: &spec.args,
                envs: &spec.envs,
                cwd: spec.cwd.as_deref(),
            },
            stdin: spec.stdin.is_some(),
        };
        let message = serde_json::to_vec(&start)
            .map_err(|e| E2bError::Protocol(format!("encoding the start request: {e}")))?;
        let request = self
            .request_as(target, Method::POST, "/process.Process/Start", spec.user)
            .header(CONTENT_TYPE, "application/connect+json")
            .header("Connect-Protocol-Version", "1")
            .header(
                "Connect-Timeout-Ms",
                spec.timeout.as_millis().max(1).to_string(),
            )
            .header("Keepalive-Ping-Interval", KEEPALIVE_SECS)
            .body(encode_frame(0, &message));

        let mut stream = Stream::new(spec.output_cap, spec.output.clone());
        let read = tokio::time::timeout(
            spec.timeout + GRACE,
            self.read_stream(request, target, spec, &mut stream),
        )
        .await;
        if let Some(feeder) = stream.stdin_feeder.take() {
            feeder.abort();
        }
        match read {
            Ok(Ok(())) => stream.finish(started.elapsed(), spec.timeout),
            Ok(Err(error)) => Err(error),
            Err(_) => {
                if let Some(pid) = stream.pid {
                    tracing::warn!(sandbox_id = %target.sandbox_id, pid, "envd did not end the command at its timeout; killing it");
                    if let Err(error) = self.kill_process(target, pid).await {
                        tracing::warn!(sandbox_id = %target.sandbox_id, pid, %error, "could not kill a timed-out command");
                    }
                }
                Ok(stream.abandoned(started.elapsed()))
            }
        }
    }

    async fn read_stream(
        &self,
        request: RequestBuilder,
        target: &Target,
        spec: &ProcessSpec,
        stream: &mut Stream,
    ) -> Result<(), E2bError> {
        let mut response = request.send().await.map_err(E2bError::from_transport)?;
        // Only layers in front of Connect answer non-200: envd's token check, the proxy.
        if response.status() != StatusCode::OK {
            return Err(E2bError::from_response(response, Plane::Envd).await);
        }
        let mut decoder = FrameDecoder::default();
        while let Some(chunk) = response.chunk().await.map_err(E2bError::from_transport)? {
            decoder.push(&chunk);
            while let Some(frame) = decoder.next_frame().map_err(E2bError::Protocol)? {
                if frame.is_end_stream() {
                    stream.end_stream =
                        Some(parse_end_stream(&frame.payload).map_err(E2bError::Protocol)?);
                    return Ok(());
                }
                match parse_event(&frame.payload).map_err(E2bError::Protocol)? {
                    Event::Start { pid } => {
                        stream.pid = Some(pid);
                        if let Some(input) = &spec.stdin {
                            stream.stdin_feeder = Some(self.feed_stdin(target, pid, input.clone()));
                        }
                    }
                    Event::Stdout(bytes) | Event::Pty(bytes) => {
                        stream.take(OutputChunk::Stdout(bytes)).await
                    }
                    Event::Stderr(bytes) => stream.take(OutputChunk::Stderr(bytes)).await,
                    Event::Keepalive => {}
                    Event::End(end) => stream.end = Some(end),
                }
            }
        }
        Err(E2bError::Transport(format!(
            "the command's stream ended without its end-of-stream frame ({} bytes left over)",
            decoder.pending()
        )))
    }

    /// Write `input` to the process's stdin and close it, beside the output stream (a process
    /// that writes before it reads must not block us from reading).
    fn feed_stdin(&self, target: &Target, pid: u32, input: Vec<u8>) -> tokio::task::JoinHandle<()> {
        let client = self.clone();
        let target = target.clone();
        tokio::spawn(async move {
            let result = async {
                if !input.is_empty() {
                    client
                        .unary(
                            &target,
                            "SendInput",
                            serde_json::json!({"process": {"pid": pid}, "input": {"stdin": encode_bytes(&input)}}),
                        )
                        .await?;
                }
                client
                    .unary(&target, "CloseStdin", serde_json::json!({"process": {"pid": pid}}))
                    .await
            }
            .await;
            if let Err(error) = result {
                tracing::warn!(sandbox_id = %target.sandbox_id, pid, %error, "could not hand the command its stdin");
            }
        })
    }

    pub async fn kill_process(&self, target: &Target, pid: u32) -> Result<(), E2bError> {
        self.unary(
            target,
            "SendSignal",
            serde_json::json!({"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"}),
        )
        .await
    }

    /// A unary `process.Process` call: bare JSON in and out, errors as non-200 statuses.
    async fn unary(
        &self,
        target: &Target,
        method: &str,
        body: serde_json::Value,
    ) -> Result<(), E2bError> {
        let request = self
            .request(target, Method::POST, &format!("/process.Process/{method}"))
            .header("Connect-Protocol-Version", "1")
            .json(&body);
        self.send(request, Plane::Envd).await.map(drop)
    }

    /// Send a unary request within the request timeout; a status other than success is the
    /// error `plane` answers with.
    async fn send(
        &self,
        request: RequestBuilder,
        plane: Plane,
    ) -> Result<reqwest::Response, E2bError> {
        let response = request
            .timeout(self.request_timeout)
            .send()
            .await
            .map_err(E2bError::from_transport)?;
        if response.status().is_success() {
            Ok(response)
        } else {
            Err(E2bError::from_response(response, plane).await)
        }
    }

    /// `GET /files?path=..`: the file's bytes, refused past `cap`.
    pub async fn read_file(
        &self,
        target: &Target,
        path: &str,
        cap: u64,
    ) -> Result<Vec<u8>, E2bError> {
        let request = self
            .request(target, Method::GET, "/files")
            .query(&[("path", path), ("username", SandboxUser::User.as_str())]);
        let mut response = self.send(request, Plane::Files).await?;
        let too_large = || E2bError::Rejected {
            status: 413,
            message: format!("{path} is larger than {cap} bytes"),
            error_code: None,
        };
        let declared = response
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|n| n > cap) {
            return Err(too_large());
        }
        let mut out = Vec::with_capacity(declared.unwrap_or(0) as usize);
        while let Some(chunk) = response.chunk().await.map_err(E2bError::from_transport)? {
            if (out.len() + chunk.len()) as u64 > cap {
                return Err(too_large());
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    }

    /// `POST /files?path=..` with a raw body (envd ≥ 0.5.7): creates parent directories and
    /// overwrites.
    pub async fn write_file(
        &self,
        target: &Target,
        path: &str,
        contents: &[u8],
    ) -> Result<(), E2bError> {
        let request = self
            .request(target, Method::POST, "/files")
            .query(&[("path", path), ("username", SandboxUser::User.as_str())])
            .header(CONTENT_TYPE, "application/octet-stream")
            .body(contents.to_vec());
        self.send(request, Plane::Files).await.map(drop)
    }
}

/// One stream's output up to the cap: kept, or (streaming) only counted.
struct Capped {
    bytes: Vec<u8>,
    cap: usize,
    seen: usize,
    overflowed: bool,
}

impl Capped {
    /// The part of `chunk` within the cap, counted but not kept.
    fn admit<'a>(&mut self, chunk: &'a [u8]) -> &'a [u8] {
        let room = self.cap.saturating_sub(self.seen);
        if chunk.len() > room {
            self.overflowed = true;
        }
        let admitted = &chunk[..chunk.len().min(room)];
        self.seen += admitted.len();
        admitted
    }

    fn push(&mut self, chunk: &[u8]) {
        let admitted = self.admit(chunk);
        self.bytes.extend_from_slice(admitted);
    }
}

/// What has been read from one `Start` stream so far.
struct Stream {
    pid: Option<u32>,
    stdout: Capped,
    stderr: Capped,
    end: Option<EndEvent>,
    /// `Some(None)` for a clean end-of-stream, `Some(Some(e))` for a handler error.
    end_stream: Option<Option<ConnectError>>,
    stdin_feeder: Option<tokio::task::JoinHandle<()>>,
    /// A streaming exec's receiver, until it goes away or stops reading.
    forward_to: Option<OutputSink>,
    streaming: bool,
}

impl Stream {
    fn new(cap: usize, forward_to: Option<OutputSink>) -> Self {
        let capped = || Capped {
            bytes: Vec::new(),
            cap,
            seen: 0,
            overflowed: false,
        };
        Self {
            pid: None,
            stdout: capped(),
            stderr: capped(),
            end: None,
            end_stream: None,
            stdin_feeder: None,
            streaming: forward_to.is_some(),
            forward_to,
        }
    }

    /// Output read from the stream: kept up to the cap, or sent on as it comes when streaming.
    async fn take(&mut self, chunk: OutputChunk) {
        let (is_stdout, bytes) = match chunk {
            OutputChunk::Stdout(bytes) => (true, bytes),
            OutputChunk::Stderr(bytes) => (false, bytes),
        };
        let capped = if is_stdout {
            &mut self.stdout
        } else {
            &mut self.stderr
        };
        if !self.streaming {
            capped.push(&bytes);
            return;
        }
        let admitted = capped.admit(&bytes);
        if let Some(sink) = self.forward_to.as_ref().filter(|_| !admitted.is_empty()) {
            let admitted = admitted.to_vec();
            let chunk = if is_stdout {
                OutputChunk::Stdout(admitted)
            } else {
                OutputChunk::Stderr(admitted)
            };
            if !forward(sink, chunk).await {
                self.forward_to = None;
            }
        }
    }

    fn output(self, exit_code: Option<i32>, timed_out: bool, duration: Duration) -> ProcessOutput {
        ProcessOutput {
            exit_code,
            truncated: self.stdout.overflowed || self.stderr.overflowed,
            stdout: self.stdout.bytes,
            stderr: self.stderr.bytes,
            timed_out,
            duration,
        }
    }

    /// The stream ended properly: read the outcome from the `end` event and the final frame.
    fn finish(mut self, elapsed: Duration, timeout: Duration) -> Result<ProcessOutput, E2bError> {
        let error = self.end_stream.take().flatten();
        let deadline_hit = error
            .as_ref()
            .is_some_and(|e| e.code == "deadline_exceeded");
        match (self.end.take(), error) {
            (Some(end), error) => {
                let code = end.code();
                // envd kills the process when its deadline passes; a signal death at or after
                // the deadline is that kill.
                let timed_out = deadline_hit || (code.is_none() && elapsed >= timeout);
                if let Some(e) = error.filter(|_| !deadline_hit) {
                    tracing::warn!(code = %e.code, message = ?e.message, "command ended with a stream error after its end event");
                }
                Ok(self.output(if timed_out { None } else { code }, timed_out, elapsed))
            }
            (None, _) if deadline_hit => Ok(self.output(None, true, elapsed)),
            // envd could not start the process (no such program or working directory): report
            // it as a shell would, exit 127 with the reason on stderr, so a missing program is
            // the command's failure, not the provider's.
            (None, Some(error)) if error.code == "invalid_argument" && self.pid.is_none() => {
                let reason = error.message.unwrap_or(error.code);
                self.stderr.push(format!("{reason}\n").as_bytes());
                Ok(self.output(Some(127), false, elapsed))
            }
            (None, Some(error)) => Err(connect_error(error)),
            (None, None) => Err(E2bError::Protocol(
                "the command's stream ended without an end event".into(),
            )),
        }
    }

    /// We stopped waiting: whatever arrived, marked as timed out.
    fn abandoned(self, elapsed: Duration) -> ProcessOutput {
        self.output(None, true, elapsed)
    }
}

/// A Connect error code, typed (CONNECT's code-to-meaning table).
fn connect_error(error: ConnectError) -> E2bError {
    let message = error.message.unwrap_or_else(|| error.code.clone());
    match error.code.as_str() {
        "unauthenticated" | "permission_denied" => E2bError::Unauthorized {
            status: 401,
            message,
        },
        "resource_exhausted" => E2bError::RateLimited {
            message,
            retry_after: None,
        },
        "unavailable" => E2bError::Server {
            status: 503,
            message,
            error_code: Some(error.code),
        },
        "invalid_argument"
        | "not_found"
        | "failed_precondition"
        | "out_of_range"
        | "already_exists" => E2bError::Rejected {
            status: 400,
            message,
            error_code: Some(error.code),
        },
        _ => E2bError::Server {
            status: 500,
            message,
            error_code: Some(error.code),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream_with(end: Option<EndEvent>, end_stream: Option<ConnectError>) -> Stream {
        let mut s = Stream::new(4, None);
        s.stdout.push(b"hello world");
        s.end = end;
        s.end_stream = Some(end_stream);
        s
    }

    #[test]
    fn output_is_capped_per_stream_and_flagged() {
        let out = stream_with(Some(EndEvent::default()), None)
            .finish(Duration::from_millis(5), Duration::from_secs(1))
            .unwrap();
        assert_eq!(out.stdout, b"hell");
        assert!(out.truncated);
        assert_eq!(out.exit_code, Some(0));
        assert!(!out.timed_out);
    }

    #[test]
    fn deadline_exceeded_with_or_without_an_end_event_is_a_timeout() {
        let deadline = || ConnectError {
            code: "deadline_exceeded".into(),
            message: None,
        };
        let killed = EndEvent {
            exit_code: Some(-1),
            status: Some("signal: killed".into()),
            ..EndEvent::default()
        };
        for end in [Some(killed.clone()), None] {
            let out = stream_with(end, Some(deadline()))
                .finish(Duration::from_secs(1), Duration::from_secs(1))
                .unwrap();
            assert!(out.timed_out);
            assert_eq!(out.exit_code, None);
        }
        // No stream error at all, but a signal death at the deadline: still the timeout.
        let out = stream_with(Some(killed), None)
            .finish(Duration::from_secs(2), Duration::from_secs(1))
            .unwrap();
        assert!(out.timed_out);
    }

    #[test]
    fn a_process_that_cannot_start_exits_127() {
        let mut s = Stream::new(100, None);
        s.end_stream = Some(Some(ConnectError {
            code: "invalid_argument".into(),
            message: Some("exec: no such file".into()),
        }));
        let out = s.finish(Duration::ZERO, Duration::from_secs(1)).unwrap();
        assert_eq!(out.exit_code, Some(127));
        assert_eq!(out.stderr, b"exec: no such file\n");
    }

    #[test]
    fn stream_errors_without_an_end_are_typed() {
        let mut started = stream_with(
            None,
            Some(ConnectError {
                code: "invalid_argument".into(),
                message: Some("bad".into()),
            }),
        );
        started.pid = Some(7);
        let err = started
            .finish(Duration::ZERO, Duration::from_secs(1))
            .unwrap_err();
        assert!(matches!(err, E2bError::Rejected { .. }), "{err:?}");
        let err = stream_with(
            None,
            Some(ConnectError {
                code: "unavailable".into(),
                message: None,
            }),
        )
        .finish(Duration::ZERO, Duration::from_secs(1))
        .unwrap_err();
        assert!(
            matches!(err, E2bError::Server { status: 503, .. }),
            "{err:?}"
        );
        let err = stream_with(None, None)
            .finish(Duration::ZERO, Duration::from_secs(1))
            .unwrap_err();
        assert!(matches!(err, E2bError::Protocol(_)));
    }
}
