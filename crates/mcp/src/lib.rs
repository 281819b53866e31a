//! One thread's sandbox as MCP tools (the official Rust SDK, `rmcp`), written once for both ways
//! threadbox serves them:
//!
//! - `threadbox mcp --thread ID` on stdio, whose backend is the CLI's HTTP client;
//! - `POST /v1/threads/{thread_id}/mcp` on the API itself (streamable HTTP, stateless), whose
//!   backend is the use cases ([`Threadbox`]) the router already holds.
//!
//! [`tools::SandboxTools`] holds the tools, their input schemas and descriptions; a
//! [`SandboxBackend`] does the sandbox operations. A failure is a tool error (`isError`) whose
//! text is the API's error shape, `{"error": {"code", "message", ...}}`, so a model can read the
//! code and adapt, whichever way it came.
//!
//! The HTTP endpoint takes bodies up to the API's JSON limit (`http::MAX_JSON_BODY`, 1 MiB) and
//! answers one that is too large, malformed, empty or a batch with a JSON-RPC error (`body`).
//! It keeps nothing between requests (no MCP session; each POST is answered on its
//! own, as JSON rather than an event stream), so it runs behind API Gateway and Lambda, which
//! buffer responses. That is also why `run_command` sends no progress notifications there: the
//! output comes with the result.

mod backend;
mod body;
pub mod tools;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use async_trait::async_trait;
use axum::extract::Request;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{json, Value};

use threadbox_api::http::ApiError;
// The bodies the tools send, as the API's routes take them.
pub use threadbox_api::wire::{ExecBody, ProcessBody};
use threadbox_core::ports::{
    ExecResult, FileEntry, GrepMatch, OutputChunk, ProcessInfo, ProcessOutput, ProcessSignal,
};
use threadbox_core::usecases::Threadbox;

pub use backend::ThreadboxBackend;
pub use tools::SandboxTools;

pub use body::{INVALID_REQUEST, MAX_MESSAGE_DEPTH, MAX_MESSAGE_VALUES, PARSE_ERROR};

/// The longest a command may run through the MCP endpoint, for a proxy in front that cannot wait
/// longer (API Gateway): put it in the requests' extensions (the `sandbox-api` function does).
/// `run_command` then refuses a longer `timeout_seconds` with `exec_timeout_over_gateway_limit`
/// and gives a command without one this limit, as the gateway's exec route does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExecLimit(pub std::time::Duration);

/// Where a backend that streams a command's output sends it while the command runs.
pub type OutputSink = tokio::sync::mpsc::UnboundedSender<OutputChunk>;

/// Why a tool call failed, in the API's terms: the error `code` clients branch on, the message,
/// and (when the API answered) its HTTP status and `Retry-After`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolFailure {
    pub code: String,
    pub message: String,
    pub status: Option<u16>,
    pub retry_after: Option<u64>,
}

impl ToolFailure {
    /// A failure the tool itself finds in its arguments (no API call made).
    pub fn invalid(message: impl Into<String>) -> Self {
        Self {
            code: "invalid_request".into(),
            message: message.into(),
            status: None,
            retry_after: None,
        }
    }

    /// The error body the model reads: `{"error": {"code", "message"[, "status", "retry_after"]}}`.
    pub fn to_json(&self) -> Value {
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(status) = self.status {
            error["status"] = json!(status);
            error["retry_after"] = json!(self.retry_after);
        }
        json!({ "error": error })
    }
}

impl From<ApiError> for ToolFailure {
    fn from(error: ApiError) -> Self {
        Self {
            code: error.code.to_owned(),
            message: error.message,
            status: Some(error.status.as_u16()),
            retry_after: error.retry_after,
        }
    }
}

impl From<threadbox_core::usecases::UseCaseError> for ToolFailure {
    fn from(error: threadbox_core::usecases::UseCaseError) -> Self {
        ApiError::from(error).into()
    }
}

/// The sandbox operations the tools need, for one thread named by its id. Implemented over the
/// use cases here ([`ThreadboxBackend`]) and over the HTTP API in the CLI.
#[async_trait]
pub trait SandboxBackend: Send + Sync + 'static {
    /// Run a command (creating or resuming the sandbox). With `output`, a backend that can
    /// streams the output there while the command runs; the result then carries it too, whole.
    async fn exec(
        &self,
        thread: &str,
        input: ExecBody,
        output: Option<OutputSink>,
    ) -> Result<ExecResult, ToolFailure>;
    /// A file's bytes if it holds at most `limit`, else `None` (reading stops past the limit).
    async fn read_file(
        &self,
        thread: &str,
        path: &str,
        limit: usize,
    ) -> Result<Option<Vec<u8>>, ToolFailure>;
    /// Replace or create a file, parents included; the bytes written.
    async fn write_file(
        &self,
        thread: &str,
        path: &str,
        contents: Vec<u8>,
    ) -> Result<u64, ToolFailure>;
    async fn list_dir(&self, thread: &str, path: &str) -> Result<Vec<FileEntry>, ToolFailure>;
    async fn stat(&self, thread: &str, path: &str) -> Result<FileEntry, ToolFailure>;
    async fn make_dir(&self, thread: &str, path: &str) -> Result<(), ToolFailure>;
    /// Paths under `path` matching `glob`, a pattern relative to it.
    async fn glob(&self, thread: &str, path: &str, glob: &str) -> Result<Vec<String>, ToolFailure>;
    async fn grep(
        &self,
        thread: &str,
        path: &str,
        pattern: &str,
    ) -> Result<Vec<GrepMatch>, ToolFailure>;
    async fn remove(&self, thread: &str, path: &str, recursive: bool) -> Result<(), ToolFailure>;
    /// The session after pausing, as `POST /v1/threads/{id}/pause` answers it.
    async fn pause(&self, thread: &str) -> Result<Value, ToolFailure>;
    /// The sandbox handle, as `POST /v1/threads/{id}/resume` answers it.
    async fn resume(&self, thread: &str) -> Result<Value, ToolFailure>;
    /// The thread as `GET /v1/threads/{id}` shows it: session, recent events, sandbox.
    async fn status(&self, thread: &str) -> Result<Value, ToolFailure>;
    /// Start a background process (creating or resuming the sandbox), as
    /// `POST /v1/threads/{id}/processes` does.
    async fn start_process(
        &self,
        thread: &str,
        input: ProcessBody,
    ) -> Result<ProcessInfo, ToolFailure>;
    /// The thread's processes, running and ended.
    async fn list_processes(&self, thread: &str) -> Result<Vec<ProcessInfo>, ToolFailure>;
    /// Up to `max` bytes of a process's output from offset `after`.
    async fn read_process_output(
        &self,
        thread: &str,
        process_id: &str,
        after: u64,
        max: u64,
    ) -> Result<ProcessOutput, ToolFailure>;
    async fn write_process_input(
        &self,
        thread: &str,
        process_id: &str,
        data: Vec<u8>,
    ) -> Result<(), ToolFailure>;
    /// Send a signal to a process's group (an ended process ignores it).
    async fn signal_process(
        &self,
        thread: &str,
        process_id: &str,
        signal: ProcessSignal,
    ) -> Result<(), ToolFailure>;
    /// Take a checkpoint of the home, as `POST /v1/threads/{id}/checkpoints` answers it.
    async fn checkpoint(&self, thread: &str, label: Option<String>) -> Result<Value, ToolFailure>;
    /// `{"checkpoints": [...]}`, newest first, as `GET /v1/threads/{id}/checkpoints` answers.
    async fn list_checkpoints(&self, thread: &str) -> Result<Value, ToolFailure>;
    /// Put the home back to a checkpoint, as `POST /v1/threads/{id}/restore` answers it.
    async fn restore(&self, thread: &str, checkpoint: &str) -> Result<Value, ToolFailure>;
    /// Fork the thread into `new_thread`, as `POST /v1/threads/{id}/fork` answers it.
    async fn fork(
        &self,
        thread: &str,
        new_thread: &str,
        checkpoint: Option<String>,
        network: Option<Value>,
    ) -> Result<Value, ToolFailure>;
}

/// `POST /v1/threads/{thread_id}/mcp`, behind the API's keys, to merge into the API's router
/// (`http::router`) where the sandbox routes are served.
pub fn routes(tb: Threadbox, auth: threadbox_api::http::ApiAuth) -> axum::Router {
    axum::Router::new()
        .route("/v1/threads/{thread_id}/mcp", post(serve))
        .route_layer(axum::middleware::from_fn_with_state(
            auth,
            threadbox_api::http::require_api_key,
        ))
        .with_state(tb)
}

/// One MCP message answered statelessly with the tools over the use cases. The auth
/// layer has already checked the API key.
async fn serve(
    threadbox_api::http::ForCaller(tb): threadbox_api::http::ForCaller,
    threadbox_api::http::Thread(thread_id): threadbox_api::http::Thread,
    limit: Option<axum::Extension<ExecLimit>>,
    mut request: Request,
) -> Response {
    // rmcp refuses a request without a host; ours do not need one (the router has already
    // decided who may call), so one without, as a test harness sends, gets a placeholder.
    if request.uri().authority().is_none() && !request.headers().contains_key(header::HOST) {
        let placeholder = header::HeaderValue::from_static("localhost");
        request.headers_mut().insert(header::HOST, placeholder);
    }
    let backend = Arc::new(
        ThreadboxBackend::new(tb).with_exec_limit(limit.map(|axum::Extension(limit)| limit.0)),
    );
    let thread = thread_id.as_str().to_owned();
    let config = StreamableHttpServerConfig::default()
        // Nothing is kept between requests: no session id, every POST stands alone.
        .with_legacy_session_mode(false)
        // A plain JSON answer when the tool sends nothing before its result (ours never do here).
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_sse_retry(None)
        // The router decides who may call (API keys; loopback only without keys), and a deployed
        // API's host name is not known here.
        .disable_allowed_hosts()
        // The SDK sees only bodies that passed `body::read`; the same limit, should it read one.
        .with_max_request_body_bytes(threadbox_api::http::MAX_JSON_BODY);
    let service = StreamableHttpService::new(
        move || Ok(SandboxTools::new(backend.clone(), thread.clone(), false)),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    // A body that says it is JSON is read (bounded) and checked here; one that does not is the
    // SDK's to refuse (415), unread.
    let (parts, body) = request.into_parts();
    if !body::says_json(&parts.headers) {
        let request = Request::from_parts(parts, axum::body::Body::empty());
        return service
            .handle(request)
            .await
            .map(axum::body::Body::new)
            .into_response();
    }
    let bytes = match body::read(&parts.headers, body).await {
        Ok(bytes) => bytes,
        Err(refused) => return refused.into_response(),
    };
    let id = match body::check(&bytes) {
        Ok(id) => id,
        Err(refused) => return refused.into_response(),
    };
    let request = Request::from_parts(parts, axum::body::Body::from(bytes));
    let response = service
        .handle(request)
        .await
        .map(axum::body::Body::new)
        .into_response();
    body::answer(id, response).await
}
