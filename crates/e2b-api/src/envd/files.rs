//! envd's `/files`: download (`GET`) and upload (`POST`, multipart or a raw body) through
//! threadbox's file use cases. Errors are envd's `{"code": <status>, "message"}`.
//!
//! An upload streams into the sandbox as it arrives, a raw (`application/octet-stream`) body or
//! each multipart part alike, so the server holds no file in memory: a raw body, and all the
//! parts of one multipart body together, are held to the provider's upload limit.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, FromRequest, Multipart, Query, Request};
use axum::http::{header as http_header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use threadbox_api::http::{download_chunks, upload_chunks};
use threadbox_core::ports::{FileChunks, ProviderError};
use threadbox_core::usecases::UseCaseError;
use tokio::sync::mpsc;

use super::{envd_path, Reached};
use crate::error::E2bError;
use crate::{header, E2bApi};

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

/// `GET /files?path=`: the file's bytes, streamed.
async fn download(
    Extension(reached): Extension<Reached>,
    Query(query): Query<FileQuery>,
) -> Result<Response, E2bError> {
    let path = checked(query.path.as_deref().unwrap_or_default())?;
    let tb = &reached.tb;
    // Streamed from the file where it is, as threadbox's API answers a download: memory stays
    // bounded and no read cap applies. A sandbox that is not in place (being created or
    // resumed) is read through the file use case, which waits for it, within its cap.
    let reader = match tb.peek_open_file(&reached.thread, &path).await {
        Ok(file) => file.reader,
        Err(UseCaseError::NoSandbox { .. }) => {
            let bytes = tb
                .read_file(&reached.thread, &path)
                .await
                .map_err(|e| file_error(&path, e))?;
            Box::pin(std::io::Cursor::new(bytes))
        }
        Err(error) => return Err(file_error(&path, error)),
    };
    Ok((
        StatusCode::OK,
        [
            (
                http_header::CONTENT_TYPE,
                "application/octet-stream".to_owned(),
            ),
            (
                http_header::CONTENT_DISPOSITION,
                disposition(path.rsplit('/').next().unwrap_or_default()),
            ),
        ],
        Body::from_stream(download_chunks(reader)),
    )
        .into_response())
}

/// `Content-Disposition` for a file the sandbox named as it liked: a plain quoted name when it is
/// visible ASCII, else RFC 6266's `filename*` in UTF-8, percent-encoded (as envd's Go
/// `mime.FormatMediaType` does), so no name makes the header invalid.
fn disposition(name: &str) -> String {
    let plain = |b: u8| b.is_ascii_graphic() && b != b'"' && b != b'\\' || b == b' ';
    if name.bytes().all(plain) {
        return format!("inline; filename=\"{name}\"");
    }
    // RFC 5987's attr-char: everything else is percent-encoded.
    let attr_char = |b: u8| b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b);
    let encoded: String = name
        .bytes()
        .map(|b| {
            if attr_char(b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    format!("inline; filename*=utf-8''{encoded}")
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
    // The SDKs' `gzip=True` compresses the body; it is not decompressed here, so it is refused
    // rather than written as the compressed bytes.
    if let Some(encoding) = header(request.headers(), "content-encoding")
        .filter(|e| !e.trim().eq_ignore_ascii_case("identity"))
    {
        return Err(E2bError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "Content-Encoding {encoding:?} is not supported by threadbox's E2B API: upload \
                 without compression (gzip=False)"
            ),
        ));
    }
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
    // The parts together are held to the upload limit, as one raw upload is: a declared
    // length past it is refused before anything is written, and the bytes are counted as they
    // come for a body that declares none.
    let declared = header(request.headers(), "content-length").and_then(|n| n.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(E2bError::too_large(limit as usize));
    }
    let mut total = 0u64;
    let mut parts = Multipart::from_request(request, &())
        .await
        .map_err(|e| bad(format!("not a multipart body: {e}")))?;
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
        // The part streams into the sandbox as it is read, as a raw upload does: the use case
        // reads the channel while this feeds it from the part, within what is left of the
        // body's limit.
        let left = limit - total;
        let (feed, chunks) = mpsc::channel::<Result<Vec<u8>, ProviderError>>(4);
        let chunks: FileChunks = Box::pin(futures::stream::unfold(chunks, |mut rx| async move {
            rx.recv().await.map(|chunk| (chunk, rx))
        }));
        let reading = async {
            let mut sent = 0u64;
            let outcome = loop {
                let chunk = match part.chunk().await {
                    Ok(Some(chunk)) => chunk,
                    Ok(None) => break Ok(sent),
                    Err(e) => break Err(bad(format!("reading the multipart body failed: {e}"))),
                };
                sent += chunk.len() as u64;
                if sent > left {
                    break Err(E2bError::too_large(limit as usize));
                }
                if feed.send(Ok(chunk.to_vec())).await.is_err() {
                    // The write ended early; its own error says why.
                    break Ok(sent);
                }
            };
            if outcome.is_err() {
                let _ = feed
                    .send(Err(ProviderError::InvalidRequest(
                        "the upload was cut short".into(),
                    )))
                    .await;
            }
            drop(feed);
            outcome
        };
        let (read, wrote) = tokio::join!(
            reading,
            tb.write_file_from(&reached.thread, &destination, chunks, left)
        );
        total += read?;
        wrote.map_err(|e| file_error(&destination, e))?;
        done.push(written(&destination));
    }
    if done.is_empty() {
        return Err(bad("the multipart body holds no part named \"file\""));
    }
    Ok(Json(Value::Array(done)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_name_makes_a_valid_disposition() {
        assert_eq!(disposition("a b.txt"), "inline; filename=\"a b.txt\"");
        assert_eq!(
            disposition("caf\u{e9} \"x\"\n"),
            "inline; filename*=utf-8''caf%C3%A9%20%22x%22%0A"
        );
        for name in ["a\r\nSet-Cookie: x", "\u{1}", "\\", "\u{7f}"] {
            let value = disposition(name);
            assert!(
                axum::http::HeaderValue::from_str(&value).is_ok(),
                "{name:?}: {value}"
            );
            assert!(value.contains("filename*="), "{name:?}: {value}");
        }
    }
}
