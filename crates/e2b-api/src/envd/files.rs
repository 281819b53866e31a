//! envd's `/files`: download (`GET`) and upload (`POST`, multipart or a raw body) through
//! threadbox's file use cases. Errors are envd's `{"code": <status>, "message"}`.
//!
//! A raw (`application/octet-stream`) upload streams into the sandbox up to the provider's
//! upload limit; a multipart part is read into memory first, so parts are held to
//! [`MAX_MULTIPART_FILE`] (the SDKs send multipart only for data they already hold in memory).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, FromRequest, Multipart, Query, Request};
use axum::http::{header as http_header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use threadbox_api::http::upload_chunks;
use threadbox_core::usecases::UseCaseError;

use super::{envd_path, Reached};
use crate::error::E2bError;
use crate::{header, E2bApi};

/// The largest file one multipart part may carry.
pub const MAX_MULTIPART_FILE: u64 = 32 * 1024 * 1024;

pub(super) fn routes() -> Router<E2bApi> {
    Router::new().route(
        "/files",
        get(download)
            .post(upload)
            // Uploads are bounded here, by the provider's limit, not by axum's default.
            .layer(DefaultBodyLimit::disable()),
    )
}

#[derive(Deserialize)]
struct FileQuery {
    path: Option<String>,
}

fn bad(message: impl Into<String>) -> E2bError {
    E2bError::bad_request(message)
}

/// A file use case's failure as envd words it.
fn file_error(path: &str, error: UseCaseError) -> E2bError {
    let e2b = E2bError::from(error);
    if e2b.status == StatusCode::NOT_FOUND {
        return E2bError::new(
            StatusCode::NOT_FOUND,
            format!("path '{path}' does not exist"),
        );
    }
    e2b
}

fn checked(path: &str) -> Result<String, E2bError> {
    envd_path(path).map_err(|e| bad(e.message))
}

/// `GET /files?path=`: the file's bytes.
async fn download(
    Extension(reached): Extension<Reached>,
    Query(query): Query<FileQuery>,
) -> Result<Response, E2bError> {
    let path = checked(query.path.as_deref().unwrap_or_default())?;
    let tb = &reached.tb;
    let bytes = tb
        .read_file(&reached.thread, &path)
        .await
        .map_err(|e| file_error(&path, e))?;
    let name = path.rsplit('/').next().unwrap_or_default().replace('"', "");
    Ok((
        StatusCode::OK,
        [
            (
                http_header::CONTENT_TYPE,
                "application/octet-stream".to_owned(),
            ),
            (
                http_header::CONTENT_DISPOSITION,
                format!("inline; filename=\"{name}\""),
            ),
        ],
        bytes,
    )
        .into_response())
}

fn written(path: &str) -> Value {
    json!({
        "path": path,
        "name": path.rsplit('/').next().unwrap_or_default(),
        "type": "file",
    })
}

/// `POST /files?path=`: multipart parts named `file` (each to `path`, or to its own filename
/// when no path is given), or a raw body to `path`. Parent folders are made; files are replaced.
async fn upload(
    Extension(reached): Extension<Reached>,
    Query(query): Query<FileQuery>,
    request: Request,
) -> Result<Response, E2bError> {
    let tb = &reached.tb;
    let limit = tb.upload_limit();
    let multipart = header(request.headers(), "content-type")
        .is_some_and(|t| t.starts_with("multipart/form-data"));
    if !multipart {
        let path = checked(
            query
                .path
                .as_deref()
                .ok_or_else(|| bad("path query parameter is required for raw body upload"))?,
        )?;
        let overflowed = Arc::new(AtomicBool::new(false));
        let chunks = upload_chunks(request.into_body(), limit, overflowed.clone());
        return match tb
            .write_file_from(&reached.thread, &path, chunks, limit)
            .await
        {
            Ok(_) => Ok(Json(json!([written(&path)])).into_response()),
            Err(_) if overflowed.load(Ordering::SeqCst) => Err(E2bError::too_large(limit as usize)),
            Err(error) => Err(file_error(&path, error)),
        };
    }
    let mut parts = Multipart::from_request(request, &())
        .await
        .map_err(|e| bad(format!("not a multipart body: {e}")))?;
    let part_limit = limit.min(MAX_MULTIPART_FILE);
    let mut done = Vec::new();
    while let Some(mut part) = parts
        .next_field()
        .await
        .map_err(|e| bad(format!("reading the multipart body failed: {e}")))?
    {
        if part.name() != Some("file") {
            return Err(bad(format!(
                "unexpected multipart part {:?}; parts must be named \"file\"",
                part.name().unwrap_or_default()
            )));
        }
        let destination = match (&query.path, part.file_name()) {
            (Some(path), _) => checked(path)?,
            (None, Some(name)) => checked(name)?,
            (None, None) => {
                return Err(bad("a part with no filename, and no path query parameter"))
            }
        };
        let mut data = Vec::new();
        while let Some(chunk) = part
            .chunk()
            .await
            .map_err(|e| bad(format!("reading the multipart body failed: {e}")))?
        {
            if (data.len() + chunk.len()) as u64 > part_limit {
                return Err(E2bError::too_large(part_limit as usize));
            }
            data.extend_from_slice(&chunk);
        }
        tb.write_file(&reached.thread, &destination, &data)
            .await
            .map_err(|e| file_error(&destination, e))?;
        done.push(written(&destination));
    }
    if done.is_empty() {
        return Err(bad("the multipart body holds no part named \"file\""));
    }
    Ok(Json(Value::Array(done)).into_response())
}
