//! envd's `process.Process` over threadbox's background processes.
//!
//! Every `Start` is a background process of the thread (`usecases::processes`): it outlives the
//! stream (as in envd, closing the stream does not kill it), keeps the thread awake while it
//! works, and is listed, signalled, written to and re-attached to by its pid. The pid is derived
//! from threadbox's process id (a 31-bit FNV-1a), so any process finds it again by listing.
//!
//! Output is sent as envd sends it: `stdout` and `stderr` data as each stream wrote it (a
//! terminal's as `pty`). What differs from envd: a command killed by signal N reports
//! `exitCode: -1` with `signal: N` status, as envd does, where a command that itself exits with
//! 128+N looks the same.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Json, Router};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

use threadbox_api::wire::{CommandSpec, ProcessBody};
use threadbox_core::ports::{
    OutputStream, ProcessChunk, ProcessInfo, ProcessSignal, ProcessState, PtySize, MAX_INPUT_BYTES,
};
use threadbox_core::usecases::MAX_PROCESS_IDLE;
use threadbox_e2b::wire::{end_stream_frame, event_frame, request_frame, Pty, StartRequest};

use super::{connect_service, envd_path, unimplemented, user_of, Answer, Reached, Unary};
use crate::error::ConnectError;
use crate::{header, read_body, E2bApi, MAX_JSON_BODY};

/// envd's keepalive interval when the client names none.
const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(90);
/// The shortest keepalive interval taken (a client asking for less gets this): each window is
/// a follow of its own, with a hold taken and released, so a stream costs two writes of the
/// thread's record per window. The SDKs ask for 50 s.
const MIN_KEEPALIVE: Duration = Duration::from_secs(10);
/// Frames buffered towards a slow reader before the follow waits for it.
const STREAM_BUFFER: usize = 64;

pub(super) fn routes() -> Router<E2bApi> {
    connect_service(
        "process.Process",
        vec![
            ("Start", post(start)),
            ("Connect", post(connect)),
            ("List", post(list)),
            ("SendInput", post(send_input)),
            ("SendSignal", post(send_signal)),
            ("Update", post(update)),
            ("CloseStdin", post(unimplemented)),
        ],
    )
}

/// The pid E2B's clients see for a threadbox process id: FNV-1a, 31 bits, never 0.
pub(crate) fn pid_of(process_id: &str) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in process_id.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    (hash & 0x7fff_ffff).max(1)
}

// ---------------------------------------------------------------------------------------------
// Messages

/// A terminal's size as threadbox takes it.
fn pty_size(pty: &Pty) -> Result<PtySize, ConnectError> {
    let size =
        |n: u32| u16::try_from(n).map_err(|_| ConnectError::invalid("pty size out of range"));
    Ok(PtySize {
        cols: size(pty.size.cols)?,
        rows: size(pty.size.rows)?,
    })
}

#[derive(Deserialize, Default)]
pub(super) struct Selector {
    pub(super) pid: Option<u32>,
    tag: Option<String>,
}

#[derive(Deserialize)]
struct Selected {
    #[serde(default)]
    process: Selector,
}

/// A call on one process: which one (`process`), and the method's own fields.
#[derive(Deserialize)]
struct OnProcess<Call> {
    #[serde(default)]
    process: Selector,
    #[serde(flatten)]
    call: Call,
}

// ---------------------------------------------------------------------------------------------
// Streams

/// A streaming answer: HTTP 200 and the frames as they come.
pub(super) fn stream_response(rx: mpsc::Receiver<Vec<u8>>) -> Response {
    let frames = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|frame| (Ok::<_, std::convert::Infallible>(Bytes::from(frame)), rx))
    });
    (
        StatusCode::OK,
        [("content-type", "application/connect+json")],
        Body::from_stream(frames),
    )
        .into_response()
}

/// A stream that is only its end-of-stream error (HTTP 200, as connect-go answers a handler that
/// fails before sending anything).
pub(super) fn failed_stream(error: ConnectError) -> Response {
    let (tx, rx) = mpsc::channel(1);
    let _ = tx.try_send(end_stream_frame(Some((error.code, &error.message))));
    stream_response(rx)
}

/// The one request message of a streaming call (a 415 for another content type; otherwise a
/// stream that is only its error, as connect-go answers).
pub(super) struct Streamed<T>(pub(super) T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for Streamed<T> {
    type Rejection = Response;

    async fn from_request(request: Request, _: &S) -> Result<Self, Self::Rejection> {
        let connect = header(request.headers(), "content-type")
            .is_some_and(|t| t.starts_with("application/connect+json"));
        if !connect {
            return Err((
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "envd's streaming calls take application/connect+json",
            )
                .into_response());
        }
        let bytes = read_body(request.into_body(), MAX_JSON_BODY + 5)
            .await
            .map_err(|e| failed_stream(ConnectError::new("resource_exhausted", e.message)))?;
        let message = request_frame(&bytes).map_err(|e| failed_stream(ConnectError::invalid(e)))?;
        serde_json::from_slice(message)
            .map(Streamed)
            .map_err(|e| failed_stream(ConnectError::invalid(format!("invalid request: {e}"))))
    }
}

/// How a stream is paced: envd's keepalive (`Keepalive-Ping-Interval`, seconds), and the
/// process's deadline (`Connect-Timeout-Ms`; absent or 0: none), after which envd kills it.
pub(super) struct Pacing {
    pub(super) keepalive: Duration,
    pub(super) deadline: Option<Instant>,
}

impl Pacing {
    pub(super) fn of(headers: &HeaderMap) -> Self {
        let keepalive = header(headers, "keepalive-ping-interval")
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map_or(DEFAULT_KEEPALIVE, |s| {
                Duration::from_secs(s).max(MIN_KEEPALIVE)
            })
            .min(DEFAULT_KEEPALIVE);
        let deadline = header(headers, "connect-timeout-ms")
            .and_then(|s| s.trim().parse::<u64>().ok())
            .filter(|ms| *ms > 0)
            .map(|ms| Instant::now() + Duration::from_millis(ms).min(MAX_PROCESS_IDLE));
        Self {
            keepalive,
            deadline,
        }
    }
}

/// envd's `end` event for a process that ended.
fn end_event(info: &ProcessInfo) -> Value {
    match (info.state, info.exit_code) {
        (ProcessState::Lost, _) => json!({
            "exitCode": -1,
            "error": "the process was lost (its supervisor was killed, or the sandbox recreated)",
        }),
        (_, Some(code)) if code > 128 && code < 160 => json!({
            "exitCode": -1,
            "status": format!("signal: {}", code - 128),
        }),
        (_, Some(code)) => {
            let mut end = json!({ "exited": true, "status": format!("exit status {code}") });
            // protojson leaves zero values out.
            if code != 0 {
                end["exitCode"] = json!(code);
            }
            end
        }
        (_, None) => json!({ "exitCode": -1, "status": "ended" }),
    }
}

/// Follow process `id` from `offset` into `tx`: its output as `data` events, a `keepalive`
/// when quiet, a kill at the deadline, then `end` and the end of the stream. Stops (leaving the
/// process running) when the reader goes away.
async fn pump(
    at: Reached,
    id: String,
    mut offset: u64,
    pty: bool,
    pacing: Pacing,
    tx: mpsc::Sender<Vec<u8>>,
) {
    let mut killed = false;
    loop {
        let mut window = pacing.keepalive;
        if let Some(deadline) = pacing.deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() && !killed {
                killed = true;
                at.tb
                    .signal_process(&at.thread, &id, ProcessSignal::Kill)
                    .await
                    .ok();
            }
            if !killed {
                window = window.min(left.max(Duration::from_millis(10)));
            }
        }
        let (sink, mut chunks) = mpsc::channel::<ProcessChunk>(STREAM_BUFFER);
        // Owns the follow's receiver, so a reader that goes away (the response dropped, `tx`
        // closed) drops it at once: the follow ends and releases its hold then, as threadbox's
        // own follow does, not at the end of its window.
        let to_reader = &tx;
        let forward = async move {
            loop {
                let chunk = tokio::select! {
                    chunk = chunks.recv() => chunk,
                    () = to_reader.closed() => return false,
                };
                let Some(chunk) = chunk else { return true };
                let kind = match (pty, chunk.stream) {
                    (true, _) => "pty",
                    (false, OutputStream::Stdout) => "stdout",
                    (false, OutputStream::Stderr) => "stderr",
                };
                let frame = event_frame("data", json!({ kind: BASE64.encode(&chunk.data) }));
                if to_reader.send(frame).await.is_err() {
                    return false;
                }
            }
        };
        let follow = at
            .tb
            .follow_process_output(&at.thread, &id, offset, window, sink);
        let (followed, reader_there) = tokio::join!(follow, forward);
        if !reader_there {
            return;
        }
        let frame = match followed {
            Ok((reached_offset, info)) => {
                offset = reached_offset;
                match info {
                    Some(info) if info.state == ProcessState::Running => {
                        event_frame("keepalive", json!({}))
                    }
                    Some(info) => {
                        let _ = tx.send(event_frame("end", end_event(&info))).await;
                        end_stream_frame(None)
                    }
                    None => end_stream_frame(Some(("not_found", "the process is gone"))),
                }
            }
            Err(error) => {
                let error = ConnectError::from(error);
                end_stream_frame(Some((error.code, &error.message)))
            }
        };
        let last = !frame_is_keepalive(&frame);
        if tx.send(frame).await.is_err() || last {
            return;
        }
    }
}

fn frame_is_keepalive(frame: &[u8]) -> bool {
    frame.first() == Some(&0) && frame.ends_with(br#"{"event":{"keepalive":{}}}"#)
}

/// `Start`: run the command as a background process and stream it.
async fn start(
    Extension(at): Extension<Reached>,
    headers: HeaderMap,
    Streamed(request): Streamed<StartRequest>,
) -> Response {
    let pacing = Pacing::of(&headers);
    let prepared = (|| {
        let user = user_of(&headers)?;
        let cwd = request.process.cwd.as_deref().map(envd_path).transpose()?;
        let pty = request.pty.as_ref().map(pty_size).transpose()?;
        let mut argv = vec![request.process.cmd];
        argv.extend(request.process.args);
        let mut env = at.env.clone();
        env.extend(request.process.envs);
        let mut body = ProcessBody::running(CommandSpec {
            cmd: None,
            argv: Some(argv),
            cwd,
            env,
        });
        body.pty = pty;
        body.user = Some(user);
        // The process keeps its thread awake while it works, up to its deadline.
        body.idle_timeout_ms = pacing.deadline.map(|d| {
            d.saturating_duration_since(Instant::now())
                .as_millis()
                .max(1000) as u64
        });
        body.into_request()
            .map_err(|e| ConnectError::invalid(e.message))
    })();
    let process = match prepared {
        Ok(process) => process,
        Err(error) => return failed_stream(error),
    };
    let pty = process.pty.is_some();
    let info = match at.tb.start_process(&at.thread, process).await {
        Ok(info) => info,
        Err(error) => return failed_stream(error.into()),
    };
    let (tx, rx) = mpsc::channel(STREAM_BUFFER);
    let _ = tx.try_send(event_frame("start", json!({ "pid": pid_of(&info.id) })));
    tokio::spawn(pump(at, info.id, 0, pty, pacing, tx));
    stream_response(rx)
}

/// The running process a selector names.
pub(super) async fn selected(
    at: &Reached,
    selector: &Selector,
) -> Result<ProcessInfo, ConnectError> {
    let Some(pid) = selector.pid else {
        return Err(match &selector.tag {
            Some(tag) => {
                ConnectError::new("not_found", format!("process with tag {tag} not found"))
            }
            None => ConnectError::invalid("the request names no process (pid or tag)"),
        });
    };
    at.tb
        .list_processes(&at.thread)
        .await?
        .into_iter()
        .find(|p| pid_of(&p.id) == pid)
        .ok_or_else(|| ConnectError::new("not_found", format!("process with pid {pid} not found")))
}

/// `Connect`: re-attach to a process, from its output as of now.
async fn connect(
    Extension(at): Extension<Reached>,
    headers: HeaderMap,
    Streamed(request): Streamed<Selected>,
) -> Response {
    let info = match selected(&at, &request.process).await {
        Ok(info) => info,
        Err(error) => return failed_stream(error),
    };
    let pacing = Pacing {
        deadline: None,
        ..Pacing::of(&headers)
    };
    let (tx, rx) = mpsc::channel(STREAM_BUFFER);
    let _ = tx.try_send(event_frame("start", json!({ "pid": pid_of(&info.id) })));
    let (id, offset, pty) = (info.id, info.output_bytes, info.pty);
    tokio::spawn(pump(at, id, offset, pty, pacing, tx));
    stream_response(rx)
}

/// `List`: the running processes.
async fn list(Extension(at): Extension<Reached>, Unary(_): Unary<Value>) -> Answer {
    let all = at.tb.list_processes(&at.thread).await?;
    let processes: Vec<Value> = all
        .iter()
        .filter(|p| p.state == ProcessState::Running)
        .map(|p| {
            json!({
                "pid": pid_of(&p.id),
                "config": { "cmd": p.command, "args": [], "envs": {} },
            })
        })
        .collect();
    Ok(Json(json!({ "processes": processes })))
}

#[derive(Deserialize)]
pub(super) struct Input {
    pub(super) stdin: Option<String>,
    pub(super) pty: Option<String>,
}

#[derive(Deserialize)]
struct SendInput {
    input: Input,
}

/// `SendInput`: bytes to the process's stdin (or terminal), any amount the body holds.
async fn send_input(
    Extension(at): Extension<Reached>,
    Unary(request): Unary<OnProcess<SendInput>>,
) -> Answer {
    let Input { stdin, pty } = request.call.input;
    let encoded = stdin
        .or(pty)
        .ok_or_else(|| ConnectError::invalid("input holds neither stdin nor pty"))?;
    let data = BASE64
        .decode(encoded)
        .map_err(|e| ConnectError::invalid(format!("input is not base64: {e}")))?;
    let info = selected(&at, &request.process).await?;
    // envd takes a message's input whole (up to the body limit); threadbox writes at most
    // `MAX_INPUT_BYTES` at a time, so larger input goes in order, a piece at a time.
    for piece in data.chunks(MAX_INPUT_BYTES) {
        at.tb
            .write_process_input(&at.thread, &info.id, piece)
            .await?;
    }
    Ok(Json(json!({})))
}

#[derive(Deserialize)]
struct SendSignal {
    signal: Value,
}

/// `SendSignal`: SIGKILL or SIGTERM, by name or number.
async fn send_signal(
    Extension(at): Extension<Reached>,
    Unary(request): Unary<OnProcess<SendSignal>>,
) -> Answer {
    let signal = match &request.call.signal {
        Value::String(s) if s == "SIGNAL_SIGKILL" => ProcessSignal::Kill,
        Value::String(s) if s == "SIGNAL_SIGTERM" => ProcessSignal::Term,
        Value::Number(n) if n.as_u64() == Some(9) => ProcessSignal::Kill,
        Value::Number(n) if n.as_u64() == Some(15) => ProcessSignal::Term,
        other => {
            return Err(ConnectError::invalid(format!(
                "signal {other}: SIGNAL_SIGKILL or SIGNAL_SIGTERM"
            )))
        }
    };
    let info = selected(&at, &request.process).await?;
    at.tb.signal_process(&at.thread, &info.id, signal).await?;
    Ok(Json(json!({})))
}

#[derive(Deserialize)]
struct Update {
    pty: Option<Pty>,
}

/// `Update`: a terminal's new size.
async fn update(
    Extension(at): Extension<Reached>,
    Unary(request): Unary<OnProcess<Update>>,
) -> Answer {
    let info = selected(&at, &request.process).await?;
    if let Some(pty) = &request.call.pty {
        at.tb
            .resize_process(&at.thread, &info.id, pty_size(pty)?)
            .await?;
    }
    Ok(Json(json!({})))
}

#[cfg(test)]
mod tests {
    use super::*;
    use threadbox_core::domain::Millis;

    fn ended(state: ProcessState, code: Option<i32>) -> ProcessInfo {
        ProcessInfo {
            id: "p1".into(),
            command: "true".into(),
            pty: false,
            state,
            exit_code: code,
            started_at: Some(Millis(0)),
            ended_at: Some(Millis(1)),
            output_bytes: 0,
            output_start: 0,
        }
    }

    #[test]
    fn ends_read_as_envd_writes_them() {
        assert_eq!(
            end_event(&ended(ProcessState::Exited, Some(0))),
            json!({"exited": true, "status": "exit status 0"}),
            "zero values are left out"
        );
        assert_eq!(
            end_event(&ended(ProcessState::Exited, Some(3)))["exitCode"],
            3
        );
        let killed = end_event(&ended(ProcessState::Exited, Some(137)));
        assert_eq!(killed["exitCode"], -1);
        assert_eq!(killed["status"], "signal: 9");
        assert_eq!(end_event(&ended(ProcessState::Lost, None))["exitCode"], -1);
    }

    #[test]
    fn pids_are_positive_31_bit_and_stable() {
        let a = pid_of("0123456789abcdef");
        assert_eq!(a, pid_of("0123456789abcdef"));
        assert_ne!(a, pid_of("0123456789abcdee"));
        assert!(a > 0 && a < (1 << 31));
    }

    #[test]
    fn a_keepalive_is_not_asked_for_more_often_than_every_10_seconds() {
        // Each keepalive window is a follow of its own (a hold taken and released, two writes
        // of the thread's record): a client asking for one every second must not make a
        // stream cost writes at that rate.
        let mut headers = HeaderMap::new();
        for (asked, got) in [("1", 10), ("0", 10), ("30", 30), ("999999", 90), ("x", 90)] {
            headers.insert("keepalive-ping-interval", asked.parse().unwrap());
            assert_eq!(
                Pacing::of(&headers).keepalive,
                Duration::from_secs(got),
                "{asked}"
            );
        }
    }

    #[test]
    fn keepalives_are_told_from_the_last_frame() {
        assert!(frame_is_keepalive(&event_frame("keepalive", json!({}))));
        assert!(!frame_is_keepalive(&end_stream_frame(None)));
        assert!(!frame_is_keepalive(&event_frame("end", json!({}))));
    }
}
