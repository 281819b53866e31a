//! Sandbox routes: run a command, and read, write, list, stat and remove files.
//!
//! Exec and the writes (PUT, DELETE) create the thread's sandbox on first use and resume it when
//! paused, under a hold so nothing pauses it underneath them. GETs change nothing: an unknown
//! thread is a 404, and a file is read from the sandbox as it is, paused or not (`inspect`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::auth::ForCaller;
use super::error::ApiError;
use super::extract::{ApiQuery, JsonBody, SandboxPath, Thread};
use crate::wire::ExecBody;
use threadbox_core::domain::CheckpointCause;
use threadbox_core::ports::{ExecResult, FileEntry, ProviderError, DEFAULT_FILE_CAP};
use threadbox_core::usecases::Threadbox;

/// The longest a command may run.
pub const MAX_EXEC_TIMEOUT: Duration = Duration::from_secs(10 * 60);
/// The largest file a PUT accepts where the provider gathers uploads in memory (its file cap).
/// A provider that streams them sets its own (`SandboxProvider::upload_limit`; runc: 1 GiB).
pub const MAX_FILE_BODY: usize = DEFAULT_FILE_CAP as usize;

pub(crate) fn routes() -> Router<Threadbox> {
    Router::new()
        .route("/v1/threads/{thread_id}/exec", post(exec))
        .route(
            "/v1/threads/{thread_id}/files/{*path}",
            get(read)
                .put(write)
                .delete(remove)
                // Files are the one body allowed past the API's JSON limit: the PUT handler
                // counts the body against the provider's upload limit as it streams.
                .layer(DefaultBodyLimit::disable()),
        )
}

/// Run a command: the result as JSON when it ends, or with `Accept: text/event-stream` its
/// output as it happens (see `exec_stream`).
async fn exec(
    ForCaller(tb): ForCaller,
    Thread(thread_id): Thread,
    headers: axum::http::HeaderMap,
    JsonBody(body): JsonBody<ExecBody>,
) -> Result<Response, ApiError> {
    let kill_on_disconnect = body.kill_on_disconnect;
    let take_checkpoint = body.checkpoint;
    let request = body.into_request()?;
    // Taken before the command, which runs only once it is: undoing the command is restoring it.
    let checkpoint = match take_checkpoint {
        true => {
            // A new thread is made first, as the exec would: its checkpoint is its empty home.
            tb.resolve(&thread_id).await?;
            Some(
                tb.checkpoint(&thread_id, None, CheckpointCause::Turn)
                    .await?,
            )
        }
        false => None,
    };
    let named = |mut response: Response| {
        if let Some(value) = checkpoint
            .as_ref()
            .and_then(|c| HeaderValue::from_str(c.id.as_str()).ok())
        {
            response.headers_mut().insert(CHECKPOINT_HEADER, value);
        }
        response
    };
    if wants_event_stream(&headers) {
        return Ok(named(
            super::exec_stream::exec_events(tb, thread_id, request, kill_on_disconnect)
                .into_response(),
        ));
    }
    let result: ExecResult = tb.exec(&thread_id, request).await?;
    Ok(named(
        Json(ExecAnswer {
            result,
            checkpoint: checkpoint.clone(),
        })
        .into_response(),
    ))
}

/// The header naming the checkpoint an exec with `"checkpoint": true` took first.
pub const CHECKPOINT_HEADER: &str = "threadbox-checkpoint";

/// An exec's JSON answer: the result, and the checkpoint taken before it when one was asked for.
#[derive(Serialize)]
struct ExecAnswer {
    #[serde(flatten)]
    result: ExecResult,
    #[serde(skip_serializing_if = "Option::is_none")]
    checkpoint: Option<threadbox_core::domain::Checkpoint>,
}

/// Whether the client asked for server-sent events (`Accept: text/event-stream`).
pub fn wants_event_stream(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|kind| {
            kind.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("text/event-stream"))
        })
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileQuery {
    /// GET: list the directory instead of reading a file.
    #[serde(default)]
    list: bool,
    /// GET: describe the path instead of reading it.
    #[serde(default)]
    stat: bool,
    /// DELETE: remove a directory and everything in it.
    #[serde(default)]
    recursive: bool,
    /// GET on a directory: the paths under it matching this glob (`*`, `?`, `[..]`, `**`).
    glob: Option<String>,
    /// GET on a file or directory: the lines under it matching this regular expression.
    grep: Option<String>,
    /// PUT with an empty body: make the path a directory (parents included).
    #[serde(default)]
    dir: bool,
}

impl FileQuery {
    /// The GET-only options given, by name.
    fn reads(&self) -> Vec<&'static str> {
        [
            ("list", self.list),
            ("stat", self.stat),
            ("glob", self.glob.is_some()),
            ("grep", self.grep.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, given)| given.then_some(name))
        .collect()
    }
}

#[derive(Serialize)]
struct Globbed {
    path: String,
    glob: String,
    paths: Vec<String>,
}

#[derive(Serialize)]
struct Grepped {
    path: String,
    grep: String,
    matches: Vec<threadbox_core::ports::GrepMatch>,
}

#[derive(Serialize)]
struct Listing {
    path: String,
    entries: Vec<FileEntry>,
}

/// GET: the file's bytes, or a listing (`?list=true`), its metadata (`?stat=true`), the paths
/// under it matching a glob (`?glob=`), or the lines under it matching a regex (`?grep=`).
async fn read(
    ForCaller(tb): ForCaller,
    Thread(thread_id): Thread,
    SandboxPath(path): SandboxPath,
    ApiQuery(query): ApiQuery<FileQuery>,
) -> Result<Response, ApiError> {
    if query.recursive || query.dir {
        return Err(ApiError::bad_request(
            "invalid_query",
            "recursive applies to DELETE and dir to PUT only",
        ));
    }
    let reads = query.reads();
    if reads.len() > 1 {
        return Err(ApiError::bad_request(
            "invalid_query",
            format!("give one of {}, not several", reads.join(", ")),
        ));
    }
    if let Some(glob) = query.glob {
        if glob.is_empty() || glob.starts_with('/') || glob.contains('\0') {
            return Err(ApiError::bad_request(
                "invalid_query",
                "glob is a pattern relative to the path, like *.rs or src/**/*.toml",
            ));
        }
        let pattern = format!("{}/{glob}", path.trim_end_matches('/'));
        let paths = tb.peek_glob(&thread_id, &pattern).await?;
        return Ok(Json(Globbed { path, glob, paths }).into_response());
    }
    if let Some(grep) = query.grep {
        if grep.is_empty() || grep.contains('\0') {
            return Err(ApiError::bad_request(
                "invalid_query",
                "grep is a regular expression to look for",
            ));
        }
        let matches = tb.peek_grep(&thread_id, &grep, &path).await?;
        return Ok(Json(Grepped {
            path,
            grep,
            matches,
        })
        .into_response());
    }
    match (query.list, query.stat) {
        (true, _) => {
            let entries = tb.peek_dir(&thread_id, &path).await?;
            Ok(Json(Listing { path, entries }).into_response())
        }
        (false, true) => Ok(Json(tb.peek_stat(&thread_id, &path).await?).into_response()),
        (false, false) => {
            let file = tb.peek_open_file(&thread_id, &path).await?;
            Ok((
                [(header::CONTENT_TYPE, "application/octet-stream")],
                axum::body::Body::from_stream(chunks_of(file.reader)),
            )
                .into_response())
        }
    }
}

/// How much of a file is read at a time when streaming it out.
const READ_CHUNK: usize = 64 * 1024;

/// `reader` as a stream of chunks, ending after the end of the file or the first error (the
/// answer is then cut short, which the client sees as a broken transfer).
fn chunks_of(
    reader: std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>,
) -> impl futures::Stream<Item = std::io::Result<Vec<u8>>> + Send {
    futures::stream::unfold(Some(reader), |reader| async move {
        use tokio::io::AsyncReadExt;
        let mut reader = reader?;
        let mut chunk = vec![0u8; READ_CHUNK];
        match reader.read(&mut chunk).await {
            Ok(0) => None,
            Ok(n) => {
                chunk.truncate(n);
                Some((Ok(chunk), Some(reader)))
            }
            Err(error) => {
                tracing::warn!(%error, "reading a sandbox file failed mid-answer");
                Some((Err(error), None))
            }
        }
    })
}

#[derive(Serialize)]
struct Written {
    path: String,
    size: u64,
}

/// PUT: the body is the file's new contents; missing parent directories are created. The body
/// is streamed into the sandbox as it arrives (bounded memory); past the provider's upload limit
/// it is 413 and the file is left as it was.
async fn write(
    ForCaller(tb): ForCaller,
    Thread(thread_id): Thread,
    SandboxPath(path): SandboxPath,
    ApiQuery(query): ApiQuery<FileQuery>,
    headers: axum::http::HeaderMap,
    body: axum::body::Body,
) -> Result<Response, ApiError> {
    if query.recursive || !query.reads().is_empty() {
        return Err(ApiError::bad_request(
            "invalid_query",
            "PUT takes only dir=true",
        ));
    }
    if query.dir {
        // A directory has no contents: a body would be lost, so it is refused.
        if axum::body::to_bytes(body, 0).await.is_err() {
            return Err(ApiError::bad_request(
                "invalid_request",
                "dir=true makes a directory and takes no body",
            ));
        }
        tb.make_dir(&thread_id, &path).await?;
        return Ok(Json(serde_json::json!({"path": path, "kind": "dir"})).into_response());
    }
    let limit = tb.upload_limit();
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("a file body may hold at most {limit} bytes"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let overflowed = Arc::new(AtomicBool::new(false));
    let chunks = upload_chunks(body, limit, overflowed.clone());
    match tb.write_file_from(&thread_id, &path, chunks, limit).await {
        Ok(size) => Ok(Json(Written { path, size }).into_response()),
        Err(_) if overflowed.load(Ordering::SeqCst) => Err(too_large()),
        Err(error) => Err(error.into()),
    }
}

/// The request body as upload chunks; past `limit` bytes an error ends it and `overflowed` says
/// why.
pub fn upload_chunks(
    body: axum::body::Body,
    limit: u64,
    overflowed: Arc<AtomicBool>,
) -> threadbox_core::ports::FileChunks {
    use futures::StreamExt;
    let mut seen = 0u64;
    Box::pin(body.into_data_stream().map(move |chunk| {
        let chunk = chunk.map_err(|e| {
            ProviderError::InvalidRequest(format!("reading the request body failed: {e}"))
        })?;
        seen += chunk.len() as u64;
        if seen > limit {
            overflowed.store(true, Ordering::SeqCst);
            return Err(ProviderError::InvalidRequest(format!(
                "the body is over {limit} bytes"
            )));
        }
        Ok(chunk.to_vec())
    }))
}

/// DELETE: remove a file, or a directory with `?recursive=true`.
async fn remove(
    ForCaller(tb): ForCaller,
    Thread(thread_id): Thread,
    SandboxPath(path): SandboxPath,
    ApiQuery(query): ApiQuery<FileQuery>,
) -> Result<StatusCode, ApiError> {
    if query.dir || !query.reads().is_empty() {
        return Err(ApiError::bad_request(
            "invalid_query",
            "DELETE takes only recursive=true",
        ));
    }
    tb.remove(&thread_id, &path, query.recursive).await?;
    Ok(StatusCode::NO_CONTENT)
}
