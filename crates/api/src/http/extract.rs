//! Extractors that validate input and fail with the API's JSON error shape, never axum's plain
//! text: a thread id from the path, a sandbox path from the path, JSON bodies and query strings.

use axum::extract::{FromRequest, FromRequestParts, Query, RawPathParams, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::Json;
use serde::de::DeserializeOwned;

use super::error::ApiError;
use threadbox_core::domain::{ImageName, ThreadId};

/// The longest sandbox path accepted (Linux's PATH_MAX).
pub(crate) const MAX_SANDBOX_PATH: usize = 4096;

/// `{thread_id}` from the route, validated.
pub struct Thread(pub ThreadId);

/// `{*path}` from the route, as an absolute path inside the sandbox.
pub(crate) struct SandboxPath(pub String);

/// A JSON body; a malformed or mis-shaped one is a 400 in the API's shape.
pub struct JsonBody<T>(pub T);

/// A query string; a malformed one is a 400 in the API's shape.
pub struct ApiQuery<T>(pub T);

async fn path_param<S: Send + Sync>(
    parts: &mut Parts,
    state: &S,
    name: &str,
) -> Result<String, ApiError> {
    let params = RawPathParams::from_request_parts(parts, state).await?;
    params
        .iter()
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.to_owned())
        .ok_or_else(|| ApiError::bad_request("invalid_path", format!("missing {{{name}}}")))
}

impl<S: Send + Sync> FromRequestParts<S> for Thread {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let raw = path_param(parts, state, "thread_id").await?;
        ThreadId::parse(&raw)
            .map(Thread)
            .map_err(|e| ApiError::bad_request("invalid_thread_id", e.to_string()))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for SandboxPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let raw = path_param(parts, state, "path").await?;
        sandbox_path(&format!("/{raw}")).map(SandboxPath)
    }
}

/// Reject paths that are wrong whatever the sandbox holds, before any sandbox is touched.
/// Confinement itself is the provider's job; this only keeps obvious attempts out of it.
pub fn sandbox_path(path: &str) -> Result<String, ApiError> {
    let bad = |why: &str| ApiError::bad_request("invalid_path", format!("path {path:?} {why}"));
    if !path.starts_with('/') {
        return Err(bad("must be absolute"));
    }
    if path.len() > MAX_SANDBOX_PATH {
        return Err(ApiError::bad_request(
            "invalid_path",
            format!(
                "path is {} bytes long; the limit is {MAX_SANDBOX_PATH}",
                path.len()
            ),
        ));
    }
    if path.contains('\0') {
        return Err(bad("contains a NUL byte"));
    }
    if path.split('/').any(|part| part == "..") {
        return Err(bad("contains a '..' component"));
    }
    Ok(path.to_owned())
}

impl<S, T> FromRequest<S> for JsonBody<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let Json(value) = Json::<T>::from_request(request, state).await?;
        Ok(JsonBody(value))
    }
}

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Query(value) = Query::<T>::from_request_parts(parts, state).await?;
        Ok(ApiQuery(value))
    }
}

/// A JSON body that may be absent (empty, or `null`): `None` then. Present, it must be sent as
/// JSON and match `T` exactly.
pub(super) fn optional_body<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: &[u8],
    shape: &str,
) -> Result<Option<T>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase())
        .is_some_and(|v| v == "application/json" || v.ends_with("+json"));
    if !is_json {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "a body must be sent with `Content-Type: application/json`",
        ));
    }
    serde_json::from_slice::<Option<T>>(body).map_err(|e| {
        ApiError::bad_request("invalid_json", format!("the body must be {shape}: {e}"))
    })
}

/// Read an image name from a body's `image` field: `None` when absent or `null`; a name that is
/// not one (`ImageName::parse`) is a 400 saying what names look like.
pub(super) fn image_name(value: Option<serde_json::Value>) -> Result<Option<ImageName>, ApiError> {
    value
        .filter(|v| !v.is_null())
        .map(|value| {
            let serde_json::Value::String(name) = value else {
                return Err(ApiError::bad_request(
                    "invalid_image",
                    "image: expected a registered image's name (GET /v1/images lists them)",
                ));
            };
            ImageName::parse(&name).map_err(|e| ApiError::bad_request("invalid_image", e))
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_paths_reject_the_obviously_bad() {
        for ok in [
            "/home/user/a.txt",
            "/",
            "/home/user/",
            "/a..b/c..",
            "/home/./x",
        ] {
            assert_eq!(sandbox_path(ok).unwrap(), ok);
        }
        for (bad, why) in [
            ("/home/../etc/passwd", "'..'"),
            ("/..", "'..'"),
            ("/home/user/..", "'..'"),
            ("/a\0b", "NUL"),
            ("relative/path", "absolute"),
        ] {
            let err = sandbox_path(bad).unwrap_err();
            assert_eq!(err.code, "invalid_path");
            assert!(err.message.contains(why), "{bad:?}: {}", err.message);
        }
        let long = format!("/{}", "a".repeat(MAX_SANDBOX_PATH));
        assert!(sandbox_path(&long)
            .unwrap_err()
            .message
            .contains("the limit is 4096"));
    }
}
