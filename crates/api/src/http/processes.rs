//! Background process routes: start a command that outlives the request, list a thread's
//! processes, read or follow a process's output, write to its input, resize its terminal and
//! signal it.
//!
//! - `POST /v1/threads/{id}/processes` → 201 with the process (its `id`, `state`, ...);
//! - `GET /v1/threads/{id}/processes` → `{"processes": [...]}`;
//! - `GET …/processes/{pid}/output?after=N&max=M` → `{"offset", "next", "text" | "base64",
//!   "process"}`; with `Accept: text/event-stream` the output as it comes: `output` events
//!   (`{"offset", "text" | "base64"}`) until the process ends (or `timeout_ms` passes), then
//!   `end` (`{"next", "process"}`) or `error`;
//! - `POST …/processes/{pid}/input` `{"text"}` or `{"base64"}` → 204;
//! - `POST …/processes/{pid}/resize` `{"cols", "rows"}` → 204;
//! - `DELETE …/processes/{pid}?signal=TERM|KILL|INT|HUP|STOP|CONT` → 202 (default TERM).
//!
//! Like exec, these bring the thread's sandbox up (create, resume) and hold it meanwhile.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{FromRequestParts, RawPathParams};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::mpsc;

use super::auth::ForCaller;
use super::error::ApiError;
use super::exec_stream::{error_event, json_event, Utf8Events};
use super::extract::{ApiQuery, JsonBody, Thread};
use super::sandbox::wants_event_stream;
use crate::wire::{self, millis_within, EndFrame, OutputPage, Payload, PayloadError, ProcessBody};
use threadbox_core::domain::ThreadId;
use threadbox_core::ports::{
    valid_process_id, OutputStream, ProcessChunk, ProcessSignal, PtySize, MAX_INPUT_BYTES,
    MAX_OUTPUT_READ,
};
use threadbox_core::usecases::Threadbox;

/// The longest a follow stays open before the client reads on with `after`.
pub const MAX_FOLLOW: Duration = Duration::from_secs(10 * 60);

pub(crate) fn routes() -> Router<Threadbox> {
    Router::new()
        .route("/v1/threads/{thread_id}/processes", post(start).get(list))
        .route(
            "/v1/threads/{thread_id}/processes/{process_id}",
            delete(signal),
        )
        .route(
            "/v1/threads/{thread_id}/processes/{process_id}/output",
            get(output),
        )
        .route(
            "/v1/threads/{thread_id}/processes/{process_id}/input",
            post(input),
        )
        .route(
            "/v1/threads/{thread_id}/processes/{process_id}/resize",
            post(resize),
        )
}

/// `{process_id}` from the route, validated.
pub(crate) struct Process(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Process {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let params = RawPathParams::from_request_parts(parts, state).await?;
        let raw = params
            .iter()
            .find(|(key, _)| *key == "process_id")
            .map(|(_, value)| value.to_owned())
            .unwrap_or_default();
        if valid_process_id(&raw) {
            Ok(Process(raw))
        } else {
            Err(ApiError::bad_request(
                "invalid_process_id",
                "a process id is 1 to 32 letters and digits",
            ))
        }
    }
}

async fn start(
    ForCaller(tb): ForCaller,
    Thread(thread_id): Thread,
    JsonBody(body): JsonBody<ProcessBody>,
) -> Result<Response, ApiError> {
    let request = body.into_request()?;
    let info = tb.start_process(&thread_id, request).await?;
    Ok((StatusCode::CREATED, Json(info)).into_response())
}

async fn list(
    ForCaller(tb): ForCaller,
    Thread(thread_id): Thread,
) -> Result<Json<serde_json::Value>, ApiError> {
    let processes = tb.list_processes(&thread_id).await?;
    Ok(Json(json!({ "processes": processes })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OutputQuery {
    after: Option<u64>,
    max: Option<u64>,
    timeout_ms: Option<u64>,
}

async fn output(
    ForCaller(tb): ForCaller,
    Thread(thread_id): Thread,
    Process(process_id): Process,
    headers: axum::http::HeaderMap,
    ApiQuery(query): ApiQuery<OutputQuery>,
) -> Result<Response, ApiError> {
    let after = query.after.unwrap_or(0);
    if wants_event_stream(&headers) {
        let timeout =
            millis_within("timeout_ms", query.timeout_ms, 1, MAX_FOLLOW)?.unwrap_or(MAX_FOLLOW);
        return Ok(follow_events(tb, thread_id, process_id, after, timeout).into_response());
    }
    let max = query.max.unwrap_or(MAX_OUTPUT_READ);
    if max == 0 || max > MAX_OUTPUT_READ {
        return Err(ApiError::bad_request(
            "invalid_request",
            format!("max must be between 1 and {MAX_OUTPUT_READ}; got {max}"),
        ));
    }
    let read = tb
        .read_process_output(&thread_id, &process_id, after, max)
        .await?;
    let page = OutputPage {
        offset: read.offset,
        next: read.next(),
        data: Payload::of(&read.data),
        process: read.info,
        stderr: read.stderr.iter().map(|r| [r.start, r.end]).collect(),
    };
    // As a JSON value, so its keys go out in order as they always have.
    Ok(Json(wire::to_json(&page)).into_response())
}

/// Follow a process's output as server-sent events. The follow runs in a task of its own, which
/// ends when the response is dropped (a client that went away closes its channel).
fn follow_events(
    tb: Threadbox,
    thread_id: ThreadId,
    process_id: String,
    after: u64,
    timeout: Duration,
) -> Sse<impl futures::Stream<Item = Result<Event, Infallible>>> {
    let (sink, output) = mpsc::channel(32);
    let task = tokio::spawn(async move {
        tb.follow_process_output(&thread_id, &process_id, after, timeout, sink)
            .await
    });
    struct Follow {
        output: Option<mpsc::Receiver<ProcessChunk>>,
        task: Option<tokio::task::JoinHandle<FollowResult>>,
        text: Utf8Events,
        pending: Vec<Event>,
    }
    type FollowResult = Result<
        (u64, Option<threadbox_core::ports::ProcessInfo>),
        threadbox_core::usecases::UseCaseError,
    >;
    let state = Follow {
        output: Some(output),
        task: Some(task),
        text: Utf8Events::of_stream(wire::OUTPUT, after, OutputStream::Stdout),
        pending: Vec::new(),
    };
    let events = futures::stream::unfold(state, |mut state| async move {
        loop {
            if !state.pending.is_empty() {
                let event = state.pending.remove(0);
                return Some((Ok(event), state));
            }
            if let Some(output) = &mut state.output {
                match output.recv().await {
                    Some(chunk) => {
                        // After output that left the ring, events go on from where it resumes;
                        // each event is of one stream.
                        if state.text.expects() != Some(chunk.offset)
                            || state.text.stream() != Some(chunk.stream)
                        {
                            state.pending = state.text.finish();
                            state.text =
                                Utf8Events::of_stream(wire::OUTPUT, chunk.offset, chunk.stream);
                        }
                        state.pending.extend(state.text.push(&chunk.data));
                    }
                    None => {
                        state.output = None;
                        state.pending = state.text.finish();
                    }
                }
                continue;
            }
            let mut task = state.task.take()?;
            let ended = (&mut task).await;
            let event = match ended {
                Ok(Ok((next, process))) => json_event(wire::END, &EndFrame { next, process }),
                Ok(Err(error)) => error_event(ApiError::from(error)),
                Err(join) => error_event(ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    format!("the follow's task failed: {join}"),
                )),
            };
            return Some((Ok(event), state));
        }
    });
    Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(1)))
}

async fn input(
    ForCaller(tb): ForCaller,
    Thread(thread_id): Thread,
    Process(process_id): Process,
    JsonBody(body): JsonBody<Payload>,
) -> Result<StatusCode, ApiError> {
    let bad = |m: String| ApiError::bad_request("invalid_request", m);
    let data = body.decode().map_err(|e| match e {
        PayloadError::Base64(e) => bad(format!("base64 is not valid: {e}")),
        PayloadError::Neither | PayloadError::Both => {
            bad("give text or base64 (one of them)".into())
        }
    })?;
    if data.len() > MAX_INPUT_BYTES {
        return Err(bad(format!(
            "input may be at most {MAX_INPUT_BYTES} bytes at a time; got {}",
            data.len()
        )));
    }
    tb.write_process_input(&thread_id, &process_id, &data)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn resize(
    ForCaller(tb): ForCaller,
    Thread(thread_id): Thread,
    Process(process_id): Process,
    JsonBody(size): JsonBody<PtySize>,
) -> Result<StatusCode, ApiError> {
    let size = size
        .check()
        .map_err(|e| ApiError::bad_request("invalid_request", e.to_string()))?;
    tb.resize_process(&thread_id, &process_id, size).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SignalQuery {
    signal: Option<ProcessSignal>,
}

async fn signal(
    ForCaller(tb): ForCaller,
    Thread(thread_id): Thread,
    Process(process_id): Process,
    ApiQuery(query): ApiQuery<SignalQuery>,
) -> Result<StatusCode, ApiError> {
    let signal = query.signal.unwrap_or(ProcessSignal::Term);
    tb.signal_process(&thread_id, &process_id, signal).await?;
    Ok(StatusCode::ACCEPTED)
}
